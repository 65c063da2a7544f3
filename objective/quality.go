package objective

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// jsonCase is one structured-output check: a prompt and the schema the
// answer is constrained to and validated against.
type jsonCase struct {
	Name   string
	Prompt string
	Schema string
}

// jsonCases are small schemas covering the validator's subset; the gate
// cycles through them (24 requests = 4 rounds of 6).
var jsonCases = []jsonCase{
	{"person", "Describe a fictional person as JSON with name, age and email.",
		`{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":80},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string"}},"required":["name","age","email"],"additionalProperties":false}`},
	{"weather", "Give a weather report for Paris as JSON.",
		`{"type":"object","properties":{"city":{"type":"string","minLength":1},"temperature_c":{"type":"number","minimum":-90,"maximum":60},"condition":{"type":"string","enum":["sunny","cloudy","rain","snow","fog"]}},"required":["city","temperature_c","condition"],"additionalProperties":false}`},
	{"todo", "List three tasks for a moving day as JSON.",
		`{"type":"object","properties":{"tasks":{"type":"array","minItems":1,"maxItems":10,"items":{"type":"object","properties":{"title":{"type":"string","minLength":1},"done":{"type":"boolean"}},"required":["title","done"],"additionalProperties":false}}},"required":["tasks"],"additionalProperties":false}`},
	{"sentiment", "Classify the sentiment of 'The service was slow but the food was great.' as JSON.",
		`{"type":"object","properties":{"label":{"type":"string","enum":["positive","negative","mixed","neutral"]},"confidence":{"type":"number","minimum":0,"maximum":1}},"required":["label","confidence"],"additionalProperties":false}`},
	{"book", "Describe a well-known novel as JSON with title, author, year and genres.",
		`{"type":"object","properties":{"title":{"type":"string","minLength":1},"author":{"type":"string","minLength":1},"year":{"type":"integer","minimum":1000,"maximum":2100},"genres":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":5}},"required":["title","author","year","genres"],"additionalProperties":false}`},
	{"order", "Create a JSON order with an id, a list of items with quantities, and whether it is paid.",
		`{"type":"object","properties":{"order_id":{"type":"string","minLength":1},"items":{"type":"array","minItems":1,"maxItems":8,"items":{"type":"object","properties":{"sku":{"type":"string"},"quantity":{"type":"integer","minimum":1,"maximum":100}},"required":["sku","quantity"],"additionalProperties":false}},"paid":{"type":"boolean"}},"required":["order_id","items","paid"],"additionalProperties":false}`},
}

// toolDefs are the functions offered on every tool-call request.
var toolDefs = []struct{ Name, Desc, Params string }{
	{"get_weather", "Get the current weather for a city.",
		`{"type":"object","properties":{"city":{"type":"string","minLength":1},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"],"additionalProperties":false}`},
	{"convert_currency", "Convert an amount of money between currencies.",
		`{"type":"object","properties":{"amount":{"type":"number","minimum":0},"from":{"type":"string","minLength":3,"maxLength":3},"to":{"type":"string","minLength":3,"maxLength":3}},"required":["amount","from","to"],"additionalProperties":false}`},
	{"search_flights", "Search flights between two airports on a date.",
		`{"type":"object","properties":{"origin":{"type":"string","minLength":3,"maxLength":3},"destination":{"type":"string","minLength":3,"maxLength":3},"date":{"type":"string","minLength":10,"maxLength":10}},"required":["origin","destination","date"],"additionalProperties":false}`},
	{"set_timer", "Set a countdown timer.",
		`{"type":"object","properties":{"minutes":{"type":"integer","minimum":1,"maximum":1440},"label":{"type":"string"}},"required":["minutes"],"additionalProperties":false}`},
}

// toolCases: a prompt and the function it must call (8 = 2 per function).
var toolCases = []struct{ Prompt, Want string }{
	{"What is the weather in Berlin right now?", "get_weather"},
	{"How much is 250 US dollars in euros?", "convert_currency"},
	{"Find flights from SFO to JFK on 2026-12-24.", "search_flights"},
	{"Set a timer for 15 minutes for the pasta.", "set_timer"},
	{"Is it raining in Tokyo? Use fahrenheit.", "get_weather"},
	{"Convert 1000 JPY to GBP.", "convert_currency"},
	{"Search flights from LHR to CDG on 2027-01-05.", "search_flights"},
	{"Remind me in 90 minutes with a timer labelled laundry.", "set_timer"},
}

var toolSchemas = func() map[string]*Schema {
	m := map[string]*Schema{}
	for _, t := range toolDefs {
		m[t.Name] = mustSchema(t.Params)
	}
	return m
}()

func mustSchema(s string) *Schema {
	var sc Schema
	if err := json.Unmarshal([]byte(s), &sc); err != nil {
		panic(fmt.Sprintf("bad built-in schema %s: %v", s, err))
	}
	return &sc
}

// gateMaxTokens leaves room for a reasoning model to think before it answers.
const gateMaxTokens = 2048

// gateRequest is one quality request and its checker.
type gateRequest struct {
	kind  string // json | tool
	body  []byte
	check func(*streamResult) error
}

// gateRequests builds nJSON structured-output and nTool tool-call requests.
func gateRequests(model string, nJSON, nTool int) ([]gateRequest, error) {
	var out []gateRequest
	for i := range nJSON {
		jc := jsonCases[i%len(jsonCases)]
		schema := mustSchema(jc.Schema)
		body, err := chatBody(model, userMsg(fmt.Sprintf("%s Answer with JSON only. (check %d)", jc.Prompt, i)), gateMaxTokens, false,
			func(r *openai.ChatCompletionRequest) {
				r.ResponseFormat = &openai.ChatCompletionResponseFormat{
					Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
					JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{
						Name: jc.Name, Schema: json.RawMessage(jc.Schema), Strict: true,
					},
				}
			}, nil)
		if err != nil {
			return nil, err
		}
		name := jc.Name
		out = append(out, gateRequest{kind: "json", body: body, check: func(r *streamResult) error {
			txt := strings.TrimSpace(r.content.String())
			if err := schema.ValidateJSON(txt); err != nil {
				return fmt.Errorf("json %s: %w", name, err)
			}
			return nil
		}})
	}
	tools := make([]openai.Tool, len(toolDefs))
	for i, t := range toolDefs {
		tools[i] = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.Name, Description: t.Desc, Parameters: json.RawMessage(t.Params),
		}}
	}
	for i := range nTool {
		tc := toolCases[i%len(toolCases)]
		body, err := chatBody(model, userMsg(tc.Prompt), gateMaxTokens, false, func(r *openai.ChatCompletionRequest) {
			r.Tools = tools
			r.ToolChoice = "auto"
		}, nil)
		if err != nil {
			return nil, err
		}
		want := tc.Want
		out = append(out, gateRequest{kind: "tool", body: body, check: func(r *streamResult) error {
			err := checkToolCall(r.tools, want)
			if err != nil && len(r.tools) == 0 && r.content.Len() > 0 {
				// Usually a server without a tool-call parser (SGLang --tool-call-parser).
				err = fmt.Errorf("%w; content instead: %.60q", err, r.content.String())
				if strings.Contains(r.content.String(), "<tool_call>") {
					err = fmt.Errorf("%w (the model's raw tool-call markup: the server parses no tool calls; SGLang needs --tool-call-parser)", err)
				}
			}
			return err
		}})
	}
	return out, nil
}

// checkToolCall passes when the first call is to want and its arguments
// parse and match the declared parameters.
func checkToolCall(calls []toolCall, want string) error {
	if len(calls) == 0 {
		return errors.New("tool: no tool call")
	}
	c := calls[0]
	if c.Name != want {
		return fmt.Errorf("tool: called %q, want %q", c.Name, want)
	}
	sc, ok := toolSchemas[c.Name]
	if !ok {
		return fmt.Errorf("tool: unknown function %q", c.Name)
	}
	if err := sc.ValidateJSON(c.Arguments); err != nil {
		return fmt.Errorf("tool %s arguments: %w", c.Name, err)
	}
	return nil
}

// RunQuality runs the quality gates once against t and returns the check.
// The error is non-nil only when the gates could not run (cancelled, hang).
func RunQuality(ctx context.Context, t Target, q QualitySpec) (*QualityCheck, error) {
	w := Workload{Quality: q}.WithDefaults()
	c := newClient(t, 8)
	defer c.close()
	model, _, err := c.resolveModel(ctx, t.Model)
	if err != nil {
		return nil, err
	}
	return qualityCheck(ctx, c, model, w.Quality, time.Duration(w.HangTimeout*float64(time.Second)))
}

func qualityCheck(ctx context.Context, c looper, model string, q QualitySpec, hang time.Duration) (*QualityCheck, error) {
	reqs, err := memoGates(model, q.JSONRequests, q.ToolRequests)
	if err != nil {
		return nil, err
	}
	bodies := make([][]byte, len(reqs))
	for i, r := range reqs {
		bodies[i] = r.body
	}
	b, err := c.closedLoop(ctx, bodies, 8, hang, true)
	if err != nil {
		return nil, fmt.Errorf("quality gates: %w", err)
	}
	qc := &QualityCheck{JSONTotal: q.JSONRequests, ToolTotal: q.ToolRequests}
	for i, r := range b.results {
		g := reqs[i]
		var cerr error
		if !r.rec.OK {
			cerr = fmt.Errorf("%s request: %s", g.kind, r.rec.Error)
		} else if cerr = g.check(r); cerr != nil && r.rec.Finish == "length" {
			cerr = fmt.Errorf("%w (finish_reason length after %d tokens)", cerr, r.rec.OutputTokens)
		}
		switch {
		case cerr != nil:
			if len(qc.Failures) < 16 {
				qc.Failures = append(qc.Failures, cerr.Error())
			}
		case g.kind == "json":
			qc.JSONPass++
		default:
			qc.ToolPass++
		}
	}
	qc.Summary = QualitySummary{
		JSON: fmt.Sprintf("%d/%d", qc.JSONPass, qc.JSONTotal),
		Tool: fmt.Sprintf("%d/%d", qc.ToolPass, qc.ToolTotal),
	}
	qc.Pass = passes(qc.JSONPass, qc.JSONTotal, q.MinPass) && passes(qc.ToolPass, qc.ToolTotal, q.MinPass)
	return qc, nil
}

func passes(n, total int, min float64) bool {
	return total == 0 || float64(n)/float64(total) >= min-1e-12
}

// runGate runs the gates, records them as res.Quality.Before or After,
// and returns an ErrQuality error when they fail.
func runGate(ctx context.Context, c looper, model string, w Workload, opt Options, res *Result, when string) error {
	opt.phase("quality %s", when)
	qc, err := qualityCheck(ctx, c, model, w.Quality, time.Duration(w.HangTimeout*float64(time.Second)))
	if err != nil {
		return fmt.Errorf("%s the sweep: %w", when, err)
	}
	if res.Quality == nil {
		res.Quality = &Quality{}
	}
	if when == "before" {
		res.Quality.Before = qc
	} else {
		res.Quality.After = qc
	}
	opt.progress("quality %s: json %s, tool %s", when, qc.Summary.JSON, qc.Summary.Tool)
	if !qc.Pass {
		return fmt.Errorf("%w %s the sweep: json %s, tool %s (min pass %.2f)", ErrQuality, when, qc.Summary.JSON, qc.Summary.Tool, w.Quality.MinPass)
	}
	return nil
}

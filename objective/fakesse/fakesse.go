// Package fakesse is a small in-process stand-in for SGLang's OpenAI
// endpoints, for tests and the load-generator benchmark: streaming chat
// completions with SGLang-shaped chunks, a deterministic first-token delay,
// schema-valid structured outputs, tool calls, and injected faults.
package fakesse

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Server answers /v1/models, /server_info, /health_generate, /metrics and
// streaming /v1/chat/completions. The zero value works; set fields before
// serving.
type Server struct {
	Model string // served model name; default "fake/model"
	// FirstTokenDelay is slept between reading a request and writing its
	// first content chunk.
	FirstTokenDelay time.Duration
	// TokenInterval is slept between content chunks (0 = as fast as possible).
	TokenInterval time.Duration
	// Tokens is the output length when a request sets no max_tokens.
	Tokens int
	// ReasoningTokens of the output are sent as reasoning_content first.
	ReasoningTokens int
	// NoUsage leaves out the usage chunk even when include_usage is asked.
	NoUsage bool
	// KVTokens and MaxRunning are reported by /server_info (0 = omitted).
	KVTokens, MaxRunning int
	// MaxModelLen is the max_model_len /v1/models reports (0: 1048576).
	MaxModelLen int
	// Corrupt makes structured outputs invalid JSON and drops tool calls.
	Corrupt bool
	// NoMetrics answers /metrics with 404, as SGLang without
	// --enable-metrics does.
	NoMetrics bool
	// RawToolMarkup answers tool requests with the model's tool-call
	// markup as content, as a server without a tool-call parser does.
	RawToolMarkup bool
	// FailFrom makes every request numbered >= FailFrom (1-based) answer
	// HTTP 500 (0 = never).
	FailFrom int64
	// HangAfter makes streams stop sending after this many content chunks
	// and wait for the client to go away (0 = never).
	HangAfter int
	// APIKey, when set, is required as a Bearer token except on /health*.
	APIKey string
	// QueueReqs is reported as sglang:num_queue_reqs by /metrics.
	QueueReqs int
	// RunLimit, when > 0, lets only this many streams produce tokens at
	// once; the others wait in a queue (not reported by /server_info).
	RunLimit int

	// CounterSkew is added to sglang:generation_tokens_total for every
	// finished stream, to fake a server whose counter disagrees with the
	// tokens it sent.
	CounterSkew int64

	// genTokens is sglang:generation_tokens_total: the completion tokens of
	// every finished stream, counted before its last chunk is written.
	genTokens atomic.Int64

	slotsOnce sync.Once
	slots     chan struct{}

	// overshoot holds, per request, how late the first content chunk was
	// written after the handler started, beyond FirstTokenDelay (seconds);
	// GET /fake/overshoot returns it.
	overshoot []float64
	// timings holds, per request, when its handler started and when its
	// first content chunk was written; GET /fake/timings returns it.
	timings []Timing

	requests atomic.Int64
	mu       sync.Mutex
	bodies   [][]byte
	// KeepBodies keeps every chat request body for inspection.
	KeepBodies bool
}

// Requests returns how many chat requests arrived.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Bodies returns the kept request bodies.
func (s *Server) Bodies() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.bodies...)
}

func (s *Server) model() string {
	if s.Model == "" {
		return "fake/model"
	}
	return s.Model
}

// ServeHTTP routes the endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.APIKey != "" && !strings.HasPrefix(r.URL.Path, "/health") && r.Header.Get("Authorization") != "Bearer "+s.APIKey {
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"error":"Unauthorized"}`))
		return
	}
	switch r.URL.Path {
	case "/health", "/health_generate":
		w.WriteHeader(http.StatusOK)
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","created":1700000000,"owned_by":"sglang","root":%q,"parent":null,"max_model_len":%d}]}`,
			s.model(), s.model(), cmp.Or(s.MaxModelLen, 1048576))
	case "/server_info", "/get_server_info":
		info := map[string]any{"status": "ready", "version": "fake-0.1"}
		if s.KVTokens > 0 {
			info["max_total_num_tokens"] = s.KVTokens
		}
		if s.MaxRunning > 0 {
			info["max_running_requests"] = s.MaxRunning
			info["internal_states"] = []any{map[string]any{"effective_max_running_requests_per_dp": s.MaxRunning}}
		}
		json.NewEncoder(w).Encode(info)
	case "/metrics":
		if s.NoMetrics {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=%q,tp_rank=\"0\"} %d.0\n", s.model(), s.QueueReqs)
		fmt.Fprintf(w, "# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{model_name=%q} %d.0\n", s.model(), s.genTokens.Load())
	case "/v1/chat/completions":
		s.chat(w, r)
	case "/fake/timings":
		s.mu.Lock()
		json.NewEncoder(w).Encode(s.timings)
		s.mu.Unlock()
	case "/fake/overshoot":
		s.mu.Lock()
		json.NewEncoder(w).Encode(s.overshoot)
		s.mu.Unlock()
	default:
		http.NotFound(w, r)
	}
}

// Timing is one chat request's timeline on the server, in wall-clock Unix
// nanoseconds, so that a client in another process on the same machine can
// line it up with its own timestamps. The handler start is also sent as the
// StartHeader response header.
type Timing struct {
	Start      int64 `json:"start_ns"`       // the handler started
	FirstToken int64 `json:"first_token_ns"` // the first content chunk is being written
}

// StartHeader is the response header carrying the handler's start time
// (wall-clock Unix nanoseconds).
const StartHeader = "X-Fake-Start-Ns"

// request is the part of a chat request the fake reads.
type request struct {
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens           int   `json:"max_tokens"`
	MaxCompletionTokens int   `json:"max_completion_tokens"`
	Stream              bool  `json:"stream"`
	IgnoreEOS           *bool `json:"ignore_eos"`
	StreamOptions       *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
	Tools []struct {
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	n := s.requests.Add(1)
	var body bytes.Buffer
	body.ReadFrom(r.Body)
	if s.KeepBodies {
		s.mu.Lock()
		s.bodies = append(s.bodies, bytes.Clone(body.Bytes()))
		s.mu.Unlock()
	}
	var req request
	if err := json.Unmarshal(body.Bytes(), &req); err != nil {
		http.Error(w, `{"object":"error","message":"bad JSON","type":"BadRequestError","param":null,"code":400}`, http.StatusBadRequest)
		return
	}
	if s.FailFrom > 0 && n >= s.FailFrom {
		http.Error(w, `{"object":"error","message":"injected failure","type":"InternalServerError","param":null,"code":500}`, http.StatusInternalServerError)
		return
	}
	if !req.Stream {
		http.Error(w, `{"object":"error","message":"fakesse streams only","type":"BadRequestError","param":null,"code":400}`, http.StatusBadRequest)
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set(StartHeader, strconv.FormatInt(start.UnixNano(), 10))
	id := fmt.Sprintf("%032x", n)
	prefix := []byte(`data: {"id":"` + id + `","object":"chat.completion.chunk","created":1700000000,"model":` + strconv.Quote(s.model()) + `,"choices":[{"index":0,"delta":`)
	suffix := []byte(`,"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}` + "\n\n")
	buf := make([]byte, 0, 512)
	send := func(delta []byte) {
		buf = append(append(append(buf[:0], prefix...), delta...), suffix...)
		w.Write(buf)
		if fl != nil {
			fl.Flush()
		}
	}
	// SGLang's first chunk: role, empty content, null reasoning.
	send([]byte(`{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null}`))

	pieces, tools := s.output(&req)
	ctx := r.Context()
	if s.RunLimit > 0 {
		s.slotsOnce.Do(func() { s.slots = make(chan struct{}, s.RunLimit) })
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		case <-ctx.Done():
			return
		}
	}
	if d := s.FirstTokenDelay - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	var delta []byte
	completion := 0
	for i, p := range pieces {
		if i > 0 && s.TokenInterval > 0 {
			time.Sleep(s.TokenInterval)
		}
		if s.HangAfter > 0 && i >= s.HangAfter {
			<-ctx.Done()
			return
		}
		if ctx.Err() != nil {
			return
		}
		field := "content"
		if i < s.ReasoningTokens && tools == nil && req.ResponseFormat == nil {
			field = "reasoning_content"
		}
		delta = append(delta[:0], `{"role":null,"`...)
		delta = append(delta, field...)
		delta = append(delta, `":`...)
		delta = strconv.AppendQuote(delta, p)
		if field == "content" {
			delta = append(delta, `,"reasoning_content":null,"tool_calls":null}`...)
		} else {
			delta = append(delta, `,"content":null,"tool_calls":null}`...)
		}
		completion++
		if i == 0 {
			defer func(t0 time.Time) {
				s.mu.Lock()
				s.overshoot = append(s.overshoot, t0.Sub(start).Seconds()-s.FirstTokenDelay.Seconds())
				s.timings = append(s.timings, Timing{Start: start.UnixNano(), FirstToken: t0.UnixNano()})
				s.mu.Unlock()
			}(time.Now())
		}
		if req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats {
			buf = append(append(append(buf[:0], prefix...), delta...), `,"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":10,"completion_tokens":`...)
			buf = strconv.AppendInt(buf, int64(completion), 10)
			buf = append(buf, "}}\n\n"...)
			w.Write(buf)
			if fl != nil {
				fl.Flush()
			}
			continue
		}
		send(delta)
	}
	finish := "length"
	if req.ResponseFormat != nil {
		finish = "stop"
	}
	for i, t := range tools {
		completion += 8
		args, _ := json.Marshal(t.args)
		tc, _ := json.Marshal([]any{map[string]any{"id": fmt.Sprintf("call_%024x", i), "index": i, "type": "function",
			"function": map[string]any{"name": t.name, "arguments": string(args)}}})
		send([]byte(`{"role":null,"content":null,"reasoning_content":null,"tool_calls":` + string(tc) + `}`))
		finish = "tool_calls"
	}
	s.genTokens.Add(int64(completion) + s.CounterSkew)
	fmt.Fprintf(w, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"role\":null,\"content\":null,\"reasoning_content\":null},\"logprobs\":null,\"finish_reason\":%q,\"matched_stop\":null}],\"usage\":null}\n\n", id, s.model(), finish)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage && !s.NoUsage {
		fmt.Fprintf(w, "data: {\"id\":%q,\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":%q,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d,\"prompt_tokens_details\":null,\"reasoning_tokens\":0}}\n\n",
			id, s.model(), promptTokens(&req), promptTokens(&req)+completion, completion)
	}
	w.Write([]byte("data: [DONE]\n\n"))
	if fl != nil {
		fl.Flush()
	}
}

func promptTokens(req *request) int {
	n := 0
	for _, m := range req.Messages {
		n += len(strings.Fields(m.Content))
	}
	return n
}

type call struct {
	name string
	args any
}

// output returns the content pieces (one per token) and tool calls.
func (s *Server) output(req *request) ([]string, []call) {
	prompt := ""
	for _, m := range req.Messages {
		prompt += m.Content
	}
	if len(req.Tools) > 0 {
		if s.Corrupt {
			return []string{"I", " cannot", " help"}, nil
		}
		if s.RawToolMarkup {
			return []string{"<tool_call>", req.Tools[0].Function.Name, "\n<arg_key>"}, nil
		}
		for _, t := range req.Tools {
			if toolMatches(t.Function.Name, prompt) {
				var sc map[string]any
				json.Unmarshal(t.Function.Parameters, &sc)
				return nil, []call{{t.Function.Name, Instance(sc)}}
			}
		}
		return []string{"No", " tool"}, nil
	}
	if req.ResponseFormat != nil && req.ResponseFormat.JSONSchema != nil {
		var sc map[string]any
		json.Unmarshal(req.ResponseFormat.JSONSchema.Schema, &sc)
		doc, _ := json.Marshal(Instance(sc))
		if s.Corrupt {
			doc = doc[:len(doc)/2]
		}
		return splitTokens(string(doc)), nil
	}
	n := req.MaxCompletionTokens
	if n == 0 {
		n = req.MaxTokens
	}
	if n == 0 {
		n = s.Tokens
	}
	if n == 0 {
		n = 16
	}
	out := make([]string, n)
	for i := range out {
		out[i] = " tok"
	}
	return out, nil
}

// toolMatches is the fake's "model": a function is called when a keyword
// of its name appears in the prompt.
func toolMatches(name, prompt string) bool {
	p := strings.ToLower(prompt)
	for _, kw := range map[string][]string{
		"get_weather":      {"weather", "raining"},
		"convert_currency": {"convert", "dollars in"},
		"search_flights":   {"flights"},
		"set_timer":        {"timer"},
	}[name] {
		if strings.Contains(p, kw) {
			return true
		}
	}
	return false
}

// splitTokens cuts s into pieces of up to 4 bytes, like tokens.
func splitTokens(s string) []string {
	var out []string
	for len(s) > 4 {
		out = append(out, s[:4])
		s = s[4:]
	}
	return append(out, s)
}

// Instance returns a value valid against a JSON schema of the subset the
// quality gates use (type, properties, required, enum, items, bounds).
func Instance(sc map[string]any) any {
	if e, ok := sc["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	num := func(k string) (float64, bool) { f, ok := sc[k].(float64); return f, ok }
	switch sc["type"] {
	case "object":
		out := map[string]any{}
		props, _ := sc["properties"].(map[string]any)
		for k, v := range props {
			if sub, ok := v.(map[string]any); ok {
				out[k] = Instance(sub)
			}
		}
		return out
	case "array":
		n := 1
		if m, ok := num("minItems"); ok && m > 1 {
			n = int(m)
		}
		items, _ := sc["items"].(map[string]any)
		out := make([]any, n)
		for i := range out {
			out[i] = Instance(items)
		}
		return out
	case "string":
		n := 5
		if m, ok := num("minLength"); ok && int(m) > n {
			n = int(m)
		}
		if m, ok := num("maxLength"); ok && int(m) < n {
			n = int(m)
		}
		return strings.Repeat("x", n)
	case "integer", "number":
		v := 1.0
		if m, ok := num("minimum"); ok && m > v {
			v = m
		}
		if m, ok := num("maximum"); ok && m < v {
			v = m
		}
		return v
	case "boolean":
		return true
	}
	return nil
}

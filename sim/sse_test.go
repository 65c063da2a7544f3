package sim

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestSSEGolden pins the byte shape of every chunk kind to SGLang's.
func TestSSEGolden(t *testing.T) {
	cw := newChunkWriter("0123456789abcdef0123456789abcdef", "zai-org/GLM-5.3-Flash", 1796000000)
	cw.role()
	cw.text(pReason, "Let me think")
	cw.text(pContent, escapeJSON("Hello \"world\"\n"))
	cw.tool("call_0123456789abcdef01234567", "get_weather", "")
	cw.tool("", "", escapeJSON(`{"city":"Berlin"}`))
	cw.finish("stop", 151329)
	cw.finish("length", nil)
	cw.usage(12, 3, 1, 0, false)
	cw.usage(12, 3, 0, 8, true)
	got := string(cw.buf) + "data: [DONE]\n\n"
	const golden = "testdata/sse.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("SSE bytes differ from %s (run with -update after checking):\n%s", golden, got)
	}
	// Every frame is valid JSON.
	for _, fr := range strings.Split(strings.TrimSpace(got), "\n\n") {
		p := strings.TrimPrefix(fr, "data: ")
		if p == "[DONE]" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			t.Fatalf("frame %q: %v", p, err)
		}
	}
}

// validate is a small JSON-schema check (the subset GenerateJSON honours).
func validate(t *testing.T, v any, s map[string]any, path string) {
	t.Helper()
	if e, ok := s["enum"].([]any); ok {
		for _, x := range e {
			if x == v {
				return
			}
		}
		t.Errorf("%s: %v not in enum %v", path, v, e)
		return
	}
	minmax := func(key string) (float64, bool) { f, ok := s[key].(float64); return f, ok }
	switch schemaType(s) {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			t.Errorf("%s: not an object", path)
			return
		}
		props, _ := s["properties"].(map[string]any)
		for _, r := range toStrings(s["required"]) {
			if _, ok := m[r]; !ok {
				t.Errorf("%s: missing required %s", path, r)
			}
		}
		for k, x := range m {
			ps, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s: extra property %s", path, k)
				continue
			}
			validate(t, x, ps, path+"."+k)
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			t.Errorf("%s: not an array", path)
			return
		}
		if lo, ok := minmax("minItems"); ok && float64(len(a)) < lo {
			t.Errorf("%s: %d items < %v", path, len(a), lo)
		}
		if hi, ok := minmax("maxItems"); ok && float64(len(a)) > hi {
			t.Errorf("%s: %d items > %v", path, len(a), hi)
		}
		items, _ := s["items"].(map[string]any)
		for _, x := range a {
			validate(t, x, items, path+"[]")
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok || (schemaType(s) == "integer" && f != float64(int64(f))) {
			t.Errorf("%s: %v is not a %s", path, v, schemaType(s))
			return
		}
		if lo, ok := minmax("minimum"); ok && f < lo {
			t.Errorf("%s: %v < %v", path, f, lo)
		}
		if hi, ok := minmax("maximum"); ok && f > hi {
			t.Errorf("%s: %v > %v", path, f, hi)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			t.Errorf("%s: %v is not a boolean", path, v)
		}
	default:
		str, ok := v.(string)
		if !ok {
			t.Errorf("%s: %v is not a string", path, v)
			return
		}
		if lo, ok := minmax("minLength"); ok && float64(len(str)) < lo {
			t.Errorf("%s: %q shorter than %v", path, str, lo)
		}
		if hi, ok := minmax("maxLength"); ok && float64(len(str)) > hi {
			t.Errorf("%s: %q longer than %v", path, str, hi)
		}
	}
}

func toStrings(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func TestGenerateJSON(t *testing.T) {
	cases := []struct{ prompt, schema string }{
		{"Describe a fictional person as JSON.", `{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":80},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string"}},"required":["name","age","email"],"additionalProperties":false}`},
		{"Give a weather report for Paris as JSON.", `{"type":"object","properties":{"city":{"type":"string","minLength":1},"temperature_c":{"type":"number","minimum":-90,"maximum":60},"condition":{"type":"string","enum":["sunny","cloudy","rain"]}},"required":["city","temperature_c","condition"]}`},
		{"List tasks.", `{"type":"object","properties":{"tasks":{"type":"array","minItems":1,"maxItems":10,"items":{"type":"object","properties":{"title":{"type":"string","minLength":1},"done":{"type":"boolean"}},"required":["title","done"]}}},"required":["tasks"]}`},
		{"Find flights from SFO to JFK on 2026-12-24.", `{"type":"object","properties":{"origin":{"type":"string","minLength":3,"maxLength":3},"destination":{"type":"string","minLength":3,"maxLength":3},"date":{"type":"string","minLength":10,"maxLength":10}},"required":["origin","destination","date"]}`},
		{"Set a timer for 15 minutes.", `{"type":"object","properties":{"minutes":{"type":"integer","minimum":1,"maximum":1440},"label":{"type":"string"}},"required":["minutes"]}`},
		{"x", `{"type":"object","properties":{"ids":{"type":"array","items":{"type":"integer","exclusiveMinimum":0}},"n":{"type":["number","null"]}}}`},
	}
	for i, c := range cases {
		for seed := uint64(0); seed < 5; seed++ {
			txt, err := GenerateJSON([]byte(c.schema), c.prompt, seed)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal([]byte(txt), &v); err != nil {
				t.Fatalf("case %d: invalid JSON %q: %v", i, txt, err)
			}
			var s map[string]any
			json.Unmarshal([]byte(c.schema), &s)
			validate(t, v, s, "$")
		}
	}
}

func TestChooseTool(t *testing.T) {
	tools := []toolDef{
		{Name: "get_weather", Description: "Get the current weather for a city.", Params: json.RawMessage(`{"properties":{"unit":{"enum":["celsius","fahrenheit"]}}}`)},
		{Name: "convert_currency", Description: "Convert an amount of money between currencies."},
		{Name: "search_flights", Description: "Search flights between two airports on a date."},
		{Name: "set_timer", Description: "Set a countdown timer."},
	}
	cases := map[string]string{
		"What is the weather in Berlin right now?":               "get_weather",
		"How much is 250 US dollars in euros?":                   "convert_currency",
		"Find flights from SFO to JFK on 2026-12-24.":            "search_flights",
		"Remind me in 90 minutes with a timer labelled laundry.": "set_timer",
		"Is it raining in Tokyo? Use fahrenheit.":                "get_weather",
	}
	for prompt, want := range cases {
		if got := tools[chooseTool(tools, prompt)].Name; got != want {
			t.Errorf("%q: chose %s, want %s", prompt, got, want)
		}
	}
}

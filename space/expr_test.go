package space

import (
	"errors"
	"strings"
	"testing"
)

func TestExpr(t *testing.T) {
	env := map[string]any{
		"ep": int64(4), "steps": int64(5), "mf": 0.78, "spec": "EAGLE", "radix": true,
		"predicted.max_running_requests": int64(51),
	}
	tests := []struct {
		src  string
		want any // value, or "error: substring"
	}{
		{"1 + 2 * 3", int64(7)},
		{"(1 + 2) * 3", int64(9)},
		{"7 // 2", int64(3)},
		{"-7 // 2", int64(-4)},
		{"-7 % 3", int64(2)},
		{"7 / 2", 3.5},
		{"7.5 // 2", 3.0},
		{"256 // 5", int64(51)},
		{"steps + 1", int64(6)},
		{"steps * 1 + 1 >= 6", true},
		{"ep == 4 and spec == 'EAGLE'", true},
		{`spec == "EAGLE" or missing > 1`, true}, // or short-circuits
		{"not radix", false},
		{"not (ep == 1)", true},
		{"ep in [1, 4]", true},
		{"spec not in ['EAGLE', 'NGRAM']", false},
		{"mf < 0.8 and mf >= 0.78", true},
		{"4 == 4.0", true},
		{"'a' < 'b'", true},
		{"min(steps, 3) + max(1, 2, ep)", int64(7)},
		{"abs(-2.5)", 2.5},
		{"predicted.max_running_requests < 64", true},
		{"1_000 * 2", int64(2000)},
		{"1e3", 1000.0},
		{"null == null", true},
		{"true and false", false},
		{"missing > 1", "error: is not set"},
		{"ep > 'x'", "error: cannot order"},
		{"1 // 0", "error: division by zero"},
		{"ep and true", "error: and needs true/false"},
		{"ep +", "error: unexpected"},
		{"ep ==", "error: unexpected"},
		{"(ep", "error: expected )"},
		{"foo(1)", "error: unknown function foo"},
		{"ep = 1", "error: unexpected character"},
		{"'open", "error: unterminated string"},
		{"ep 4", "error: unexpected"},
		{"x in 4", "error: expected ["},
		{"abs(1, 2)", "error: abs takes one"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			e, err := ParseExpr(tt.src)
			var got any
			if err == nil {
				got, err = e.Eval(env)
			}
			if want, ok := tt.want.(string); ok && strings.HasPrefix(want, "error: ") {
				if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(want, "error: ")) {
					t.Fatalf("got %v, %v; want %s", got, err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %v (%T), want %v (%T)", got, got, tt.want, tt.want)
			}
		})
	}
}

func TestExprUnsetAndNames(t *testing.T) {
	e, err := ParseExpr("spec_steps + 1 <= predicted.kv_tokens and spec_steps > 0")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(e.Names(), ","); got != "spec_steps,predicted.kv_tokens" {
		t.Errorf("names %s", got)
	}
	if _, err := e.Eval(map[string]any{}); !errors.Is(err, errUnset) {
		t.Errorf("unset name: %v", err)
	}
	if _, err := ParseExpr(strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200)); err == nil {
		t.Error("deep nesting accepted")
	}
}

func FuzzExpr(f *testing.F) {
	for _, s := range []string{"a + 1 >= 2 and not b", "x in [1, 'a']", "min(a, 2) // 0", "-(-a) % 3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := ParseExpr(src)
		if err != nil {
			return
		}
		_, _ = e.Eval(map[string]any{"a": int64(3), "b": true, "x": "a"})
	})
}

package space

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSurveyEnumeratesWithConditions(t *testing.T) {
	doc := `name: s
engine: {command: sglang serve}
model: {path: m, hybrid: true}
fixed: '--max-running-requests 64'
params:
  - {name: slots, type: categorical, choices: [128, 384], flag: --max-mamba-cache-size}
  - {name: spec, type: bool}
  - {name: steps, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: spec}
derived:
  - {flag: --speculative-algorithm, value: "'EAGLE'", when: spec}
`
	st, err := Parse("s.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	sv := st.Survey(DefaultSurveyLimits)
	// 2 slots x (no spec + 3 steps) = 8 configs; 128 slots cap 64 at 25.
	if !sv.Enumerated || sv.Size != 8 || sv.Infeasible != 4 || sv.Feasible != 4 {
		t.Errorf("survey %+v", sv)
	}
	if len(sv.Rejections) != 1 || sv.Rejections[0].Count != 4 ||
		sv.Rejections[0].Message != "--max-mamba-cache-size 128 with radix cache and overlap: 128 // 5 = 25 < --max-running-requests 64" {
		t.Errorf("rejections %+v", sv.Rejections)
	}
}

func TestSurveySamplesDeterministically(t *testing.T) {
	doc := base + `params:
  - {name: mf, type: float, low: 0.5, high: 0.9, flag: --mem-fraction-static}
  - {name: tp, type: int, low: 1, high: 8, log: true, flag: --tp-size}
`
	st, err := Parse("s.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	lim := SurveyLimits{MaxEnumerate: 1000, Samples: 300, Seed: 7}
	a, b := st.Survey(lim), st.Survey(lim)
	a.Example, b.Example = nil, nil
	if a.Enumerated || !a.Continuous || a.Checked != 300 {
		t.Errorf("survey %+v", a)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("two surveys with the same seed differ")
	}
	// tp > 1 needs more than the default single GPU.
	if a.RuleCounts()["parallel_gpus"] == 0 || a.Feasible == 0 {
		t.Errorf("rule counts %v, feasible %d", a.RuleCounts(), a.Feasible)
	}
}

// TestBoundCountsWithoutListing: the space's size is counted from its
// params; a float with a fine step loads and is sampled, where listing its
// 400 million values (over 6 GB) to count them ran out of memory at load.
func TestBoundCountsWithoutListing(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		want         float64
		finite       bool
	}{
		{"fine float step", "  - {name: mf, type: float, low: 0.1, high: 0.9, step: 0.000000002, flag: --mem-fraction-static}\n", 400000001, true},
		// An off param counts as one more value.
		{"conditional", "  - {name: a, type: int, low: 1, high: 1000, step: 3, flag: --max-running-requests}\n" +
			"  - {name: b, type: bool, values: {false: --disable-radix-cache}}\n" +
			"  - {name: c, type: categorical, choices: [fcfs, lpm, dfs-weight], flag: --schedule-policy, when: b}\n", 334 * 2 * 4, true},
		{"continuous", "  - {name: mf, type: float, low: 0.5, high: 0.9, flag: --mem-fraction-static}\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Parse("s.yaml", []byte(base+"params:\n"+tc.params))
			if err != nil {
				t.Fatal(err)
			}
			if n, finite := st.Bound(); finite != tc.finite || finite && n != tc.want {
				t.Errorf("Bound() = %v, %v; want %v, %v", n, finite, tc.want, tc.finite)
			}
			if sv := st.Survey(SurveyLimits{MaxEnumerate: 1000, Samples: 50, Seed: 1}); sv.Enumerated || sv.Checked != 50 {
				t.Errorf("survey %+v", sv)
			}
		})
	}
}

// TestOverCountsConditional: Bound multiplies every param's values (an off
// param one more), so branches that exclude each other look far larger
// than they are; Over counts their configs. Before, a grid of 2,000
// configs with two exclusive 1,000-value branches was refused as up to
// 2,004,002.
func TestOverCountsConditional(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		limit        int
		bound        float64
		over         bool
	}{
		{"exclusive branches", "  - {name: sp, type: categorical, choices: [fcfs, lpm], flag: --schedule-policy}\n" +
			"  - {name: x, type: int, low: 1, high: 1000, flag: --max-running-requests, when: \"sp == 'fcfs'\"}\n" +
			"  - {name: y, type: int, low: 1, high: 1000, flag: --cuda-graph-max-bs, when: \"sp == 'lpm'\"}\n", 1000000, 2 * 1001 * 1001, false},
		{"exactly at the limit", "  - {name: sp, type: categorical, choices: [fcfs, lpm], flag: --schedule-policy}\n" +
			"  - {name: x, type: int, low: 1, high: 1000, flag: --max-running-requests, when: \"sp == 'fcfs'\"}\n" +
			"  - {name: y, type: int, low: 1, high: 1000, flag: --cuda-graph-max-bs, when: \"sp == 'lpm'\"}\n", 2000, 2 * 1001 * 1001, false},
		{"one past the limit", "  - {name: sp, type: categorical, choices: [fcfs, lpm], flag: --schedule-policy}\n" +
			"  - {name: x, type: int, low: 1, high: 1000, flag: --max-running-requests, when: \"sp == 'fcfs'\"}\n" +
			"  - {name: y, type: int, low: 1, high: 1000, flag: --cuda-graph-max-bs, when: \"sp == 'lpm'\"}\n", 1999, 2 * 1001 * 1001, true},
		// An active param with more values than the limit decides without
		// listing them.
		{"fine float in a branch", "  - {name: b, type: bool, values: {false: --disable-radix-cache}}\n" +
			"  - {name: mf, type: float, low: 0.1, high: 0.9, step: 0.000000002, flag: --mem-fraction-static, when: b}\n", 1000000, 2 * 400000002, true},
		{"no when: the bound decides", "  - {name: a, type: int, low: 1, high: 1001, flag: --max-running-requests}\n" +
			"  - {name: b, type: int, low: 1, high: 1000, flag: --cuda-graph-max-bs}\n", 1000000, 1001 * 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Parse("s.yaml", []byte(base+"params:\n"+tc.params))
			if err != nil {
				t.Fatal(err)
			}
			if bound, over := st.Over(tc.limit); bound != tc.bound || over != tc.over {
				t.Errorf("Over(%d) = %v, %v; want %v, %v", tc.limit, bound, over, tc.bound, tc.over)
			}
		})
	}
}

// A when: that cannot be evaluated for one choice fails every config with
// that choice for the same reason: the survey lists it once, with how many
// configs it failed, not once per config.
func TestSurveyCountsResolveErrors(t *testing.T) {
	doc := base + `params:
  - {name: slots, type: categorical, choices: [auto, 256, 384], flag: --max-mamba-cache-size, values: {auto: ""}}
  - {name: radix, type: bool, values: {false: --disable-radix-cache}}
  - {name: overlap, type: bool, values: {false: --disable-overlap-schedule}}
  - {name: bs, type: int, low: 8, high: 16, step: 8, flag: --cuda-graph-max-bs, when: slots > 128}
`
	st, err := Parse("s.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	sv := st.Survey(DefaultSurveyLimits)
	want := []string{`params[bs].when "slots > 128": cannot order "auto" and 128 (4 configs)`}
	if !reflect.DeepEqual(sv.Errors, want) || sv.Checked != 20 {
		t.Errorf("errors %q of %d configs, want %q of 20", sv.Errors, sv.Checked, want)
	}
}

// A derived value that some configs cannot pass their flag is reported at
// the derived entry, file:line:col, whether the schema refuses its words
// or it cannot be evaluated.
func TestDerivedFailuresPointAtTheEntry(t *testing.T) {
	tests := []struct {
		name, value string
		resolveErr  string // substring of Resolve's error for the first config
		rejection   string // else the flag_value rejection's message
	}{
		{"schema refuses", "slots", "",
			`s.yaml:10:51: derived[--speculative-num-draft-tokens].value "slots": --speculative-num-draft-tokens "auto" is not an integer; valid: an integer`},
		{"not an integer", "steps + 0.5", "",
			`s.yaml:10:51: derived[--speculative-num-draft-tokens].value "steps + 0.5": --speculative-num-draft-tokens "1.5" is not an integer`},
		{"cannot be evaluated", "8 // (steps - 1)",
			`s.yaml:10:51: derived[--speculative-num-draft-tokens].value "8 // (steps - 1)": division by zero`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := base + `params:
  - {name: slots, type: categorical, choices: [auto, 256]}
  - {name: steps, type: int, low: 1, high: 3}
derived:
  - {flag: --speculative-num-draft-tokens, value: "` + tt.value + `"}
`
			st, err := Parse("s.yaml", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := st.Resolve(Params{"slots": "auto", "steps": 1}, nil)
			if tt.resolveErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.resolveErr) {
					t.Fatalf("resolve error %v, want %s", err, tt.resolveErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rej := st.Check(cfg)
			if len(rej) != 1 || rej[0].Rule != "flag_value" || !strings.Contains(rej[0].Message, tt.rejection) {
				t.Errorf("rejections %+v, want one flag_value: %s", rej, tt.rejection)
			}
		})
	}
}

// TestFloatGridDecimals: a float's values are the grid from low by step,
// printed with the decimals of low or step, whichever has more. Before,
// they were rounded to the step's decimals: low 0.05 by 0.1 listed 0.1,
// 0.2, 0.2, ..., 1 (above high 0.95), and a step of 1e-9 or finer had 0
// decimals.
func TestFloatGridDecimals(t *testing.T) {
	for _, tc := range []struct {
		name            string
		low, high, step float64
		want            []string // the values as flags print them
	}{
		{"low finer than step", 0.05, 0.95, 0.1, []string{"0.05", "0.15", "0.25", "0.35", "0.45", "0.55", "0.65", "0.75", "0.85", "0.95"}},
		{"step finer than low", 0.7, 0.75, 0.01, []string{"0.7", "0.71", "0.72", "0.73", "0.74", "0.75"}},
		{"whole step", 1, 4, 1.5, []string{"1", "2.5", "4"}},
		{"nano step", 0.1, 0.100000002, 0.000000001, []string{"0.1", "0.100000001", "0.100000002"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			par := &Param{Name: "f", Type: "float", Low: tc.low, High: tc.high, Step: tc.step}
			var got []string
			for _, v := range par.values() {
				got = append(got, par.text(v))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("values %v, want %v", got, tc.want)
			}
		})
	}
}

// StepAtOrAbove lands on the very value a config at that step holds (the
// grid's own, float noise trimmed), and a grid value stays itself.
func TestStepAtOrAbove(t *testing.T) {
	for _, tc := range []struct {
		name         string
		low, step, t float64
		want         float64
	}{
		{"between steps", 0.80, 0.01, 0.8451, 0.85},
		{"a step up to float noise", 0.80, 0.01, 0.8 + 7*0.01, 0.87},
		{"just above a step", 0.80, 0.01, 0.87 + 1e-6, 0.88},
		{"low finer than step", 0.05, 0.1, 0.3, 0.35},
		{"below low", 0.78, 0.02, 0.5, 0.5},
		{"no step", 0.78, 0, 0.8123, 0.8123},
	} {
		t.Run(tc.name, func(t *testing.T) {
			par := &Param{Name: "f", Type: "float", Low: tc.low, High: 1, Step: tc.step}
			got := par.StepAtOrAbove(tc.t)
			if got != tc.want {
				t.Fatalf("StepAtOrAbove(%v) = %v, want %v", tc.t, got, tc.want)
			}
			if tc.step > 0 && tc.t > tc.low && !slices.Contains(par.values(), any(got)) {
				t.Errorf("%v is not one of the grid's values %v", got, par.values())
			}
		})
	}
}

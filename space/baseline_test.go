package space

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestLoadBaselineErrors: a bad budget.baseline or default: is reported
// at its file, line and column, with the values that would be valid.
func TestLoadBaselineErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"baseline value", base + "budget: {baseline: defaults}\n",
			`t.yaml:6:20: budget.baseline: "defaults"; valid: default (launch the engine's default config first, and hold the winner against it) or none`},
		{"baseline a bool", base + "budget:\n  baseline: false\n",
			`t.yaml:7:13: budget.baseline: "false"; valid: default`},
		{"baseline a list", base + "budget: {baseline: [default]}\n",
			"t.yaml:6:20: budget.baseline: got a list; valid: a string"},
		{"baseline misspelt key", base + "budget: {base_line: none}\n",
			"budget.base_line: unknown field (did you mean baseline?)"},
		{"default not a choice", base + "params:\n  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size, default: 2}\n",
			"t.yaml:7:78: params[ep].default: 2 is not a value of ep; valid: 1, 4"},
		{"default off the int step", base + "params:\n  - {name: s, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size, default: 100}\n",
			"t.yaml:7:95: params[s].default: 100 is not a value of s; valid: 64..512 step 64"},
		{"default above a float range", base + "params:\n  - {name: mf, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static, default: 0.95}\n",
			"params[mf].default: 0.95 is not a value of mf; valid: 0.7..0.9"},
		{"default of a bool", base + "params:\n  - {name: g, type: bool, values: {false: --disable-cuda-graph}, default: maybe}\n",
			"params[g].default: maybe is not a value of g; valid: true or false"},
		{"default against a flagless value", base + "params:\n  - {name: r, type: bool, values: {false: --disable-radix-cache}, default: false}\n",
			"params[r].default: false, but r=true passes no flag, so the engine's default is true; valid: default: true, or no default:"},
		{"default against a flagless choice", base + "params:\n  - {name: slots, type: categorical, choices: [auto, 256], flag: --max-mamba-cache-size, values: {auto: \"\"}, default: 256}\n",
			"params[slots].default: 256, but slots=auto passes no flag, so the engine's default is auto; valid: default: auto, or no default:"},
		{"default not a scalar", base + "params:\n  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size, default: [1]}\n",
			"params[ep].default: got a list; valid: a string, number or boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n%v\nwant substring\n%s", err, tt.want)
			}
		})
	}
}

// TestBaseline: the engine default sets each param to its flagless value,
// else its default:, and leaves the rest to the engine; its flags are the
// model's and the fixed ones, with the derived flags its flagless values
// give.
func TestBaseline(t *testing.T) {
	const fixed = "fixed: {--tp-size: 4}\n"
	tests := []struct {
		name     string
		params   string
		baseline string // budget.baseline; "" leaves the default
		flags    string
		set      string
		omitted  []string
	}{
		{"flagless values", compareParams, "",
			"--model-path org/model --tp-size 4", "mf=0.78 mf2=0.7 radix=true slots=auto speculative=none", []string{"ep"}},
		{"defaults fill the rest", `params:
  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size, default: 1}
  - {name: mf, type: float, low: 0.7, high: 0.9, step: 0.05, flag: --mem-fraction-static, default: 0.85}
  - {name: radix, type: bool, values: {false: --disable-radix-cache}, default: true}
`, "default", "--model-path org/model --tp-size 4", "ep=1 mf=0.85 radix=true", nil},
		{"an inactive param is not omitted", `params:
  - {name: speculative, type: categorical, choices: [none, EAGLE], values: {none: "", EAGLE: --speculative-algorithm EAGLE --speculative-eagle-topk 1}}
  - {name: steps, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: speculative == 'EAGLE'}
derived:
  - {flag: --speculative-num-draft-tokens, value: steps + 1, when: speculative == 'EAGLE'}
  - {flag: --chunked-prefill-size, value: 4096, when: speculative == 'none'}
`, "", "--model-path org/model --tp-size 4 --chunked-prefill-size 4096", "speculative=none", nil},
		{"a derived flag reads no default:", `params:
  - {name: mf, type: float, low: 0.7, high: 0.9, step: 0.05, flag: --mem-fraction-static, default: 0.85}
derived:
  - {flag: --chunked-prefill-size, value: 4096, when: mf > 0.8}
`, "none", "--model-path org/model --tp-size 4", "mf=0.85", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := base + fixed + tc.params
			if tc.baseline != "" {
				doc += "budget: {baseline: " + tc.baseline + "}\n"
			}
			st, err := Parse("t.yaml", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.baseline
			if want == "" {
				want = BaselineDefault
			}
			if st.Budget.Baseline != want {
				t.Errorf("budget.baseline %q, want %q", st.Budget.Baseline, want)
			}
			b, err := st.Baseline(nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(b.Config.Flags, " "); got != tc.flags {
				t.Errorf("flags %q, want %q", got, tc.flags)
			}
			if got := b.Config.Params.String(); got != tc.set {
				t.Errorf("params %q, want %q", got, tc.set)
			}
			if !slices.Equal(b.Omitted, tc.omitted) || b.InSpace() != (len(tc.omitted) == 0) {
				t.Errorf("omitted %v (in space %v), want %v", b.Omitted, b.InSpace(), tc.omitted)
			}
			sv := st.Survey(DefaultSurveyLimits)
			if (sv.Baseline != nil) != (want == BaselineDefault) {
				t.Errorf("check's baseline %+v with budget.baseline %s", sv.Baseline, want)
			}
		})
	}
}

// TestBaselineRejected: check says when the study's constraints or the
// engine's rules reject the engine default before launch.
func TestBaselineRejected(t *testing.T) {
	doc := base + `gpus: {per_trial: 4}
fixed: {--tp-size: 4}
params:
  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size, default: 1}
constraints: [ep == gpus_per_trial]
`
	st, err := Parse("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	b := st.Survey(DefaultSurveyLimits).Baseline
	if b == nil || b.Error != "" {
		t.Fatalf("baseline %+v", b)
	}
	if len(b.Rejections) != 1 || b.Rejections[0].Rule != "constraint" || !strings.Contains(b.Rejections[0].Message, "ep=1") {
		t.Errorf("rejections %+v, want the constraint, with ep=1", b.Rejections)
	}
	if strings.Join(b.Argv, " ") != "python3 -m sglang.launch_server --model-path org/model --tp-size 4" {
		t.Errorf("argv %q: want the fixed flags and no param's flag", b.Argv)
	}
}

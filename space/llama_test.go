package space

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const llamaStudy = "../testdata/studies/llama-cpu.yaml"

// TestLoadLlamaStudy: the bundled llama.cpp study loads with its model
// path from the environment, resolves to llama-server's own forms (-m
// first, negations for false, no --flag=value) and its rules reject what
// llama-server would cap silently.
func TestLoadLlamaStudy(t *testing.T) {
	t.Setenv("LLAMA_MODEL", "/cache/tiny.gguf")
	st, err := Load(llamaStudy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Engine.Kind.Name != "llamacpp" || st.Model != "/cache/tiny.gguf" || st.CPUsPerTrial != 2 {
		t.Fatalf("engine %s model %q cpus %d", st.Engine.Kind.Name, st.Model, st.CPUsPerTrial)
	}
	p := Params{"threads": 1, "slots": "8", "batch": "512", "ubatch": "128", "flash_attn": "on", "cont_batching": false}
	cfg, err := st.Resolve(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-m", "/cache/tiny.gguf", "--alias", "tiny", "-c", "2048", "-t", "1", "-np", "8", "-b", "512", "-ub", "128", "-fa", "on", "--no-cont-batching"}
	if !slices.Equal(cfg.Flags, want) {
		t.Errorf("flags\n got %q\nwant %q", cfg.Flags, want)
	}
	if rej := st.Check(cfg); len(rej) != 0 {
		t.Errorf("rejected: %v", rej)
	}
	if cfg.Predicted.MaxRunningRequests != 8 || cfg.Predicted.SlotContext != 256 {
		t.Errorf("predicted %+v", cfg.Predicted)
	}
	// cont_batching true is llama-server's default: nothing is written.
	p["cont_batching"] = true
	if cfg, err = st.Resolve(p, nil); err != nil || slices.Contains(cfg.Flags, "--cont-batching") || slices.Contains(cfg.Flags, "--no-cont-batching") {
		t.Errorf("cont_batching true: %q %v", cfg.Flags, err)
	}
	p["batch"], p["ubatch"] = "64", "128"
	cfg, err = st.Resolve(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rej := st.Check(cfg); len(rej) != 1 || rej[0].Rule != "ubatch_size" {
		t.Errorf("-ub 128 -b 64: %v", rej)
	}
	sv := st.Survey(DefaultSurveyLimits)
	if sv.Size != 128 || sv.Feasible != 96 {
		t.Errorf("survey: %d configs, %d feasible", sv.Size, sv.Feasible)
	}
}

// llamaBase is a minimal llama.cpp study; cases append lines.
const llamaBase = `name: t
engine:
  name: llamacpp
  command: llama-server
model: {path: /m.gguf, served_name: tiny}
`

func TestLoadLlamaErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"inline value in a fixed string", llamaBase + "fixed: '--port=1'\n",
			"t.yaml:6:8: fixed: --port=1: llamacpp takes no --flag=value form (it reads the whole word as an unknown argument); valid: --port 1, the value as the next word"},
		{"inline value in a param", llamaBase + "params:\n  - {name: np, type: categorical, choices: [4], template: '--parallel={value}'}\n",
			"t.yaml:7:59: params[np].template: --parallel=4: llamacpp takes no --flag=value form (it reads the whole word as an unknown argument); valid: --parallel 4, the value as the next word"},
		{"inline value as a mapping key", llamaBase + "fixed: {--parallel=4: 1}\n", "t.yaml:6:9: fixed.--parallel=4: unknown flag --parallel=4"},
		{"switch given a value", llamaBase + "fixed: '--cont-batching true'\n",
			`fixed: "true" is not a flag: --cont-batching is a switch and takes no value; valid: --cont-batching alone to turn it on, --no-cont-batching to turn it off`},
		{"negation as a mapping key", llamaBase + "fixed: {--no-cont-batching: true}\n",
			"t.yaml:6:9: fixed.--no-cont-batching: --no-cont-batching is the negation of --cont-batching; valid: --cont-batching: false"},
		{"negation as a bool param's flag", llamaBase + "params:\n  - {name: cb, type: bool, flag: --no-cont-batching}\n",
			"params[cb].flag: --no-cont-batching is the negation of --cont-batching; valid: flag: --cont-batching (false writes --no-cont-batching)"},
		{"model flag by its alias", llamaBase + "fixed: '--model /x.gguf'\n", "fixed: --model comes from model.path; valid: leave it out"},
		{"served name flag", llamaBase + "fixed: {-a: x}\n", "fixed.-a: -a comes from model.served_name"},
		{"launch flag", llamaBase + "fixed: '--metrics'\n", "fixed: --metrics is set by the launcher"},
		{"log level", llamaBase + "fixed: {-lv: 2}\n", "fixed.-lv: -lv is set by the launcher"},
		{"int with a suffix", llamaBase + "fixed: {-c: 8k}\n", `t.yaml:6:13: fixed.-c: --ctx-size "8k" is not an integer; valid: an integer`},
		{"unknown short flag", llamaBase + "fixed: '-nq 4'\n", "fixed: unknown flag -nq (did you mean"},
		{"cpus zero", llamaBase + "cpus: {per_trial: 0}\n", "t.yaml:6:19: cpus.per_trial: 0; valid: an integer >= 1"},
		{"cpus missing", llamaBase + "cpus: {}\n", "cpus.per_trial: missing"},
		{"model variable unset", strings.Replace(llamaBase, "/m.gguf", "'${SGTUNE_TEST_UNSET_MODEL}'", 1),
			"t.yaml:5:15: model.path: ${SGTUNE_TEST_UNSET_MODEL} refers to $SGTUNE_TEST_UNSET_MODEL, which is not set; valid: export SGTUNE_TEST_UNSET_MODEL=PATH to the model, or write the path itself in model.path"},
		{"model variable broken", strings.Replace(llamaBase, "/m.gguf", "'${HOME'", 1), `"${HOME": "${HOME" is not a variable reference; valid: $NAME or ${NAME}`},
		{"model variable, short form", "name: t\nengine: {name: llamacpp, command: llama-server}\nmodel: $SGTUNE_TEST_UNSET_MODEL/x.gguf\n",
			"t.yaml:3:8: model: $SGTUNE_TEST_UNSET_MODEL/x.gguf refers to $SGTUNE_TEST_UNSET_MODEL"},
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

func TestLoadLlamaForms(t *testing.T) {
	t.Setenv("SGTUNE_TEST_MODEL_DIR", "/models")
	st, err := Parse("t.yaml", []byte(strings.Replace(llamaBase, "/m.gguf", "'${SGTUNE_TEST_MODEL_DIR}/$SGTUNE_TEST_MODEL_DIR.gguf'", 1)+
		"fixed: {--cont-batching: false, --warmup: true, --context-shift: false, -np: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Model != "/models//models.gguf" {
		t.Errorf("model %q", st.Model)
	}
	cfg, err := st.Resolve(Params{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A fixed switch is written as given: false as its negation where it
	// has one, even when that is the default.
	want := []string{"-m", "/models//models.gguf", "--alias", "tiny", "--no-cont-batching", "--warmup", "--no-context-shift", "-np", "4"}
	if !slices.Equal(cfg.Flags, want) {
		t.Errorf("flags\n got %q\nwant %q", cfg.Flags, want)
	}
	if st.Fixed["--cont-batching"] != "" || len(st.Fixed) != 4 {
		t.Errorf("fixed %v", st.Fixed)
	}
}

package space

import (
	"slices"
	"strings"
	"testing"
)

const vllmBase = `name: v
engine:
  name: vllm
  command: vllm serve
  version: v0.11.1
model: {path: org/model, moe: true}
gpus: {per_trial: 4}
`

// TestVLLMStudyTypo: a mistyped vLLM flag in a study is reported at its
// line with the closest valid name, in fixed flags and in a param's flag.
func TestVLLMStudyTypo(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{vllmBase + "fixed:\n  --max-num-seq: 64\n", "v.yaml:9:3: fixed.--max-num-seq: unknown flag --max-num-seq (did you mean --max-num-seqs?)"},
		{vllmBase + "fixed: [--gpu-memory-utilisation 0.9]\n", "unknown flag --gpu-memory-utilisation (did you mean --gpu-memory-utilization?)"},
		{vllmBase + "params:\n  - {name: pc, type: bool, values: {true: --enable-prefix-cachng, false: ''}}\n", "unknown flag --enable-prefix-cachng (did you mean --enable-prefix-caching?)"},
		{vllmBase + "fixed:\n  --model: other\n", "--model comes from model.path"},
	} {
		_, err := Parse("v.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v\nwant %s", err, tc.want)
		}
	}
}

// TestVLLMResolveArgv: the config carries --model for the schema; the argv
// puts the model after `vllm serve`, where vLLM takes it.
func TestVLLMResolveArgv(t *testing.T) {
	st, err := Parse("v.yaml", []byte(vllmBase+`memory:
  reference: {kv_tokens: 500000, gpu_memory_utilization: 0.9}
  kv_tokens_per_mem_fraction_point: 5000
fixed:
  --tensor-parallel-size: 4
  --enable-expert-parallel: true
params:
  - {name: gmu, type: categorical, choices: [0.8, 0.9], flag: --gpu-memory-utilization}
`))
	if err != nil {
		t.Fatal(err)
	}
	if !st.MoE || st.Memory.RefMemFraction != 0.9 {
		t.Errorf("moe %v, reference fraction %v", st.MoE, st.Memory.RefMemFraction)
	}
	cfg, err := st.Resolve(Params{"gmu": "0.8"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"vllm", "serve", "org/model", "--tensor-parallel-size", "4", "--enable-expert-parallel", "--gpu-memory-utilization", "0.8"}
	if got := st.Argv(cfg); !slices.Equal(got, want) {
		t.Errorf("argv %v\nwant %v", got, want)
	}
	if cfg.Predicted.KVTokens != 450000 || cfg.Predicted.KVSource != "hint" {
		t.Errorf("prediction %+v", cfg.Predicted)
	}
	if rej := st.Check(cfg); len(rej) != 0 {
		t.Errorf("rejected: %v", rej)
	}
	if _, err := Parse("v.yaml", []byte(vllmBase+"memory:\n  reference: {kv_tokens: 1, gpu_memory_utilization: 0.9, mem_fraction_static: 0.9}\n")); err == nil ||
		!strings.Contains(err.Error(), "gpu_memory_utilization: given with mem_fraction_static") {
		t.Errorf("both reference fractions: %v", err)
	}
}

// TestVLLMSwitchesOff: vLLM writes a BooleanOptionalAction as --NAME and
// --no-NAME; false, in a bool param or under fixed, writes --no-NAME.
// Before, false wrote nothing, so prefix caching off ran with vLLM's
// default (on) and was measured and exported as off.
func TestVLLMSwitchesOff(t *testing.T) {
	st, err := Parse("v.yaml", []byte(vllmBase+`fixed:
  --tensor-parallel-size: 4
  --enable-chunked-prefill: false
params:
  - {name: pc, type: bool, flag: --enable-prefix-caching}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pc   bool
		want []string
	}{
		{true, []string{"vllm", "serve", "org/model", "--tensor-parallel-size", "4", "--no-enable-chunked-prefill", "--enable-prefix-caching"}},
		{false, []string{"vllm", "serve", "org/model", "--tensor-parallel-size", "4", "--no-enable-chunked-prefill", "--no-enable-prefix-caching"}},
	} {
		cfg, err := st.Resolve(Params{"pc": tc.pc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Argv(cfg); !slices.Equal(got, tc.want) {
			t.Errorf("pc=%v: argv %v\nwant %v", tc.pc, got, tc.want)
		}
	}
}

// TestVLLMSwitchAtDefault: a bool param on a switch whose vLLM default is
// stated writes nothing for that default, so the fingerprint and the
// count of flags changed from the engine's defaults see no change there.
// Before, --enforce-eager false wrote --no-enforce-eager.
func TestVLLMSwitchAtDefault(t *testing.T) {
	st, err := Parse("v.yaml", []byte(vllmBase+`fixed:
  --tensor-parallel-size: 4
params:
  - {name: eager, type: bool, flag: --enforce-eager}
  - {name: tqdm, type: bool, flag: --use-tqdm-on-load}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		eager, tqdm bool
		want        []string
	}{
		{false, true, []string{"vllm", "serve", "org/model", "--tensor-parallel-size", "4"}},
		{true, false, []string{"vllm", "serve", "org/model", "--tensor-parallel-size", "4", "--enforce-eager", "--no-use-tqdm-on-load"}},
	} {
		cfg, err := st.Resolve(Params{"eager": tc.eager, "tqdm": tc.tqdm}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Argv(cfg); !slices.Equal(got, tc.want) {
			t.Errorf("eager=%v tqdm=%v: argv %v\nwant %v", tc.eager, tc.tqdm, got, tc.want)
		}
	}
}

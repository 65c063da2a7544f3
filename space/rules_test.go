package space

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/engine"
)

// ruleStudy is a hybrid-model study with the given fixed flags.
func ruleStudy(t *testing.T, perTrial int, fixed, extra string) *Study {
	t.Helper()
	doc := `name: rules
engine: {name: sglang, command: sglang serve}
model: {path: org/m, hybrid: true}
gpus: {per_trial: ` + strconv.Itoa(perTrial) + `}
fixed: '` + fixed + `'
` + extra
	st, err := Parse("rules.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestEngineRules(t *testing.T) {
	tests := []struct {
		name     string
		perTrial int
		fixed    string
		extra    string
		rule     string // "" = feasible
		msg      string
		ratio    int // expected state ratio when > 0
		running  int // expected predicted max running when > 0
	}{
		{"tp fits", 4, "--tp-size 4", "", "", "", 0, 0},
		{"tp too big", 4, "--tp-size 8", "", "parallel_gpus", "--tp-size 8 = 8 GPUs > gpus.per_trial 4", 0, 0},
		{"dp replicas", 4, "--tp-size 4 --dp-size 2", "", "parallel_gpus", "--tp-size 4 x --dp-size 2 = 8 GPUs > gpus.per_trial 4", 0, 0},
		{"dp attention inside tp", 4, "--tp-size 4 --dp-size 2 --enable-dp-attention", "", "", "", 0, 0},
		{"dp attention divisibility", 4, "--tp-size 4 --dp-size 3 --enable-dp-attention", "", "dp_attention", "--dp-size 3 to divide --tp-size 4", 0, 0},
		{"ep divides tp", 4, "--tp-size 4 --ep-size 3", "", "ep_divides_tp", "--ep-size 3 does not divide --tp-size 4", 0, 0},
		{"ep alias", 4, "--tp-size 4 --ep 2", "", "", "", 0, 0},
		{"a2a forces ep", 4, "--tp-size 4 --ep-size 2 --moe-a2a-backend deepep", "", "ep_a2a", "--ep-size 2 would be overridden", 0, 0},
		{"eagle draft topk1", 4, "--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4", "",
			"eagle_draft_tokens", "--speculative-num-draft-tokens 4 with --speculative-eagle-topk 1: SGLang sets it to --speculative-num-steps 5 + 1 = 6", 0, 0},
		{"eagle draft tree", 4, "--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 6", "",
			"eagle_draft_tokens", "6 > --speculative-num-steps 2 x --speculative-eagle-topk 2 + 1 = 5", 0, 0},
		{"eagle ok", 4, "--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 4 --max-running-requests 16 --max-mamba-cache-size 512", "", "", "", 5, 16},
		{"trtllm topk", 4, "--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 4 --attention-backend trtllm_mha", "",
			"eagle_backend", "trtllm_mha backend only supports topk = 1", 0, 0},
		{"standalone dp attention", 4, "--tp-size 4 --dp-size 2 --enable-dp-attention --speculative-algorithm STANDALONE", "",
			"eagle_backend", "standalone speculative decoding does not support DP attention", 0, 0},
		{"track interval", 4, "--speculative-algorithm EAGLE --speculative-num-steps 7 --speculative-eagle-topk 1 --mamba-track-interval 4", "",
			"mamba_strategy", "--mamba-track-interval 4 < --speculative-num-draft-tokens 8", 0, 0},
		{"lazy with spec", 4, "--speculative-algorithm EAGLE --mamba-radix-cache-strategy extra_buffer_lazy", "",
			"mamba_strategy", "extra_buffer_lazy is unsupported with speculative decoding", 0, 0},
		// The state ratio table (ref §2) with 256 slots and 64 requested.
		{"ratio 1 radix off", 4, "--max-running-requests 64 --max-mamba-cache-size 256 --disable-radix-cache", "", "", "", 1, 64},
		{"ratio 3 no_buffer", 4, "--max-running-requests 64 --max-mamba-cache-size 256 --mamba-radix-cache-strategy no_buffer", "", "", "", 3, 64},
		{"ratio 3 auto without overlap", 4, "--max-running-requests 64 --max-mamba-cache-size 256 --disable-overlap-schedule", "", "", "", 3, 64},
		{"ratio 4 extra_buffer no overlap", 4, "--max-running-requests 64 --max-mamba-cache-size 256 --mamba-radix-cache-strategy extra_buffer --disable-overlap-schedule", "", "", "", 4, 64},
		{"ratio 4 lazy overlap", 4, "--max-running-requests 64 --max-mamba-cache-size 256 --mamba-radix-cache-strategy extra_buffer_lazy", "", "", "", 4, 64},
		{"ratio 5", 4, "--max-running-requests 64 --max-mamba-cache-size 256", "", "limits_reduced",
			"--max-mamba-cache-size 256 with radix cache and overlap: 256 // 5 = 51 < --max-running-requests 64", 5, 51},
		{"ratio 5 accepted", 4, "--max-running-requests 64 --max-mamba-cache-size 256", "on_limits_reduced: accept\n", "", "", 5, 51},
		{"384 slots", 4, "--max-running-requests 64 --max-mamba-cache-size 384", "", "", "", 5, 64},
		{"128 slots", 4, "--max-running-requests 64 --max-mamba-cache-size 128", "", "limits_reduced", "128 // 5 = 25 < --max-running-requests 64", 5, 25},
		{"too small", 4, "--max-running-requests 64 --max-mamba-cache-size 4", "on_limits_reduced: accept\n", "state_slots", "4 // 5 = 0: the state cache is too small", 5, 0},
		{"spec default 48", 4, "--speculative-algorithm EAGLE --max-mamba-cache-size 200", "", "limits_reduced",
			"200 // 5 = 40 < max running requests 48 (speculative default)", 5, 40},
		{"per dp worker", 4, "--tp-size 4 --dp-size 2 --enable-dp-attention --max-running-requests 64 --max-mamba-cache-size 256", "", "limits_reduced",
			"--max-mamba-cache-size 128 with radix cache and overlap: 128 // 5 = 25 < --max-running-requests 64 // --dp-size 2 = 32 per DP worker", 5, 25},
		{"radix off pool = requests", 4, "--max-running-requests 64 --disable-radix-cache", "", "", "", 1, 64},
		{"kv need", 4, "--max-running-requests 64 --disable-radix-cache",
			"memory: {reference: {kv_tokens: 100000, mem_fraction_static: 0.8, state_slots: 64}, kv_tokens_per_state_slot: 100}\nworkload: {chat: {concurrency: [64], requests: [64], max_tokens: 120000}}\n",
			"kv_capacity", "predicted KV tokens 100000 < 120256 needed by one request (256 prompt + 120000 max_tokens)", 1, 64},
		// A pool short of the running requests' tokens serves them in turn
		// (the rest queue): not rejected.
		{"kv short of the running requests", 4, "--tp-size 4 --dp-size 2 --enable-dp-attention --max-running-requests 64 --disable-radix-cache",
			"memory: {reference: {kv_tokens: 100000, mem_fraction_static: 0.8, state_slots: 32}, kv_tokens_per_state_slot: 100}\nworkload: {chat: {concurrency: [63], requests: [63], max_tokens: 4096}}\n",
			"", "", 1, 32},
		{"kv fits per dp worker", 4, "--tp-size 4 --dp-size 2 --enable-dp-attention --max-running-requests 64 --disable-radix-cache",
			"memory: {reference: {kv_tokens: 150000, mem_fraction_static: 0.8, state_slots: 32}, kv_tokens_per_state_slot: 100}\nworkload: {chat: {concurrency: [64], requests: [64], max_tokens: 4096}}\n",
			"", "", 1, 32},
		{"kv halves requests", 4, "--max-running-requests 64 --disable-radix-cache",
			"memory: {reference: {kv_tokens: 100, mem_fraction_static: 0.8, state_slots: 64}, kv_tokens_per_state_slot: 100}\nworkload: {chat: {concurrency: [1], requests: [1], max_tokens: 8}}\n",
			"limits_reduced", "predicted KV tokens 100 // 2 = 50 < --max-running-requests 64", 1, 50},
		{"constraint", 4, "--tp-size 4", "params:\n  - {name: ep, type: categorical, choices: [1, 2], flag: --ep-size}\nconstraints: ['ep == 1 or ep == gpus_per_trial']\n",
			"constraint", `constraint "ep == 1 or ep == gpus_per_trial" is false with ep=2, gpus_per_trial=4`, 0, 0},
		{"constraint on prediction", 4, "--max-running-requests 64 --max-mamba-cache-size 384", "constraints: ['predicted.max_running_requests >= 100']\n",
			"constraint", "predicted.max_running_requests=64", 5, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := ruleStudy(t, tt.perTrial, tt.fixed, tt.extra)
			var p Params
			if strings.Contains(tt.extra, "params:") {
				p = Params{"ep": "2"}
			}
			cfg, err := st.Resolve(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			rej := st.Check(cfg)
			if tt.rule == "" {
				if len(rej) > 0 {
					t.Errorf("rejected: %+v", rej)
				}
			} else {
				found := slices.ContainsFunc(rej, func(r engine.Rejection) bool { return r.Rule == tt.rule && strings.Contains(r.Message, tt.msg) })
				if !found {
					t.Errorf("rejections %+v, want %s: %s", rej, tt.rule, tt.msg)
				}
			}
			if tt.ratio > 0 && cfg.Predicted.StateRatio != tt.ratio {
				t.Errorf("ratio %d, want %d", cfg.Predicted.StateRatio, tt.ratio)
			}
			if tt.running > 0 && cfg.Predicted.MaxRunningRequests != tt.running {
				t.Errorf("max running %d, want %d", cfg.Predicted.MaxRunningRequests, tt.running)
			}
		})
	}
}

func TestSuggestWithGoptuna(t *testing.T) {
	st, err := Load(glmStudy)
	if err != nil {
		t.Fatal(err)
	}
	study, err := goptuna.CreateStudy("t", goptuna.StudyOptionSampler(goptuna.NewRandomSampler(goptuna.RandomSamplerOptionSeed(3))),
		goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	seenSpec, seenNone := false, false
	err = study.Optimize(func(trial goptuna.Trial) (float64, error) {
		p, err := st.Suggest(&trial)
		if err != nil {
			return 0, err
		}
		_, hasSteps := p["spec_steps"]
		if (p["speculative"] == "EAGLE") != hasSteps {
			t.Errorf("spec_steps present %v with speculative %v", hasSteps, p["speculative"])
		}
		seenSpec = seenSpec || hasSteps
		seenNone = seenNone || !hasSteps
		cfg, err := st.Resolve(p, nil)
		if err != nil {
			return 0, err
		}
		if hasSteps {
			steps := p["spec_steps"].(int)
			if !slices.Contains(cfg.Flags, "--speculative-num-draft-tokens") ||
				cfg.Flags[slices.Index(cfg.Flags, "--speculative-num-draft-tokens")+1] != strconv.Itoa(steps+1) {
				t.Errorf("draft tokens not steps+1 in %q", cfg.Flags)
			}
		}
		if mf := p["mem_fraction"].(float64); math.Abs(mf*100-math.Round(mf*100)) > 1e-9 {
			t.Errorf("mem fraction %v is not on its 0.01 step", mf)
		}
		_ = st.Check(cfg)
		return 0, nil
	}, 40)
	if err != nil {
		t.Fatal(err)
	}
	if !seenSpec || !seenNone {
		t.Errorf("40 trials never/always drew speculative decoding (%v %v)", seenSpec, seenNone)
	}
}

func TestResolveErrors(t *testing.T) {
	st, err := Load(glmStudy)
	if err != nil {
		t.Fatal(err)
	}
	good := Params{"ep": "4", "radix_cache": true, "state_slots": "384", "mem_fraction": 0.78, "chunked_prefill": "4096",
		"cuda_graphs": true, "overlap": true, "speculative": "none"}
	if _, err := st.Resolve(good, nil); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"ep": "2", "mem_fraction": 0.955, "radix_cache": "yes", "chunked_prefill": 1.5} {
		p := maps.Clone(good)
		p[k] = v
		if _, err := st.Resolve(p, nil); err == nil {
			t.Errorf("%s=%v resolved", k, v)
		}
	}
	p := maps.Clone(good)
	delete(p, "overlap")
	if _, err := st.Resolve(p, nil); err == nil {
		t.Error("missing active param resolved")
	}
	// An inactive param is dropped.
	p = maps.Clone(good)
	p["spec_steps"] = 3
	cfg, err := st.Resolve(p, nil)
	if err != nil || cfg.Params["spec_steps"] != nil || slices.Contains(cfg.Flags, "--speculative-num-steps") {
		t.Errorf("inactive spec_steps kept: %v %v", err, cfg)
	}
}

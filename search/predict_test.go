package search

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/space"
)

const glmStudy = "../testdata/studies/glm-5.3-flash-h200x4.yaml"

// glmConfigs resolves a few configs of the GLM study over memory fraction
// and state slots, without and with speculative decoding.
func glmConfigs(t *testing.T, st *space.Study, l engine.Learned) []*space.Config {
	t.Helper()
	var out []*space.Config
	for _, mf := range []float64{0.72, 0.76, 0.80, 0.84, 0.88} {
		for _, slots := range []string{"auto", "128", "256", "384"} {
			for _, spec := range []string{"none", "EAGLE"} {
				p := space.Params{"ep": "4", "radix_cache": true, "state_slots": slots, "mem_fraction": mf,
					"chunked_prefill": "8192", "cuda_graphs": true, "overlap": true, "speculative": spec}
				if spec == "EAGLE" {
					p["spec_steps"] = 3
				}
				cfg, err := st.Resolve(p, l)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, cfg)
			}
		}
	}
	return out
}

// trueKV is a machine whose KV arithmetic differs from the study's hint: a
// different offset and slopes, as a hint taken on another machine would.
func trueKV(cfg *space.Config, st *space.Study) int {
	v := st.View(cfg)
	mf, _ := v.Float("--mem-fraction-static", 0.85)
	// The pool size the rules give (an auto pool's too), without learning.
	plain, err := st.Resolve(cfg.Params, nil)
	if err != nil {
		panic(err)
	}
	slots := plain.Predicted.StateSlots
	kv := 3_100_000 + (mf-0.85)*100*121_000 - float64(slots-64)*2_700
	if v.On("--speculative-algorithm") {
		kv -= 520_000
	}
	return int(kv)
}

// TestPredictorLearnsKV: a hint 8% off converges to this machine after a
// few startups, an observed config predicts exactly what it reported, and
// the fit reports an error that covers the truth.
func TestPredictorLearnsKV(t *testing.T) {
	st, err := space.Load(glmStudy)
	if err != nil {
		t.Fatal(err)
	}
	l := newPredictor()
	relErr := func() (worst float64) {
		for _, c := range glmConfigs(t, st, l) {
			worst = math.Max(worst, math.Abs(float64(c.Predicted.KVTokens-trueKV(c, st)))/float64(trueKV(c, st)))
		}
		return worst
	}
	before := relErr()
	cfgs := glmConfigs(t, st, nil)
	for _, i := range []int{0, 7, 13, 22, 31, 38} { // six startups spread over the space
		f := engine.Facts{MaxTotalNumTokens: trueKV(cfgs[i], st), MaxRunningRequests: cfgs[i].Predicted.MaxRunningRequests}
		o, ok := st.Observe(cfgs[i], f)
		if !ok {
			t.Fatal("no observation")
		}
		l.add(o)
	}
	after := relErr()
	t.Logf("worst relative KV error over %d configs: %.4f with the hint alone, %.5f after six startups", len(cfgs), before, after)
	if before < 0.02 || after > before/20 {
		t.Errorf("learning did not converge: %.4f -> %.5f", before, after)
	}
	for _, c := range glmConfigs(t, st, l) {
		if c.Predicted.KVSource == "fitted" && math.Abs(float64(c.Predicted.KVTokens-trueKV(c, st))) > 3*float64(c.Predicted.KVTokensErr)+1000 {
			t.Errorf("%s: predicted %d ± %d, true %d", c.Params, c.Predicted.KVTokens, c.Predicted.KVTokensErr, trueKV(c, st))
		}
	}
	// An observed config predicts exactly what was observed.
	c := cfgs[5]
	o, _ := st.Observe(c, engine.Facts{MaxTotalNumTokens: 1234567, MaxRunningRequests: 61})
	l.add(o)
	again, err := st.Resolve(c.Params, l)
	if err != nil {
		t.Fatal(err)
	}
	if again.Predicted.KVTokens != 1234567 || again.Predicted.MaxRunningRequests != 61 || again.Predicted.KVSource != "observed" {
		t.Errorf("exact observation not reused: %+v", again.Predicted)
	}
	// The study itself did not change: without the predictor it predicts
	// what it did before.
	fresh, _ := st.Resolve(c.Params, nil)
	if fresh.Predicted.KVTokens != c.Predicted.KVTokens {
		t.Errorf("the study changed: %d -> %d", c.Predicted.KVTokens, fresh.Predicted.KVTokens)
	}
}

// ruleStudy is a hybrid-model study over the state pool size.
func ruleStudy(t *testing.T, fixed, extra string) *space.Study {
	t.Helper()
	doc := `name: rules
engine: {name: sglang, command: sglang serve}
model: {path: org/m, hybrid: true}
gpus: {per_trial: 4}
fixed: '--max-running-requests 64 ` + fixed + `'
params:
  - {name: slots, type: categorical, choices: [128, 256], flag: --max-mamba-cache-size}
` + extra
	st, err := space.Parse(filepath.Join(t.TempDir(), "rules.yaml"), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPredictorLearnsRatio: a build whose state ratio differs from the rule
// teaches the study through one startup log.
func TestPredictorLearnsRatio(t *testing.T) {
	st := ruleStudy(t, "", "")
	l := newPredictor()
	cfg, _ := st.Resolve(space.Params{"slots": "256"}, l)
	if cfg.Predicted.StateRatio != 5 || len(st.Check(cfg)) == 0 {
		t.Fatalf("rule ratio: %+v", cfg.Predicted)
	}
	// This engine capped 128 slots at 32: ratio 4 (e.g. FEB-era spec handling).
	small, _ := st.Resolve(space.Params{"slots": "128"}, l)
	o, ok := st.Observe(small, engine.Facts{MaxRunningRequests: 32, MambaCacheSize: 128})
	if !ok {
		t.Fatal("no observation")
	}
	l.add(o)
	cfg, _ = st.Resolve(space.Params{"slots": "256"}, l)
	if cfg.Predicted.StateRatio != 4 || cfg.Predicted.MaxRunningRequests != 64 || len(st.Check(cfg)) != 0 {
		t.Errorf("learned ratio not used: %+v %v", cfg.Predicted, st.Check(cfg))
	}
}

// TestPredictorCountedPrompt: the KV check sizes a request by what the
// server counted (chat template included), not the nominal prompt: a pool
// of 770 tokens holds a request of 512 + 256 but not one of 518 + 256.
func TestPredictorCountedPrompt(t *testing.T) {
	st := ruleStudy(t, "--disable-radix-cache", `memory: {reference: {kv_tokens: 770, mem_fraction_static: 0.8, state_slots: 0}, kv_tokens_per_state_slot: 0.0001}
workload: {chat: {concurrency: [64], requests: [64], max_tokens: 256, prompt_tokens: 512}}
on_limits_reduced: accept
`)
	l := newPredictor()
	cfg, err := st.Resolve(space.Params{"slots": "256"}, l)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Check(cfg) {
		if r.Rule == "kv_capacity" {
			t.Fatalf("nominal prompt rejected: %v", r.Message)
		}
	}
	l.addPrompts(518, 64)
	if l.PromptTokens() != 518 {
		t.Fatalf("prompt tokens %d", l.PromptTokens())
	}
	cfg, _ = st.Resolve(space.Params{"slots": "256"}, l)
	var msg string
	for _, r := range st.Check(cfg) {
		if r.Rule == "kv_capacity" {
			msg = r.Message
		}
	}
	want := "774 needed by one request (518 prompt as the server counted + 256 max_tokens)"
	if msg == "" || !strings.Contains(msg, want) {
		t.Errorf("counted prompt not used: %q, want %q", msg, want)
	}
}

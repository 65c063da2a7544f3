package space

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/seed"
)

// seedRecord is seed 000's published record
// (/work/shared/seeds/000_a1b3c8372588667f.txt, runs[] as JSON).
const seedRecord = "../testdata/profiles/calibration/seed000.json"

func seedRuns(t *testing.T) []seed.Run {
	t.Helper()
	doc, err := seed.Load(seedRecord)
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Runs) != 10 {
		t.Fatalf("want the seed's 10 runs, got %d", len(doc.Runs))
	}
	return doc.Runs
}

// explicitSlots says whether the seed run set --max-mamba-cache-size: the
// pools of 64 (radix off: = --max-running-requests) and 575 (radix on, auto)
// are SGLang's own sizes; 128/256/384 were chosen by hand.
func explicitSlots(slots int) bool { return slots == 128 || slots == 256 || slots == 384 }

// seedParams maps a seed run onto the glm study's params.
func seedParams(r seed.Run) Params {
	c := r.Config
	p := Params{
		"ep":              strconv.Itoa(c.EP),
		"radix_cache":     c.PrefixCaching,
		"state_slots":     "auto",
		"mem_fraction":    c.MemoryFraction,
		"chunked_prefill": strconv.Itoa(c.MaxBatchedTokens),
		"cuda_graphs":     !c.DisableCUDAGraph,
		"overlap":         !c.DisableOverlapSchedule,
		"speculative":     "none",
	}
	if explicitSlots(c.StatePoolSlots) {
		p["state_slots"] = strconv.Itoa(c.StatePoolSlots)
	}
	if c.SpecMethod != nil {
		p["speculative"] = *c.SpecMethod
		p["spec_steps"] = *c.SpecSteps
	}
	return p
}

// seedFlags is the engine command line the seed run describes.
func seedFlags(r seed.Run) map[string]string {
	c := r.Config
	f := map[string]string{
		"--model-path":           "zai-org/GLM-5.3-Flash",
		"--tp-size":              strconv.Itoa(c.TP),
		"--ep-size":              strconv.Itoa(c.EP),
		"--max-running-requests": strconv.Itoa(c.RequestedMaxRunning),
		"--context-length":       strconv.Itoa(c.MaxModelLen),
		"--mem-fraction-static":  strconv.FormatFloat(c.MemoryFraction, 'f', -1, 64),
		"--chunked-prefill-size": strconv.Itoa(c.MaxBatchedTokens),
		// The seed's tool-call checks pass (8/8), so its servers parsed
		// reasoning and tool calls; its config records leave the parsers
		// out, and the study names seed 004's (glm45, glm47).
		"--reasoning-parser": "glm45",
		"--tool-call-parser": "glm47",
	}
	if !c.PrefixCaching {
		f["--disable-radix-cache"] = ""
	}
	if explicitSlots(c.StatePoolSlots) {
		f["--max-mamba-cache-size"] = strconv.Itoa(c.StatePoolSlots)
	}
	if c.DisableCUDAGraph {
		f["--disable-cuda-graph"] = ""
	}
	if c.DisableOverlapSchedule {
		f["--disable-overlap-schedule"] = ""
	}
	if c.SpecMethod != nil {
		f["--speculative-algorithm"] = *c.SpecMethod
		f["--speculative-eagle-topk"] = "1"
		f["--speculative-num-steps"] = strconv.Itoa(*c.SpecSteps)
		f["--speculative-num-draft-tokens"] = strconv.Itoa(*c.SpecTokens)
	}
	return f
}

func flagMap(t *testing.T, st *Study, flags []string) map[string]string {
	t.Helper()
	args, err := st.Schema.ParseArgv(flags)
	if err != nil {
		t.Fatalf("flags %q: %v", flags, err)
	}
	out := map[string]string{}
	for _, a := range args {
		if _, dup := out[a.Name]; dup {
			t.Errorf("flag %s emitted twice in %q", a.Name, flags)
		}
		out[a.Name] = strings.Join(a.Values, " ")
	}
	return out
}

const glmStudy = "../testdata/studies/glm-5.3-flash-h200x4.yaml"

func TestSeedRunsResolveAndCheck(t *testing.T) {
	st, err := Load(glmStudy)
	if err != nil {
		t.Fatal(err)
	}
	const mtp5 = "--max-mamba-cache-size 256 with radix cache and overlap: 256 // 5 = 51 < --max-running-requests 64"
	var rejected []string
	for _, r := range seedRuns(t) {
		t.Run(r.Name, func(t *testing.T) {
			cfg, err := st.Resolve(seedParams(r), nil)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Flags[0] != "--model-path" {
				t.Errorf("flags start with %q, want --model-path", cfg.Flags[0])
			}
			got, want := flagMap(t, st, cfg.Flags), seedFlags(r)
			for k, v := range want {
				if gv, ok := got[k]; !ok || gv != v {
					t.Errorf("flag %s = %q (present %v), seed has %q", k, gv, ok, v)
				}
			}
			for k, v := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("extra flag %s %q not in the seed run", k, v)
				}
			}
			pr := cfg.Predicted
			if pr.StateSlots != r.Config.StatePoolSlots {
				t.Errorf("predicted state slots %d, seed %d", pr.StateSlots, r.Config.StatePoolSlots)
			}
			if pr.MaxRunningRequests != r.Config.EffectiveMaxRunning {
				t.Errorf("predicted max running requests %d, seed effective %d", pr.MaxRunningRequests, r.Config.EffectiveMaxRunning)
			}
			if rel := math.Abs(float64(pr.KVTokens-r.Config.KVTokens)) / float64(r.Config.KVTokens); rel > 0.01 {
				t.Errorf("predicted KV tokens %d, seed %d (%.2f%% off)", pr.KVTokens, r.Config.KVTokens, 100*rel)
			}
			rej := st.Check(cfg)
			if len(rej) > 0 {
				rejected = append(rejected, r.Name)
			}
			if r.Name == "quad-ep4-mtp5" {
				if len(rej) != 1 || rej[0].Message != mtp5 || rej[0].Rule != "limits_reduced" {
					t.Errorf("rejections %+v, want exactly %q", rej, mtp5)
				}
			}
			t.Logf("%s: slots %d ratio %d running %d kv %d (seed %d) rejections %v", r.Name, pr.StateSlots, pr.StateRatio,
				pr.MaxRunningRequests, pr.KVTokens, r.Config.KVTokens, rej)
		})
	}
	// The seed rejected quad-ep4-mtp5 (51 < 64) after launching it. It also
	// ran quad-ep4-cache-state128, whose startup log capped 64 at 25 (128 // 5):
	// the same rule, which sgtune applies before launch.
	want := []string{"quad-ep4-cache-state128", "quad-ep4-mtp5"}
	slices.Sort(rejected)
	if !slices.Equal(rejected, want) {
		t.Errorf("rejected %v, want %v", rejected, want)
	}

	// With on_limits_reduced: accept, all ten launch.
	st.OnLimitsReduced = "accept"
	for _, r := range seedRuns(t) {
		cfg, err := st.Resolve(seedParams(r), nil)
		if err != nil {
			t.Fatal(err)
		}
		if rej := st.Check(cfg); len(rej) > 0 {
			t.Errorf("%s with accept: %v", r.Name, rej)
		}
	}
}

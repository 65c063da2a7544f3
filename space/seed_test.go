package space

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// seedRun is one run of seed 000 (space/testdata/seed000_runs.json is the
// subset of /work/shared/seeds/000_a1b3c8372588667f.txt these tests need).
type seedRun struct {
	Name   string `json:"name"`
	State  string `json:"state"`
	Config struct {
		TP         int     `json:"tp"`
		EP         int     `json:"ep"`
		MaxModel   int     `json:"max_model_len"`
		Chunked    int     `json:"max_num_batched_tokens"`
		MemFrac    float64 `json:"memory_fraction"`
		Prefix     bool    `json:"prefix_caching"`
		NoGraph    bool    `json:"disable_cuda_graph"`
		NoOverlap  bool    `json:"disable_overlap_schedule"`
		Requested  int     `json:"requested_max_running_requests"`
		Effective  int     `json:"effective_max_running_requests"`
		Slots      int     `json:"effective_state_pool_slots"`
		KVTokens   int     `json:"engine_kv_tokens"`
		SpecMethod *string `json:"spec_method"`
		SpecSteps  *int    `json:"spec_num_steps"`
		SpecTokens *int    `json:"spec_num_tokens"`
	} `json:"config"`
}

func seedRuns(t *testing.T) []seedRun {
	t.Helper()
	data, err := os.ReadFile("testdata/seed000_runs.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Runs []seedRun }
	if err := json.Unmarshal(data, &doc); err != nil {
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
func seedParams(r seedRun) Params {
	c := r.Config
	p := Params{
		"ep":              strconv.Itoa(c.EP),
		"radix_cache":     c.Prefix,
		"state_slots":     "auto",
		"mem_fraction":    c.MemFrac,
		"chunked_prefill": strconv.Itoa(c.Chunked),
		"cuda_graphs":     !c.NoGraph,
		"overlap":         !c.NoOverlap,
		"speculative":     "none",
	}
	if explicitSlots(c.Slots) {
		p["state_slots"] = strconv.Itoa(c.Slots)
	}
	if c.SpecMethod != nil {
		p["speculative"] = *c.SpecMethod
		p["spec_steps"] = *c.SpecSteps
	}
	return p
}

// seedFlags is the engine command line the seed run describes.
func seedFlags(r seedRun) map[string]string {
	c := r.Config
	f := map[string]string{
		"--model-path":           "zai-org/GLM-5.3-Flash",
		"--tp-size":              strconv.Itoa(c.TP),
		"--ep-size":              strconv.Itoa(c.EP),
		"--max-running-requests": strconv.Itoa(c.Requested),
		"--context-length":       strconv.Itoa(c.MaxModel),
		"--mem-fraction-static":  strconv.FormatFloat(c.MemFrac, 'f', -1, 64),
		"--chunked-prefill-size": strconv.Itoa(c.Chunked),
	}
	if !c.Prefix {
		f["--disable-radix-cache"] = ""
	}
	if explicitSlots(c.Slots) {
		f["--max-mamba-cache-size"] = strconv.Itoa(c.Slots)
	}
	if c.NoGraph {
		f["--disable-cuda-graph"] = ""
	}
	if c.NoOverlap {
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
			if pr.StateSlots != r.Config.Slots {
				t.Errorf("predicted state slots %d, seed %d", pr.StateSlots, r.Config.Slots)
			}
			if pr.MaxRunningRequests != r.Config.Effective {
				t.Errorf("predicted max running requests %d, seed effective %d", pr.MaxRunningRequests, r.Config.Effective)
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

package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

const smallVLLMStudy = "testdata/small-vllm.yaml"

func loadStudy(t *testing.T, path string) *space.Study {
	t.Helper()
	st, err := space.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestSimWords(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"sglang-sim --sim-profile glm-5.3-flash-h200x4", nil},
		{"sglang-sim --sim-engine vllm --sim-profile p --sim-speedup 25", []string{"--sim-engine", "vllm"}},
		{"sglang-sim --sim-engine=vllm --sim-speedup=25 --sim-overhead-ms 3", []string{"--sim-engine=vllm", "--sim-overhead-ms", "3"}},
		{"python3 -m sglang.launch_server", nil},
	} {
		if got := simWords(strings.Fields(tc.cmd)); !slices.Equal(got, tc.want) {
			t.Errorf("%q: %q, want %q", tc.cmd, got, tc.want)
		}
	}
}

// TestVLLMVirtual: a vLLM study runs in virtual time as vLLM: the
// simulator gets --sim-engine vllm and the positional model, its startup
// is read with vLLM's log parser and its crashes with vLLM's rules. With
// SGLang's view of the same argv every launch fails (as it did when the
// runner hard-coded SGLang: every config bad_command).
func TestVLLMVirtual(t *testing.T) {
	st := loadStudy(t, smallVLLMStudy)
	eng := newSimEngine(st)
	if eng.kind != engine.VLLM || !slices.Equal(eng.words, []string{"--sim-engine", "vllm"}) {
		t.Fatalf("engine %s, words %q; want vllm and --sim-engine vllm", eng.kind.Name, eng.words)
	}
	profile := studyProfile(st.Engine.Command)
	var cfg *space.Config
	st.Enumerate(func(p space.Params) bool {
		c, err := st.Resolve(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p["expert_parallel"] == true && len(st.Check(c)) == 0 {
			cfg = c
			return false
		}
		return true
	})
	if cfg == nil {
		t.Fatal("no feasible config with expert parallelism")
	}
	sglang := simEngine{kind: engine.SGLang, command: eng.command}
	for _, tc := range []struct {
		name   string
		eng    simEngine
		starts bool
	}{
		{"vllm", eng, true},
		{"sglang's view", sglang, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &virtualBackend{profile: profile, eng: tc.eng}
			srv, err := b.startDrawn(t.Context(), launcher.Spec{Argv: st.Argv(cfg)}, 1, 2)
			var f *launcher.Failure
			switch {
			case !tc.starts && errors.As(err, &f):
				return
			case !tc.starts:
				t.Fatalf("started (err %v); want a startup failure", err)
			case err != nil:
				t.Fatalf("start %q: %v", st.Argv(cfg), err)
			}
			if facts := srv.Facts(); facts.MaxTotalNumTokens <= 0 {
				t.Errorf("facts %+v: no KV cache size from vLLM's log", facts)
			}
		})
	}

	ls, err := ComputeLandscape(t.Context(), st, landscapeOptions{Profile: profile, Draws: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ls.Configs {
		p := c.Params
		switch {
		case p["async_scheduling"] == true && p["speculative"] == "mtp":
			if c.Launched() {
				t.Errorf("%s launched; want rejected by vLLM's async_scheduling rule", p)
			}
		case p["expert_parallel"] == false:
			if c.Class != engine.ClassIllegalMemoryAccess || c.Mean != 0 {
				t.Errorf("%s: class %q mean %v; want vLLM's illegal memory access", p, c.Class, c.Mean)
			}
		default:
			if c.Mean <= 0 || len(c.Values) != 2 {
				t.Errorf("%s: class %q (%s), mean %v over %d draws", p, c.Class, c.Reason, c.Mean, len(c.Values))
			}
		}
	}
	if b := ls.Configs[ls.Best].Params; b["speculative"] != "mtp" || b["expert_parallel"] != true {
		t.Errorf("best %s", b)
	}

	// The study loop and a baseline launch through the same backend.
	pre := search.Check(st, os.Getenv)
	pre.Host = nil // sglang-sim need not be on PATH: nothing runs outside the process
	cmp := comparison{Study: st, Profile: profile, Landscape: ls, Seeds: 2, Budget: 4, NoiseCV: 0.1, Workers: 2, Preflight: &pre,
		Backend: &virtualBackend{profile: profile, noiseCV: 0.1, eng: eng}}
	ms, err := pickMethods("ours,random")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := cmp.Run(context.Background(), ms)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range runs {
		if len(r.Regret) != 4 {
			t.Errorf("%s seed %d: regret %v; want 4 launches", r.Method, r.Seed, r.Regret)
		}
		found = found || r.Regret[len(r.Regret)-1] < 1
	}
	if !found {
		t.Errorf("no search found a config that counts: %+v", runs)
	}
}

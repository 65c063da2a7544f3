package sim

import (
	"math"
	"strings"
	"testing"
)

// seedConfigs are the ten configurations of seed 000 as SGLang argv, with
// the engine figures the seed recorded.
var seedConfigs = []struct {
	name       string
	argv       string
	kvTokens   int
	mrr, slots int
}{
	{"reproduce", "--tp 4 --ep 1 --mem-fraction-static 0.85 --disable-radix-cache --max-running-requests 64", 3343552, 64, 64},
	{"no-cuda-graphs", "--tp 4 --ep 1 --mem-fraction-static 0.85 --disable-radix-cache --max-running-requests 64 --disable-cuda-graph", 3343552, 64, 64},
	{"no-overlap", "--tp 4 --ep 1 --mem-fraction-static 0.85 --disable-radix-cache --max-running-requests 64 --disable-overlap-schedule", 3343552, 64, 64},
	{"state-pool-128", "--tp 4 --ep 1 --mem-fraction-static 0.85 --disable-radix-cache --max-running-requests 64 --max-mamba-cache-size 128", 3157760, 64, 128},
	{"prefix-cache-on", "--tp 4 --ep 1 --mem-fraction-static 0.85 --max-running-requests 64", 1860480, 64, 575},
	{"quad-ep4", "--tp 4 --ep 4 --mem-fraction-static 0.85 --disable-radix-cache --max-running-requests 64", 3342848, 64, 64},
	{"quad-ep4-cache-state128", "--tp 4 --ep 4 --mem-fraction-static 0.78 --chunked-prefill-size 4096 --max-running-requests 64 --max-mamba-cache-size 128", 2341824, 25, 128},
	{"quad-ep4-mtp5", "--tp 4 --ep 4 --mem-fraction-static 0.78 --chunked-prefill-size 4096 --max-running-requests 64 --max-mamba-cache-size 256 --speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6", 789440, 51, 256},
	{"quad-ep4-cache-state384", "--tp 4 --ep 4 --mem-fraction-static 0.78 --chunked-prefill-size 4096 --max-running-requests 64 --max-mamba-cache-size 384", 1598848, 64, 384},
	{"quad-ep4-mtp5-state384", "--tp 4 --ep 4 --mem-fraction-static 0.78 --chunked-prefill-size 4096 --max-running-requests 64 --max-mamba-cache-size 384 --speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6", 241344, 64, 384},
}

func mustProfile(t testing.TB, name string) *Profile {
	t.Helper()
	p, err := LoadProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func resolveArgv(t testing.TB, p *Profile, argv string) (*Args, *Plan) {
	t.Helper()
	a, err := ParseArgs(append([]string{"--model-path", "zai-org/GLM-5.3-Flash", "--context-length", "32768"}, strings.Fields(argv)...))
	if err != nil {
		t.Fatal(err)
	}
	return a, Resolve(a, p)
}

func TestMemoryModelSeed000(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	for _, c := range seedConfigs {
		t.Run(c.name, func(t *testing.T) {
			_, pl := resolveArgv(t, p, c.argv)
			if pl.Err != nil {
				t.Fatalf("startup error: %v", pl.Err)
			}
			dev := math.Abs(float64(pl.KVTokens-c.kvTokens)) / float64(c.kvTokens)
			if dev > 0.01 {
				t.Errorf("KV tokens %d, seed %d (%.2f%% off)", pl.KVTokens, c.kvTokens, dev*100)
			}
			if pl.EffectiveMRR != c.mrr {
				t.Errorf("effective max running requests %d, seed %d", pl.EffectiveMRR, c.mrr)
			}
			if pl.StateSlots != c.slots {
				t.Errorf("state slots %d, seed %d", pl.StateSlots, c.slots)
			}
			t.Logf("kv %d (seed %d, %+.3f%%) mrr %d slots %d", pl.KVTokens, c.kvTokens, 100*float64(pl.KVTokens-c.kvTokens)/float64(c.kvTokens), pl.EffectiveMRR, pl.StateSlots)
		})
	}
}

func TestReductionWarning(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	_, pl := resolveArgv(t, p, seedConfigs[7].argv)
	want := "max_running_requests was reduced from the requested 64 to 51 (per dp worker) due to the available KV cache capacity."
	if pl.ReductionWarning != want {
		t.Fatalf("warning %q, want %q", pl.ReductionWarning, want)
	}
	_, pl = resolveArgv(t, p, seedConfigs[8].argv)
	if pl.ReductionWarning != "" {
		t.Fatalf("384 slots must keep 64, got %q", pl.ReductionWarning)
	}
}

func TestRatioTable(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	cases := []struct {
		argv  string
		ratio int
	}{
		{"--disable-radix-cache", 1},
		{"--mamba-radix-cache-strategy no_buffer", 3},
		{"--mamba-radix-cache-strategy extra_buffer --disable-overlap-schedule", 4},
		{"--mamba-radix-cache-strategy extra_buffer_lazy", 4},
		{"", 5},
		{"--disable-overlap-schedule", 3}, // auto -> no_buffer without overlap
	}
	for _, c := range cases {
		_, pl := resolveArgv(t, p, "--tp 4 --ep 4 "+c.argv)
		if pl.Ratio != c.ratio {
			t.Errorf("%q: ratio %d, want %d", c.argv, pl.Ratio, c.ratio)
		}
	}
}

func TestStartupErrors(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	cases := []struct{ argv, kind string }{
		{"--tp 4 --mem-fraction-static 0.95", "oom"},
		{"--tp 4 --mem-fraction-static 0.5", "memory"},
		{"--tp 4 --max-mamba-cache-size 4 --max-running-requests 64", "state_pool"},
	}
	for _, c := range cases {
		_, pl := resolveArgv(t, p, c.argv)
		if pl.Err == nil || pl.Err.Kind != c.kind {
			t.Errorf("%q: error %v, want kind %s", c.argv, pl.Err, c.kind)
		}
	}
}

// seed004Argv is seed 004's launch command (host, port and key dropped).
const seed004Argv = "--served-model-name zai-org/GLM-5.3-Flash --trust-remote-code --tp 8 --reasoning-parser glm45 --tool-call-parser glm47 --context-length 1048576 --mem-fraction-static 0.76 --enable-metrics --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend flashinfer_sparse_mla --dsa-decode-backend flashinfer_sparse_mla --linear-attn-backend triton --attention-backend dsa --fp8-gemm-backend cutlass --moe-runner-backend triton --speculative-algorithm DFLASH --speculative-draft-model-path incoai/GLM-5.3-Flash-DFlash2 --speculative-draft-attention-backend fa4"

// TestSeed004Capacity: the seed's over-capacity cells follow from KV tokens
// with the tuner's arithmetic conc*(context+max_output) <= KV.
func TestSeed004Capacity(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-rtxpro6000x8")
	a, err := ParseArgs(append([]string{"--model-path", "zai-org/GLM-5.3-Flash"}, strings.Fields(seed004Argv)...))
	if err != nil {
		t.Fatal(err)
	}
	pl := Resolve(a, p)
	if pl.Err != nil {
		t.Fatal(pl.Err)
	}
	t.Logf("KV tokens %d, slots %d, mrr %d", pl.KVTokens, pl.StateSlots, pl.EffectiveMRR)
	// Fits (valid in the seed) and does not fit (over capacity).
	fits := [][2]int{{32768, 32}, {65536, 16}, {131072, 8}, {262144, 4}, {524288, 4}, {1043456, 2}}
	over := [][2]int{{16384, 128}, {32768, 64}, {65536, 32}, {131072, 16}, {262144, 8}, {524288, 8}, {1043456, 4}}
	for _, c := range fits {
		if c[1]*(c[0]+4096) > pl.KVTokens {
			t.Errorf("%d x %d should fit in %d", c[0], c[1], pl.KVTokens)
		}
	}
	for _, c := range over {
		if c[1]*(c[0]+4096) <= pl.KVTokens {
			t.Errorf("%d x %d should be over capacity at %d", c[0], c[1], pl.KVTokens)
		}
	}
}

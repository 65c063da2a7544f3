package sim

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/sgtune/sgtune/engine"
)

// TestDPReplicasPlan: --dp-size without DP attention runs replicas, each
// with the requested running cap and its own GPUs (world size TP x DP);
// with DP attention the workers split one TP group and its cap as before.
func TestDPReplicasPlan(t *testing.T) {
	dense := mustProfile(t, "llama-3.1-8b-h100x2")
	glm := mustProfile(t, "glm-5.3-flash-h200x4")
	for _, tc := range []struct {
		name                string
		p                   *Profile
		argv                string
		replicas, mrr       int
		world               int
		dpAttention, faults bool
	}{
		{"tp2", dense, "--tp 2 --max-running-requests 64", 1, 64, 2, false, false},
		{"tp1 dp2", dense, "--tp 1 --dp 2 --max-running-requests 64", 2, 64, 2, false, false},
		{"tp2 dp2 needs 4 GPUs", dense, "--tp 2 --dp 2 --max-running-requests 64", 2, 64, 4, false, true},
		{"dp attention", glm, "--tp 4 --dp 2 --enable-dp-attention --max-running-requests 128", 1, 64, 4, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, pl := resolveArgv(t, tc.p, tc.argv)
			if pl.Err != nil {
				t.Fatal(pl.Err)
			}
			if pl.replicas() != tc.replicas || pl.EffectiveMRR != tc.mrr || pl.DPAttention != tc.dpAttention {
				t.Errorf("replicas %d, effective mrr %d, dp attention %v; want %d, %d, %v", pl.replicas(), pl.EffectiveMRR, pl.DPAttention, tc.replicas, tc.mrr, tc.dpAttention)
			}
			facts := pl.Facts(a)
			if facts["world_size"] != tc.world {
				t.Errorf("world_size %v, want %d", facts["world_size"], tc.world)
			}
			rules, err := MatchFaults(tc.p.Faults, facts)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(rules) > 0; got != tc.faults {
				t.Errorf("faults %v, want some: %v", rules, tc.faults)
			}
		})
	}
}

// shortBodies are n chat bodies of unique ~200-token prompts and maxTok
// output tokens.
func shortBodies(n, maxTok int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = chatBody(fmt.Sprintf("tag-%d ", i)+words("w", 200), fmt.Sprintf("question %d", i), maxTok)
	}
	return out
}

// TestDPReplicasRun: two replicas each admit their own running cap and
// decode their halves side by side: 16 requests with a cap of 8 take one
// wave on TP1 x DP2, as long as 8 requests on one replica, and two waves
// on one replica (the second without the first's cold batch shapes).
// Each replica keeps its own prefix cache.
func TestDPReplicasRun(t *testing.T) {
	p := mustProfile(t, "llama-3.1-8b-h100x2")
	base := []string{"--model-path", "m", "--tp-size", "1", "--max-running-requests", "8", "--cuda-graph-max-bs", "8"}
	run := func(argv []string, bodies [][]byte, conc int) (LoopResult, *Virtual) {
		t.Helper()
		return closedLoop(t, p, argv, bodies, conc)
	}
	bodies := shortBodies(16, 256)
	one, _ := run(base, bodies, 16)
	two, v := run(append(slices.Clone(base), "--dp-size", "2"), bodies, 16)
	half, _ := run(base, bodies[:8], 8)
	t.Logf("16 requests: %.3f s on one replica, %.3f s on two; 8 on one: %.3f s", one.DurationS, two.DurationS, half.DurationS)
	if r := two.DurationS / one.DurationS; r > 0.75 {
		t.Errorf("two replicas took %.2f of one replica's time, want one wave of its two", r)
	}
	if r := two.DurationS / half.DurationS; r < 0.95 || r > 1.1 {
		t.Errorf("two replicas with 8 each took %.2f of one replica's time with 8, want about the same", r)
	}
	// Round robin: each replica's cache holds its own 8 prompts.
	for r, c := range v.eng.caches {
		if got, want := c.tokens(), 8*200; got < want*9/10 || got > want*11/10 {
			t.Errorf("replica %d caches %d prompt tokens, want about %d", r, got, want)
		}
	}
}

// TestNoOverlapStepCost: with performance.no_overlap_step_ms a step
// without the overlap scheduler costs the table's CPU time more; without
// the table (every bundled GLM profile) overlap changes no step time.
func TestNoOverlapStepCost(t *testing.T) {
	p := mustProfile(t, "llama-3.1-8b-h100x2")
	with := *p
	with.Perf.NoOverlapStepMS = Table{{1, 1}, {256, 5}}
	for _, tc := range []struct {
		name string
		p    *Profile
		b    int
		want float64 // ms more without overlap
	}{
		{"no table", p, 64, 0},
		{"batch 1", &with, 1, 1},
		{"batch 256", &with, 256, 5},
		{"batch 128", &with, 128, 1 + 4*127.0/255},
	} {
		_, on := resolveArgv(t, tc.p, "--tp 2")
		_, off := resolveArgv(t, tc.p, "--tp 2 --disable-overlap-schedule")
		eOn := NewEngine(tc.p, on, nil, 1, io.Discard, nil)
		eOff := NewEngine(tc.p, off, nil, 1, io.Discard, nil)
		if got := eOff.StepMS(tc.b, 100_000, false) - eOn.StepMS(tc.b, 100_000, false); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: decode step %.4f ms longer without overlap, want %.4f", tc.name, got, tc.want)
		}
		batch := []*Seq{{Prompt: 1000}}
		if got := (eOff.prefillS(batch, []int{1000}) - eOn.prefillS(batch, []int{1000})) * 1000; math.Abs(got-tc.p.Perf.NoOverlapStepMS.At(1)) > 1e-9 {
			t.Errorf("%s: prefill step %.4f ms longer without overlap, want %.4f", tc.name, got, tc.p.Perf.NoOverlapStepMS.At(1))
		}
	}
}

// TestOOMHeadroom: memory.oom_headroom fails a launch whose memory
// fraction leaves less than the chunk's activations and the CUDA graphs'
// buffers need, so the safe fraction falls as either grows; without it
// only oom_mem_fraction applies.
func TestOOMHeadroom(t *testing.T) {
	p := mustProfile(t, "llama-3.1-8b-h100x2")
	q := *p
	q.Memory.OOMHeadroom = OOMHeadroom{BaseGB: 2, ChunkMBPerToken: 0.5, GraphMBPerBS: 10}
	// 79.1 GB per GPU: 1 - mf leaves 7.91 GB at 0.90, 3.955 GB at 0.95.
	for _, tc := range []struct {
		name string
		p    *Profile
		argv string
		oom  bool
	}{
		{"headroom unset", p, "--mem-fraction-static 0.94 --chunked-prefill-size 16384", false},
		{"fits", &q, "--mem-fraction-static 0.90 --chunked-prefill-size 4096 --cuda-graph-max-bs 128", false},            // 2+2+1.25 < 7.91
		{"chunk too large", &q, "--mem-fraction-static 0.90 --chunked-prefill-size 16384 --cuda-graph-max-bs 128", true}, // 2+8+1.25
		{"graphs too large", &q, "--mem-fraction-static 0.93 --chunked-prefill-size 4096 --cuda-graph-max-bs 256", true}, // 5.54 < 2+2+2.5
		{"no graphs", &q, "--mem-fraction-static 0.93 --chunked-prefill-size 4096 --cuda-graph-max-bs 256 --disable-cuda-graph", false},
		{"small chunk floor", &q, "--mem-fraction-static 0.94 --chunked-prefill-size 512 --disable-cuda-graph", false}, // 2+1 < 4.75
	} {
		_, pl := resolveArgv(t, tc.p, "--tp 2 "+tc.argv)
		if got := pl.Err != nil && pl.Err.Kind == "oom"; got != tc.oom {
			t.Errorf("%s: oom %v (%v), want %v", tc.name, got, pl.Err, tc.oom)
		}
	}
}

// TestGraphMaxBSFact: fault rules can name the decode CUDA graphs' largest
// batch (the flag, or SGLang's default).
func TestGraphMaxBSFact(t *testing.T) {
	p := mustProfile(t, "llama-3.1-8b-h100x2")
	rule := FaultRule{Name: "large graphs", When: map[string]any{"disable_cuda_graph": false, "cuda_graph_max_bs": map[string]any{"gt": 256}},
		Effect: FaultEffect{Kind: "crash_when_running_over", N: 256}}
	for _, tc := range []struct {
		argv  string
		match bool
	}{
		{"--tp 2", false}, // default 256 at TP2
		{"--tp 2 --cuda-graph-max-bs 384", true},
		{"--tp 2 --cuda-graph-max-bs 384 --disable-cuda-graph", false},
	} {
		a, pl := resolveArgv(t, p, tc.argv)
		got, err := MatchFaults([]FaultRule{rule}, pl.Facts(a))
		if err != nil {
			t.Fatal(err)
		}
		if (len(got) > 0) != tc.match {
			t.Errorf("%s: matched %v, want %v", tc.argv, got, tc.match)
		}
	}
}

// TestTouchKnownSameAsTouch: touching a chain with the blocks a match
// found leaves the cache in the same LRU order as touching it by lookups,
// whatever was evicted in between.
func TestTouchKnownSameAsTouch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, b := newPrefixCache(), newPrefixCache()
	chains := make([][]uint64, 12)
	for i := range chains {
		n := 5 + rng.IntN(40)
		prefix := rng.IntN(3) // a few shared roots
		chains[i] = make([]uint64, n)
		h := uint64(prefix + 1)
		for j := range chains[i] {
			if j > 3 || i%4 == 0 {
				h = mix64(h ^ uint64(i*1000+j))
			} else {
				h = mix64(h + uint64(j))
			}
			chains[i][j] = h
		}
	}
	for step := range 400 {
		ch := chains[rng.IntN(len(chains))]
		hitA := a.match(ch)
		hitB, known := b.matchBlocks(ch, nil)
		if hitA != hitB {
			t.Fatalf("step %d: matched %d and %d blocks", step, hitA, hitB)
		}
		a.touch(ch[:hitA])
		b.touchKnown(ch[:hitB], known)
		for range rng.IntN(30) { // other requests' evictions in between
			a.evict()
			b.evict()
		}
		a.touch(ch)
		b.touchKnown(ch, known)
		for a.tokens() > 300*cacheBlockTokens {
			a.evict()
			b.evict()
		}
		var orderA, orderB []uint64
		for x := a.root.next; x != &a.root; x = x.next {
			orderA = append(orderA, x.key)
		}
		for x := b.root.next; x != &b.root; x = x.next {
			orderB = append(orderB, x.key)
		}
		if !slices.Equal(orderA, orderB) {
			t.Fatalf("step %d: LRU orders differ (%d and %d blocks)", step, len(orderA), len(orderB))
		}
	}
}

// TestRunningFaultOnChunkedPrompt: a request whose prompt is prefilled in
// chunks runs from its first chunk, so a crash_when_running_over rule
// fires on it as on a batch's admission (it never fired when every prompt
// was longer than the chunk size).
func TestRunningFaultOnChunkedPrompt(t *testing.T) {
	p := mustProfile(t, "llama-3.1-8b-h100x2")
	for _, tc := range []struct {
		name   string
		prompt int // words
		dp     string
		crash  bool
	}{
		{"short prompts", 200, "1", true},
		{"chunked prompts", 3000, "1", true},
		{"chunked prompts, two replicas of 6", 3000, "2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := *p
			q.Faults = []FaultRule{{Name: "crash over 4", When: map[string]any{"tp_size": 2}, Effect: FaultEffect{Kind: "crash_when_running_over", N: 4}}}
			argv := []string{"--model-path", "m", "--tp-size", "2", "--dp-size", tc.dp, "--chunked-prefill-size", "1024"}
			v, err := NewVirtual(argv, VirtualOptions{Profile: &q})
			if err != nil {
				t.Fatal(err)
			}
			bodies := make([][]byte, 12)
			for i := range bodies {
				bodies[i] = chatBody(fmt.Sprintf("tag-%d ", i)+words("w", tc.prompt), "q", 16)
			}
			_, err = v.ClosedLoop(bodies, 12, 600, false)
			if v.Crashed() != tc.crash {
				t.Errorf("crashed %v (%v), want %v", v.Crashed(), err, tc.crash)
			}
		})
	}
}

// TestOOMMessageStatesTheShortfall: an out-of-memory message says what its
// allocation lacked as PyTorch does (tried - free), and that is what the
// fraction must drop: the same config a little further down starts, a
// little less far down still fails. It holds for the headroom edge, the
// oom_mem_fraction edge and a startup_oom rule's own edge.
func TestOOMMessageStatesTheShortfall(t *testing.T) {
	p := mustProfile(t, "llama-3.1-8b-h100x2")
	q := *p
	q.Memory.OOMHeadroom = OOMHeadroom{BaseGB: 2, ChunkMBPerToken: 0.5, GraphMBPerBS: 10}
	r := *p
	r.Faults = append(slices.Clone(p.Faults), FaultRule{Name: "long chunks", When: map[string]any{"chunked_prefill_size": map[string]any{"gt": 8192}, "mem_fraction_static": map[string]any{"gt": 0.85}},
		Effect: FaultEffect{Kind: "startup_oom"}})
	oomAt := func(p *Profile, argv string, mf float64) (string, bool) {
		a, pl := resolveArgv(t, p, fmt.Sprintf("--tp 2 %s --mem-fraction-static %.4f", argv, mf))
		if pl.Err != nil && pl.Err.Kind == "oom" {
			return pl.Err.Lines[0], true
		}
		rules, err := MatchFaults(p.Faults, pl.Facts(a))
		if err != nil {
			t.Fatal(err)
		}
		st := &startup{p: p, pl: pl, rules: rules}
		if st.hasFault("startup_oom") {
			return st.faultOOM().Lines[0], true
		}
		return "", false
	}
	for _, tc := range []struct {
		name string
		p    *Profile
		argv string
		mf   float64
	}{
		{"headroom", &q, "--chunked-prefill-size 16384 --cuda-graph-max-bs 128", 0.93},
		{"oom_mem_fraction", p, "", 0.97},
		{"startup_oom rule", &r, "--chunked-prefill-size 16384", 0.90},
	} {
		msg, oom := oomAt(tc.p, tc.argv, tc.mf)
		share, ok := engine.OOMShortfall(msg)
		if !oom || !ok {
			t.Fatalf("%s: oom %v, shortfall read %v from %q", tc.name, oom, ok, msg)
		}
		if _, oom := oomAt(tc.p, tc.argv, tc.mf-share-0.002); oom {
			t.Errorf("%s: %.4f short, yet %.4f fails too", tc.name, share, tc.mf-share-0.002)
		}
		if _, oom := oomAt(tc.p, tc.argv, tc.mf-share+0.002); !oom {
			t.Errorf("%s: %.4f short, yet %.4f starts", tc.name, share, tc.mf-share+0.002)
		}
	}
}

package search

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sgtune/sgtune/space"
)

// feasibilityStudy is the fake study with slots, radix and a memory
// fraction (mem) added to its params.
func feasibilityStudy(t *testing.T) *space.Study {
	t.Helper()
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}\n  - {name: radix, type: bool, values: {false: --disable-radix-cache}}\n  - {name: mem, type: float, low: 0.80, high: 0.96, step: 0.01, flag: --mem-fraction-static}")
	return st
}

// The covers blame what the failures share and no success refutes: ep=1
// with radix off (two crashes; ep=4 ran without radix, ep=1 ran with it),
// and a memory fraction at or above the one that ran out of memory, not
// those below it that ran.
func TestFeasibility(t *testing.T) {
	st := feasibilityStudy(t)
	rec := func(n int, state, class, ep string, radix bool, mem float64) Record {
		return Record{Number: n, State: state, FailureClass: class, Params: map[string]any{"ep": ep, "radix": radix, "slots": 128, "mem": mem}}
	}
	recs := []Record{
		rec(1, StateFailed, "illegal_memory_access", "1", false, 0.85),
		rec(2, StateFailed, "crashed", "1", false, 0.82),
		rec(3, StateComplete, "", "4", false, 0.85),
		rec(4, StateComplete, "", "1", true, 0.85),
		rec(5, StateFailed, "oom", "4", true, 0.93),
		rec(6, StateComplete, "", "4", true, 0.90),
		rec(7, StateFailed, "startup_timeout", "4", true, 0.80), // not a recurring class
	}
	m, err := newModel(st, false)
	if err != nil {
		t.Fatal(err)
	}
	f := newFeasibility(st, recs, m.names, m.silent, rand.New(rand.NewPCG(1, 2)))
	free := math.Log((crashDraws + crashFloor) / (crashDraws + crashFloor))
	for _, tc := range []struct {
		name   string
		p      space.Params
		blamed bool
	}{
		{"ep=1 with radix off", space.Params{"ep": "1", "radix": false, "slots": 256, "mem": 0.84}, true},
		{"ep=4 with radix off", space.Params{"ep": "4", "radix": false, "slots": 256, "mem": 0.84}, false},
		{"ep=1 with radix on", space.Params{"ep": "1", "radix": true, "slots": 256, "mem": 0.84}, false},
		{"above the oom", space.Params{"ep": "4", "radix": true, "slots": 256, "mem": 0.95}, true},
		{"below the oom, where 0.90 ran", space.Params{"ep": "4", "radix": true, "slots": 256, "mem": 0.91}, false},
		{"the timeout's config", space.Params{"ep": "4", "radix": true, "slots": 128, "mem": 0.80}, false},
	} {
		got := f.logRuns(tc.p)
		if blamed := got < free-1e-9; blamed != tc.blamed {
			t.Errorf("%s: log chance to run %.2f, blamed %v; want blamed %v", tc.name, got, blamed, tc.blamed)
		}
	}
}

// blamedShare is the share of the covers that blame p, over 50 draws of
// crashDraws covers of recs' failures.
func blamedShare(t *testing.T, st *space.Study, recs []Record, p space.Params) float64 {
	t.Helper()
	m, err := newModel(st, false)
	if err != nil {
		t.Fatal(err)
	}
	covers, blamed := 0, 0
	for seed := range uint64(50) {
		f := newFeasibility(st, recs, m.names, m.silent, rand.New(rand.NewPCG(seed, 7)))
		for _, rules := range f.covers {
			covers++
			for _, rule := range rules {
				if matches(p, rule) {
					blamed++
					break
				}
			}
		}
	}
	return float64(blamed) / float64(covers)
}

// An out-of-memory failure is the memory fraction's first: most covers
// blame the fraction at and above the one that ran out, whatever the other
// values, and fewer blame the config's other values at any fraction.
// Without oomElsewhere every single value would be blamed alike (about a
// third of the covers each).
func TestOOMBlamesTheMemoryFractionFirst(t *testing.T) {
	st := feasibilityStudy(t)
	recs := []Record{{Number: 1, State: StateFailed, FailureClass: "oom", Params: map[string]any{"ep": "4", "radix": true, "slots": 128, "mem": 0.90}}}
	if share := blamedShare(t, st, recs, space.Params{"ep": "1", "radix": false, "slots": 256, "mem": 0.93}); share < 0.5 {
		t.Errorf("a higher fraction with other values is blamed by %.2f of the covers; want most", share)
	}
	if share := blamedShare(t, st, recs, space.Params{"ep": "4", "radix": true, "slots": 128, "mem": 0.86}); share > 0.4 {
		t.Errorf("a lower fraction with the same values is blamed by %.2f of the covers; want fewer", share)
	}
}

// A config that ran out of memory blames its prefill chunk and every
// larger one (a workspace flag), never a smaller one: a chunk's
// activations come out of the memory the fraction leaves.
func TestOOMBlamesLargerChunks(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: chunk, type: categorical, choices: [4096, 8192, 16384], flag: --chunked-prefill-size}\n  - {name: mem, type: float, low: 0.80, high: 0.96, step: 0.01, flag: --mem-fraction-static}")
	recs := []Record{{Number: 1, State: StateFailed, FailureClass: "oom", Params: map[string]any{"ep": "4", "chunk": "8192", "mem": 0.90}}}
	larger := blamedShare(t, st, recs, space.Params{"ep": "1", "chunk": "16384", "mem": 0.85})
	smaller := blamedShare(t, st, recs, space.Params{"ep": "1", "chunk": "4096", "mem": 0.85})
	if larger == 0 || smaller > 0 {
		t.Errorf("covers blaming a 16384 chunk: %.2f (want some), a 4096 chunk: %.2f (want none)", larger, smaller)
	}
}

// An out-of-memory failure whose message says how much its allocation
// lacked blames the fractions that far below it too: 4 GiB short on an
// 80 GiB GPU at 0.95 is a twentieth of the GPU, so 0.92 with the same
// values fails as well, and 0.89 does not. Without the message, 0.92 is
// below the fraction that failed and nothing blames it alone.
func TestOOMShortfallBlamesFractionsBelow(t *testing.T) {
	st := feasibilityStudy(t)
	params := map[string]any{"ep": "4", "radix": true, "slots": 128, "mem": 0.95}
	short := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 5.00 GiB. GPU 0 has a total capacity of 80.00 GiB of which 1.00 GiB is free."
	for _, tc := range []struct {
		name   string
		reason string
		mem    float64
		most   bool
	}{
		{"within the shortfall", short, 0.92, true},
		{"below the shortfall", short, 0.89, false},
		{"no sizes in the message", "torch.OutOfMemoryError: CUDA out of memory.", 0.92, false},
	} {
		recs := []Record{{Number: 1, State: StateFailed, FailureClass: "oom", Reason: tc.reason, Params: params}}
		p := space.Params{"ep": "4", "radix": true, "slots": 128, "mem": tc.mem}
		if share := blamedShare(t, st, recs, p); (share > 0.5) != tc.most {
			t.Errorf("%s: the same values at %.2f are blamed by %.2f of the covers; want most: %v", tc.name, tc.mem, share, tc.most)
		}
	}
}

// A pool too small for the KV cache (SGLang: "Not enough memory. Please
// try to increase --mem-fraction-static") blames its fraction and the
// smaller ones, not the larger ones its message asks for.
func TestPoolTooSmallBlamesSmallerFractions(t *testing.T) {
	st := feasibilityStudy(t)
	recs := []Record{{Number: 1, State: StateFailed, FailureClass: "oom", Params: map[string]any{"ep": "4", "radix": true, "slots": 128, "mem": 0.85},
		Reason: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.85"}}
	smaller := blamedShare(t, st, recs, space.Params{"ep": "4", "radix": true, "slots": 128, "mem": 0.82})
	larger := blamedShare(t, st, recs, space.Params{"ep": "4", "radix": true, "slots": 128, "mem": 0.90})
	if smaller < 0.5 || larger > 0.4 {
		t.Errorf("the same values at 0.82 are blamed by %.2f of the covers (want most), at 0.90 by %.2f (want fewer)", smaller, larger)
	}
}

// A shortfall that reaches no step of the fraction below the one that
// failed (0.4 GiB of 80 at 0.95, steps of 0.01) adds no rule: the covers
// are those of a message without sizes.
func TestOOMShortfallUnderOneStepAddsNothing(t *testing.T) {
	st := feasibilityStudy(t)
	params := map[string]any{"ep": "4", "radix": true, "slots": 128, "mem": 0.95}
	share := func(reason string) float64 {
		recs := []Record{{Number: 1, State: StateFailed, FailureClass: "oom", Reason: reason, Params: params}}
		return blamedShare(t, st, recs, space.Params{"ep": "1", "radix": false, "slots": 256, "mem": 0.95})
	}
	small := share("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.40 GiB. GPU 0 has a total capacity of 80.00 GiB of which 1.00 GiB is free.")
	if none := share("torch.OutOfMemoryError: CUDA out of memory."); small != none {
		t.Errorf("a 0.4 GiB shortfall: %.3f of the covers blame the fraction; without sizes %.3f", small, none)
	}
}

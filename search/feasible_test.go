package search

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sgtune/sgtune/space"
)

// The covers blame what the failures share and no success refutes: ep=1
// with radix off (two crashes; ep=4 ran without radix, ep=1 ran with it),
// and a memory fraction at or above the one that ran out of memory, not
// those below it that ran.
func TestFeasibility(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}\n  - {name: radix, type: bool, values: {false: --disable-radix-cache}}\n  - {name: mem, type: float, low: 0.80, high: 0.96, step: 0.01, flag: --mem-fraction-static}")
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

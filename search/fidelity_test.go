package search

import (
	"slices"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
)

func TestPruneReason(t *testing.T) {
	refs := []levelRef{{1, 1000}, {2, 19000}, {5, 12000}}
	frac := space.Prune{Rule: "fraction", Fraction: 0.5, MinComplete: 3}
	tests := []struct {
		name string
		rule space.Prune
		mine float64
		refs []levelRef
		want string // substring; "" = not pruned
	}{
		{"clear loser", frac, 7.9, refs, "C16: 7.9 tok/s < 0.50 x 19000.0, trial 2's"},
		{"within the fraction", frac, 9600, refs, ""},
		{"too few complete trials", frac, 1, refs[:2], ""},
		{"off", space.Prune{Rule: "off"}, 1, refs, ""},
		{"median rule below", space.Prune{Rule: "median", MinComplete: 3}, 11000, refs, "< the median 12000.0 of 3"},
		{"median rule above", space.Prune{Rule: "median", MinComplete: 3}, 12001, refs, ""},
		{"median of an even count", space.Prune{Rule: "median", MinComplete: 2}, 6499, refs[:2], "the median 10000.0"},
	}
	for _, tc := range tests {
		got := pruneReason(tc.rule, 16, tc.mine, tc.refs)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A pair of values becomes a crash region once two launched configs with
// it failed, none succeeded, and for one of the failures every other
// explanation of one or two values is refuted by a success.
func TestCrashRegion(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}\n  - {name: radix, type: bool, values: {false: --disable-radix-cache}}")
	rec := func(n int, state, class string, ep string, radix bool, slots int) Record {
		return Record{Number: n, State: state, FailureClass: class, Params: map[string]any{"ep": ep, "radix": radix, "slots": slots}}
	}
	sparse := []Record{
		rec(1, StateFailed, "illegal_memory_access", "1", false, 64),
		rec(4, StateFailed, "crashed", "1", false, 256),
		rec(5, StateComplete, "", "4", false, 256),
		rec(6, StateComplete, "", "1", true, 128),
		rec(7, StateFailed, "startup_timeout", "1", false, 384), // not a recurring class
	}
	// Successes with 64 slots (with ep=1, and without the radix cache)
	// leave ep=1 with radix off the only explanation of trial 1.
	crashes := append(slices.Clone(sparse),
		rec(8, StateComplete, "", "1", true, 64),
		rec(9, StateComplete, "", "4", false, 64))
	tests := []struct {
		name string
		recs []Record
		p    space.Params
		want string
	}{
		{"in the pair region", crashes, space.Params{"ep": "1", "radix": false, "slots": 448},
			"crash region: every launched config with ep=1, radix=false failed (trials 1, 4: crashed, illegal_memory_access) and none succeeded"},
		{"another explanation left: nothing with 64 slots succeeded", sparse, space.Params{"ep": "1", "radix": false, "slots": 448}, ""},
		{"outside: ep 4 succeeded without radix", crashes, space.Params{"ep": "4", "radix": false, "slots": 448}, ""},
		{"outside: radix on", crashes, space.Params{"ep": "1", "radix": true, "slots": 448}, ""},
		{"one crash is not a region", crashes[1:], space.Params{"ep": "1", "radix": false, "slots": 448}, ""},
		{"a success inside undoes it", append(slices.Clone(crashes), rec(10, StatePruned, "", "1", false, 512)), space.Params{"ep": "1", "radix": false, "slots": 448}, ""},
	}
	for _, tc := range tests {
		if got := crashRegion(st, tc.recs, tc.p); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// Failures of two causes do not establish the values they merely share
// (bench-search's GLM study, where the best config runs without the radix
// cache and with CUDA graphs). No overlap scheduler crashes three configs
// that differ in every other param; ep=1 with radix off crashes three
// more, two of them with graphs on. While no success has radix off with
// graphs on, that pair explains trials 1 and 2 as well as ep=1 with radix
// off does, so neither is ruled out (the sampler's soft covers steer away
// meanwhile); once one such config runs, ep=1 with radix off is the only
// explanation left and becomes a region. Each failure is explained once:
// trial 4 (ep=1, radix off, no overlap) counts for the region taken first.
func TestCrashRegionSoleCause(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}\n  - {name: radix, type: bool, values: {false: --disable-radix-cache}}\n  - {name: graphs, type: bool, values: {false: --disable-cuda-graph}}\n  - {name: overlap, type: bool, values: {false: --disable-overlap-schedule}}")
	rec := func(n int, state string, ep string, radix, graphs, overlap bool, slots int) Record {
		class := ""
		if state == StateFailed {
			class = "illegal_memory_access"
		}
		return Record{Number: n, State: state, FailureClass: class,
			Params: map[string]any{"ep": ep, "radix": radix, "graphs": graphs, "overlap": overlap, "slots": slots}}
	}
	causes := []Record{
		rec(1, StateFailed, "1", false, true, true, 64),
		rec(2, StateFailed, "1", false, true, true, 128),
		rec(3, StateFailed, "4", true, true, false, 192),
		rec(4, StateFailed, "1", false, false, false, 256),
		rec(5, StateFailed, "4", false, false, false, 320),
		rec(6, StateComplete, "4", true, true, true, 128),
		rec(7, StateComplete, "4", false, false, true, 64),
		rec(8, StateComplete, "4", true, true, true, 192),
		rec(9, StateComplete, "1", true, true, true, 64),
	}
	separated := append(slices.Clone(causes), rec(10, StateComplete, "4", false, true, true, 128))
	noOverlap := "crash region: every launched config with overlap=false failed (trials 3, 4, 5: illegal_memory_access) and none succeeded"
	tests := []struct {
		name string
		recs []Record
		p    space.Params
		want string
	}{
		{"overlap off", causes, space.Params{"ep": "4", "radix": true, "graphs": true, "overlap": false, "slots": 448}, noOverlap},
		{"not what two causes share", causes, space.Params{"ep": "4", "radix": false, "graphs": true, "overlap": true, "slots": 448}, ""},
		{"not yet ep=1 with radix off", causes, space.Params{"ep": "1", "radix": false, "graphs": false, "overlap": true, "slots": 448}, ""},
		{"ep=1 with radix off once separated", separated, space.Params{"ep": "1", "radix": false, "graphs": false, "overlap": true, "slots": 448},
			"crash region: every launched config with ep=1, radix=false failed (trials 1, 2, 4: illegal_memory_access) and none succeeded"},
		{"overlap off once separated", separated, space.Params{"ep": "4", "radix": true, "graphs": true, "overlap": false, "slots": 448}, noOverlap},
		{"ep=1 with radix on stays open", separated, space.Params{"ep": "1", "radix": true, "graphs": true, "overlap": true, "slots": 448}, ""},
	}
	for _, tc := range tests {
		if got := crashRegion(st, tc.recs, tc.p); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// A trial is pruned only after a level within pruneReach of the scored
// one: C1 says little of C64 (speculative decoding doubles C1 alone).
func TestPrunesAt(t *testing.T) {
	st, _, _ := openFake(t, "score: {metric: output_tok_s, concurrency: 4}", "score: {metric: output_tok_s, concurrency: 64}",
		"concurrency: [4], requests: [4]", "concurrency: [1, 16, 64], requests: [4, 16, 64]")
	top, _, _ := openFake(t, "score: {metric: output_tok_s, concurrency: 4}", "score: {metric: output_tok_s}",
		"concurrency: [4], requests: [4]", "concurrency: [1, 16, 128], requests: [4, 16, 128]")
	tests := []struct {
		st   *space.Study
		conc int
		want bool
	}{
		{st, 1, false}, {st, 8, false}, {st, 16, true}, {st, 64, true},
		{top, 1, false}, {top, 16, false}, {top, 32, true},
	}
	for _, tc := range tests {
		if got := prunesAt(tc.st, tc.conc); got != tc.want {
			t.Errorf("score at C%d, level C%d: %v, want %v", tc.st.Score.Concurrency, tc.conc, got, tc.want)
		}
	}
}

// A flagged point (objective.Point.Outlier) does not prune its trial: make
// demo's single C16 repeat that paid the first-time cost its warm-up did
// not read 3,715 tok/s against about 19,000 and pruned the trial. The
// level's other points still decide.
func TestLevelPruneSkipsFlagged(t *testing.T) {
	refs := []levelRef{{2, 19000}, {5, 12000}, {6, 17000}}
	frac := space.Prune{Rule: "fraction", Fraction: 0.5, MinComplete: 3}
	pt := func(r int, tokS float64, outlier string) objective.Point {
		return objective.Point{Concurrency: 16, Repeat: r, State: "passed", OutputTokS: tokS, Outlier: outlier}
	}
	cold := "3715.3 tok/s < 0.50 x its warm-up's 8533.3"
	tests := []struct {
		name      string
		pts       []objective.Point
		why, kept string // substrings; "" = empty
	}{
		{"a single flagged repeat", []objective.Point{pt(1, 3715.3, cold)}, "", "not pruned on flagged points (" + cold + "): C16: 3715.3 tok/s < 0.50 x 19000.0"},
		{"the same repeat unflagged", []objective.Point{pt(1, 3715.3, "")}, "C16: 3715.3 tok/s < 0.50 x 19000.0", ""},
		{"flagged but fast enough", []objective.Point{pt(1, 15000, "TTFT p50 0.3 s vs the repeats' median 0.1 s")}, "", ""},
		{"the unflagged repeats decide", []objective.Point{pt(1, 3715.3, cold), pt(2, 4000, ""), pt(3, 4100, "")}, "C16: 4050.0 tok/s < 0.50 x 19000.0", ""},
		{"unflagged repeats keep it", []objective.Point{pt(1, 3715.3, cold), pt(2, 18000, ""), pt(3, 18500, "")}, "", ""},
	}
	for _, tc := range tests {
		why, kept := levelPrune(frac, 16, tc.pts, refs)
		if (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) || (tc.kept == "") != (kept == "") || !strings.Contains(kept, tc.kept) {
			t.Errorf("%s: pruned %q, kept %q; want %q and %q", tc.name, why, kept, tc.why, tc.kept)
		}
	}
}

package search

import (
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

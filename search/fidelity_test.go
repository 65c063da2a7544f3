package search

import (
	"strings"
	"testing"

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

func TestCrashRegion(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}\n  - {name: radix, type: bool, values: {false: --disable-radix-cache}}")
	rec := func(n int, state, class string, ep string, radix bool, slots int) Record {
		return Record{Number: n, State: state, FailureClass: class, Params: map[string]any{"ep": ep, "radix": radix, "slots": slots}}
	}
	crashes := []Record{
		rec(1, StateFailed, "illegal_memory_access", "1", false, 64),
		rec(4, StateFailed, "crashed", "1", false, 256),
		rec(5, StateComplete, "", "4", false, 256),
		rec(6, StateComplete, "", "1", true, 128),
		rec(7, StateFailed, "startup_timeout", "1", false, 384), // not a recurring class
	}
	tests := []struct {
		name string
		recs []Record
		p    space.Params
		want string
	}{
		{"in the pair region", crashes, space.Params{"ep": "1", "radix": false, "slots": 448},
			"crash region: every launched config with ep=1, radix=false failed (trials 1, 4: crashed, illegal_memory_access) and none succeeded"},
		{"outside: ep 4 succeeded without radix", crashes, space.Params{"ep": "4", "radix": false, "slots": 448}, ""},
		{"outside: radix on", crashes, space.Params{"ep": "1", "radix": true, "slots": 448}, ""},
		{"one crash is not a region", crashes[:1], space.Params{"ep": "1", "radix": false, "slots": 448}, ""},
		{"a success inside undoes it", append(crashes, rec(8, StatePruned, "", "1", false, 512)), space.Params{"ep": "1", "radix": false, "slots": 448}, ""},
	}
	for _, tc := range tests {
		if got := crashRegion(st, tc.recs, tc.p); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

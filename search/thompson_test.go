package search

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/space"
)

// After a few measurements that put ep=4 three times above ep=1, every
// draw proposes an unmeasured ep=4 config, and a draw is reproducible.
func TestThompsonFollowsTheData(t *testing.T) {
	st, _, _ := openFake(t)
	ts, err := newTSSpace(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.cands) != 16 {
		t.Fatalf("%d candidates, want 16 (ep 2 × slots 8)", len(ts.cands))
	}
	score := func(v float64) *float64 { return &v }
	rec := func(n int, ep string, slots int, s float64) Record {
		return Record{Number: n, State: StateComplete, ScoreOK: true, Score: score(s), Params: map[string]any{"ep": ep, "slots": slots}}
	}
	recs := []Record{rec(0, "4", 64, 3000), rec(1, "1", 64, 1000), rec(2, "4", 128, 3100), rec(3, "1", 192, 1050), rec(4, "1", 256, 990)}
	measured := func(p space.Params) bool {
		return slices.ContainsFunc(recs, func(r Record) bool { return r.Params["ep"] == p["ep"] && r.Params["slots"] == p["slots"] })
	}
	open := func(p space.Params) bool { return !measured(p) }
	for n := 5; n < 25; n++ {
		got, err := ts.thompson(st, recs, 7, n, open)
		if err != nil {
			t.Fatal(err)
		}
		p, err := st.Suggest(&pinned{internal: got})
		if err != nil {
			t.Fatal(err)
		}
		if p["ep"] != "4" || measured(p) {
			t.Errorf("trial %d: proposed %v, want an unmeasured ep=4 config", n, p)
		}
		again, err := ts.thompson(st, recs, 7, n, open)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(again) != fmt.Sprint(got) {
			t.Errorf("trial %d: %v then %v from the same seed and trials", n, got, again)
		}
	}
	if got, err := ts.thompson(st, recs, 7, 5, func(space.Params) bool { return false }); err != nil || got != nil {
		t.Errorf("nothing open: %v, %v; want no proposal", got, err)
	}
}

func TestThompsonNeedsAFiniteSpace(t *testing.T) {
	st, _, _ := openFake(t, "- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: mem, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static}")
	if _, err := newTSSpace(st); err == nil || !strings.Contains(err.Error(), "finite space") {
		t.Errorf("continuous param: %v, want an error naming the finite space", err)
	}
}

// The drawn crash rules explain failures the cheapest way: one value every
// crash shares and no success has; a conjunction of three when each pair
// of it ran fine.
func TestSampleCrashCover(t *testing.T) {
	names := []string{"ep", "radix", "cuda", "overlap", "chunk"}
	cfg := func(state string, v ...any) Record { return crashTestRecord(names, state, v...) }
	tests := []struct {
		name string
		recs []Record
		want string
	}{
		{"one shared value", []Record{
			cfg(StateFailed, "1", false, true, false, "a"), cfg(StateFailed, "4", true, false, false, "a"),
			cfg(StateFailed, "4", false, true, false, "b"),
			cfg(StateComplete, "4", false, true, true, "a"), cfg(StateComplete, "1", true, false, true, "b"),
		}, "[{overlap false}]"},
		{"a triple whose pairs ran", []Record{
			cfg(StateFailed, "1", false, true, true, "a"), cfg(StateFailed, "1", false, true, true, "b"),
			cfg(StateComplete, "1", false, false, true, "a"), cfg(StateComplete, "1", true, true, true, "a"),
			cfg(StateComplete, "4", false, true, true, "b"), cfg(StateComplete, "4", false, true, true, "a"),
		}, "[{ep 1} {radix false} {cuda true}]"},
	}
	for _, tc := range tests {
		for seed := range uint64(10) {
			cc := crashRuleCandidates(tc.recs, names, nil).draw(rand.New(rand.NewPCG(seed, 2)))
			found := false
			for _, r := range cc.rules {
				found = found || fmt.Sprint(r) == tc.want
			}
			if !found {
				t.Errorf("%s (draw %d): rules %v lack %s", tc.name, seed, cc.rules, tc.want)
			}
			if cc.runs(literalsOf(tc.recs[0].Params, names)) {
				t.Errorf("%s (draw %d): the first crash escapes the rules %v", tc.name, seed, cc.rules)
			}
		}
	}
}

// A value that passes the engine no flag (CUDA graphs on) is rarely blamed
// alone: two crashes that share it and ep=1 are put on the pair in most
// draws, where without the silent prior the single value takes nearly all.
func TestSampleCrashCoverSilentValue(t *testing.T) {
	names := []string{"ep", "radix", "cuda", "overlap", "chunk"}
	cfg := func(state string, v ...any) Record { return crashTestRecord(names, state, v...) }
	recs := []Record{
		cfg(StateFailed, "1", true, true, true, "a"), cfg(StateFailed, "1", false, true, false, "b"),
		cfg(StateComplete, "1", true, false, true, "a"), cfg(StateComplete, "4", false, false, false, "b"),
	}
	alone := func(silent map[literal]bool) float64 {
		n := 0
		const draws = 200
		for seed := range uint64(draws) {
			cc := crashRuleCandidates(recs, names, silent).draw(rand.New(rand.NewPCG(seed, 3)))
			for _, r := range cc.rules {
				if fmt.Sprint(r) == "[{cuda true}]" {
					n++
				}
			}
		}
		return float64(n) / draws
	}
	t.Logf("blamed alone: %.2f without, %.2f with the silent prior", alone(nil), alone(map[literal]bool{{"cuda", "true"}: true}))
	if got := alone(nil); got < 0.8 {
		t.Errorf("without the silent prior cuda=true is blamed alone in %.2f of the draws, want most", got)
	}
	if got := alone(map[literal]bool{{"cuda", "true"}: true}); got > 0.4 {
		t.Errorf("with cuda=true silent it is blamed alone in %.2f of the draws, want few", got)
	}
}

// crashTestRecord is a trial in state with names[i] = v[i]; a failed one
// crashed the way that recurs.
func crashTestRecord(names []string, state string, v ...any) Record {
	p := map[string]any{}
	for i, n := range names {
		p[n] = v[i]
	}
	r := Record{State: state, Params: p}
	if state == StateFailed {
		r.FailureClass = "illegal_memory_access"
	}
	return r
}

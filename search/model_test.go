package search

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/sgtune/sgtune/objective"
)

// The model races inside the budget: where a config's runs disagree by
// 30% while the configs near the top differ by a few percent, some launch
// runs a measured config again (stored as a rerun of its first trial), it
// counts in the budget, and the winner pools every run of its config.
// What the study declares is DeclareFrom over its trials.
func TestRacingRunsInsideTheBudget(t *testing.T) {
	st, store, _ := openFake(t, "budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 16, sampler: bayes, seed: 3}")
	var mu sync.Mutex
	runs := map[string]int{}
	b := &fakeBackend{measure: func(_ context.Context, flags string) (*objective.Result, error) {
		mu.Lock()
		runs[flags]++
		n := runs[flags]
		mu.Unlock()
		luck := 1.3 // first runs read high, second low, and so on
		if n%2 == 0 {
			luck = 0.7
		}
		return result(4, tokS(flags)*luck, 0.1), nil
	}}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	launched, raced := 0, 0
	for _, r := range sum.Records {
		if RanToEnd(r.State) {
			launched++
			if r.ConfirmOf != nil {
				raced++
			}
		}
	}
	if launched != 16 || raced == 0 || 4*raced > launched {
		t.Fatalf("%d launched, %d of them races; want the budget of 16 with 1 to 4 races", launched, raced)
	}
	w, ok, err := DeclareFrom(st, sum.Records)
	if err != nil || !ok {
		t.Fatalf("declare: %v %v", ok, err)
	}
	if sum.Winner == nil || sum.Winner.Trial != w.Trial || sum.Best == nil || sum.Best.Number != w.Trial {
		t.Fatalf("stored winner %+v, best %+v; DeclareFrom names trial %d", sum.Winner, sum.Best, w.Trial)
	}
	key := ""
	for _, r := range sum.Records {
		if r.Number == w.Trial {
			key = r.ConfigKey
		}
	}
	want := 0
	for _, r := range sum.Records {
		if r.ConfigKey == key && RanToEnd(r.State) {
			want++
		}
	}
	if len(w.Runs) != want {
		t.Errorf("the winner pooled %d runs; its config ran %d times", len(w.Runs), want)
	}
	if !strings.Contains(w.Reason, "highest estimated score") {
		t.Errorf("reason %q", w.Reason)
	}
}

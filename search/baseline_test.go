package search

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/storage"
)

// defaultFlags is what the unit study's engine default launches: the
// model and the fixed flags, no param's flag.
const defaultFlags = "--model-path m --tp-size 4"

// TestBaselineLaunchedFirst: with budget.baseline: default the study's
// first launch is the engine default, counted in budget.trials; a default
// that leaves params to the engine stores no params (it is no point of
// the space), one whose params all have a default: stores them; a resumed
// study does not launch it again; budget.baseline: none launches none.
func TestBaselineLaunchedFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace []string
		omitted []string
		params  string // the stored params of the default's trial
	}{
		{"params left to the engine", []string{"confirm: 0}", "confirm: 0, baseline: default}"},
			[]string{"ep", "slots"}, "map[]"},
		{"every param has a default", []string{"confirm: 0}", "confirm: 0, baseline: default}",
			"flag: --ep-size}", "flag: --ep-size, default: 1}", "step: 64,", "step: 64, default: 256,"},
			nil, "map[ep:1 slots:256]"},
		{"baseline none", []string{"confirm: 0}", "confirm: 0, baseline: none}"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t, tc.replace...)
			b := &fakeBackend{}
			sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
			if err != nil {
				t.Fatal(err)
			}
			n, err := store.LaunchedCount(context.Background(), mustStudyID(t, store, st.Name))
			if err != nil {
				t.Fatal(err)
			}
			if n != 6 || len(b.launches) != 6 {
				t.Fatalf("%d launches counted, %d made; want the budget's 6, the default among them", n, len(b.launches))
			}
			base, ok := BaselineOf(sum.Records)
			if tc.params == "" {
				if ok || strings.HasSuffix(b.launches[0], defaultFlags) {
					t.Fatalf("baseline: none launched the default: %+v, first launch %q", base, b.launches[0])
				}
				return
			}
			if !ok || base.Number != 0 || base.State != StateComplete {
				t.Fatalf("engine default %+v (found %v); want trial 0, complete", base, ok)
			}
			if b.launches[0] != defaultFlags {
				t.Errorf("first launch %q, want the engine default %q", b.launches[0], defaultFlags)
			}
			for _, l := range b.launches[1:] {
				if l == defaultFlags {
					t.Errorf("the engine default launched twice: %q", b.launches)
				}
			}
			if got := fmt.Sprint(base.Params); got != tc.params || !slices.Equal(base.Omitted, tc.omitted) || base.InSpace() != (len(tc.omitted) == 0) {
				t.Errorf("default's params %s omitted %v in space %v; want %s %v", got, base.Omitted, base.InSpace(), tc.params, tc.omitted)
			}
			// Resumed with a larger budget: searched on, no second default.
			st.Budget.Trials = 8
			b2 := &fakeBackend{}
			sum, err, _ = runFake(t, context.Background(), st, store, b2, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(b2.launches) != 2 || slices.Contains(b2.launches, defaultFlags) {
				t.Errorf("resumed launches %q: want 2 of the search's", b2.launches)
			}
			marked := 0
			for _, r := range sum.Records {
				if r.Baseline {
					marked++
				}
			}
			if marked != 1 {
				t.Errorf("%d trials of the engine default, want 1", marked)
			}
		})
	}
}

func mustStudyID(t *testing.T, store *storage.Store, name string) int {
	t.Helper()
	id, err := store.GetStudyIDFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestBaselineHeldAgainstWinner runs confirming studies whose engine
// default measures above or below what the search finds: a search config
// that does not beat the default by more than the measured spread is not
// declared over it (the default wins, best and export name it), one that
// does carries its gain; the default's reruns are confirmation runs,
// outside the budget.
func TestBaselineHeldAgainstWinner(t *testing.T) {
	for _, tc := range []struct {
		name    string
		def     []float64 // the default's score, run by run
		winner  int       // -1: a config of the search
		versus  string
		asGood  bool
		gainMin float64
	}{
		{"the default beats everything", []float64{400, 380}, 0, "the engine default is as good as anything found (pooled 390.0 vs trial", true, 0},
		{"the search beats the default", []float64{100, 100}, -1, "× the engine default, pooled over 2 runs each (trial 0: pooled 100.0)", false, 1.5},
		{"the search's best within the spread", []float64{150, 240}, 0, "within the spread 90.0", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t, "confirm: 0}", "confirm: 2, confirm_rounds: 1, baseline: default}")
			var mu sync.Mutex
			runs := map[string]int{}
			b := &fakeBackend{measure: func(ctx context.Context, flags string) (*objective.Result, error) {
				mu.Lock()
				n := runs[flags]
				runs[flags]++
				mu.Unlock()
				v := tokS(flags)
				if flags == defaultFlags {
					v = tc.def[min(n, len(tc.def)-1)]
				}
				return result(4, v, 0.1), nil
			}}
			sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
			if err != nil {
				t.Fatal(err)
			}
			w := sum.Winner
			if w == nil || w.Baseline == nil || w.Baseline.Trial != 0 || len(w.Baseline.Runs) != 2 {
				t.Fatalf("winner %+v: want one held against the default's 2 runs", w)
			}
			// Every confirmed config is listed with its runs pooled: the
			// report and rescore read them from the winner.
			if len(w.Candidates) != 3 {
				t.Errorf("%d candidates, want the 2 confirmed configs and the default: %+v", len(w.Candidates), w.Candidates)
			}
			for i, c := range w.Candidates {
				if len(c.Runs) != 2 || (i > 0 && c.Pooled > w.Candidates[i-1].Pooled) {
					t.Errorf("candidate %d: trial %d pooled %.1f over %d runs; want 2 runs each, best pooled first", i, c.Trial, c.Pooled, len(c.Runs))
				}
			}
			if runs[defaultFlags] != 2 {
				t.Errorf("the default ran %d times, want 2 (its first run and one confirmation)", runs[defaultFlags])
			}
			if n, err := store.LaunchedCount(context.Background(), mustStudyID(t, store, st.Name)); err != nil || n != 6 {
				t.Errorf("%d launches counted (%v), want the budget's 6: confirmation runs are outside it", n, err)
			}
			if w.DefaultAsGood != tc.asGood || (tc.winner >= 0 && w.Trial != tc.winner) || (tc.winner < 0 && w.Trial == 0) {
				t.Errorf("winner trial %d, default as good %v (%s); want %d, %v", w.Trial, w.DefaultAsGood, w.Reason, tc.winner, tc.asGood)
			}
			if tc.asGood && (w.Searched == nil || w.Searched.Trial == 0 || w.Gain != 0) {
				t.Errorf("the default wins: searched %+v gain %v", w.Searched, w.Gain)
			}
			if w.Gain < tc.gainMin || (w.Gain > 0 && w.Gain != w.Pooled/w.Baseline.Pooled) {
				t.Errorf("gain %v, want the pooled ratio %v/%v, at least %v", w.Gain, w.Pooled, w.Baseline.Pooled, tc.gainMin)
			}
			if sum.Best == nil || sum.Best.Number != w.Trial {
				t.Errorf("best %+v, want the declared winner %d", sum.Best, w.Trial)
			}
			if got := VersusDefault(w, sum.Best, sum.Records); !strings.Contains(got, tc.versus) {
				t.Errorf("versus the default: %q, want %q", got, tc.versus)
			}
			stored, ok, err := ReadWinner(store, st.Name)
			if err != nil || !ok || stored.Trial != w.Trial || stored.DefaultAsGood != w.DefaultAsGood || stored.Baseline == nil {
				t.Errorf("stored winner %+v %v %v", stored, ok, err)
			}
		})
	}
}

// TestBaselineFailureReported: an engine default that crashes is stored
// failed, the search goes on and confirms without it, and the summary
// line names the failure.
func TestBaselineFailureReported(t *testing.T) {
	st, store, _ := openFake(t, "confirm: 0}", "confirm: 2, baseline: default}")
	b := &fakeBackend{crash: func(flags string) *launcher.Failure {
		if flags == defaultFlags {
			return &launcher.Failure{Class: engine.ClassIllegalMemoryAccess, ExitCode: 1, Reason: "CUDA error: an illegal memory access was encountered"}
		}
		return nil
	}}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	base, ok := BaselineOf(sum.Records)
	if !ok || base.State != StateFailed || base.FailureClass != engine.ClassIllegalMemoryAccess {
		t.Fatalf("engine default %+v", base)
	}
	if sum.Winner == nil || sum.Winner.Baseline != nil || sum.Winner.Trial == 0 {
		t.Fatalf("winner %+v: want a search config, the failed default not confirmed", sum.Winner)
	}
	got := VersusDefault(sum.Winner, sum.Best, sum.Records)
	if want := "the engine default failed: illegal_memory_access: CUDA error"; !strings.HasPrefix(got, want) {
		t.Errorf("versus the default: %q, want %q", got, want)
	}
}

// TestBaselineRerunAfterInterrupt: Ctrl-C during the engine default
// queues its re-run, which the next run launches first with the same
// flags (though it has no params to replay) and counts once.
func TestBaselineRerunAfterInterrupt(t *testing.T) {
	st, store, _ := openFake(t, "budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 2, sampler: random, seed: 3, confirm: 0, baseline: default}")
	ctx, cancel := context.WithCancel(context.Background())
	b := &fakeBackend{measure: func(mctx context.Context, flags string) (*objective.Result, error) {
		cancel()
		<-mctx.Done()
		return nil, mctx.Err()
	}}
	if _, err, _ := runFake(t, ctx, st, store, b, 1); err != nil {
		t.Fatal(err)
	}
	b2 := &fakeBackend{}
	sum, err, _ := runFake(t, context.Background(), st, store, b2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.launches) != 1 || b.launches[0] != defaultFlags || len(b2.launches) != 2 || b2.launches[0] != defaultFlags || b2.launches[1] == defaultFlags {
		t.Fatalf("launches %q then %q; want the default, then it again and one config of the search", b.launches, b2.launches)
	}
	base, ok := BaselineOf(sum.Records)
	if !ok || base.RetryOf == nil || *base.RetryOf != 0 || base.State != StateComplete || base.InSpace() {
		t.Errorf("engine default %+v: want the complete retry of trial 0", base)
	}
	var cfg struct {
		Params map[string]any `json:"params"`
	}
	if err := json.Unmarshal(base.Config, &cfg); err != nil || len(cfg.Params) != 0 {
		t.Errorf("the default's stored config params %v (%v): want none (every param left to the engine)", cfg.Params, err)
	}
}

// TestDeclareAgainst: the winner among the search's confirmed configs is
// held against the engine default's confirmed runs.
func TestDeclareAgainst(t *testing.T) {
	run := func(trial int, scores ...float64) *Candidate {
		c := &Candidate{Trial: trial}
		for _, s := range scores {
			c.Runs = append(c.Runs, Measurement{Trial: trial, Score: s, OK: true})
		}
		c.Pooled, c.Spread = Pool(c.Runs)
		return c
	}
	tests := []struct {
		name   string
		cands  []*Candidate
		base   *Candidate
		win    int
		asGood bool
		gain   string
		say    string
	}{
		{"beats the default beyond the spread", []*Candidate{run(3, 200, 210), run(5, 150, 152)}, run(0, 100, 104),
			3, false, "2.01", "it beats the engine default (trial 0, pooled 102.0 over 2 runs) by 103.0, more than the spread 10.0"},
		{"within the spread of the default", []*Candidate{run(3, 110, 130), run(5, 90, 95)}, run(0, 105, 115),
			0, true, "0.00", "does not beat the default's 110.0 over 2 runs by more than the measured spread 20.0"},
		{"below the default", []*Candidate{run(3, 90, 92)}, run(0, 120, 121),
			0, true, "0.00", "the search's best, trial 3, pooled 91.0"},
		{"exactly the spread above is no gain", []*Candidate{run(3, 110, 110)}, run(0, 95, 105),
			0, true, "0.00", "measured spread 10.0"},
		{"one run each beats the default", []*Candidate{run(3, 120)}, run(0, 100),
			3, false, "1.20", "it beats the engine default (trial 0, pooled 100.0 over 1 run) by 20.0 (one run of each: no spread measured)"},
		{"one run each below the default", []*Candidate{run(3, 90)}, run(0, 100),
			0, true, "0.00", "pooled 90.0 over 1 run, does not beat the default's 100.0 over 1 run (one run of each: no spread measured)"},
		{"only the default confirmed", nil, run(0, 100, 101), 0, true, "0.00", "the engine default is the only confirmed config"},
		{"no default: Declare", []*Candidate{run(3, 200, 210)}, nil, 3, false, "0.00", "the only confirmed config"},
	}
	for _, tc := range tests {
		var cands []Candidate
		for _, c := range tc.cands {
			cands = append(cands, *c)
		}
		w, ok := DeclareAgainst(cands, tc.base)
		if !ok || w.Trial != tc.win || w.DefaultAsGood != tc.asGood || fmt.Sprintf("%.2f", w.Gain) != tc.gain || !strings.Contains(w.Reason, tc.say) {
			t.Errorf("%s: winner %d as good %v gain %.2f %q; want %d %v %s %q", tc.name, w.Trial, w.DefaultAsGood, w.Gain, w.Reason, tc.win, tc.asGood, tc.gain, tc.say)
		}
		if tc.base != nil && len(w.Candidates) != len(tc.cands)+1 {
			t.Errorf("%s: candidates %v, want the default among them", tc.name, w.Candidates)
		}
	}
	if _, ok := DeclareAgainst(nil, nil); ok {
		t.Error("a winner from nothing")
	}
}

// TestVersusDefault: the line each outcome of the engine default gives.
func TestVersusDefault(t *testing.T) {
	score := func(v float64) *float64 { return &v }
	def := func(r Record) Record { r.Baseline = true; return r }
	ran := json.RawMessage(`{"max_running_requests":64}`)
	search := Record{Number: 4, State: StateComplete, ScoreOK: true, Score: score(300)}
	confirmed := &Winner{Trial: 4, Pooled: 295, Spread: 10, Runs: make([]Measurement, 3), Gain: 1.84,
		Baseline: &Candidate{Trial: 0, Pooled: 160.3, Spread: 5, Runs: make([]Measurement, 3)}}
	asGood := &Winner{Trial: 0, Pooled: 160.3, Spread: 5, DefaultAsGood: true,
		Baseline: &Candidate{Trial: 0, Pooled: 160.3, Spread: 5, Runs: make([]Measurement, 2)},
		Searched: &Candidate{Trial: 4, Pooled: 170.1, Spread: 20, Runs: make([]Measurement, 2)}}
	complete := def(Record{Number: 0, State: StateComplete, ScoreOK: true, Score: score(160.3)})
	tests := []struct {
		name string
		w    *Winner
		best *Record
		recs []Record
		want string
	}{
		{"ratio", confirmed, &search, []Record{complete, search}, "1.84× the engine default, pooled over 3 runs each (trial 0: pooled 160.3)"},
		{"as good", asGood, &complete, []Record{complete, search}, "the engine default is as good as anything found (pooled 160.3 vs trial 4's 170.1, within the spread 20.0)"},
		{"failed at a level", nil, &search, []Record{def(Record{Number: 0, State: StateFailed, FailureClass: "illegal_memory_access", FailedIn: "C64 r1", Facts: ran}), search},
			"the engine default failed: illegal_memory_access at C64"},
		{"failed in a warm-up", nil, &search, []Record{def(Record{Number: 0, State: StateFailed, FailureClass: "hang", FailedIn: "warm-up C16", Facts: ran}), search},
			"the engine default failed: hang at C16"},
		{"failed a quality gate", nil, &search, []Record{def(Record{Number: 0, State: StateFailed, FailureClass: "quality", FailedIn: "quality after", Facts: ran}), search},
			"the engine default failed: quality at the quality check after the sweep"},
		{"failed at startup", nil, &search, []Record{def(Record{Number: 0, State: StateFailed, FailureClass: "oom", LogPath: "trial-0.log"}), search},
			"the engine default failed: oom at startup"},
		{"rejected", nil, &search, []Record{def(Record{Number: 0, State: StateInfeasible, Reason: "256 // 5 = 51 < 64"}), search},
			"the engine default is rejected before launch: 256 // 5 = 51 < 64"},
		{"missed the SLO", nil, &search, []Record{def(Record{Number: 0, State: StateComplete, Score: score(90), ScoreReason: "ttft p99 3.1 s > 2 s"}), search},
			"the engine default does not count: ttft p99 3.1 s > 2 s"},
		{"not confirmed", nil, &search, []Record{complete, search}, "1.87× the engine default, one run each, not confirmed (trial 0: 160.3)"},
		{"a retry replaces the interrupted default", confirmed, &search,
			[]Record{def(Record{Number: 0, State: StateInterrupted}), search, def(Record{Number: 5, State: StateFailed, FailureClass: "oom", LogPath: "x"})},
			"the engine default failed: oom at startup"},
		{"still running", nil, &search, []Record{def(Record{Number: 0, State: StateRunning}), search}, ""},
		{"no default", nil, &search, []Record{search}, ""},
	}
	for _, tc := range tests {
		if got := VersusDefault(tc.w, tc.best, tc.recs); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBaselineRejectedBeforeLaunch: an engine default the study's rules
// reject is stored infeasible with the reason, launches nothing, and the
// summary line says so.
func TestBaselineRejectedBeforeLaunch(t *testing.T) {
	st, store, _ := openFake(t, "confirm: 0}", "confirm: 0, baseline: default}",
		"flag: --ep-size}", "flag: --ep-size, default: 1}", "workload:", "constraints: ['ep == gpus_per_trial']\nworkload:")
	b := &fakeBackend{}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	base, ok := BaselineOf(sum.Records)
	if !ok || base.Number != 0 || base.State != StateInfeasible || !strings.Contains(base.Reason, "ep=1") {
		t.Fatalf("engine default %+v; want trial 0 infeasible by the constraint", base)
	}
	if slices.Contains(b.launches, defaultFlags) {
		t.Errorf("launched the rejected default: %q", b.launches)
	}
	got := VersusDefault(sum.Winner, sum.Best, sum.Records)
	if want := `the engine default is rejected before launch: constraint "ep == gpus_per_trial" is false with ep=1, gpus_per_trial=4`; got != want {
		t.Errorf("versus the default: %q, want %q", got, want)
	}
}

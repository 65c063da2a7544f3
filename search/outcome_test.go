package search

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search/sampler"
	"github.com/sgtune/sgtune/space"
)

// result is a measured chat result with one point at concurrency c.
func result(c int, tokS, ttftP99 float64) *objective.Result {
	p := objective.Point{Concurrency: c, Repeat: 1, State: "passed", Requested: 4, Issued: 4, Completed: 4,
		OutputTokens: 400, OutputTokS: tokS, TTFT: objective.Stats{P50: ttftP99 / 2, P99: ttftP99}}
	return &objective.Result{Kind: "chat", Points: []objective.Point{p}, Medians: objective.Medians([]objective.Point{p})}
}

func TestDecide(t *testing.T) {
	spec := objective.ScoreSpec{Metric: "output_tok_s", Concurrency: 4,
		SLO: []objective.SLO{{Metric: "ttft", Percentile: "p99", Max: 1}}}
	oom := &launcher.Failure{Class: engine.ClassOOM, ExitCode: 1, Reason: "CUDA out of memory"}
	ima := &launcher.Failure{Class: engine.ClassIllegalMemoryAccess, ExitCode: 134, Excerpt: "\n  RuntimeError: CUDA error: an illegal memory access\n"}
	tests := []struct {
		name   string
		in     observed
		state  string
		final  goptuna.TrialState
		class  string
		value  float64 // what the sampler sees, when set
		hasVal bool
		retry  bool
	}{
		{"startup failure", observed{startErr: fmt.Errorf("start: %w", oom)}, StateFailed, goptuna.TrialStatePruned, engine.ClassOOM, 0, false, false},
		{"interrupted during startup", observed{startErr: context.Canceled, interrupted: true}, StateInterrupted, goptuna.TrialStateFail, "", 0, false, true},
		{"launch error without a failure", observed{startErr: errors.New("log dir: permission denied")}, StateInterrupted, goptuna.TrialStateFail, "", 0, false, true},
		{"limits reduced", observed{limits: "the engine reduced max_running_requests from 64 to 51"}, StateFailed, goptuna.TrialStatePruned, ClassLimitsReduced, 0, false, false},
		{"crash during measurement wins over the request errors", observed{result: result(4, 100, 0.5), measureErr: objective.ErrFailedRequests, crash: ima},
			StateFailed, goptuna.TrialStatePruned, engine.ClassIllegalMemoryAccess, 0, false, false},
		{"crash even when interrupted", observed{measureErr: context.Canceled, crash: ima, interrupted: true}, StateFailed, goptuna.TrialStatePruned, engine.ClassIllegalMemoryAccess, 0, false, false},
		{"interrupted measurement", observed{measureErr: context.Canceled, interrupted: true}, StateInterrupted, goptuna.TrialStateFail, "", 0, false, true},
		{"finished before Ctrl-C is scored", observed{result: result(4, 100, 0.5), interrupted: true}, StateComplete, goptuna.TrialStateComplete, "", 100, true, false},
		{"hang", observed{measureErr: fmt.Errorf("c=4: %w", objective.ErrHang)}, StateFailed, goptuna.TrialStatePruned, engine.ClassHang, 0, false, false},
		{"quality gate", observed{measureErr: fmt.Errorf("json 12/24: %w", objective.ErrQuality)}, StateFailed, goptuna.TrialStatePruned, ClassQuality, 0, false, false},
		{"failed requests", observed{measureErr: objective.ErrFailedRequests}, StateFailed, goptuna.TrialStatePruned, ClassRequestsFailed, 0, false, false},
		{"other measurement error", observed{measureErr: errors.New("bad JSON")}, StateFailed, goptuna.TrialStatePruned, ClassMeasurement, 0, false, false},
		{"pruned keeps its partial score", observed{result: result(4, 80, 0.5), measureErr: errPruned, pruned: "C1 200 tok/s < 50% of the best 800"},
			StatePruned, goptuna.TrialStatePruned, "", 0, false, false},
		{"complete meeting the SLO", observed{result: result(4, 123.5, 0.5)}, StateComplete, goptuna.TrialStateComplete, "", 123.5, true, false},
		{"complete missing the SLO is 0 to the sampler", observed{result: result(4, 500, 3)}, StateComplete, goptuna.TrialStateComplete, "", 0, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := decide(tc.in, spec)
			if out.State != tc.state || out.Final != tc.final || out.Class != tc.class || out.Retry != tc.retry {
				t.Errorf("got state %s final %v class %q retry %v, want %s %v %q %v",
					out.State, out.Final, out.Class, out.Retry, tc.state, tc.final, tc.class, tc.retry)
			}
			if (out.Value != nil) != tc.hasVal || (tc.hasVal && *out.Value != tc.value) {
				t.Errorf("sampler value %v, want %v (set %v)", out.Value, tc.value, tc.hasVal)
			}
			if out.Line == "" {
				t.Error("no progress line")
			}
			if want := tc.name == "launch error without a failure"; out.Unlaunchable != want {
				t.Errorf("unlaunchable %v, want %v", out.Unlaunchable, want)
			}
			if out.State == StateFailed && out.Reason == "" {
				t.Error("a failure without a reason")
			}
		})
	}
	// A pruned trial's partial score is stored but never counts.
	out := decide(observed{result: result(4, 80, 0.5), measureErr: errPruned, pruned: "too slow"}, spec)
	if out.Score == nil || *out.Score != 80 || out.ScoreOK {
		t.Errorf("pruned score %v ok %v", out.Score, out.ScoreOK)
	}
	// Pruned before the scored level, it has no score (not a score of 0),
	// and says why.
	out = decide(observed{result: result(1, 80, 0.5), measureErr: errPruned, pruned: "too slow"}, spec)
	if out.Score != nil || out.ScoreReason != "no point at concurrency 4" {
		t.Errorf("pruned before the scored level: score %v, reason %q", out.Score, out.ScoreReason)
	}
	if s, ok := (Record{State: StatePruned, Score: new(float64)}).Scored(); ok {
		t.Errorf("a stored 0 of a pruned trial reads as score %v", s)
	}
	// The failure's excerpt gives the reason when the launcher had none.
	out = decide(observed{crash: ima}, spec)
	if out.Reason != "RuntimeError: CUDA error: an illegal memory access" {
		t.Errorf("reason %q", out.Reason)
	}
}

func TestLimitsReduced(t *testing.T) {
	f := engine.Facts{RequestedMaxRunningRequests: 64, MaxRunningRequests: 51}
	if limitsReduced(f, "reject") == "" {
		t.Error("64 -> 51 not refused")
	}
	if limitsReduced(f, "accept") != "" {
		t.Error("refused although accepted")
	}
	if limitsReduced(engine.Facts{MaxRunningRequests: 64}, "reject") != "" {
		t.Error("no reduction warning, yet refused")
	}
}

// TestSamplerNames keeps the study file's list of samplers equal to what
// search/sampler builds and the search's own "bayes".
func TestSamplerNames(t *testing.T) {
	names := append(sampler.Names(), "bayes")
	slices.Sort(names)
	if got, want := fmt.Sprint(space.Samplers), fmt.Sprint(names); got != want {
		t.Errorf("space.Samplers %s, search/sampler %s", got, want)
	}
}

// TestParamsAsWritten: a 0.01-step float is shown as written.
func TestParamsAsWritten(t *testing.T) {
	low, step := 0.7, 0.01 // variables: constant arithmetic would be exact
	sampled := low + 10*step
	if fmt.Sprint(sampled) == "0.8" {
		t.Fatal("the sampled value is exact here; the test shows nothing")
	}
	got := asWritten(map[string]interface{}{"mem_fraction": sampled, "ep": "4", "slots": 256})
	if fmt.Sprint(got) != "map[ep:4 mem_fraction:0.8 slots:256]" {
		t.Errorf("%v", got)
	}
	if s := space.Params(got).String(); s != "ep=4 mem_fraction=0.8 slots=256" {
		t.Errorf("%s", s)
	}
}

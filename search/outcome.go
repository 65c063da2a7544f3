package search

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
)

// errPruned ends a measurement that cannot come near the best so far.
var errPruned = errors.New("pruned: cannot come near the best trial")

// observed is everything a launched trial's walk saw, for decide.
type observed struct {
	// startErr is Backend.Start's error (a *launcher.Failure when the
	// server failed to start).
	startErr error
	// limits is why the trial was stopped right after startup because the
	// engine reduced its limits ("" when it was not).
	limits string
	// result and measureErr are the measurement's; crash is how the
	// server ended (Running.Stop).
	result     *objective.Result
	measureErr error
	crash      *launcher.Failure
	// interrupted: the run was cancelled (Ctrl-C) while the trial ran.
	interrupted bool
	// pruned is why the measurement was stopped early because the trial
	// could not come near the best ("" when it was not).
	pruned string
}

// outcome is how a trial ended, as stored and as the sampler sees it.
type outcome struct {
	State  string             // StateComplete, StateFailed, StatePruned, StateInterrupted
	Final  goptuna.TrialState // goptuna's state: COMPLETE, PRUNED (teaches TPE to avoid), FAIL (interrupted)
	Class  string             // failure class
	Reason string
	// Failure is the launcher's classification with its log excerpt.
	Failure *launcher.Failure
	// Score is the objective's value; ScoreOK whether it meets the SLOs
	// and gates; Value what the sampler is told (0 for a miss).
	Score       *float64
	ScoreOK     bool
	ScoreReason string
	Value       *float64
	// Retry: the trial did not finish through no fault of its config; a
	// copy is queued and run first.
	Retry bool
	// Unlaunchable: the launch itself failed though no server did (a log
	// directory it cannot write); see maxUnlaunchable.
	Unlaunchable bool
	// Line is the progress line, without "trial N".
	Line string
}

// decide turns what a trial's walk observed into its outcome. It is a pure
// function of its inputs (tested by a table), so every path a trial can
// take is decided in one place.
func decide(o observed, spec objective.ScoreSpec) outcome {
	var f *launcher.Failure
	switch {
	case o.startErr != nil && errors.As(o.startErr, &f):
		out := failed(f)
		out.Line = fmt.Sprintf("failed at startup: %s: %s", f.Class, out.Reason)
		return out
	case o.startErr != nil && o.interrupted:
		return interrupted("interrupted during startup")
	case o.startErr != nil:
		out := interrupted(o.startErr.Error())
		out.Line = "could not be launched: " + o.startErr.Error() + "; it will be retried"
		out.Unlaunchable = true
		return out
	case o.limits != "":
		return outcome{State: StateFailed, Final: goptuna.TrialStatePruned, Class: ClassLimitsReduced,
			Reason: o.limits, Line: "rejected after startup: " + o.limits}
	case o.crash != nil:
		out := failed(o.crash)
		out.Line = fmt.Sprintf("failed during measurement: %s: %s", o.crash.Class, out.Reason)
		return out
	case o.measureErr != nil && o.interrupted:
		// Only a measurement the interrupt cut short is retried; one that
		// finished before Ctrl-C (say, during teardown) is scored below.
		return interrupted("interrupted during measurement")
	case o.pruned != "":
		out := outcome{State: StatePruned, Final: goptuna.TrialStatePruned, Reason: o.pruned}
		if o.result != nil {
			// A pruned trial keeps its partial score for reports, never
			// for the ranking: it is not complete. Pruned before the
			// scored level, it has none (not a score of 0).
			v, ok, why := objective.Score(spec, o.result)
			if ok || v > 0 {
				out.Score = &v
			}
			out.ScoreReason = why
		}
		out.Line = "pruned: " + o.pruned
		return out
	case o.measureErr != nil:
		class := ClassMeasurement
		switch {
		case errors.Is(o.measureErr, objective.ErrHang):
			class = engine.ClassHang
		case errors.Is(o.measureErr, objective.ErrQuality):
			class = ClassQuality
		case errors.Is(o.measureErr, objective.ErrFailedRequests):
			class = ClassRequestsFailed
		}
		return outcome{State: StateFailed, Final: goptuna.TrialStatePruned, Class: class, Reason: o.measureErr.Error(),
			Line: fmt.Sprintf("failed: %s: %v", class, o.measureErr)}
	}
	value, ok, why := objective.Score(spec, o.result)
	out := outcome{State: StateComplete, Final: goptuna.TrialStateComplete, Score: &value, ScoreOK: ok, ScoreReason: why}
	// A trial that misses its SLO or a gate ranks below every one that
	// meets it.
	seen := 0.0
	verdict := "meets the SLO"
	if ok {
		seen = value
	} else {
		verdict = "does not count: " + why
	}
	out.Value = &seen
	out.Line = fmt.Sprintf("complete: score %s (%s)", strconv.FormatFloat(value, 'f', 1, 64), verdict)
	return out
}

// failed is the outcome of a server that failed.
func failed(f *launcher.Failure) outcome {
	reason := f.Reason
	if reason == "" {
		reason = firstLine(f.Excerpt)
	}
	return outcome{State: StateFailed, Final: goptuna.TrialStatePruned, Class: f.Class, Reason: reason, Failure: f}
}

// interrupted is the outcome of a trial stopped through no fault of its
// config: it is queued again.
func interrupted(reason string) outcome {
	return outcome{State: StateInterrupted, Final: goptuna.TrialStateFail, Reason: reason, Retry: true,
		Line: reason + "; it will be retried"}
}

// limitsReduced says why a started server must not be measured: the engine
// capped its running requests below what was asked (seed rule 1; SGLang
// logs it per DP worker). "" when the limits hold or the study accepts it.
func limitsReduced(f engine.Facts, onLimitsReduced string) string {
	req := f.RequestedMaxRunningRequests
	if req > 0 && f.MaxRunningRequests > 0 && f.MaxRunningRequests < req && onLimitsReduced != "accept" {
		return fmt.Sprintf("the engine reduced max_running_requests from %d to %d (on_limits_reduced: reject)",
			req, f.MaxRunningRequests)
	}
	return ""
}

func firstLine(s string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// Outcome is how one launch of a config ended, as a study stores it.
type Outcome struct {
	State   string // StateComplete, StateFailed (StateInterrupted when cut short)
	Class   string // failure class
	Reason  string
	Score   float64 // the objective's value (complete trials)
	ScoreOK bool    // it met the SLOs and gates
}

// Value is what the sampler is told: the score of a complete trial that
// met its SLOs and gates, else 0.
func (o Outcome) Value() float64 {
	if o.State == StateComplete && o.ScoreOK {
		return o.Score
	}
	return 0
}

// Decide is a trial's one decision, for tools that drive a Backend
// themselves (bench-search's landscape): how a launch ended, from Start's
// error, the started server's facts (a reduced limit fails it), the
// measurement and how the server stopped.
func Decide(st *space.Study, startErr error, facts engine.Facts, res *objective.Result, measureErr error, crash *launcher.Failure) Outcome {
	o := observed{startErr: startErr, result: res, measureErr: measureErr, crash: crash}
	if startErr == nil {
		o.limits = limitsReduced(facts, st.OnLimitsReduced)
	}
	out := decide(o, st.Score)
	r := Outcome{State: out.State, Class: out.Class, Reason: out.Reason, ScoreOK: out.ScoreOK}
	if out.Score != nil {
		r.Score = *out.Score
	}
	return r
}

package main

import (
	"github.com/sgtune/sgtune/engine"

	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/sim/virtual"
	"github.com/sgtune/sgtune/space"
)

// Trial states, as `sgtune run` stores them.
const (
	stateComplete = search.StateComplete
	stateFailed   = search.StateFailed
)

// outcome is what `sgtune run` would record for one launch of a config,
// decided the way search's trial loop decides it, from a virtual launch.
type outcome struct {
	State   string  `json:"state"`           // complete | failed
	Class   string  `json:"class,omitempty"` // failure class when failed
	Reason  string  `json:"reason,omitempty"`
	Score   float64 `json:"score"` // objective.Score's value
	ScoreOK bool    `json:"score_ok"`
	// Facts are what the launcher parsed from the startup log.
	Facts engine.Facts `json:"-"`
	// Result is the measurement (nil when the launch failed).
	Result *objective.Result `json:"-"`
}

// Value is what the sampler sees: the score when the trial completed and
// met its SLOs and gates, else 0 (search.reported).
func (o outcome) Value() float64 {
	if o.State == stateComplete && o.ScoreOK {
		return o.Score
	}
	return 0
}

// start launches cfg virtually. It returns the server when the launch
// succeeded and passed the limits check; otherwise the failed outcome.
func start(ctx context.Context, st *space.Study, cfg *space.Config, opt virtual.Options) (*virtual.Server, outcome, error) {
	srv, err := virtual.Start(ctx, cfg.Flags, opt)
	var se *virtual.StartupError
	switch {
	case errors.As(err, &se):
		f := launcher.ClassifyLog(engine.SGLang, strings.NewReader(strings.Join(se.Log, "\n")+"\n"), se.ExitCode, false)
		return nil, outcome{State: stateFailed, Class: f.Class, Reason: f.Reason}, nil
	case err != nil:
		return nil, outcome{}, err
	}
	fp := engine.SGLang.NewLogParser()
	for _, l := range srv.Log() {
		fp.Line(l)
	}
	facts := fp.Facts()
	if !fp.Ready() {
		return nil, outcome{}, fmt.Errorf("virtual startup of %s: no ready line", cfg.Params)
	}
	// The engine may cap running requests below what was asked; the
	// study says whether that fails the trial (search.launch).
	if req := facts.RequestedMaxRunningRequests; req > 0 && facts.MaxRunningRequests > 0 &&
		facts.MaxRunningRequests < req && st.OnLimitsReduced != "accept" {
		return nil, outcome{State: stateFailed, Class: search.ClassLimitsReduced, Facts: facts,
			Reason: fmt.Sprintf("the engine reduced max_running_requests from %d to %d (on_limits_reduced: reject)", req, facts.MaxRunningRequests)}, nil
	}
	return srv, outcome{Facts: facts}, nil
}

// measure runs the study's workload on srv and decides the outcome as
// search does after objective.Run: a crash is classified from the log, a
// measurement error by its kind, else the score.
func measure(ctx context.Context, st *space.Study, srv *virtual.Server, facts engine.Facts) (outcome, error) {
	res, merr := srv.Measure(ctx, st.Workload, objective.Options{})
	o := outcome{Facts: facts, Result: res}
	if ctx.Err() != nil {
		return o, ctx.Err()
	}
	if code, exited := srv.Exited(); exited {
		f := launcher.ClassifyLog(engine.SGLang, strings.NewReader(srv.LogText()), code, true)
		o.State, o.Class, o.Reason = stateFailed, f.Class, f.Reason
		return o, nil
	}
	if merr != nil {
		o.State, o.Reason = stateFailed, merr.Error()
		switch {
		case errors.Is(merr, objective.ErrHang):
			o.Class = engine.ClassHang
		case errors.Is(merr, objective.ErrQuality):
			o.Class = search.ClassQuality
		case errors.Is(merr, objective.ErrFailedRequests):
			o.Class = search.ClassRequestsFailed
		default:
			o.Class = search.ClassMeasurement
		}
		return o, nil
	}
	o.State = stateComplete
	o.Score, o.ScoreOK, o.Reason = objective.Score(st.Score, res)
	return o, nil
}

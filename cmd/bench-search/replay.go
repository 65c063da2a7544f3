package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

// tableReplay is a measured table ready to replay against a study: its
// configs by the argv the study launches them with.
type tableReplay struct {
	path   string
	table  *Table
	byArgv map[string]*TableConfig
}

// tableLandscape reads the measured table at path as st's landscape: a
// config's true score is the mean of its runs' values (0 for a run that
// failed or missed the SLO), as the simulated landscape's is the mean of
// its draws. The table must be of st's space (the same configs in the
// same order); a partial one gives configs it has not measured yet no
// value. The landscape carries the table for the searches' launches
// (comparison.backend).
func tableLandscape(path string, st *space.Study) (*Landscape, error) {
	t, err := loadTable(path)
	if err != nil {
		return nil, err
	}
	if t.Header.Study != st.Name {
		return nil, fmt.Errorf("%s: a table of study %s, not of %s: pass --study %s", path, t.Header.Study, st.Name, t.Header.StudyFile)
	}
	confs, cfgs, err := enumerateTable(st)
	if err != nil {
		return nil, err
	}
	if len(confs) != len(t.Configs) {
		return nil, fmt.Errorf("%s: %d configs, the space of %s has %d", path, len(t.Configs), st.Path, len(confs))
	}
	r := &tableReplay{path: path, table: t, byArgv: map[string]*TableConfig{}}
	ls := &Landscape{Version: landscapeVersion, Study: st.Name, Profile: "measured:" + filepath.Base(path), Key: t.Header.StudySHA256,
		Draws: t.Header.Repeats, ScreenDraws: t.Header.Repeats, WallS: t.Header.WallS, Workers: 1, Best: -1}
	for i := range t.Configs {
		tc := &t.Configs[i]
		// The recorded params resolve to the config the study enumerates
		// at that place (the model path may differ: the flags are the
		// study's now).
		cfg, err := st.Resolve(tc.Params, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: config %d (%s): %w", path, i, tc.Params, err)
		}
		if flagsKey(cfg.Flags) != flagsKey(cfgs[i].Flags) || (tc.Reject == "") != (confs[i].Reject == "") {
			return nil, fmt.Errorf("%s: config %d is %s (%s), the study's is %s (%s): the table is of another space",
				path, i, tc.Params, tc.Reject, confs[i].Params, confs[i].Reject)
		}
		r.byArgv[flagsKey(st.Argv(cfgs[i]))] = tc
		ct := ConfigTruth{Params: cfgs[i].Params, Reject: tc.Reject, Group: i}
		classes := map[string]int{}
		for j := range tc.Runs {
			run := &tc.Runs[j]
			ct.Values = append(ct.Values, run.Value())
			if run.Facts != nil {
				ls.StartupS += run.Facts.StartupS
			}
			if run.Outcome.State == search.StateFailed {
				ct.Failed++
				classes[run.Outcome.Class]++
				if classes[run.Outcome.Class] > classes[ct.Class] || ct.Class == "" {
					ct.Class, ct.Reason = run.Outcome.Class, run.Outcome.Reason
				}
			}
		}
		if len(tc.Runs) > 0 {
			ls.Groups++
		}
		ls.Runs += len(tc.Runs)
		ct.Mean, ct.SE = meanSE(ct.Values)
		ls.Configs = append(ls.Configs, ct)
		if len(ct.Values) > 0 && (ls.Best < 0 || ct.Mean > ls.Configs[ls.Best].Mean) {
			ls.Best = i
		}
	}
	ls.replay = r
	return ls, nil
}

// tableBackend replays a measured table: each launch draws one of the
// config's measured runs (the simulator seed picks it) and hands out its
// facts, its measurement or its failure as the study loop saw them live.
type tableBackend struct {
	replay *tableReplay
}

// startDrawn starts a replayed launch: a run whose startup failed returns
// its *launcher.Failure.
func (b *tableBackend) startDrawn(ctx context.Context, spec launcher.Spec, seed, _ uint64) (search.Running, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	tc, ok := b.replay.byArgv[flagsKey(spec.Argv)]
	if !ok {
		return nil, fmt.Errorf("replay: %q is not a config of the table %s", spec.Argv, b.replay.path)
	}
	if len(tc.Runs) == 0 {
		why := "not measured yet"
		if tc.Reject != "" {
			why = "statically infeasible, never launched: " + tc.Reject
		}
		return nil, fmt.Errorf("replay: the table %s has no run of %s (%s)", b.replay.path, tc.Params, why)
	}
	run := &tc.Runs[seed%uint64(len(tc.Runs))]
	if run.StartFailure != nil {
		return nil, run.StartFailure.failure()
	}
	if run.Facts == nil {
		return nil, fmt.Errorf("replay: %s round %d: a started run without facts", tc.Params, run.Round)
	}
	return &tableRunning{run: run}, nil
}

// tableRunning is a replayed started server: one measured run.
type tableRunning struct {
	run *TableRun
}

func (r *tableRunning) Facts() engine.Facts { return *r.run.Facts }

// Measure implements search.Running: a copy of the recorded measurement
// and its error. The recording measured in full; opt.AfterLevel is called
// after every level the live measurement finished before the last, as
// objective calls it, and an error from it ends the measurement there (the
// points after that level dropped), so a pruning search sees what it
// would have seen live.
func (r *tableRunning) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := copyResult(r.run.Result)
	if err != nil {
		return nil, err
	}
	merr := r.run.MeasureErr.err()
	if res == nil {
		if merr == nil {
			return nil, fmt.Errorf("replay: round %d has neither a measurement nor its error", r.run.Round)
		}
		return nil, merr
	}
	var levels []int
	if w.Kind == "chat" && len(w.Chat.Concurrency) > 0 {
		levels = reachedLevels(w, res)
	}
	for li, conc := range levels {
		pts := levelPoints(res.Points, conc)
		if opt.Point != nil {
			for _, p := range pts {
				opt.Point(p)
			}
		}
		// objective calls AfterLevel once a level's repeats are done, not
		// after the workload's last level: here, after every level but
		// the workload's last that the run went past.
		if opt.AfterLevel == nil || conc == w.Chat.Concurrency[len(w.Chat.Concurrency)-1] || li == len(levels)-1 && merr != nil {
			continue
		}
		if err := opt.AfterLevel(conc, pts); err != nil {
			truncate(res, levels[:li+1])
			return res, fmt.Errorf("after concurrency %d: %w", conc, err)
		}
	}
	return res, merr
}

// Stop implements search.Running: the recorded crash (nil when the server
// stopped cleanly or its end did not count).
func (r *tableRunning) Stop(context.Context) (*launcher.Failure, error) {
	return r.run.Crash.failure(), nil
}

// copyResult is a deep copy of res (nil for nil).
func copyResult(res *objective.Result) (*objective.Result, error) {
	if res == nil {
		return nil, nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("replay: copy the result: %w", err)
	}
	out := &objective.Result{}
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("replay: copy the result: %w", err)
	}
	return out, nil
}

// reachedLevels are the workload's chat levels the result reached (a
// warm-up wave or a measured point), in the workload's order: objective
// runs them in that order and stops at the first failure.
func reachedLevels(w objective.Workload, res *objective.Result) []int {
	var out []int
	for _, conc := range w.Chat.Concurrency {
		at := func(p objective.Point) bool { return p.Concurrency == conc && (p.Phase == "" || p.Phase == "warmup") }
		if slices.ContainsFunc(res.Points, at) || slices.ContainsFunc(res.Warmup, at) {
			out = append(out, conc)
		}
	}
	return out
}

// levelPoints are the measured points of the level conc.
func levelPoints(points []objective.Point, conc int) []objective.Point {
	var out []objective.Point
	for _, p := range points {
		if p.Phase == "" && p.Concurrency == conc {
			out = append(out, p)
		}
	}
	return out
}

// truncate keeps what res measured at the levels kept, as a measurement
// stopped after the last of them holds: its points, warm-ups, requests,
// medians and audit count.
func truncate(res *objective.Result, kept []int) {
	keep := func(p objective.Point) bool { return slices.Contains(kept, p.Concurrency) }
	res.Points = slices.DeleteFunc(res.Points, func(p objective.Point) bool { return !keep(p) })
	res.Warmup = slices.DeleteFunc(res.Warmup, func(p objective.Point) bool { return !keep(p) })
	res.Requests = slices.DeleteFunc(res.Requests, func(r objective.RequestRecord) bool { return !slices.Contains(kept, r.Concurrency) })
	res.Medians = objective.Medians(res.Points)
	n := 0
	for _, p := range res.Points {
		if p.State != objective.StateInterrupted {
			n++
		}
	}
	res.Audit.Points = n
}

// printTableSummary follows printSummary for a landscape read from a
// measured table: where and how it was measured, the failures over all
// runs, and how far a config's repeats spread; its last line sums it up.
func printTableSummary(w io.Writer, ls *Landscape) {
	r := ls.replay
	if r == nil {
		return
	}
	t := r.table
	h := &t.Header
	state := "complete"
	if !h.Complete {
		state = fmt.Sprintf("partial, %d of %d runs", t.Runs(), t.Feasible()*h.Repeats)
	}
	fmt.Fprintf(w, "measured table %s (%s): %s, model %s (%d bytes), %d x %s, %d repeats, recorded from %s over %.0f s in %d session(s), load average %.2f/%.2f/%.2f at the start, %.2f/%.2f/%.2f at the end\n",
		r.path, state, h.EngineVersion, filepath.Base(h.Model), h.ModelBytes, h.Machine.NProc, h.Machine.CPUModel, h.Repeats,
		h.Started.Format("2006-01-02 15:04 MST"), h.WallS, h.Sessions, h.LoadStart[0], h.LoadStart[1], h.LoadStart[2], h.LoadEnd[0], h.LoadEnd[1], h.LoadEnd[2])
	fmt.Fprintf(w, "here a draw is a launch measured on that machine: the true score is the mean over a config's measured repeats, real noise included\n")
	if n := t.Busy(); n > 0 {
		fmt.Fprintf(w, "%d of its %d runs were recorded at a load average above the CPUs + 1: their noise is partly other work's\n", n, t.Runs())
	}
	runClasses := map[string]int{}
	var cvs []float64
	mixed, runs := 0, 0
	for i := range ls.Configs {
		c := &ls.Configs[i]
		for _, run := range t.Configs[i].Runs {
			runs++
			if run.Outcome.State != search.StateComplete {
				runClasses[cmp.Or(run.Outcome.Class, run.Outcome.State)]++
			} else if !run.Outcome.ScoreOK {
				runClasses["slo_missed"]++
			}
		}
		if len(c.Values) < 2 {
			continue
		}
		pos := 0
		for _, v := range c.Values {
			if v > 0 {
				pos++
			}
		}
		switch {
		case pos == len(c.Values):
			cvs = append(cvs, cv(c.Values))
		case pos > 0:
			mixed++
		}
	}
	fmt.Fprintf(w, "runs that did not count (%d runs): %s\n", runs, classList(runClasses))
	b := 0.0
	if ls.Best >= 0 {
		b = ls.Configs[ls.Best].Mean
	}
	within := 0
	started := 0
	for i := range ls.Configs {
		c := &ls.Configs[i]
		if len(c.Values) > 0 {
			started++
			if b > 0 && c.Mean >= 0.97*b {
				within++
			}
		}
	}
	medCV, p90CV, maxCV := 0.0, 0.0, 0.0
	if len(cvs) > 0 {
		sort.Float64s(cvs)
		medCV, p90CV, maxCV = median(cvs), objective.Percentile(cvs, 90), cvs[len(cvs)-1]
		fmt.Fprintf(w, "spread across repeats (coefficient of variation of the value, %d configs that counted in every repeat): median %.1f%%, p90 %.1f%%, max %.1f%%; %d configs counted in some repeats only\n",
			len(cvs), 100*medCV, 100*p90CV, 100*maxCV, mixed)
	}
	if ls.Best >= 0 {
		bc := &ls.Configs[ls.Best]
		vals := make([]string, len(bc.Values))
		for i, v := range bc.Values {
			vals[i] = fmt.Sprintf("%.1f", v)
		}
		fmt.Fprintf(w, "best config's repeats: %s\n", strings.Join(vals, ", "))
	}
	best := "none"
	if ls.Best >= 0 {
		best = strings.ReplaceAll(ls.Configs[ls.Best].Params.String(), " ", ",")
	}
	fmt.Fprintf(w, "table_best=%s table_best_mean=%.1f within_97=%d/%d median_cv=%.1f%% failures=%q wall_s=%.0f\n",
		best, b, within, started, 100*medCV, classList(runClasses), h.WallS)
}

// cv is the coefficient of variation of xs (sample standard deviation
// over the mean).
func cv(xs []float64) float64 {
	m, se := meanSE(xs)
	if m == 0 {
		return 0
	}
	return se * math.Sqrt(float64(len(xs))) / m
}

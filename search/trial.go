package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// crashGrace is how long a failed measurement waits for the engine to exit.
const crashGrace = 3 * time.Second

// deterministicClasses are failures that recur for the same config, so a
// proposal equal to such a trial is rejected without launching it again.
var deterministicClasses = map[string]bool{
	launcher.ClassIllegalMemoryAccess: true,
	launcher.ClassOOM:                 true,
	launcher.ClassStartupCrash:        true,
	launcher.ClassCrashed:             true,
	launcher.ClassBadCommand:          true,
	launcher.ClassHang:                true,
	ClassQuality:                      true,
	ClassLimitsReduced:                true,
}

// runTrial proposes, checks, launches and measures one trial. launched
// reports whether it used a launch from the budget.
func (r *runner) runTrial(ctx context.Context, gpus []int, retry *Record) (launched bool, err error) {
	id, err := r.store.CreateNewTrial(r.study.ID)
	if err != nil {
		return false, fmt.Errorf("create trial: %w", err)
	}
	number, _ := r.store.GetTrialNumberFromID(id)
	if err := r.store.SetTrialSystemAttr(id, attrOwner, r.owner); err != nil {
		return false, err
	}
	_ = r.store.Heartbeat(id)

	trial := &goptuna.Trial{Study: r.study, ID: id}
	var sg space.Suggester = trial
	if retry != nil {
		if err := r.store.SetTrialSystemAttr(id, attrRetryOf, strconv.Itoa(retry.Number)); err != nil {
			return false, err
		}
		sg = &replay{Trial: trial, store: r.store, id: id, params: retry.Params}
	}
	params, err := r.st.Suggest(sg)
	if err != nil {
		r.fail(id, StateFailed, "sampler", err.Error())
		return false, fmt.Errorf("trial %d: sample: %w", number, err)
	}
	ft, err := r.store.GetTrial(id)
	if err != nil {
		return false, err
	}
	label := space.Params(ft.Params).String()

	cfg, err := r.st.Resolve(params)
	if err != nil {
		r.skip(id, number, label, "resolve", err.Error())
		return false, nil
	}
	cfgJSON, _ := json.Marshal(cfg)
	engineJSON, _ := json.Marshal(r.st.Engine.Command)
	_ = r.store.SetTrialUserAttr(id, attrConfig, string(cfgJSON))
	_ = r.store.SetTrialUserAttr(id, attrEngine, string(engineJSON))
	if lc := r.st.Engine.LaunchCommand; len(lc) > 0 {
		b, _ := json.Marshal(lc)
		_ = r.store.SetTrialUserAttr(id, attrLaunchCmd, string(b))
	}
	if v := r.st.Engine.Version; v != "" {
		_ = r.store.SetTrialUserAttr(id, attrVersion, v)
	}

	if rej := r.st.Check(cfg); len(rej) > 0 {
		msgs := make([]string, len(rej))
		for i, x := range rej {
			msgs[i] = x.Message
		}
		rj, _ := json.Marshal(rej)
		_ = r.store.SetTrialUserAttr(id, attrRejections, string(rj))
		r.skip(id, number, label, rej[0].Rule, strings.Join(msgs, "; "))
		return false, nil
	}
	if retry == nil {
		prev, ok := r.sameConfig(id, ft.Params)
		switch {
		case ok && prev.State == StateFailed:
			r.skip(id, number, label, ClassKnownBadConfig,
				fmt.Sprintf("same config as trial %d, which failed with %s", prev.Number, prev.FailureClass))
			return false, nil
		case ok && prev.State == StateComplete:
			r.duplicate(id, number, label, prev)
			return false, nil
		case ok && prev.State == StateRunning:
			// Another worker is measuring this config right now; TPE has
			// no constant liar, so parallel workers can propose the same.
			r.skips.Add(1)
			r.printf("trial %d not launched [%s]: trial %d is measuring the same config\n", number, label, prev.Number)
			_ = r.finish(id, goptuna.TrialStateFail, map[string]string{
				attrState:  StateDuplicate,
				attrReason: fmt.Sprintf("same config as trial %d, running at the time; not launched", prev.Number),
			})
			return false, nil
		}
	}
	r.skips.Store(0)
	return true, r.launch(ctx, id, number, label, gpus, cfg)
}

// skip records a proposal that is not launched.
func (r *runner) skip(id, number int, label, rule, reason string) {
	r.skips.Add(1)
	r.mu.Lock()
	r.sum.Infeasible++
	r.mu.Unlock()
	r.printf("trial %d infeasible [%s]: %s\n", number, label, reason)
	r.fail(id, StateInfeasible, rule, reason)
}

// fail finishes a trial as PRUNED (so TPE learns to avoid it) with a state.
func (r *runner) fail(id int, state, class, reason string) {
	_ = r.finish(id, goptuna.TrialStatePruned, map[string]string{
		attrState: state, attrClass: class, attrReason: reason,
	})
}

// sameConfig finds another trial with the same params that completed, is
// running, or failed in a way that recurs: launching it again would only
// spend GPU time to learn the same thing.
func (r *runner) sameConfig(id int, params map[string]interface{}) (Record, bool) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return Record{}, false
	}
	key := space.Params(params).String()
	for _, rec := range recs {
		if rec.ID == id || space.Params(rec.Params).String() != key {
			continue
		}
		if rec.State == StateComplete || rec.State == StateRunning ||
			(rec.State == StateFailed && deterministicClasses[rec.FailureClass]) {
			return rec, true
		}
	}
	return Record{}, false
}

// duplicate records a proposal of an already measured config. The sampler
// sees the earlier trial's value (a penalty would teach TPE that the best
// region is bad); reports show it as a duplicate, never as a measurement.
func (r *runner) duplicate(id, number int, label string, prev Record) {
	r.skips.Add(1)
	r.printf("trial %d not launched [%s]: same config as trial %d\n", number, label, prev.Number)
	value := 0.0
	if prev.ScoreOK && prev.Score != nil {
		value = *prev.Score
	}
	_ = r.store.SetTrialValue(id, value)
	_ = r.finish(id, goptuna.TrialStateComplete, map[string]string{
		attrState:  StateDuplicate,
		attrReason: fmt.Sprintf("same config as trial %d; not launched again", prev.Number),
	})
}

// launch starts the server, measures it and stores the outcome.
func (r *runner) launch(ctx context.Context, id, number int, label string, gpus []int, cfg *space.Config) error {
	start := time.Now()
	r.printf("trial %d launching [%s] on GPUs %s\n", number, label, gpuList(gpus))
	argv := append(append([]string{}, r.st.Engine.Command...), cfg.Flags...)
	argvJSON, _ := json.Marshal(argv)
	logPath := filepath.Join(r.opt.LogDir, safeName(r.st.Name), fmt.Sprintf("trial-%d.log", number))
	_ = r.store.SetTrialUserAttr(id, attrArgv, string(argvJSON))
	_ = r.store.SetTrialUserAttr(id, attrLogPath, logPath)
	_ = r.store.SetTrialUserAttr(id, attrGPUs, gpuList(gpus))

	stopBeat := r.heartbeat(id)
	defer stopBeat()

	spec := launcher.Spec{
		Argv:           argv,
		GPUs:           gpus,
		LogPath:        logPath,
		StartupTimeout: r.st.Launch.StartupTimeout,
		APIKey:         r.apiKey,
	}
	// The tag lets a later run find and kill this server if sgtune dies
	// without taking it down.
	spec.Env = append(spec.Env, trialTag(r.st.Name, number))
	for k, v := range r.st.Engine.Env {
		spec.Env = append(spec.Env, k+"="+v)
	}
	for k, v := range cfg.Env {
		spec.Env = append(spec.Env, k+"="+v)
	}
	if r.apiKey != "" {
		spec.Argv = append(spec.Argv, "--api-key", r.apiKey)
	}
	attrs := map[string]string{}
	done := func(state goptuna.TrialState) error {
		attrs[attrDurationS] = strconv.FormatFloat(time.Since(start).Seconds(), 'f', 1, 64)
		return r.finish(id, state, attrs)
	}

	srv, err := launcher.Start(ctx, spec)
	if err != nil {
		var f *launcher.Failure
		switch {
		case ctx.Err() != nil:
			r.printf("trial %d interrupted during startup; it will be retried\n", number)
			attrs[attrState], attrs[attrReason] = StateInterrupted, "interrupted during startup"
			return done(goptuna.TrialStateFail)
		case errors.As(err, &f):
			r.recordFailure(attrs, f)
			r.printf("trial %d failed at startup: %s: %s\n", number, f.Class, attrs[attrReason])
			r.count(StateFailed)
			return done(goptuna.TrialStatePruned)
		default:
			attrs[attrState], attrs[attrReason] = StateInterrupted, err.Error()
			return errors.Join(fmt.Errorf("trial %d: launch: %w", number, err),
				done(goptuna.TrialStateFail))
		}
	}
	facts, _ := json.Marshal(srv.Facts)
	attrs[attrFacts] = string(facts)
	// What the engine reported sharpens the predictions for later proposals.
	r.st.Observe(cfg.Params, srv.Facts.MaxTotalNumTokens, srv.Facts.MaxRunningRequests)
	r.printf("trial %d ready in %.1fs: max_running_requests=%d max_total_num_tokens=%d\n",
		number, srv.Facts.StartupS, srv.Facts.MaxRunningRequests, srv.Facts.MaxTotalNumTokens)

	// The engine may cap running requests below what was asked (seed rule
	// 1); it says so in its log, per DP worker.
	if req := srv.Facts.RequestedMaxRunningRequests; req > 0 && srv.Facts.MaxRunningRequests > 0 &&
		srv.Facts.MaxRunningRequests < req && r.st.OnLimitsReduced != "accept" {
		r.stop(srv)
		attrs[attrState], attrs[attrClass] = StateFailed, ClassLimitsReduced
		attrs[attrReason] = fmt.Sprintf("the engine reduced max_running_requests from %d to %d (on_limits_reduced: reject)",
			req, srv.Facts.MaxRunningRequests)
		r.printf("trial %d rejected after startup: %s\n", number, attrs[attrReason])
		r.count(StateFailed)
		return done(goptuna.TrialStatePruned)
	}

	mctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-srv.Exited():
			cancel()
		case <-mctx.Done():
		}
	}()
	target := objective.Target{URL: srv.URL, Model: r.servedModel(), APIKey: r.apiKey}
	res, merr := objective.Run(mctx, target, r.st.Workload, objective.Options{
		Progress: func(line string) { r.printf("trial %d   %s\n", number, line) },
	})
	cancel()
	if merr != nil {
		// Requests fail the moment the engine dies, usually before the
		// process has finished writing its traceback and exited; give it a
		// moment so the failure is classified from its exit, not as a
		// measurement error.
		select {
		case <-srv.Exited():
		case <-time.After(crashGrace):
		}
	}
	crashed := srv.Failure()
	if merr != nil && errors.Is(merr, objective.ErrHang) && crashed == nil {
		srv.MarkHang()
	}
	r.stop(srv)
	if crashed == nil {
		crashed = srv.Failure()
	}
	if res != nil {
		if err := r.store.SavePoints(id, res.Points); err != nil {
			return fmt.Errorf("trial %d: save points: %w", number, err)
		}
		// Per-request records let goodput be rescored without relaunching.
		if err := r.store.SaveRequests(id, requestRecords(res.Requests)); err != nil {
			return fmt.Errorf("trial %d: save requests: %w", number, err)
		}
		rj, _ := json.Marshal(struct {
			Medians map[int]objective.Median `json:"medians"`
			Quality *objective.Quality       `json:"quality,omitempty"`
		}{res.Medians, res.Quality})
		attrs[attrResult] = string(rj)
	}
	switch {
	case crashed != nil:
		r.recordFailure(attrs, crashed)
		r.printf("trial %d failed during measurement: %s: %s\n", number, crashed.Class, attrs[attrReason])
		r.count(StateFailed)
		return done(goptuna.TrialStatePruned)
	case ctx.Err() != nil:
		r.printf("trial %d interrupted; it will be retried on the next run\n", number)
		attrs[attrState], attrs[attrReason] = StateInterrupted, "interrupted during measurement"
		return done(goptuna.TrialStateFail)
	case merr != nil:
		class := ClassMeasurement
		if errors.Is(merr, objective.ErrHang) {
			class = launcher.ClassHang
		} else if errors.Is(merr, objective.ErrQuality) {
			class = ClassQuality
		} else if errors.Is(merr, objective.ErrFailedRequests) {
			class = ClassRequestsFailed
		}
		attrs[attrState], attrs[attrClass], attrs[attrReason] = StateFailed, class, merr.Error()
		r.printf("trial %d failed: %s: %v\n", number, class, merr)
		r.count(StateFailed)
		return done(goptuna.TrialStatePruned)
	}

	value, ok, why := objective.Score(r.st.Score, res)
	attrs[attrState] = StateComplete
	attrs[attrScore] = strconv.FormatFloat(value, 'g', -1, 64)
	attrs[attrScoreOK] = strconv.FormatBool(ok)
	attrs[attrScoreReason] = why
	if err := r.store.SetTrialValue(id, reported(value, ok)); err != nil {
		return err
	}
	verdict := "meets the SLO"
	if !ok {
		verdict = "does not count: " + why
	}
	r.printf("trial %d complete: score %.1f (%s)\n", number, value, verdict)
	r.count(StateComplete)
	return done(goptuna.TrialStateComplete)
}

// reported is the value the sampler sees: a trial that misses its SLO or a
// gate ranks below every trial that meets it.
func reported(value float64, ok bool) float64 {
	if ok {
		return value
	}
	return 0
}

func (r *runner) recordFailure(attrs map[string]string, f *launcher.Failure) {
	attrs[attrState] = StateFailed
	attrs[attrClass] = f.Class
	attrs[attrExitCode] = strconv.Itoa(f.ExitCode)
	attrs[attrExcerpt] = f.Excerpt
	attrs[attrLogTail] = f.Tail
	attrs[attrReason] = f.Reason
	if f.Reason == "" {
		attrs[attrReason] = firstLine(f.Excerpt)
	}
}

func (r *runner) count(state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch state {
	case StateComplete:
		r.sum.Complete++
		r.sum.Launched++
	case StateFailed:
		r.sum.Failed++
		r.sum.Launched++
	}
}

// stop tears the server down, at once when the run is aborted.
func (r *runner) stop(srv *launcher.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if r.opt.Abort != nil {
		go func() {
			select {
			case <-r.opt.Abort:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	_ = srv.Stop(ctx)
}

// heartbeat proves the trial's owner alive until the returned func is called.
func (r *runner) heartbeat(id int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.store.KeepAlive(ctx, id, heartbeatEvery)
	}()
	return func() { cancel(); <-done }
}

func (r *runner) servedModel() string {
	if r.st.ServedModelName != "" {
		return r.st.ServedModelName
	}
	return r.st.Model
}

// replay suggests the stored values of an interrupted trial, so its retry
// runs the same config.
type replay struct {
	*goptuna.Trial
	store interface {
		SetTrialParam(int, string, float64, interface{}) error
	}
	id     int
	params map[string]interface{}
}

func (p *replay) set(name string, internal float64, dist interface{}) error {
	return p.store.SetTrialParam(p.id, name, internal, dist)
}

// SuggestStepInt implements space.Suggester.
func (p *replay) SuggestStepInt(name string, low, high, step int) (int, error) {
	if v, ok := p.params[name].(int); ok {
		return v, p.set(name, float64(v), goptuna.StepIntUniformDistribution{Low: low, High: high, Step: step})
	}
	return p.Trial.SuggestStepInt(name, low, high, step)
}

// SuggestFloat implements space.Suggester.
func (p *replay) SuggestFloat(name string, low, high float64) (float64, error) {
	if v, ok := p.params[name].(float64); ok {
		return v, p.set(name, v, goptuna.UniformDistribution{Low: low, High: high})
	}
	return p.Trial.SuggestFloat(name, low, high)
}

// SuggestLogFloat implements space.Suggester.
func (p *replay) SuggestLogFloat(name string, low, high float64) (float64, error) {
	if v, ok := p.params[name].(float64); ok {
		return v, p.set(name, v, goptuna.LogUniformDistribution{Low: low, High: high})
	}
	return p.Trial.SuggestLogFloat(name, low, high)
}

// SuggestDiscreteFloat implements space.Suggester.
func (p *replay) SuggestDiscreteFloat(name string, low, high, q float64) (float64, error) {
	if v, ok := p.params[name].(float64); ok {
		return v, p.set(name, v, goptuna.DiscreteUniformDistribution{Low: low, High: high, Q: q})
	}
	return p.Trial.SuggestDiscreteFloat(name, low, high, q)
}

// SuggestCategorical implements space.Suggester.
func (p *replay) SuggestCategorical(name string, choices []string) (string, error) {
	if v, ok := p.params[name].(string); ok {
		for i, c := range choices {
			if c == v {
				return v, p.set(name, float64(i), goptuna.CategoricalDistribution{Choices: choices})
			}
		}
	}
	return p.Trial.SuggestCategorical(name, choices)
}

// requestRecords converts the load generator's per-request records for storage,
// numbering requests within their point.
func requestRecords(in []objective.RequestRecord) []storage.RequestRecord {
	out := make([]storage.RequestRecord, len(in))
	type key struct {
		phase     string
		c, r, ctx int
	}
	idx := map[key]int{}
	for i, q := range in {
		k := key{q.Phase, q.Concurrency, q.Repeat, q.Context}
		out[i] = storage.RequestRecord{
			Phase: q.Phase, Concurrency: q.Concurrency, Repeat: q.Repeat, Context: q.Context, Index: idx[k],
			TTFT: q.TTFT, Latency: q.Latency, OutputTokens: q.OutputTokens, OK: q.OK, Error: q.Error,
		}
		idx[k]++
	}
	return out
}

// trialTag is the environment entry that marks a trial's server processes.
func trialTag(study string, number int) string {
	return fmt.Sprintf("SGTUNE_TRIAL=%s/%d", safeName(study), number)
}

func gpuList(gpus []int) string {
	if len(gpus) == 0 {
		return "(default)"
	}
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
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
	defer func() {
		// Whatever broke (storage, the sampler), the trial must not stay
		// RUNNING: mark it to be retried. Finished trials refuse the write.
		if err != nil {
			r.printf("trial %d: %v\n", number, err)
			_ = r.finish(id, goptuna.TrialStateFail, map[string]string{
				attrState: StateInterrupted, attrReason: err.Error(),
			})
		}
	}()
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
		if winner, lost := r.retryTaken(id, number, retry.Number); lost {
			// Another process resumed the same study and re-runs this
			// trial already; the lower trial number wins.
			r.printf("trial %d not launched: trial %d already re-runs trial %d\n", number, winner, retry.Number)
			return false, r.finish(id, goptuna.TrialStateFail, map[string]string{
				attrState:  StateDuplicate,
				attrReason: fmt.Sprintf("trial %d already re-runs trial %d", winner, retry.Number),
			})
		}
		sg = &replay{params: retry.Params, next: trial, set: func(name string, v float64, d interface{}) error {
			return r.store.SetTrialParam(id, name, v, d)
		}}
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
	key := configKey(cfg)
	_ = r.store.SetTrialUserAttr(id, attrConfig, string(cfgJSON))
	_ = r.store.SetTrialUserAttr(id, attrConfigKey, key)
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
		prev, ok := r.sameConfig(id, key)
		switch {
		case ok && prev.State == StateFailed:
			r.skips.Add(1)
			reason := fmt.Sprintf("same config as trial %d, which failed with %s", prev.Number, prev.FailureClass)
			r.printf("trial %d not launched [%s]: %s\n", number, label, reason)
			r.fail(id, StateInfeasible, ClassKnownBadConfig, reason)
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

// sameConfig finds another trial with the same command line that completed,
// is running, or failed in a way that recurs: launching it again would only
// spend GPU time to learn the same thing.
func (r *runner) sameConfig(id int, key string) (Record, bool) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return Record{}, false
	}
	for _, rec := range recs {
		if rec.ID == id || rec.ConfigKey != key {
			continue
		}
		if rec.State == StateComplete || rec.State == StateRunning ||
			(rec.State == StateFailed && deterministicClasses[rec.FailureClass]) {
			return rec, true
		}
	}
	return Record{}, false
}

// retryTaken reports whether a trial other than this one, with a lower
// number, already re-runs the interrupted trial orig.
func (r *runner) retryTaken(id, number, orig int) (winner int, lost bool) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return 0, false
	}
	for _, rec := range recs {
		if rec.ID != id && rec.RetryOf != nil && *rec.RetryOf == orig && rec.Number < number && rec.State != StateDuplicate {
			return rec.Number, true
		}
	}
	return 0, false
}

// configKey identifies a config by what would be launched: its flags and
// environment. Two sampled points that resolve to the same command line
// (a log-scale int drawn as 3.7 and 4.2, say) are the same config.
func configKey(cfg *space.Config) string {
	var b strings.Builder
	b.WriteString(strings.Join(cfg.Flags, " "))
	for _, k := range sortedKeys(cfg.Env) {
		fmt.Fprintf(&b, " %s=%s", k, cfg.Env[k])
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
	_ = r.store.SetTrialUserAttr(id, attrGPUs, gpuCSV(gpus))

	stopBeat := r.heartbeat(id)
	defer stopBeat()

	spec := launcher.Spec{
		Argv:           argv,
		GPUs:           gpus,
		LogPath:        logPath,
		StartupTimeout: r.st.Launch.StartupTimeout,
		APIKey:         r.apiKey,
		Abort:          r.opt.Abort,
	}
	// The tag lets a later run find and kill this server if sgtune dies
	// without taking it down. cfg.Env already holds engine.env.
	spec.Env = append(spec.Env, r.trialTag(number))
	for _, k := range sortedKeys(cfg.Env) {
		spec.Env = append(spec.Env, k+"="+cfg.Env[k])
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
	r.observe(cfg.Params, srv.Facts)
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
	if merr != nil && ctx.Err() == nil {
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
	case merr != nil && ctx.Err() != nil:
		// Only a measurement the interrupt cut short is retried; one that
		// finished before Ctrl-C (say, during teardown) is scored below.
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

// stop tears the server down; the spec's Abort channel (second Ctrl-C)
// makes the launcher skip the grace period.
func (r *runner) stop(srv *launcher.Server) {
	_ = srv.Stop(context.Background())
}

// heartbeat proves the trial's owner alive until the returned func is
// called. A failed beat (a busy database) is retried; only a trial another
// process has taken over ends it.
func (r *runner) heartbeat(id int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			err := r.store.KeepAlive(ctx, id, heartbeatEvery)
			if err == nil || errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(heartbeatEvery):
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (r *runner) servedModel() string {
	if r.st.ServedModelName != "" {
		return r.st.ServedModelName
	}
	return r.st.Model
}

// replay suggests stored values: the params of an interrupted trial for its
// retry, or of any stored trial to rebuild its config. set, when not nil,
// records each value on the new trial; a param without a stored value goes
// to next, or is an error when next is nil.
type replay struct {
	params map[string]interface{}
	next   space.Suggester
	set    func(name string, internal float64, dist interface{}) error
}

var errNoStoredValue = errors.New("no stored value")

func (p *replay) use(name string, internal float64, dist interface{}) error {
	if p.set == nil {
		return nil
	}
	return p.set(name, internal, dist)
}

// SuggestStepInt implements space.Suggester.
func (p *replay) SuggestStepInt(name string, low, high, step int) (int, error) {
	if v, ok := p.params[name].(int); ok {
		return v, p.use(name, float64(v), goptuna.StepIntUniformDistribution{Low: low, High: high, Step: step})
	}
	if p.next == nil {
		return 0, fmt.Errorf("%s: %w", name, errNoStoredValue)
	}
	return p.next.SuggestStepInt(name, low, high, step)
}

// SuggestFloat implements space.Suggester.
func (p *replay) SuggestFloat(name string, low, high float64) (float64, error) {
	if v, ok := p.params[name].(float64); ok {
		return v, p.use(name, v, goptuna.UniformDistribution{Low: low, High: high})
	}
	if p.next == nil {
		return 0, fmt.Errorf("%s: %w", name, errNoStoredValue)
	}
	return p.next.SuggestFloat(name, low, high)
}

// SuggestLogFloat implements space.Suggester.
func (p *replay) SuggestLogFloat(name string, low, high float64) (float64, error) {
	if v, ok := p.params[name].(float64); ok {
		return v, p.use(name, v, goptuna.LogUniformDistribution{Low: low, High: high})
	}
	if p.next == nil {
		return 0, fmt.Errorf("%s: %w", name, errNoStoredValue)
	}
	return p.next.SuggestLogFloat(name, low, high)
}

// SuggestDiscreteFloat implements space.Suggester.
func (p *replay) SuggestDiscreteFloat(name string, low, high, q float64) (float64, error) {
	if v, ok := p.params[name].(float64); ok {
		return v, p.use(name, v, goptuna.DiscreteUniformDistribution{Low: low, High: high, Q: q})
	}
	if p.next == nil {
		return 0, fmt.Errorf("%s: %w", name, errNoStoredValue)
	}
	return p.next.SuggestDiscreteFloat(name, low, high, q)
}

// SuggestCategorical implements space.Suggester.
func (p *replay) SuggestCategorical(name string, choices []string) (string, error) {
	if v, ok := p.params[name].(string); ok {
		for i, c := range choices {
			if c == v {
				return v, p.use(name, float64(i), goptuna.CategoricalDistribution{Choices: choices})
			}
		}
	}
	if p.next == nil {
		return "", fmt.Errorf("%s: %w", name, errNoStoredValue)
	}
	return p.next.SuggestCategorical(name, choices)
}

// observe feeds a launched config's startup facts to the space's predictions.
func (r *runner) observe(p space.Params, f launcher.Facts) {
	_ = r.st.ObserveFacts(p, space.Facts{
		KVTokens: f.MaxTotalNumTokens, MaxRunningRequests: f.MaxRunningRequests, StateSlots: f.MambaCacheSize,
	})
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
// The study's random id keeps two databases holding a study of the same
// name from killing each other's servers.
func (r *runner) trialTag(number int) string {
	return fmt.Sprintf("SGTUNE_TRIAL=%s/%s/%d", safeName(r.st.Name), r.uid, number)
}

// gpuCSV is CUDA_VISIBLE_DEVICES for gpus ("" for none).
func gpuCSV(gpus []int) string {
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

// gpuList is gpuCSV for progress lines.
func gpuList(gpus []int) string {
	if len(gpus) == 0 {
		return "(default)"
	}
	return gpuCSV(gpus)
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

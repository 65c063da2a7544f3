package search

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// deterministicClasses are failures that recur for the same config, so a
// proposal equal to such a trial is rejected without launching it again.
var deterministicClasses = map[string]bool{
	engine.ClassIllegalMemoryAccess: true,
	engine.ClassOOM:                 true,
	engine.ClassStartupCrash:        true,
	engine.ClassCrashed:             true,
	engine.ClassBadCommand:          true,
	engine.ClassModelLoad:           true,
	engine.ClassHang:                true,
	ClassQuality:                    true,
	ClassLimitsReduced:              true,
}

// trialRun is one trial on its way: what was asked, resolved and stored.
type trialRun struct {
	id, number int
	retryOf    *int
	confirmOf  *int // a confirmation run of that trial's config
	// baseline: the engine's default config (budget.baseline), launched
	// as it is and measured in full.
	baseline   bool
	params     space.Params
	label      string // params as k=v, for progress lines
	cfg        *space.Config
	resolveErr error
	start      time.Time
	stopBeat   func()
	done       bool // its final state is stored
	// phase is the measurement phase under way ("C64 r1"), stored with
	// a failure (storage.AttrFailedIn).
	phase string
}

// trial asks for a config, screens it and, when it passes, launches and
// measures it on gpus. An error ends the worker: the storage failed, the
// GPU group must not be used again, or (errBudgetTaken) other processes
// used up the budget first.
func (r *runner) trial(ctx context.Context, gpus []int) (err error) {
	t, err := r.ask()
	if err != nil {
		return err
	}
	defer t.stopBeat()
	defer func() {
		// Whatever broke (a storage write, the sampler), the trial must not
		// stay RUNNING: end it as interrupted with the reason, queued again
		// (the error says when even that failed).
		if err != nil && !t.done {
			err = r.abandon(t, err)
		}
	}()
	if skip, err := r.screen(t); err != nil || skip {
		return err
	}
	if skip, err := r.claimConfig(t); err != nil || skip {
		return err
	}
	if r.confirming {
		// The post-search confirmation (budget.confirm) is outside the
		// budget.
		return r.launch(ctx, t, gpus)
	}
	// The launch is counted against the budget atomically, across every
	// process on the study.
	ok, err := r.store.ClaimLaunch(ctx, t.id, r.budget)
	if err != nil {
		if cancelled(ctx, err) {
			// Ctrl-C came as the launch was claimed (the storage call
			// took the run's context): an interrupt like at any other
			// moment, not a storage failure.
			return r.interruptUnlaunched(t)
		}
		return fmt.Errorf("trial %d: claim a launch: %w", t.number, err)
	}
	if !ok {
		if _, _, err := r.store.InterruptTrial(t.id, StateUnlaunched, errBudgetTaken.Error(), false); err != nil {
			// Still unfinished: abandoned (above) as at any other failure.
			return fmt.Errorf("trial %d: store that it was not launched: %w", t.number, err)
		}
		t.done = true
		return errBudgetTaken
	}
	r.mu.Lock()
	r.launched++
	r.mu.Unlock()
	return r.launch(ctx, t, gpus)
}

// cancelled reports whether err is the run's own cancellation (Ctrl-C)
// seen by a storage call that takes ctx, rather than a failure.
func cancelled(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// interruptUnlaunched ends a trial that Ctrl-C stopped before its launch
// as interrupted, queued to run again first, as a trial the interrupt
// stops later is.
func (r *runner) interruptUnlaunched(t *trialRun) error {
	out := interrupted("interrupted before launch")
	if _, _, err := r.store.InterruptTrial(t.id, out.State, out.Reason, out.Retry); err != nil {
		return fmt.Errorf("trial %d: store its interruption: %w", t.number, err)
	}
	t.done = true
	r.trialEvent(EventFinished, t.number, "%s", out.Line)
	return nil
}

// errNothingQueued ends a worker that runs queued trials only (the
// confirmation runs) once none is left.
var errNothingQueued = errors.New("no queued trial")

// errBudgetTaken ends a worker whose proposal found the budget used up by
// other workers' launches (other processes', or this run's on its other
// GPU groups).
var errBudgetTaken = errors.New("the study's launch budget was spent by other launches (other GPU groups' or other processes') before this proposal could launch; not launched")

// ask takes the next trial: a queued re-run first (atomically claimed, so
// two processes never take the same), else a new trial from the sampler.
func (r *runner) ask() (*trialRun, error) {
	id, queued, err := r.store.ClaimWaitingTrial(r.study.ID)
	if err != nil {
		return nil, fmt.Errorf("claim a queued trial: %w", err)
	}
	if !queued && r.confirming {
		return nil, errNothingQueued
	}
	if !queued {
		if id, err = r.store.CreateNewTrial(r.study.ID); err != nil {
			return nil, fmt.Errorf("create trial: %w", err)
		}
	}
	t := &trialRun{id: id, start: time.Now(), stopBeat: func() {}}
	if t.number, err = r.store.GetTrialNumberFromID(id); err != nil {
		return nil, r.abandonID(id, fmt.Errorf("read trial number: %w", err))
	}
	if err := r.store.SetTrialSystemAttr(id, storage.AttrOwner, r.owner); err != nil {
		return nil, r.abandonID(id, fmt.Errorf("trial %d: record owner: %w", t.number, err))
	}
	t.stopBeat = r.heartbeat(id)
	trial := &goptuna.Trial{Study: r.study, ID: id}
	if !queued {
		// The engine default is the study's first new trial.
		base, err := r.takeBaseline(t.number)
		if err == nil && base {
			err = r.baselineTrial(t, trial)
			if err == nil {
				return t, nil
			}
			err = fmt.Errorf("trial %d: %w", t.number, err)
		}
		if err != nil {
			t.stopBeat()
			return nil, r.abandonID(id, err)
		}
	}
	if queued {
		sys, err := r.store.GetTrialSystemAttrs(id)
		if err != nil {
			t.stopBeat()
			return nil, r.abandonID(id, fmt.Errorf("trial %d: read attributes: %w", t.number, err))
		}
		if n, err := strconv.Atoi(sys[storage.AttrRetryOf]); err == nil {
			t.retryOf = &n
		}
		if n, err := strconv.Atoi(sys[storage.AttrConfirmOf]); err == nil {
			t.confirmOf = &n
		}
		_, t.baseline = sys[storage.AttrBaseline]
		// A retry re-runs the trial it retries (itself possibly a
		// confirmation run); a confirmation run, its original.
		if src := cmp.Or(t.retryOf, t.confirmOf); src != nil {
			ok, err := r.rerun(t, *src)
			if err != nil {
				t.stopBeat()
				return nil, r.abandonID(id, fmt.Errorf("trial %d: take the config of trial %d: %w", t.number, *src, err))
			}
			if ok {
				return t, nil
			}
		}
	} else if err := r.propose(t); err != nil {
		t.stopBeat()
		return nil, r.abandonID(id, fmt.Errorf("trial %d: %w", t.number, err))
	} else if err := trial.CallRelativeSampler(); err != nil {
		// A queued trial takes its stored params (rerun, else
		// fixed_params); only a new trial asks the relative sampler.
		t.stopBeat()
		return nil, r.abandonID(id, fmt.Errorf("trial %d: relative sampler: %w", t.number, err))
	}
	if t.params, err = r.st.Suggest(trial); err != nil {
		t.stopBeat()
		return nil, r.abandonID(id, fmt.Errorf("trial %d: sample: %w", t.number, err))
	}
	t.label = t.params.String()
	t.cfg, t.resolveErr = r.st.Resolve(t.params, r.learned)
	return t, nil
}

// rerun gives a queued re-run t the config trial number launched, from
// what that trial stored: its params, copied with their own distributions,
// and its resolved config (flags, env), or the params resolved again when
// it stopped before storing one. Sampling the re-run instead would decode
// the stored internal params (a choice's index) against the study file's
// current space, which a resumed study may have changed (choices reordered
// or dropped): another config would run under the original's name. ok is
// false when the trial stored no params (it stopped before sampling): the
// re-run then samples like a new trial.
func (r *runner) rerun(t *trialRun, number int) (ok bool, err error) {
	trials, err := r.store.GetAllTrials(r.study.ID)
	if err != nil {
		return false, fmt.Errorf("read trials: %w", err)
	}
	i := slices.IndexFunc(trials, func(ft goptuna.FrozenTrial) bool { return ft.Number == number })
	if i < 0 {
		return false, fmt.Errorf("the study holds no trial %d", number)
	}
	src := trials[i]
	_, baseline := src.SystemAttrs[storage.AttrBaseline]
	if len(src.InternalParams) == 0 && !baseline {
		return false, nil
	}
	for _, name := range slices.Sorted(maps.Keys(src.InternalParams)) {
		if err := r.store.SetTrialParam(t.id, name, src.InternalParams[name], src.Distributions[name]); err != nil {
			return false, fmt.Errorf("store param %s: %w", name, err)
		}
	}
	t.params = storedParams(r.st, src.Params)
	t.label = t.params.String()
	js := src.UserAttrs[storage.AttrConfig]
	if baseline {
		t.label = baselineLabel
	}
	if js == "" && baseline {
		// Stopped before it stored its config: the default again.
		b, err := r.st.Baseline(r.learned)
		if err != nil {
			t.resolveErr = fmt.Errorf("the engine default: %w", err)
			return true, nil
		}
		t.cfg = b.Config
		if len(src.InternalParams) == 0 {
			t.params = b.Config.Params
		}
		return true, nil
	}
	if js == "" {
		t.cfg, t.resolveErr = r.st.Resolve(t.params, r.learned)
		if t.resolveErr != nil {
			t.resolveErr = fmt.Errorf("trial %d's params do not fit the study's space any more, so it is not run again: %w", number, t.resolveErr)
		}
		return true, nil
	}
	var cfg space.Config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		return false, fmt.Errorf("stored config: %w", err)
	}
	if baseline && len(src.InternalParams) == 0 {
		// An engine default outside the space has only its config's
		// params (see Record.InSpace).
		t.params = storedParams(r.st, cfg.Params)
	}
	cfg.Params = t.params
	t.cfg = &cfg
	return true, nil
}

// storedParams types a stored trial's params (goptuna's external form) as
// the space's Suggest would (a bool's "true" becomes true), whatever
// domains the study file gives them now; a value that does not replay (a
// param the file dropped or retyped) stays as stored.
func storedParams(st *space.Study, stored map[string]any) space.Params {
	p := space.Params(maps.Clone(stored))
	if typed, err := st.Suggest(replay(stored)); err == nil {
		maps.Copy(p, typed)
	}
	return p
}

// replay is a space.Suggester that answers with stored values.
type replay map[string]any

func (rp replay) float(name string) (float64, error) {
	switch v := rp[name].(type) {
	case float64:
		return v, nil
	case int:
		return float64(v), nil
	}
	return 0, fmt.Errorf("param %s: stored %v is not a number", name, rp[name])
}

// SuggestStepInt implements space.Suggester.
func (rp replay) SuggestStepInt(name string, _, _, _ int) (int, error) {
	if v, ok := rp[name].(int); ok {
		return v, nil
	}
	return 0, fmt.Errorf("param %s: stored %v is not an int", name, rp[name])
}

// SuggestFloat implements space.Suggester.
func (rp replay) SuggestFloat(name string, _, _ float64) (float64, error) { return rp.float(name) }

// SuggestLogFloat implements space.Suggester.
func (rp replay) SuggestLogFloat(name string, _, _ float64) (float64, error) { return rp.float(name) }

// SuggestDiscreteFloat implements space.Suggester.
func (rp replay) SuggestDiscreteFloat(name string, _, _, _ float64) (float64, error) {
	return rp.float(name)
}

// SuggestCategorical implements space.Suggester.
func (rp replay) SuggestCategorical(name string, _ []string) (string, error) {
	if v, ok := rp[name].(string); ok {
		return v, nil
	}
	return "", fmt.Errorf("param %s: stored %v is not a choice", name, rp[name])
}

// screen stores the config of a proposal and decides whether it is
// launched: not when the engine's rules or the study's constraints reject
// it, or when an earlier trial already measured it, is measuring it, or
// failed with it in a way that recurs. skip is true for such a proposal,
// whose final state screen has stored.
func (r *runner) screen(t *trialRun) (skip bool, err error) {
	if t.resolveErr != nil {
		return true, r.skip(t, StateInfeasible, "resolve", t.resolveErr.Error(), nil)
	}
	if err := r.recordConfig(t); err != nil {
		return false, err
	}
	if rej := r.st.Check(t.cfg); len(rej) > 0 {
		msgs := make([]string, len(rej))
		for i, x := range rej {
			msgs[i] = x.Message
		}
		rj, err := json.Marshal(rej)
		if err != nil {
			return false, err
		}
		return true, r.skip(t, StateInfeasible, rej[0].Rule, strings.Join(msgs, "; "), map[string]string{storage.AttrRejections: string(rj)})
	}
	if t.retryOf != nil || t.confirmOf != nil || t.baseline {
		// A re-run, a confirmation run or the engine default is launched
		// as it is.
		return false, nil
	}
	prev, ok, err := r.sameConfig(t.id, configKey(t.cfg))
	if err != nil || !ok {
		return false, err
	}
	r.mu.Lock()
	r.repeats++
	r.mu.Unlock()
	switch prev.State {
	case StateFailed:
		return true, r.skip(t, StateInfeasible, ClassKnownBadConfig,
			fmt.Sprintf("same config as trial %d, which failed with %s", prev.Number, prev.FailureClass), nil)
	case StatePruned:
		return true, r.skip(t, StateInfeasible, ClassKnownBadConfig,
			fmt.Sprintf("same config as trial %d, which was pruned: %s", prev.Number, prev.Reason), nil)
	case StateRunning:
		// Another worker is measuring this config right now.
		return true, r.skip(t, StateDuplicate, "",
			fmt.Sprintf("same config as trial %d, running at the time; not launched", prev.Number), nil)
	}
	return true, r.duplicate(t, prev)
}

// recordConfig stores what the trial will launch: config, key, engine.
func (r *runner) recordConfig(t *trialRun) error {
	cfgJSON, err := json.Marshal(t.cfg)
	if err != nil {
		return err
	}
	engineJSON, err := json.Marshal(r.st.Engine.Command)
	if err != nil {
		return err
	}
	attrs := map[string]string{
		storage.AttrConfig:     string(cfgJSON),
		storage.AttrConfigKey:  configKey(t.cfg),
		storage.AttrEngine:     string(engineJSON),
		storage.AttrEngineName: r.st.Engine.Name,
	}
	if lc := r.st.Engine.LaunchCommand; len(lc) > 0 {
		b, err := json.Marshal(lc)
		if err != nil {
			return err
		}
		attrs[storage.AttrLaunchCommand] = string(b)
	}
	if v := r.st.Engine.Version; v != "" {
		attrs[storage.AttrEngineVersion] = v
	}
	if v := r.st.ModelRevision; v != "" {
		attrs[storage.AttrModelRevision] = v
	}
	return r.setAttrs(t, attrs)
}

// setAttrs sets user attributes of a running trial, in key order.
func (r *runner) setAttrs(t *trialRun, attrs map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if err := r.store.SetTrialUserAttr(t.id, k, attrs[k]); err != nil {
			return fmt.Errorf("trial %d: store %s: %w", t.number, k, err)
		}
	}
	return nil
}

// skip stores a proposal that is not launched, as PRUNED so the sampler
// learns to avoid its region.
func (r *runner) skip(t *trialRun, state, class, reason string, attrs map[string]string) error {
	r.mu.Lock()
	r.skips++
	if state == StateInfeasible {
		r.sum.Infeasible++
	}
	r.mu.Unlock()
	word := map[string]string{StateInfeasible: "infeasible", StateDuplicate: "not launched"}[state]
	r.emit(Event{Kind: EventSkipped, Trial: t.number, State: state,
		Text: fmt.Sprintf("trial %d %s [%s]: %s", t.number, word, t.label, reason)})
	a := map[string]string{storage.AttrState: state, storage.AttrReason: reason}
	if class != "" {
		a[storage.AttrClass] = class
	}
	maps.Copy(a, attrs)
	return r.finish(t, storage.Finish{State: goptuna.TrialStatePruned, Attrs: a})
}

// duplicate stores a proposal of an already measured config. The sampler
// sees the earlier trial's value (a penalty would teach TPE that the best
// region is bad); reports show it as a duplicate, never as a measurement.
func (r *runner) duplicate(t *trialRun, prev Record) error {
	r.mu.Lock()
	r.skips++
	r.mu.Unlock()
	r.emit(Event{Kind: EventSkipped, Trial: t.number, State: StateDuplicate,
		Text: fmt.Sprintf("trial %d not launched [%s]: same config as trial %d", t.number, t.label, prev.Number)})
	value := 0.0
	if prev.ScoreOK && prev.Score != nil {
		value = *prev.Score
	}
	return r.finish(t, storage.Finish{State: goptuna.TrialStateComplete, Value: &value, Attrs: map[string]string{
		storage.AttrState:  StateDuplicate,
		storage.AttrReason: fmt.Sprintf("same config as trial %d; not launched again", prev.Number),
	}})
}

// sameConfig finds another trial with the same command line that completed,
// is running, or failed in a way that recurs: launching it again would only
// spend GPU time to learn the same thing.
func (r *runner) sameConfig(id int, key string) (Record, bool, error) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return Record{}, false, err
	}
	prev, ok := sameConfigIn(recs, id, key)
	return prev, ok, nil
}

// sameConfigIn is sameConfig over recs for trial id. A running trial
// counts once it claimed its config (Launching, see claimConfig): two
// workers that propose the same config at once each saw the other's trial
// running before either launched, and each skipping it left the config
// never launched (two workers on a space of four configs launched three).
// Which of them launches is claimConfig's to settle.
func sameConfigIn(recs []Record, id int, key string) (Record, bool) {
	for _, rec := range recs {
		if rec.ID == id || rec.ConfigKey != key {
			continue
		}
		if rec.State == StateComplete || rec.State == StatePruned ||
			(rec.State == StateRunning && rec.Launching) ||
			(rec.State == StateFailed && deterministicClasses[rec.FailureClass]) {
			return rec, true
		}
	}
	return Record{}, false
}

// claimConfig claims the trial's config for launching (storage's
// ClaimConfig: atomic across processes): when another running trial holds
// it (two workers proposed one config at once, and each screening saw the
// other still deciding), this one is not launched. Re-runs launch as they
// are.
func (r *runner) claimConfig(t *trialRun) (skip bool, err error) {
	if t.retryOf != nil || t.confirmOf != nil || t.baseline {
		// It runs its config whatever else does; a new proposal of the
		// config meanwhile is its duplicate.
		return false, r.setAttrs(t, map[string]string{storage.AttrLaunching: "1"})
	}
	other, ok, err := r.store.ClaimConfig(context.Background(), t.id, configKey(t.cfg))
	if err != nil {
		return false, fmt.Errorf("trial %d: claim its config: %w", t.number, err)
	}
	if ok {
		return false, nil
	}
	return true, r.skip(t, StateDuplicate, "", fmt.Sprintf("same config as trial %d, running at the time; not launched", other), nil)
}

// configKey identifies a config by what would be launched: its flags and
// environment. Two sampled points that resolve to the same command line
// (a log-scale int drawn as 3.7 and 4.2, say) are the same config.
func configKey(cfg *space.Config) string {
	var b strings.Builder
	b.WriteString(strings.Join(cfg.Flags, " "))
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		fmt.Fprintf(&b, " %s=%s", k, cfg.Env[k])
	}
	return b.String()
}

// launch starts the trial's server on gpus, measures it and stores the
// outcome (an interrupted trial gives its launch back when it ends FAIL).
func (r *runner) launch(ctx context.Context, t *trialRun, gpus []int) error {
	r.mu.Lock()
	r.skips, r.repeats = 0, 0
	r.mu.Unlock()
	kind := r.st.Engine.Kind
	argv := r.st.Argv(t.cfg)
	argvJSON, err := json.Marshal(argv)
	if err != nil {
		return err
	}
	logPath := filepath.Join(r.logDir, fmt.Sprintf("trial-%d.log", t.number))
	if err := r.setAttrs(t, map[string]string{storage.AttrArgv: string(argvJSON), storage.AttrLogPath: logPath, storage.AttrGPUs: gpuCSV(gpus)}); err != nil {
		return err
	}
	// The tag lets a later run find and kill this server if sgtune dies
	// without taking it down. cfg.Env already holds engine.env.
	spec := launcher.Spec{Engine: kind, Argv: argv, GPUs: gpus, LogPath: logPath,
		StartupTimeout: r.st.Launch.StartupTimeout, APIKey: r.apiKey, Abort: r.opt.Abort,
		Env: []string{r.trialTag(t.number)}, Container: r.containerSpec(t.number, gpus)}
	for _, k := range slices.Sorted(maps.Keys(t.cfg.Env)) {
		spec.Env = append(spec.Env, k+"="+t.cfg.Env[k])
	}
	if r.apiKey != "" {
		spec.Argv = append(spec.Argv, kind.APIKeyFlag, r.apiKey)
	}
	if spec.Container != nil {
		if err := r.recordContainer(ctx, t, spec.Container); err != nil {
			return err
		}
	}
	where := "on GPUs " + gpuList(gpus)
	switch {
	case kind.UsesGPUs && r.st.Slurmed():
		where = "as a Slurm job (Slurm picks the node and GPUs)"
	case kind.UsesGPUs:
	case r.st.CPUsPerTrial > 0:
		where = fmt.Sprintf("on %d CPU(s)", r.st.CPUsPerTrial)
	default:
		where = "on the CPUs"
	}
	r.emit(Event{Kind: EventLaunching, Trial: t.number, Phase: "starting",
		Text: fmt.Sprintf("trial %d launching [%s] %s", t.number, t.label, where)})

	var o observed
	attrs := map[string]string{}
	var out outcome
	store := func() error {
		o.interrupted = ctx.Err() != nil
		out = decide(o, r.st.Score)
		return r.record(t, out, o.result, attrs)
	}
	srv, err := r.backend.Start(ctx, spec)
	o.startErr = err
	var stopErr error
	if err == nil {
		var ferr error
		o.result, o.measureErr, o.limits, o.pruned, ferr = r.measure(ctx, t, srv, attrs)
		if ferr == nil && o.limits == "" && (o.measureErr == nil || o.pruned != "") && !failedYet(srv) {
			// A finished (or pruned) measurement of a server still up is
			// stored before the teardown, which may wait minutes for the
			// GPUs to be released: a tuner killed meanwhile keeps the
			// trial, and the stopping mark has the next run kill what its
			// server left (reapEnded).
			attrs[storage.AttrStopping] = "1"
			ferr = store()
			_, stopErr = srv.Stop(context.Background())
			if ferr == nil && stopErr == nil {
				if err := r.store.AnnotateTrial(t.id, storage.AttrStopping, ""); err != nil {
					return fmt.Errorf("trial %d: store that its server stopped: %w", t.number, err)
				}
			}
		} else {
			// A failed measurement is classified by how the server
			// ended (a crash, a hang): stop it first.
			o.crash, stopErr = srv.Stop(context.Background())
		}
		if ferr != nil {
			return errors.Join(ferr, stopErr)
		}
	}
	if lerr := serverLogErr(srv, o.startErr); lerr != nil {
		r.logIncomplete(t, logPath, lerr, attrs)
	}
	if !t.done {
		if err := store(); err != nil {
			return errors.Join(err, stopErr)
		}
	}
	r.mu.Lock()
	if out.Unlaunchable {
		r.unlaunchable++
	} else {
		r.unlaunchable = 0
	}
	n := r.unlaunchable
	r.mu.Unlock()
	if n >= maxUnlaunchable {
		return fmt.Errorf("%d trials in a row could not be launched, the last (trial %d): %w; fix that and run the same command again (its trials are re-run first)",
			n, t.number, o.startErr)
	}
	if stopErr != nil {
		return fmt.Errorf("GPU group %s: the server of trial %d could not be stopped cleanly: %w; no more trials run on this group",
			gpuList(gpus), t.number, stopErr)
	}
	return nil
}

// logErrer is a Running that can tell why its log file is short (the
// real backends; bench-search's simulated servers write no log file).
type logErrer interface{ LogErr() error }

var _, _ logErrer = (*process)(nil), (*slurmJob)(nil)

// serverLogErr is the error that cut a trial's server log short: the
// stopped server's, where its backend can tell, else a failed start's.
func serverLogErr(srv Running, startErr error) error {
	if l, ok := srv.(logErrer); ok {
		return l.LogErr()
	}
	var f *launcher.Failure
	if errors.As(startErr, &f) {
		return f.LogErr
	}
	return nil
}

// logIncomplete tells the user that the trial's server log lacks lines (a
// full disk, a failed close) and stores why on the trial, with its outcome
// or, when that is stored already, after it. The measurement stands.
func (r *runner) logIncomplete(t *trialRun, logPath string, lerr error, attrs map[string]string) {
	r.trialEvent(EventNote, t.number, "server log %s is incomplete: %v", logPath, lerr)
	if !t.done {
		attrs[storage.AttrLogError] = lerr.Error()
		return
	}
	if err := r.store.AnnotateTrial(t.id, storage.AttrLogError, lerr.Error()); err != nil {
		r.trialEvent(EventNote, t.number, "could not store that its server log is incomplete: %v", err)
	}
}

// failedYet reports whether a running server already shows a failure
// (it exited on its own after its last answer), where its backend can
// tell before Stop.
func failedYet(srv Running) bool {
	f, ok := srv.(interface{ Failure() *launcher.Failure })
	return ok && f.Failure() != nil
}

// measure observes the started server's facts, refuses one whose limits
// the engine reduced (limits says why), and runs the workload, stopping it
// early when a level shows the trial cannot come near the best (pruned
// says why). ferr is a failure to store what was observed, or to read
// what pruning compares with.
func (r *runner) measure(ctx context.Context, t *trialRun, srv Running, attrs map[string]string) (res *objective.Result, merr error, limits, pruned string, ferr error) {
	facts := srv.Facts()
	fj, err := json.Marshal(facts)
	if err != nil {
		return nil, nil, "", "", err
	}
	attrs[storage.AttrFacts] = string(fj)
	// What the engine reported sharpens the predictions for later proposals.
	if o, ok := r.st.Observe(t.cfg, facts); ok {
		r.learned.add(o)
	}
	ready := fmt.Sprintf("trial %d ready in %.1fs", t.number, facts.StartupS)
	// Only what the engine reported: vLLM's log, say, names no running cap.
	var got []string
	if facts.MaxRunningRequests > 0 {
		got = append(got, fmt.Sprintf("max_running_requests=%d", facts.MaxRunningRequests))
	}
	if facts.MaxTotalNumTokens > 0 {
		got = append(got, fmt.Sprintf("max_total_num_tokens=%d", facts.MaxTotalNumTokens))
	}
	if len(got) > 0 {
		ready += ": " + strings.Join(got, " ")
	}
	r.emit(Event{Kind: EventReady, Trial: t.number, Phase: "ready", Text: ready})
	if why := limitsReduced(facts, r.st.OnLimitsReduced); why != "" {
		return nil, nil, why, "", nil
	}
	// A rate search stops a config that fails at half the best max_rate
	// so far (multi-fidelity, as the levels' pruning does for tok/s).
	floor := 0.0
	if r.st.Score.Metric == objective.MetricMaxRate && t.confirmOf == nil && !t.baseline && r.st.Budget.Prune.Rule != "off" {
		r.mu.Lock()
		if r.best != nil {
			floor = *r.best / 2
		}
		r.mu.Unlock()
	}
	res, merr = srv.Measure(ctx, r.st.Workload, objective.Options{
		MaxRunning: facts.MaxRunningRequests,
		RateFloor:  floor,
		Progress: func(line string) {
			r.emit(Event{Kind: EventPoint, Trial: t.number, Text: fmt.Sprintf("trial %d   %s", t.number, line)})
		},
		Point: func(p objective.Point) {
			r.emit(Event{Kind: EventPoint, Trial: t.number, TokS: p.OutputTokS, Phase: fmt.Sprintf("C%d r%d", p.Concurrency, p.Repeat)})
		},
		Phase: func(phase string) {
			t.phase = phase
			r.emit(Event{Kind: EventPhase, Trial: t.number, Phase: phase, Text: fmt.Sprintf("trial %d   %s", t.number, phase)})
		},
		AfterLevel: func(conc int, pts []objective.Point) error {
			if t.confirmOf != nil || t.baseline || !prunesAt(r.st, conc) {
				// A confirmation run measures its config in full: pruned, it
				// would pool as a 0 and decide the winner on noise. So does
				// the engine default, which every winner is held against.
				return nil
			}
			recs, err := levelRecords(r.store, r.st.Name)
			if err != nil {
				// The storage failed, not the config: the measurement
				// stops and the trial is abandoned (queued again) like at
				// any other storage failure, never stored as failed.
				ferr = fmt.Errorf("trial %d: read the study's trials to decide whether to prune it: %w", t.number, err)
				return ferr
			}
			why, kept := levelPrune(r.st.Budget.Prune, conc, pts, levelRefs(recs, conc))
			if kept != "" {
				r.trialEvent(EventNote, t.number, "%s", kept)
			}
			if why != "" {
				pruned = why
				return errPruned
			}
			return nil
		},
	})
	if ferr != nil {
		return res, merr, "", "", ferr
	}
	if pruned != "" && errors.Is(merr, errPruned) {
		return res, merr, "", pruned, nil
	}
	if errors.Is(merr, objective.ErrRatePruned) {
		return res, merr, "", merr.Error(), nil
	}
	return res, merr, "", "", nil
}

// levelRecords reads the trials a level's pruning compares with (Records;
// a test makes it fail).
var levelRecords = Records

// record stores a launched trial's outcome in one transaction (an
// interrupted one is queued again) and reports it.
func (r *runner) record(t *trialRun, out outcome, res *objective.Result, attrs map[string]string) error {
	attrs[storage.AttrDurationS] = strconv.FormatFloat(time.Since(t.start).Seconds(), 'f', 1, 64)
	attrs[storage.AttrState] = out.State
	if out.Reason != "" {
		attrs[storage.AttrReason] = out.Reason
	}
	if out.Class != "" {
		attrs[storage.AttrClass] = out.Class
	}
	if f := out.Failure; f != nil {
		attrs[storage.AttrExitCode] = strconv.Itoa(f.ExitCode)
		attrs[storage.AttrLogExcerpt] = f.Excerpt
		attrs[storage.AttrLogTail] = f.Tail
	}
	if out.Score != nil {
		attrs[storage.AttrScore] = strconv.FormatFloat(*out.Score, 'g', -1, 64)
		attrs[storage.AttrScoreOK] = strconv.FormatBool(out.ScoreOK)
	}
	if out.ScoreReason != "" {
		attrs[storage.AttrScoreReason] = out.ScoreReason
	}
	if out.State == StateFailed && t.phase != "" {
		attrs[storage.AttrFailedIn] = t.phase
	}
	fin := storage.Finish{State: out.Final, Value: out.Value, Attrs: attrs}
	if res != nil {
		rj, err := json.Marshal(struct {
			Medians map[int]objective.Median `json:"medians"`
			Quality *objective.Quality       `json:"quality,omitempty"`
		}{res.Medians, res.Quality})
		if err != nil {
			return err
		}
		attrs[storage.AttrResult] = string(rj)
		fin.Points = res.Points
		if fin.Points == nil {
			fin.Points = []objective.Point{}
		}
		// Per-request records let goodput be rescored without relaunching.
		fin.Requests = requestRecords(res.Requests)
		if mean, n := promptTokens(res.Requests); n > 0 {
			attrs[storage.AttrPromptTokens] = strconv.FormatFloat(mean, 'f', 2, 64)
			r.learned.addPrompts(mean, n)
		}
	}
	fin.Retry = out.Retry
	if err := r.finish(t, fin); err != nil {
		return err
	}
	if out.Retry {
		r.emit(Event{Kind: EventFinished, Trial: t.number, State: out.State, Text: fmt.Sprintf("trial %d %s", t.number, out.Line)})
		return nil
	}
	r.mu.Lock()
	if t.confirmOf != nil {
		// A confirmation run is outside the budget and the search's counts.
		r.sum.Confirmations++
		if RanToEnd(out.State) {
			r.confirmed++
		}
		r.mu.Unlock()
		r.emit(Event{Kind: EventFinished, Trial: t.number, State: out.State, Score: out.Score,
			Text: fmt.Sprintf("trial %d (confirms trial %d) %s", t.number, *t.confirmOf, out.Line)})
		return nil
	}
	switch out.State {
	case StateComplete:
		r.sum.Complete++
		if out.ScoreOK && out.Score != nil && (r.best == nil || *out.Score > *r.best) {
			s := *out.Score
			r.best = &s
		}
		switch {
		case out.ScoreOK && t.baseline:
			r.baselineMeasured = true
		case out.ScoreOK:
			r.measured[configKey(t.cfg)] = true
		}
	case StateFailed:
		r.sum.Failed++
	case StatePruned:
		r.sum.Pruned++
	}
	r.sum.Launched++
	r.mu.Unlock()
	r.emit(Event{Kind: EventFinished, Trial: t.number, State: out.State, Score: out.Score,
		Text: fmt.Sprintf("trial %d %s", t.number, out.Line)})
	return nil
}

// finish stores a trial's end; on failure the trial is ended as
// interrupted with the reason, and the error is returned.
func (r *runner) finish(t *trialRun, f storage.Finish) error {
	if err := r.store.FinishTrial(t.id, f); err != nil {
		return r.abandon(t, fmt.Errorf("trial %d: store its end: %w", t.number, err))
	}
	t.done = true
	return nil
}

// abandon ends a trial whose walk failed (a storage write, the sampler) as
// interrupted with the reason and queues it again; it returns err, with
// the failure to do even that when the storage is down.
func (r *runner) abandon(t *trialRun, err error) error {
	t.done = true
	return r.abandonID(t.id, err)
}

func (r *runner) abandonID(id int, err error) error {
	_, _, ierr := r.store.InterruptTrial(id, StateInterrupted, err.Error(), true)
	r.emit(Event{Kind: EventFinished, Trial: -1, State: StateInterrupted, Text: fmt.Sprintf("error: %v", err)})
	if ierr != nil {
		return errors.Join(err, fmt.Errorf("mark the trial interrupted: %w", ierr))
	}
	return err
}

// heartbeat proves the trial's owner alive until the returned func is
// called. A failed beat (a busy database) is retried; only a trial another
// process has taken over ends it.
func (r *runner) heartbeat(id int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // owned by the trial: ends when stop is called
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

// relearn feeds a stored trial's startup facts and counted prompt sizes
// back into the predictor (on resume).
func (r *runner) relearn(rec Record) {
	if len(rec.Facts) > 0 && len(rec.Config) > 0 {
		var f engine.Facts
		var cfg space.Config
		if json.Unmarshal(rec.Facts, &f) == nil && json.Unmarshal(rec.Config, &cfg) == nil {
			if o, ok := r.st.Observe(&cfg, f); ok {
				r.learned.add(o)
			}
		}
	}
	if rec.PromptTokens > 0 {
		r.learned.addPrompts(rec.PromptTokens, 1)
	}
}

// promptTokens is the mean prompt size the server counted over the
// requests that reported one.
func promptTokens(recs []objective.RequestRecord) (mean float64, n int) {
	sum := 0
	for _, q := range recs {
		if q.PromptTokens > 0 {
			sum += q.PromptTokens
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(sum) / float64(n), n
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

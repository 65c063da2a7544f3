// Package search runs the study loop: it asks the sampler for parameters,
// rejects infeasible configs before launch, launches and measures the rest on
// GPU groups in parallel, stores every trial, and resumes interrupted studies
// through the storage's atomic trial claiming.
package search

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// Options configure one run of a study.
type Options struct {
	Study *space.Study
	Store *storage.Store
	// Backend starts trials' servers; nil means real processes (Processes).
	Backend Backend
	LogDir  string        // per-trial server logs go to LogDir/<study>/trial-N.log
	Trials  int           // launched-trial budget for the whole study; 0 = the study's
	Timeout time.Duration // stop starting trials after this long; 0 = the study's
	// Parallel is how many trials run at once, at most one per GPU group;
	// 0 = the study's, else 1.
	Parallel int
	Getenv   func(string) string
	// Abort, when closed, tears running servers down at once (second Ctrl-C).
	Abort <-chan struct{}
	// Preflight is Check's result when the caller already ran it.
	Preflight *Preflight
	// Events receives progress, one call at a time; nil discards it.
	Events func(Event)
	// Name tells this run apart from others of the same process in the
	// storage (tests, or several workers in one process); "" for none.
	Name string
	// Worker marks one of many processes sharing the study (sgtune
	// worker): once the budget is spent it waits while other processes'
	// trials run, and re-runs those whose process died, before returning.
	Worker bool
	// Turns, when set, is told as each worker (one per GPU group) begins
	// and ends its part of the run: bench-search runs a study's workers in
	// a fixed order of turns so that a study with parallel GPU groups is
	// reproducible in virtual time. Nil: the workers run freely, as they
	// do on real GPUs.
	Turns Turns
}

// Turns orders a run's workers (Options.Turns). A worker joins before it
// asks for its first trial and leaves when it returns; between the two,
// the Backend it launches through decides when it goes on.
type Turns interface {
	// Join blocks until worker w of n (its GPU group's index) may begin;
	// an error (ctx's end) ends the worker before it asks for a trial.
	Join(ctx context.Context, w, n int) error
	// Leave says worker w returned.
	Leave(w int)
}

// Summary is what a run did.
type Summary struct {
	Study    string
	Launched int // trials the search launched in this run (counted against the budget)
	// Confirmations are the runs that measured the top configs again.
	Confirmations int
	Complete      int
	Failed        int
	Pruned        int
	Infeasible    int
	Interrupted   bool // the run was stopped before its budget was spent
	// Best is the declared winner's trial when the study declared one (see
	// Winner), else the best complete trial so far.
	Best    *Record
	Winner  *Winner
	Records []Record
}

// maxSkips bounds consecutive proposals that launch nothing (infeasible,
// duplicates) before the run gives up: the space is then mostly infeasible.
const maxSkips = 200

// heartbeatEvery is how often a running trial proves its owner alive;
// staleAfter is the default stale window (see staleWindow): how long its
// trials and leases outlive a silent owner; maxRetries bounds how often
// one config is re-run after interruptions.
const (
	heartbeatEvery = 10 * time.Second
	staleAfter     = 2 * time.Minute
	maxRetries     = 3
)

// maxUnlaunchable consecutive trials that could not be launched, though no
// server failed (a log directory that cannot be written, a command the
// backend cannot run), stop a GPU group: the cause is the machine's, and
// each retry met it at once (a run queued 2,700 retries in 5 minutes).
const maxUnlaunchable = 3

type runner struct {
	opt     Options
	st      *space.Study
	store   *storage.Store
	backend Backend
	study   *goptuna.Study
	learned *predictor
	// model is the "bayes" sampler's model of the space, built on first
	// use.
	model     *model
	modelErr  error
	modelOnce sync.Once
	owner     string // host:pid, stored with every trial this process runs
	host      string
	apiKey    string
	uid       string // the study's random id, part of every server's tag
	// containers is the container runtime's client (engine.container),
	// made on first use; see containerClient.
	containers *container.Client
	logDir     string // where its trials' logs go (see studyLogDir)
	// spaceSize is the number of distinct configs (0 = unknown, e.g.
	// continuous params); once every one was tried, the study is done.
	spaceSize int
	// gridSize is the number of grid points (sampler grid; else 0): once
	// every one was proposed, the study is done.
	gridSize int
	// grid is the preflight's grid points, for open's sampler (nil: open
	// builds them); dropped once the sampler holds them.
	grid     []map[string]float64
	deadline time.Time

	eventsMu sync.Mutex // one Events call at a time

	mu sync.Mutex
	// held are the GPU groups (lease resources) this process's workers
	// hold, so that two of them never take the same group (see leaseGroup).
	held     map[string]bool
	launched int // launched trials in the study (complete, failed, pruned), all runs
	budget   int
	parallel int // trials in flight at once: the run's slots
	// measured are the configs (ConfigKey) the search measured complete,
	// meeting the SLO: those the confirmation step may pick from.
	measured map[string]bool
	best     *float64
	skips    int // consecutive proposals that launched nothing
	repeats  int // consecutive proposals that repeated a known config
	// unlaunchable counts consecutive trials that could not be launched
	// for a reason that is not the server's (see maxUnlaunchable).
	unlaunchable int
	sum          Summary
	taken        int // trials this run took over from ended processes
	// confirming: the workers run queued confirmation runs only.
	confirming bool
	// ran and ranFor: the study's launches that ran to an end before this
	// run and their total time (see Event.Ran), read once by resume.
	ran    int
	ranFor time.Duration
	// confirmed: the study's confirmation runs that ran to an end, stored
	// before this run or ended in it (see Event.Confirms).
	confirmed int

	// baselineTaken: a trial took the engine default's launch (see
	// takeBaseline); baselineMeasured: it measured complete, meeting
	// the SLO, so the confirmation step measures it again too.
	baselineTaken, baselineMeasured bool
}

// interruptedBefore is what Run returns when a step before the first trial
// failed: an interrupt when Ctrl-C cut it short (checking the GPUs or the
// Slurm cluster takes the run's context), else err.
func (r *runner) interruptedBefore(ctx context.Context, err error) (Summary, error) {
	if ctx.Err() != nil {
		r.sum.Interrupted = true
		return r.sum, nil
	}
	return r.sum, err
}

// Run runs (or resumes) the study until its budget is spent, its timeout
// passes, or ctx is cancelled (first Ctrl-C: the running trial is ended
// cleanly and queued again for the next run).
func Run(ctx context.Context, opt Options) (Summary, error) {
	r, target, err := newRunner(opt)
	if err != nil {
		return r.sum, err
	}
	groups, err := r.slots()
	if err != nil {
		return r.sum, err
	}
	r.parallel = len(groups)
	if err := r.open(ctx, target); err != nil {
		return r.interruptedBefore(ctx, err)
	}
	if err := r.resume(); err != nil {
		return r.sum, err
	}
	if err := r.sweepContainers(ctx); err != nil {
		return r.interruptedBefore(ctx, err)
	}
	for _, g := range groups {
		if r.st.Slurmed() {
			break // the GPUs are Slurm's, on other hosts
		}
		if err := launcher.CheckGPUsFree(ctx, g); err != nil {
			return r.interruptedBefore(ctx, fmt.Errorf("GPU group %s: %w", gpuList(g), err))
		}
	}
	waiting, err := r.waiting()
	if err != nil {
		return r.sum, err
	}
	text := fmt.Sprintf("study %s: %d of %d trials launched so far, %d to retry; %s", r.st.Name, r.launched, r.budget, waiting, atATime(len(groups)))
	if r.launched >= r.budget {
		more := "a larger --trials continues the search"
		if r.opt.Worker {
			more = "a larger budget.trials in the study file continues the search"
		}
		text = fmt.Sprintf("study %s: its budget of %d trials is spent (%d launched); %d to retry; %s; %s",
			r.st.Name, r.budget, r.launched, waiting, atATime(len(groups)), more)
	}
	r.emit(Event{Kind: EventStudy, Trial: -1, Text: text, Ran: r.ran, RanFor: r.ranFor})

	err = r.workers(ctx, groups)
	// A process that ended after this run's workers stopped asking left its
	// trial running: taken over now, it is re-run here, not left queued for
	// a process that no longer exists.
	for err == nil && ctx.Err() == nil && !r.timedOut() {
		n := r.takeovers()
		if _, err = r.reap(); err != nil || r.takeovers() == n {
			break
		}
		err = r.workers(ctx, groups)
	}
	// The winner is declared once the search is over: its budget spent or
	// its space exhausted, not cut short by Ctrl-C, an error or the timeout.
	if err == nil && ctx.Err() == nil && !r.timedOut() {
		if r.st.Budget.Confirm > 0 {
			err = r.confirm(ctx, groups)
		} else {
			err = r.declareOnce()
		}
	}
	return r.summarize(ctx, err)
}

// newRunner sets a run up from its options: the owner name, the study's
// preflight, the log directory, the backend, the budget and the deadline.
// It returns the target the load generator measures.
func newRunner(opt Options) (*runner, objective.Target, error) {
	st := opt.Study
	if opt.Getenv == nil {
		opt.Getenv = os.Getenv
	}
	r := &runner{opt: opt, st: st, store: opt.Store, backend: opt.Backend, learned: newPredictor(), measured: map[string]bool{}}
	r.sum.Study = st.Name
	// A worker cut off from PostgreSQL gives a write up within half the
	// study's lease time, not the store's default minute: its trial's last
	// heartbeat may predate the outage by a beat, and once the lease is
	// past other workers take the trial over.
	r.store.SetOutageWait(r.staleWindow() / 2)
	r.host = hostname()
	r.owner = fmt.Sprintf("%s:%d", r.host, os.Getpid())
	if opt.Name != "" {
		r.owner += "#" + opt.Name
	}
	pre := opt.Preflight
	if pre == nil {
		p := Check(st, opt.Getenv)
		pre = &p
	}
	if err := pre.Err(); err != nil {
		return r, objective.Target{}, err
	}
	r.apiKey, r.spaceSize, r.grid = pre.APIKey, pre.SpaceSize, pre.grid
	if st.Slurmed() && opt.LogDir != "" {
		// Jobs on other hosts write beside the log, and a worker taking a
		// trial over finds its files by the stored path: make it absolute.
		abs, err := filepath.Abs(opt.LogDir)
		if err != nil {
			return r, objective.Target{}, fmt.Errorf("log dir: %w", err)
		}
		r.opt.LogDir = abs
	}
	// Token counts are checked against the engine's own counter when its
	// /metrics is on (skipped, and said so, when it is not).
	target := objective.Target{Model: st.ServedName(), APIKey: r.apiKey, TokenCounter: st.Engine.Kind.Metrics.GenerationTokens}
	if r.backend == nil && !st.Slurmed() {
		r.backend = Processes{Target: target}
	}
	r.budget = cmp.Or(max(opt.Trials, 0), max(st.Budget.Trials, 0), 20)
	if timeout := cmp.Or(max(opt.Timeout, 0), st.Budget.Timeout); timeout > 0 {
		r.deadline = time.Now().Add(timeout)
	}
	return r, target, nil
}

// slots returns the GPU groups the run's workers use, one each: the
// study's groups, or with Slurm as many empty ones as trials in flight.
func (r *runner) slots() ([][]int, error) {
	groups := r.st.GPUGroups
	if len(groups) == 0 {
		groups = [][]int{nil}
	}
	parallel := cmp.Or(max(r.opt.Parallel, 0), max(r.st.Budget.Parallel, 0), 1)
	switch {
	case r.st.Slurmed():
		// Slurm places each trial: no local GPU groups, parallel is the
		// number of trials this process keeps in flight.
		return make([][]int, parallel), nil
	case parallel > len(groups):
		return nil, errext.Bad(fmt.Errorf("--parallel %d exceeds the %d GPU group(s) of the study", parallel, len(groups)))
	}
	return groups[:parallel], nil
}

// atATime says how many trials this process runs at once.
func atATime(n int) string {
	if n == 1 {
		return "one trial at a time"
	}
	return fmt.Sprintf("%d trials at a time", n)
}

// open builds the sampler, loads or creates the stored study, records what
// it is and, with Slurm, connects the backend.
func (r *runner) open(ctx context.Context, target objective.Target) error {
	smp, points, err := newSampler(r.st, r.grid, r.repeated)
	r.gridSize, r.grid = len(points), nil
	if err != nil {
		return errext.Bad(fmt.Errorf("%s: budget.sampler: %w", r.st.Path, err))
	}
	// Slurm is asked first whether it would run a trial's job: a study
	// file it refuses writes nothing.
	if r.backend == nil {
		if r.backend, err = r.slurmBackend(ctx, target); err != nil {
			return err
		}
	}
	// LoadOrCreateStudy creates the study and its direction in one
	// transaction, so a second process never reads a half-made study.
	r.study, err = r.store.LoadOrCreateStudy(r.st.Name, goptuna.StudyDirectionMaximize,
		goptuna.StudyOptionStorage(r.store),
		goptuna.StudyOptionSampler(smp),
		goptuna.StudyOptionLogger(nil),
	)
	if err != nil {
		return fmt.Errorf("open study %q: %w", r.st.Name, err)
	}
	attrs, err := r.store.GetStudySystemAttrs(r.study.ID)
	if err != nil {
		return fmt.Errorf("read study attributes: %w", err)
	}
	if err := r.checkFingerprint(attrs); err != nil {
		return err
	}
	_, r.baselineTaken = attrs[storage.AttrBaselineTrial]
	if r.uid, err = r.studyUID(attrs); err != nil {
		return err
	}
	return r.describeStudy()
}

// studyLogMark, in a study's log directory, holds the study's random id.
const studyLogMark = ".sgtune-study"

// linkFile is os.Link (a test stands in a filesystem without hard links).
var linkFile = os.Link

// markLogDir writes uid to mark unless it exists (fs.ErrExist). The mark
// is written whole, then linked, so a process marking at the same time
// never reads half a mark; where the filesystem has no hard links (vfat,
// some network mounts) it is created in place.
func markLogDir(dir, mark, uid string) error {
	f, err := os.CreateTemp(dir, studyLogMark+"-*")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, uid)
	if err = errors.Join(err, f.Close()); err == nil {
		err = linkFile(f.Name(), mark)
	}
	_ = os.Remove(f.Name()) // a leftover temporary file harms nothing
	if err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	f, err = os.OpenFile(mark, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, uid)
	return errors.Join(err, f.Close())
}

// studyLogDir returns the directory of a study's trial logs: base/NAME, or
// base/NAME-UID when base/NAME holds another study's logs (a second
// database beside the first with a study of the same name, or a study
// started again after its database was deleted), whose trial-N.log files
// its own would overwrite. A mark file names the study that owns the
// directory. One without a mark (written before marks) is taken by a
// study that has trials, or when it holds no trial log.
func studyLogDir(base, name, uid string, resumed bool) (string, error) {
	dir := filepath.Join(base, safeName(name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	mark := filepath.Join(dir, studyLogMark)
	owner, err := os.ReadFile(mark)
	switch {
	case err == nil:
		if strings.TrimSpace(string(owner)) == uid {
			return dir, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	default:
		logs, err := filepath.Glob(filepath.Join(dir, "trial-*.log"))
		if err != nil {
			return "", err
		}
		logs = slices.DeleteFunc(logs, func(p string) bool {
			fi, err := os.Lstat(p)
			return err != nil || !fi.Mode().IsRegular()
		})
		if resumed || len(logs) == 0 {
			switch err := markLogDir(dir, mark, uid); {
			case err == nil:
				return dir, nil
			case !errors.Is(err, fs.ErrExist):
				return "", err
			}
			// Another process marked it first: read its mark.
			return studyLogDir(base, name, uid, resumed)
		}
	}
	own := dir + "-" + uid
	return own, os.MkdirAll(own, 0o755)
}

// workers runs one worker per GPU group until the study is done.
func (r *runner) workers(ctx context.Context, groups [][]int) error {
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for w, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if t := r.opt.Turns; t != nil {
				if t.Join(ctx, w, len(groups)) != nil {
					return // interrupted before its first trial
				}
				defer t.Leave(w)
			}
			errs[w] = r.worker(ctx, g)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// summarize reads the study's trials and winner into the run's summary.
func (r *runner) summarize(ctx context.Context, err error) (Summary, error) {
	recs, rerr := Records(r.store, r.st.Name)
	if rerr != nil {
		return r.sum, errors.Join(err, rerr)
	}
	r.sum.Records = recs
	w, ok, werr := ReadWinner(r.store, r.st.Name)
	if werr != nil {
		err = errors.Join(err, werr)
	} else if ok && w.Holds(recs) {
		r.sum.Winner = &w
	}
	if b, ok := Declared(r.sum.Winner, recs); ok {
		r.sum.Best = &b
	}
	r.sum.Interrupted = ctx.Err() != nil
	return r.sum, err
}

// timedOut reports whether the run's timeout passed.
func (r *runner) timedOut() bool {
	return !r.deadline.IsZero() && time.Now().After(r.deadline)
}

// worker runs trials on one GPU group until there is nothing left to do. It
// holds the group's lease in the storage while it runs (a second process
// waits for it), and returns an error when the group must not be used
// again (a server that could not be stopped, GPUs not released, the lease
// lost) or the storage failed.
func (r *runner) worker(ctx context.Context, gpus []int) error {
	var lease *groupLease
	if !r.st.Slurmed() { // Slurm allocates the GPUs of each job
		var err error
		if lease, gpus, err = r.leaseGroup(ctx, gpus); err != nil || lease == nil {
			return err
		}
		defer lease.release()
	}
	for {
		if lease != nil {
			if err := lease.lost(); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if !r.confirming {
			if r.timedOut() {
				r.mu.Lock()
				left := max(r.budget-r.launched, 0)
				r.mu.Unlock()
				r.note("timeout reached: no new trials; %d of the budget's %d launches are left, and the same command goes on with them (the winner is declared when the budget is spent)", left, r.budget)
				return nil
			}
			done, err := r.exhausted()
			if err != nil {
				return err
			}
			if done {
				r.note("every config of the space (%d) has been tried", r.spaceSize)
				return nil
			}
			if r.skipped() >= maxSkips {
				r.note("stopping: the last %d proposals were all infeasible or duplicates", maxSkips)
				return nil
			}
			// Every ask first takes over trials whose process went silent,
			// so a dead worker's trial is re-run while the study goes on.
			if _, err := r.reap(); err != nil {
				return err
			}
			left, err := r.budgetLeft(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted: not a storage failure
				}
				return err
			}
			if !left {
				if !r.opt.Worker {
					return nil
				}
				if more, err := r.drain(ctx); err != nil || !more {
					return err
				}
				continue
			}
		}
		if err := r.trial(ctx, gpus); err != nil {
			switch {
			case errors.Is(err, errNothingQueued):
				return nil
			case errors.Is(err, errBudgetTaken):
				r.note("%v", err)
				if r.opt.Worker {
					continue // drain, then stop
				}
				return nil
			}
			return err
		}
	}
}

// drain waits, once the budget is spent, while trials of other processes
// (or of this one's other slots) still run: one of them may die, and its
// re-run needs a worker. more is true when a trial was queued again or
// the budget has room again.
func (r *runner) drain(ctx context.Context) (more bool, err error) {
	every := min(5*time.Second, r.staleWindow()/4)
	noted := false
	for {
		recs, err := r.reap()
		if err != nil {
			return false, err
		}
		running := 0
		for _, rec := range recs {
			switch {
			case rec.State == StateWaiting && rec.ConfirmOf == nil:
				// A confirmation run waits for the confirmation step,
				// which runs once the search is over (returning more for
				// it spun the search loop, which never runs one).
				return true, nil
			case rec.State == StateRunning:
				running++
			}
		}
		if running == 0 || (!r.deadline.IsZero() && time.Now().After(r.deadline)) {
			return false, nil
		}
		if left, err := r.budgetLeft(ctx); err != nil || left {
			if ctx.Err() != nil {
				return false, nil // interrupted: not a storage failure
			}
			return left, err
		}
		if !noted {
			r.note("the study's budget is spent; waiting for %d running trial(s) to finish (one whose worker died is run again)", running)
			noted = true
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(every):
		}
	}
}

// budgetLeft reports whether the study's launched-trial budget has room;
// the storage counts every process's launches.
func (r *runner) budgetLeft(ctx context.Context) (bool, error) {
	n, err := r.store.LaunchedCount(ctx, r.study.ID)
	if err != nil {
		return false, fmt.Errorf("count launched trials: %w", err)
	}
	r.mu.Lock()
	r.launched = n
	r.mu.Unlock()
	return n < r.budget, nil
}

// exhausted reports whether every config of a finite space has a trial and
// none waits to be re-run.
func (r *runner) exhausted() (bool, error) {
	if r.spaceSize == 0 {
		return false, nil
	}
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return false, err
	}
	seen := map[string]bool{}
	proposed := 0
	for _, rec := range recs {
		if rec.Baseline {
			// The engine default is the study's own launch, no proposal
			// of the space (its config may be none of the space's).
			continue
		}
		if rec.RetryOf == nil {
			proposed++
		}
		switch rec.State {
		case StateWaiting:
			return false, nil
		case StateInterrupted, StateRunning:
		default:
			if rec.ConfigKey != "" {
				seen[rec.ConfigKey] = true
			}
		}
	}
	return len(seen) >= r.spaceSize || (r.gridSize > 0 && proposed >= r.gridSize), nil
}

// repeated reports whether the last proposal repeated a known config.
func (r *runner) repeated() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.repeats > 0
}

func (r *runner) skipped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skips
}

// waiting counts the trials queued to be re-run.
func (r *runner) waiting() (int, error) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range recs {
		if rec.State == StateWaiting {
			n++
		}
	}
	return n, nil
}

// resume takes over trials whose owner died (on this host, or silent for
// the study's stale window anywhere), queueing each for a re-run through
// the storage's atomic API, kills servers they left behind, and relearns
// what the study's earlier startups taught; the trials it read also find
// the study's log directory (see studyLogDir).
func (r *runner) resume() error {
	recs, err := r.reap()
	if err != nil {
		return err
	}
	if r.logDir, err = studyLogDir(r.opt.LogDir, r.st.Name, r.uid, len(recs) > 0); err != nil {
		return fmt.Errorf("log dir: %w", err)
	}
	if r.launched, err = r.store.LaunchedCount(context.Background(), r.study.ID); err != nil {
		return fmt.Errorf("count launched trials: %w", err)
	}
	for _, rec := range recs {
		if rec.State == StateComplete && rec.ScoreOK && rec.Score != nil && (r.best == nil || *rec.Score > *r.best) {
			s := *rec.Score
			r.best = &s
		}
		switch {
		case rec.State == StateComplete && rec.ScoreOK && rec.ConfirmOf == nil && rec.Baseline:
			r.baselineMeasured = true
		case rec.State == StateComplete && rec.ScoreOK && rec.ConfirmOf == nil && rec.ConfigKey != "":
			r.measured[rec.ConfigKey] = true
		}
		if RanToEnd(rec.State) && rec.End != nil && !rec.Start.IsZero() && rec.End.After(rec.Start) {
			r.ran++
			r.ranFor += rec.End.Sub(rec.Start)
		}
		if rec.ConfirmOf != nil && RanToEnd(rec.State) {
			r.confirmed++
		}
		r.relearn(rec)
	}
	return nil
}

// reap takes over the study's trials whose process has ended: silent for
// the study's stale window (on any host), or gone from this host (kill -9)
// however recently it beat. Each is queued for a re-run. It runs before
// every ask, while a run waits for other processes' trials and before the
// top configs are confirmed, so a process that dies while another runs
// the study has its trial re-run by that one, not left running.
// It returns the study's trials as they are after the takeovers, for the
// callers that go on to read them.
func (r *runner) reap() ([]Record, error) {
	d := r.staleWindow()
	reaped, err := r.store.ReapStale(r.study.ID, d, r.staleRetries())
	if err != nil {
		return nil, fmt.Errorf("take over stale trials: %w", err)
	}
	for _, rp := range reaped {
		r.tookOver(rp.TrialID, rp.Number, "no heartbeat for "+d.String())
	}
	return r.reapEnded()
}

// reapEnded takes over the running trials whose owner is a process of
// this host that has ended (see ownerDead; a live owner's trial is left to
// it), as status reports them, and returns the study's trials after that
// (read again only when it took one over).
func (r *runner) reapEnded() ([]Record, error) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return nil, err
	}
	took := false
	for _, rec := range recs {
		if rec.Stopping && rec.State != StateRunning && r.diedStopping(rec) && r.killLeftovers(rec.ID, rec.Number) {
			if err := r.store.AnnotateTrial(rec.ID, storage.AttrStopping, ""); err != nil {
				return nil, fmt.Errorf("trial %d: %w", rec.Number, err)
			}
		}
		if rec.State != StateRunning || !ownerDead(rec.Owner, r.host) {
			continue
		}
		reason := fmt.Sprintf("owner %s stopped without finishing the trial", rec.Owner)
		state, retry := StateInterrupted, rec.Retries < maxRetries
		if r.st.Launch.OnStale == "fail" {
			state, retry = StateFailed, false
		}
		if _, ended, err := r.store.InterruptTrial(rec.ID, state, reason, retry); err != nil {
			return nil, fmt.Errorf("take over trial %d: %w", rec.Number, err)
		} else if ended {
			r.tookOver(rec.ID, rec.Number, reason)
			took = true
		}
	}
	if took {
		return Records(r.store, r.st.Name)
	}
	return recs, nil
}

// takeovers is how many trials this run took over so far.
func (r *runner) takeovers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.taken
}

// staleWindow is the study's launch.stale_after (staleAfter when unset):
// how long a silent process keeps its running trials and every lease it
// holds (GPU groups, the confirmation) before others take them over.
func (r *runner) staleWindow() time.Duration {
	if d := r.st.Launch.StaleAfter; d > 0 {
		return d
	}
	return staleAfter
}

// staleRetries is how often ReapStale re-queues one config.
func (r *runner) staleRetries() int {
	if r.st.Launch.OnStale == "fail" {
		return 0
	}
	return maxRetries
}

// tookOver reports a trial taken over from a dead owner and kills what its
// server left behind (killLeftovers).
func (r *runner) tookOver(id, number int, reason string) {
	r.mu.Lock()
	r.taken++
	r.mu.Unlock()
	r.trialEvent(EventNote, number, "taken over: %s; queued to run again", reason)
	r.killLeftovers(id, number)
}

// stopOverdue bounds how long a live owner takes to stop a server after
// storing its trial: the stop's grace, the wait for the process group, and
// the wait for the port and GPUs (launcher.Spec.ReleaseTimeout, 2 minutes
// by default).
const stopOverdue = 5 * time.Minute

// diedStopping reports whether the owner of a trial stored before its
// server stopped (Record.Stopping) died before the stop ended: a process
// of this host that has ended, or, for a Slurm study, whose job any host
// can cancel, an owner elsewhere whose mark outlived any stop.
func (r *runner) diedStopping(rec Record) bool {
	switch OwnerLive(rec.Owner, r.host) {
	case LiveNo:
		return true
	case LiveUnknown:
		return r.st.Slurmed() && rec.End != nil && time.Since(*rec.End) > r.staleWindow()+stopOverdue
	}
	return false
}

// killLeftovers kills what the server of a trial whose owner died left
// behind: Pdeathsig takes a server down with its tuner, but not every
// engine's workers; a Slurm job outlives its worker and is cancelled. It
// reports whether it could look (and kill).
func (r *runner) killLeftovers(id, number int) bool {
	if r.st.Slurmed() {
		return r.cancelLeftoverJob(id, number)
	}
	pids, err := launcher.KillTagged(context.Background(), r.trialTag(number))
	if err != nil {
		r.trialEvent(EventNote, number, "could not look for leftover server processes: %v", err)
		return false
	}
	if len(pids) > 0 {
		r.trialEvent(EventNote, number, "killed %d leftover server process group(s)", len(pids))
	}
	n, err := r.removeTrialContainers(number)
	if err != nil {
		r.trialEvent(EventNote, number, "could not remove the trial's leftover containers: %v", err)
		return false
	}
	if n > 0 {
		r.trialEvent(EventNote, number, "removed %d leftover container(s)", n)
	}
	return true
}

// describeStudy stores what reports and rescore read without the study
// file: the score spec, the budget, the model revision, the schema file.
func (r *runner) describeStudy() error {
	spec, err := json.Marshal(r.st.Score)
	if err != nil {
		return err
	}
	attrs := map[string]string{storage.AttrScoreSpec: string(spec), storage.AttrBudgetTrials: strconv.Itoa(r.budget)}
	if r.st.ModelRevision != "" {
		attrs[storage.AttrModelRevision] = r.st.ModelRevision
	}
	if r.st.SchemaFile != "" {
		attrs[storage.AttrFlagsSchema] = r.st.SchemaFile
	}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if err := r.store.SetStudyUserAttr(r.study.ID, k, attrs[k]); err != nil {
			return fmt.Errorf("store the study's %s: %w", k, err)
		}
	}
	return nil
}

// checkFingerprint refuses to resume a study whose stored trials were
// measured under other settings than the study file now says (see
// space.Study.Fingerprint), naming the sections that changed, and stores
// the file's fingerprint otherwise. A study without trials takes the new
// settings. attrs are the study's system attributes.
func (r *runner) checkFingerprint(attrs map[string]string) error {
	fp, err := r.st.Fingerprint()
	if err != nil {
		return err
	}
	var stored map[string]string
	if s := attrs[storage.AttrFingerprint]; s != "" {
		if err := json.Unmarshal([]byte(s), &stored); err != nil {
			return fmt.Errorf("study %q: stored %s: %w", r.st.Name, storage.AttrFingerprint, err)
		}
	}
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(fp)) {
		if old, ok := stored[k]; ok && old != fp[k] {
			changed = append(changed, k)
		}
	}
	if len(changed) > 0 {
		recs, err := Records(r.store, r.st.Name)
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			hint := ""
			if slices.Contains(changed, "score") {
				hint = "; to score the stored trials another way, run sgtune rescore"
			}
			return errext.Bad(fmt.Errorf("%s: %s changed since study %q measured its %d trials in this storage, and new trials would not compare with them: restore the file's %s, or start another study (a new name: or another --storage)%s",
				r.st.Path, strings.Join(changed, ", "), r.st.Name, len(recs), strings.Join(changed, ", "), hint))
		}
	}
	// A section the file no longer has (a dropped choice or param) keeps
	// its stored key: brought back with other flag text, it is refused.
	for k, v := range stored {
		if _, ok := fp[k]; !ok {
			fp[k] = v
		}
	}
	if maps.Equal(stored, fp) {
		return nil
	}
	return r.setStudyJSON(storage.AttrFingerprint, "the study's fingerprint", fp)
}

// setStudyJSON stores v as JSON in the study's system attribute key; what
// names it in an error.
func (r *runner) setStudyJSON(key, what string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store %s: %w", what, err)
	}
	if err := r.store.SetStudySystemAttr(r.study.ID, key, string(b)); err != nil {
		return fmt.Errorf("store %s: %w", what, err)
	}
	return nil
}

// studyUID returns the study's random id (from attrs, its system
// attributes), creating it on first use: it tags the trials' server
// processes (trialTag), names the confirmation lease and the log
// directory, so every process on the study must use the same.
func (r *runner) studyUID(attrs map[string]string) (string, error) {
	if uid := attrs[storage.AttrUID]; uid != "" {
		return uid, nil
	}
	b := make([]byte, 4)
	if _, err := crand.Read(b); err != nil {
		return "", err
	}
	// Processes opening a new study at once all take the id the first
	// of them stored.
	uid, err := r.store.EnsureStudySystemAttr(r.study.ID, storage.AttrUID, hex.EncodeToString(b))
	if err != nil {
		return "", fmt.Errorf("write study attributes: %w", err)
	}
	return uid, nil
}

// trialTag is the environment entry that marks a trial's server processes.
// The study's random id keeps two databases holding a study of the same
// name from killing each other's servers.
func (r *runner) trialTag(number int) string {
	return fmt.Sprintf("SGTUNE_TRIAL=%s/%s/%d", safeName(r.st.Name), r.uid, number)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// Liveness is what a host can tell of the process that owns a trial or a
// lease.
type Liveness int

const (
	// LiveUnknown: another host's process, or an owner not in the form
	// "host:pid", cannot be checked from here.
	LiveUnknown Liveness = iota
	// LiveYes: a process of this host that exists.
	LiveYes
	// LiveNo: a process of this host that no longer exists.
	LiveNo
)

// OwnerLive checks owner ("host:pid", or "host:pid#name" for one of
// several runs in a process) when it is a process of host. The run takes
// over the trials of a LiveNo owner (see reapEnded), and status shows them
// as such.
func OwnerLive(owner, host string) Liveness {
	owner, _, _ = strings.Cut(owner, "#")
	h, p, ok := strings.Cut(owner, ":")
	if !ok || h != host || host == "" {
		return LiveUnknown
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return LiveUnknown
	}
	// Signal 0 checks existence; EPERM means it exists under another user.
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return LiveNo
	}
	return LiveYes
}

// ownerDead reports whether owner is a process of this host that no
// longer exists.
func ownerDead(owner, host string) bool { return OwnerLive(owner, host) == LiveNo }

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

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

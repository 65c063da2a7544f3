// Package search runs the study loop: it asks the sampler for parameters,
// rejects infeasible configs before launch, launches and measures the rest on
// GPU groups in parallel, stores every trial, and resumes interrupted studies.
package search

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// Options configure one run of a study.
type Options struct {
	Study    *space.Study
	Store    *storage.Store
	LogDir   string        // per-trial server logs go to LogDir/<study>/trial-N.log
	Trials   int           // launched-trial budget for the whole study; 0 = the study's
	Timeout  time.Duration // stop starting trials after this long; 0 = the study's
	Parallel int           // trials at once, at most one per GPU group; 0 = the study's or 1
	Out      io.Writer     // progress lines
	Getenv   func(string) string
	// Abort, when closed, tears running servers down at once (second Ctrl-C).
	Abort <-chan struct{}
	// Plan is Preflight's result when the caller already ran it.
	Plan *Plan
}

// Summary is what a run did.
type Summary struct {
	Study       string
	Launched    int // trials launched in this run
	Complete    int
	Failed      int
	Infeasible  int
	Interrupted bool // the run was stopped before its budget was spent
	Best        *Record
	Records     []Record
}

// maxSkips bounds consecutive proposals that launch nothing (infeasible,
// duplicates) before the run gives up: the space is then mostly infeasible.
const maxSkips = 200

// heartbeatEvery is how often a running trial proves its owner alive;
// staleAfter is when another process may take it over.
const (
	heartbeatEvery = 10 * time.Second
	staleAfter     = 2 * time.Minute
)

type runner struct {
	opt     Options
	st      *space.Study
	store   *storage.Store
	study   *goptuna.Study
	sampler *startupSampler
	owner   string
	apiKey  string
	uid     string // the study's random id, part of every server's tag
	out     *syncWriter
	// spaceSize is the number of distinct configs (0 = unknown, e.g.
	// continuous params); once every one was tried, the study is done.
	spaceSize int

	mu       sync.Mutex
	launched int // launched trials in the study (complete + failed), all runs
	budget   int
	retries  []Record // interrupted trials still to be re-run
	skips    atomic.Int64
	sum      Summary
	deadline time.Time
}

// Run runs (or resumes) the study until its budget is spent, its timeout
// passes, or ctx is cancelled (first Ctrl-C: the running trial is ended
// cleanly and retried on the next run).
func Run(ctx context.Context, opt Options) (Summary, error) {
	st := opt.Study
	if opt.Out == nil {
		opt.Out = io.Discard
	}
	if opt.Getenv == nil {
		opt.Getenv = os.Getenv
	}
	r := &runner{opt: opt, st: st, store: opt.Store, out: &syncWriter{w: opt.Out}}
	r.sum.Study = st.Name
	r.owner = fmt.Sprintf("%s:%d", hostname(), os.Getpid())

	plan := opt.Plan
	if plan == nil {
		p, err := Preflight(st, opt.Getenv)
		if err != nil {
			return r.sum, err
		}
		plan = &p
	}
	r.apiKey = plan.APIKey
	r.spaceSize = plan.SpaceSize

	r.budget = opt.Trials
	if r.budget <= 0 {
		r.budget = st.Budget.Trials
	}
	if r.budget <= 0 {
		r.budget = 20
	}
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = st.Budget.Timeout
	}
	if timeout > 0 {
		r.deadline = time.Now().Add(timeout)
	}

	// A resumed study continues the random sequence instead of replaying
	// it: seed + the number of trials already stored.
	seed := st.Budget.Seed + int64(storedTrials(r.store, st.Name))
	rand.Seed(seed) //nolint:staticcheck // goptuna's TPE draws from the global source
	model, err := newSampler(st.Budget.Sampler, seed)
	if err != nil {
		return r.sum, fmt.Errorf("%w: budget.sampler: %v", space.ErrInvalid, err)
	}
	if ss, ok := model.(*startupSampler); ok {
		r.sampler = ss
	} else {
		r.sampler = &startupSampler{random: model.(*randomSampler), model: model, n: 0}
	}
	r.sampler.skips = &r.skips
	// LoadOrCreateStudy creates the study and its direction in one
	// transaction, so a second process never reads a half-made study.
	r.study, err = r.store.LoadOrCreateStudy(st.Name, goptuna.StudyDirectionMaximize,
		goptuna.StudyOptionStorage(r.store),
		goptuna.StudyOptionSampler(r.sampler),
		goptuna.StudyOptionLogger(nil),
	)
	if err != nil {
		return r.sum, fmt.Errorf("open study %q: %w", st.Name, err)
	}
	if r.uid, err = r.studyUID(); err != nil {
		return r.sum, err
	}
	if err := r.resume(); err != nil {
		return r.sum, err
	}

	groups := st.GPUGroups
	if len(groups) == 0 {
		groups = [][]int{nil}
	}
	parallel := opt.Parallel
	if parallel <= 0 {
		parallel = st.Budget.Parallel
	}
	if parallel <= 0 {
		parallel = 1
	}
	if parallel > len(groups) {
		return r.sum, fmt.Errorf("%w: --parallel %d exceeds the %d GPU group(s) of the study", space.ErrInvalid, parallel, len(groups))
	}
	for _, g := range groups[:parallel] {
		if err := launcher.CheckGPUsFree(ctx, g); err != nil {
			return r.sum, fmt.Errorf("GPU group %s: %w", gpuList(g), err)
		}
	}
	r.printf("study %s: %d of %d trials launched so far, %d to retry; %d worker(s)\n",
		st.Name, r.launched, r.budget, len(r.retries), parallel)

	var wg sync.WaitGroup
	errs := make([]error, parallel)
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs[w] = r.worker(ctx, groups[w])
		}(w)
	}
	wg.Wait()

	recs, err := Records(r.store, st.Name)
	if err != nil {
		return r.sum, err
	}
	r.sum.Records = recs
	if b, ok := Best(recs); ok {
		r.sum.Best = &b
	}
	r.sum.Interrupted = ctx.Err() != nil
	return r.sum, errors.Join(errs...)
}

// worker runs trials on one GPU group until there is nothing left to do.
func (r *runner) worker(ctx context.Context, gpus []int) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		if !r.deadline.IsZero() && time.Now().After(r.deadline) {
			r.printf("timeout reached: no new trials\n")
			return nil
		}
		if r.exhausted() {
			r.printf("every config of the space (%d) has been tried\n", r.spaceSize)
			return nil
		}
		if r.skips.Load() >= maxSkips {
			r.printf("stopping: the last %d proposals were all infeasible or duplicates\n", maxSkips)
			return nil
		}
		retry, ok := r.claim()
		if !ok {
			return nil
		}
		launched, err := r.runTrial(ctx, gpus, retry)
		if !launched {
			r.release()
		}
		if err != nil {
			return err
		}
	}
}

// exhausted reports whether every config of a finite space has a trial.
func (r *runner) exhausted() bool {
	if r.spaceSize == 0 {
		return false
	}
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return false
	}
	seen := map[string]bool{}
	for _, rec := range recs {
		if rec.State != StateInterrupted && rec.State != StateRunning && rec.ConfigKey != "" {
			seen[rec.ConfigKey] = true
		}
	}
	r.mu.Lock()
	pending := len(r.retries)
	r.mu.Unlock()
	return pending == 0 && len(seen) >= r.spaceSize
}

// claim reserves one launch from the budget, preferring pending retries.
func (r *runner) claim() (*Record, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.launched >= r.budget {
		return nil, false
	}
	r.launched++
	if len(r.retries) > 0 {
		// An interrupted trial never counted as launched; its re-run does.
		rec := r.retries[0]
		r.retries = r.retries[1:]
		return &rec, true
	}
	return nil, true
}

// release gives back a claimed launch that was not used.
func (r *runner) release() {
	r.mu.Lock()
	r.launched--
	r.mu.Unlock()
}

// resume takes over trials left RUNNING by a dead process and queues every
// interrupted trial that has not been re-run yet.
func (r *runner) resume() error {
	stale, err := r.store.StaleRunning(r.study.ID, staleAfter)
	if err != nil {
		return fmt.Errorf("find stale trials: %w", err)
	}
	isStale := map[int]bool{}
	for _, id := range stale {
		isStale[id] = true
	}
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return err
	}
	host := hostname()
	for i, rec := range recs {
		if rec.State != StateRunning {
			continue
		}
		if !isStale[rec.ID] && !ownerDead(rec.Owner, host) {
			continue // another live process owns it
		}
		reason := fmt.Sprintf("owner %s stopped without finishing the trial", rec.Owner)
		state := StateInterrupted
		if r.st.Launch.OnStale == "fail" {
			state = StateFailed
		}
		if err := r.finish(rec.ID, goptuna.TrialStateFail, map[string]string{
			attrState: state, attrClass: "stale", attrReason: reason,
		}); err != nil && !errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
			return fmt.Errorf("take over stale trial %d: %w", rec.Number, err)
		}
		recs[i].State = state
		r.printf("trial %d: %s (%s)\n", rec.Number, state, reason)
		// Pdeathsig takes a server down with its tuner, but not every
		// engine's workers; kill whatever still carries the trial's tag.
		if pids, err := launcher.KillTagged(context.Background(), r.trialTag(rec.Number)); err == nil && len(pids) > 0 {
			r.printf("trial %d: killed %d leftover server process(es)\n", rec.Number, len(pids))
		}
	}
	retried := map[int]bool{}
	for _, rec := range recs {
		if rec.RetryOf != nil {
			retried[*rec.RetryOf] = true
		}
	}
	for _, rec := range recs {
		switch {
		case rec.State == StateInterrupted && !retried[rec.Number]:
			r.retries = append(r.retries, rec)
		case rec.State == StateComplete || rec.State == StateFailed:
			r.launched++
		}
		// Predictions learn from every startup seen so far, also in
		// earlier runs of the study.
		var f launcher.Facts
		if len(rec.Facts) > 0 && json.Unmarshal(rec.Facts, &f) == nil {
			if p, err := r.st.Suggest(&replay{params: rec.Params}); err == nil {
				r.observe(p, f)
			}
		}
	}
	return nil
}

// studyUID returns the study's random id, creating it on first use.
func (r *runner) studyUID() (string, error) {
	attrs, err := r.store.GetStudySystemAttrs(r.study.ID)
	if err != nil {
		return "", fmt.Errorf("read study attributes: %w", err)
	}
	if uid := attrs[attrUID]; uid != "" {
		return uid, nil
	}
	b := make([]byte, 4)
	if _, err := crand.Read(b); err != nil {
		return "", err
	}
	uid := hex.EncodeToString(b)
	if err := r.store.SetStudySystemAttr(r.study.ID, attrUID, uid); err != nil {
		return "", fmt.Errorf("write study attributes: %w", err)
	}
	return uid, nil
}

// storedTrials counts the trials a study already has (0 if it is new).
func storedTrials(st StudyStore, study string) int {
	recs, err := Records(st, study)
	if err != nil {
		return 0
	}
	return len(recs)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// ownerDead reports whether owner ("host:pid") is a process of this host
// that no longer exists.
func ownerDead(owner, host string) bool {
	h, p, ok := strings.Cut(owner, ":")
	if !ok || h != host {
		return false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// finish sets a trial's attributes and then its final state.
func (r *runner) finish(id int, state goptuna.TrialState, attrs map[string]string) error {
	for k, v := range attrs {
		if err := r.store.SetTrialUserAttr(id, k, v); err != nil {
			return err
		}
	}
	return r.store.SetTrialState(id, state)
}

func (r *runner) printf(format string, args ...any) {
	fmt.Fprintf(r.out, format, args...)
}

// syncWriter serialises progress lines from parallel workers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// Write implements io.Writer, one call at a time.
func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Plan is what Preflight learned about a study before anything is written.
type Plan struct {
	APIKey    string // "" when the study sets none
	SpaceSize int    // number of distinct configs when the space was enumerated, else 0
}

// surveyLimits bound the pre-run survey of the space to a few seconds.
var surveyLimits = space.SurveyLimits{MaxEnumerate: 50000, Samples: 2000, Seed: 1}

// Preflight checks what every trial needs before anything is written: the
// engine command must be runnable, the API key readable, and the space must
// hold at least one config the engine's rules accept.
func Preflight(st *space.Study, getenv func(string) string) (Plan, error) {
	if len(st.Engine.Command) == 0 {
		return Plan{}, fmt.Errorf("%w: %s: engine.command is empty", space.ErrInvalid, st.Path)
	}
	if _, err := exec.LookPath(st.Engine.Command[0]); err != nil {
		return Plan{}, fmt.Errorf("%w: %s: engine.command: cannot run %q: %v (is it installed and on PATH?)",
			space.ErrInvalid, st.Path, st.Engine.Command[0], errors.Unwrap(err))
	}
	key, err := apiKey(st, getenv)
	if err != nil {
		return Plan{}, err
	}
	sv := st.Survey(surveyLimits)
	if sv.Feasible == 0 && sv.Checked > 0 {
		var why []string
		for i, rc := range sv.Rejections {
			if i == 3 {
				break
			}
			why = append(why, fmt.Sprintf("%s (%d configs)", rc.Message, rc.Count))
		}
		why = append(why, sv.Errors...)
		scope := "every one of its"
		if !sv.Enumerated {
			scope = "every sampled one of"
		}
		return Plan{}, fmt.Errorf("%w: %s: the space has no feasible config: %s %d configs is rejected before launch: %s (see sgtune check)",
			space.ErrInvalid, st.Path, scope, sv.Checked, strings.Join(why, "; "))
	}
	plan := Plan{APIKey: key}
	if sv.Enumerated {
		plan.SpaceSize = sv.Size
	}
	return plan, nil
}

// apiKey reads the server API key the study names, if any.
func apiKey(st *space.Study, getenv func(string) string) (string, error) {
	if env := st.Launch.APIKeyEnv; env != "" {
		k := getenv(env)
		if k == "" {
			return "", fmt.Errorf("%w: launch.api_key_env: environment variable %s is empty or unset", space.ErrInvalid, env)
		}
		return k, nil
	}
	if f := st.Launch.APIKeyFile; f != "" {
		if !filepath.IsAbs(f) && st.Path != "" {
			f = filepath.Join(filepath.Dir(st.Path), f)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("%w: launch.api_key_file: %v", space.ErrInvalid, err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", nil
}

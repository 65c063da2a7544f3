package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// A user picks a budget and gets what `sgtune run` declares at its end,
// after every launch the study makes: its search trials, the engine
// default's baseline, confirmation reruns. The comparison scores
// exactly that. ladder is the budgets (budget.trials) a method's study is
// run at, each from an empty store; every launch of every run is counted.
// Its rungs are every other budget up to 12, then every 5th: each rung
// costs a whole study's proposals, so the 30 budgets would cost 15 times
// one study, these 10 rungs 4.4 times.
//
// Each rung is a real search.Run. Launches repeat across rungs (a study
// with budget 12 starts as the one with budget 10 did), so a launch's draws
// are keyed by its history (see launchKey) and its measurement is reused:
// a rung measures only the launches where it differs from the rungs before
// it. The reuse is exact: the same history gives the same launch, whose
// draws and so whose result are the same.
func ladder(budget int) []int {
	var out []int
	for n := 2; n < budget; n++ {
		if (n <= 12 && n%2 == 0) || (n > 12 && n%5 == 0) {
			out = append(out, n)
		}
	}
	return append(out, budget)
}

// rung is one study of a ladder: its budget, the launches it made in all,
// and the true score (fraction of the best) of the winner it declared.
type rung struct {
	Budget, Launches int
	// Truth is the declared winner's true score over the best; 0 when the
	// study declared nothing.
	Truth float64
	// Winner is the declared trial's number (-1: none).
	Winner int
	// Crash, Infeasible: launches that crashed, launches of statically
	// infeasible configs.
	Crash, Infeasible int
}

// memo holds the launches of one method and seed across its rungs: the
// measurement of each launch history, so a rung replays what an earlier
// one measured.
type memo struct {
	mu   sync.Mutex
	runs map[uint64]*memoRun
}

// memoRun is a launch's recorded end: its startup failure, or its facts,
// measurement and crash.
type memoRun struct {
	startErr error
	facts    engine.Facts
	res      *objective.Result
	merr     error
	crash    *launcher.Failure
	// measured is set once Measure ran: a later replay returns its result.
	measured bool
}

// drawnBackend starts a launch with the given draws: the simulator's seed
// and the measurement noise's (a measured table's replay draws its repeat
// from them).
type drawnBackend interface {
	startDrawn(ctx context.Context, spec launcher.Spec, seed, noise uint64) (search.Running, error)
}

// drawing is a drawnBackend as a search.Backend: each launch takes the
// next draws.
type drawing struct {
	next  drawnBackend
	draws func() (seed, noise uint64)
}

// Start implements search.Backend.
func (d *drawing) Start(ctx context.Context, spec launcher.Spec) (search.Running, error) {
	seed, noise := d.draws()
	return d.next.startDrawn(ctx, spec, seed, noise)
}

// memoBackend starts launches through a virtual backend with draws keyed
// by the launch's history (the study's seed, the flags of every launch so
// far and its own), reusing a recorded measurement of the same history.
type memoBackend struct {
	next drawnBackend
	memo *memo
	seed uint64
	mu   sync.Mutex
	hist uint64 // hash of the flags of the launches so far
}

// launchKey folds a launch's flags into the history hash.
func launchKey(hist uint64, argv []string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], hist)
	h.Write(b[:])
	h.Write([]byte(strings.Join(argv, "\x00")))
	return h.Sum64()
}

// Start implements search.Backend.
func (b *memoBackend) Start(ctx context.Context, spec launcher.Spec) (search.Running, error) {
	b.mu.Lock()
	key := launchKey(b.hist, spec.Argv)
	b.hist = key
	b.mu.Unlock()
	b.memo.mu.Lock()
	m, ok := b.memo.runs[key]
	if !ok {
		m = &memoRun{}
		b.memo.runs[key] = m
	}
	b.memo.mu.Unlock()
	if ok {
		if m.startErr != nil {
			return nil, m.startErr
		}
		if m.measured {
			return &replayed{m: m}, nil
		}
	}
	seed, noise := splitKey(key ^ b.seed)
	srv, err := b.next.startDrawn(ctx, spec, seed, noise)
	if err != nil {
		m.startErr = err
		return nil, err
	}
	return &recording{Running: srv, m: m}, nil
}

// splitKey derives the simulator and noise seeds of a launch from its key.
func splitKey(k uint64) (seed, noise uint64) {
	// splitmix64 steps: two well-mixed words from one.
	next := func() uint64 {
		k += 0x9e3779b97f4a7c15
		z := k
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	return next(), next()
}

// recording measures a launch and records its result for later rungs.
type recording struct {
	search.Running
	m *memoRun
}

func (r *recording) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	res, err := r.Running.Measure(ctx, w, opt)
	if ctx.Err() == nil {
		r.m.res, r.m.merr = res, err
	}
	return res, err
}

func (r *recording) Stop(ctx context.Context) (*launcher.Failure, error) {
	f, err := r.Running.Stop(ctx)
	if err == nil && ctx.Err() == nil {
		r.m.facts, r.m.crash, r.m.measured = r.Running.Facts(), f, true
	}
	return f, err
}

// replayed is a launch whose history an earlier rung measured.
type replayed struct{ m *memoRun }

func (r *replayed) Facts() engine.Facts { return r.m.facts }

func (r *replayed) Measure(context.Context, objective.Workload, objective.Options) (*objective.Result, error) {
	return r.m.res, r.m.merr
}

func (r *replayed) Stop(context.Context) (*launcher.Failure, error) { return r.m.crash, nil }

// study runs the method's study once at one budget, as `sgtune run` would
// with the study's own settings (sampler aside, for the ours_* methods),
// and scores the winner it declares.
func (c *comparison) study(ctx context.Context, m method, seed, budget int, mem *memo, index map[string]int, best float64) (rung, []search.Record, error) {
	ls := c.Landscape
	r := rung{Budget: budget, Winner: -1}
	st := c.studyOf(m, seed, budget)
	dir, err := os.MkdirTemp(scratch(), "bench-search-")
	if err != nil {
		return r, nil, err
	}
	defer os.RemoveAll(dir)
	store, err := storage.Open(filepath.Join(dir, "study.db"))
	if err != nil {
		return r, nil, err
	}
	defer store.Close()
	b := newLockstep(&memoBackend{next: c.Backend, memo: mem, seed: uint64(seed)<<32 ^ hashString(m.Name)}, st.GPUGroups)
	sum, err := search.Run(ctx, search.Options{Study: &st, Store: store, Backend: b, Turns: b, LogDir: dir,
		Parallel: max(st.Budget.Parallel, 1), Preflight: c.Preflight, Getenv: func(string) string { return "" }})
	if err != nil {
		return r, nil, fmt.Errorf("%s seed %d budget %d: %w", m.Name, seed, budget, err)
	}
	for _, rec := range sum.Records {
		if !search.RanToEnd(rec.State) {
			continue
		}
		r.Launches++
		idx, ok := index[strings.Join(rec.Flags(), " ")]
		if !ok {
			continue // a config outside the space (the engine default)
		}
		if !ls.Configs[idx].Launched() {
			r.Infeasible++
		}
		if crashClasses[rec.FailureClass] {
			r.Crash++
		}
	}
	if sum.Best != nil {
		r.Truth, r.Winner = c.truth(*sum.Best, index, best), sum.Best.Number
	}
	return r, sum.Records, nil
}

// studyOf is the study as the method runs it at one seed and budget.
func (c *comparison) studyOf(m method, seed, budget int) space.Study {
	st := *c.Study
	if m.Sampler != "" {
		st.Budget.Sampler = m.Sampler
	}
	st.Budget.Seed, st.Budget.Trials, st.Budget.Timeout = int64(seed), budget, 0
	return st
}

// truth is a declared trial's true score over the best (the engine
// default's where it lies outside the space).
func (c *comparison) truth(rec search.Record, index map[string]int, best float64) float64 {
	if idx, ok := index[strings.Join(rec.Flags(), " ")]; ok {
		return c.Landscape.Configs[idx].Mean / best
	}
	return c.DefaultTruth / best
}

// anytime scores a study whose every launch counts in its budget (no
// confirmation after the search) and whose proposals do not read the
// budget: it runs once at the full budget, and after each launch L scores
// the winner search.DeclareFrom names over the trials so far, which is
// what the same study with budget L declares (TestAnytimeIsTheBudgetsRun).
func (c *comparison) anytime(ctx context.Context, m method, seed int, index map[string]int, best float64) ([]rung, []search.Record, error) {
	full, recs, err := c.study(ctx, m, seed, c.Budget, &memo{runs: map[uint64]*memoRun{}}, index, best)
	if err != nil {
		return nil, nil, err
	}
	st := c.studyOf(m, seed, c.Budget)
	var rungs []rung
	for i, rec := range recs {
		if !search.RanToEnd(rec.State) {
			continue
		}
		r := rung{Budget: len(rungs) + 1, Launches: len(rungs) + 1, Winner: -1, Crash: full.Crash, Infeasible: full.Infeasible}
		w, ok, err := search.DeclareFrom(&st, recs[:i+1])
		if err != nil {
			return nil, nil, err
		}
		for _, d := range recs[:i+1] {
			if ok && d.Number == w.Trial {
				r.Truth, r.Winner = c.truth(d, index, best), d.Number
			}
		}
		rungs = append(rungs, r)
	}
	return rungs, recs, nil
}

// scratch is where the studies' stores go: memory where the machine has a
// tmpfs there (a study syncs every trial to its store; on a disk that wait
// was two thirds of a rung's time), else the temporary directory.
func scratch() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

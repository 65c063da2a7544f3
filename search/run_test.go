package search

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// unitStudy is a small space run against a fake backend: 2 x 8 configs.
const unitStudy = `name: unit
engine: {command: "true"}
model: m
gpus: {per_trial: 4, groups: [[0, 1, 2, 3], [4, 5, 6, 7]]}
fixed: {--tp-size: 4}
params:
  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size}
  - {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}
workload: {chat: {concurrency: [4], requests: [4], max_tokens: 8, repeats: 1}}
score: {metric: output_tok_s, concurrency: 4}
budget: {trials: 6, sampler: random, seed: 3, confirm: 0}
`

// fakeBackend measures a config's tok/s as a function of its flags; hooks
// let a test crash, interrupt or break a trial.
type fakeBackend struct {
	mu       sync.Mutex
	running  map[string]int // config flags -> servers running with them
	maxSame  int            // most servers ever running one config at once
	launches []string       // flags of every launch, in order
	// measure, when set, replaces the default measurement.
	measure func(ctx context.Context, flags string) (*objective.Result, error)
	// crash returns a failure for a config (nil: it runs fine).
	crash func(flags string) *launcher.Failure
	// gate, when set, is received from before a measurement ends (lets
	// two trials overlap).
	gate chan struct{}
	// outlier, when set, flags every point before the last level
	// (objective.Point.Outlier).
	outlier string
	// stop, when set, is called as a server's Stop begins.
	stop func(flags string)
	// exited returns, for a config, the failure of a server that exits on
	// its own right after its last answer (nil: it stays up).
	exited func(flags string) *launcher.Failure
	// level, when set, is called as a level ends, before AfterLevel.
	level func(flags string, conc int)
	// logErr is every server's log error (launcher's Server.LogErr).
	logErr error
}

func (b *fakeBackend) Start(ctx context.Context, spec launcher.Spec) (Running, error) {
	flags := strings.Join(spec.Argv[1:], " ")
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running == nil {
		b.running = map[string]int{}
	}
	b.running[flags]++
	b.maxSame = max(b.maxSame, b.running[flags])
	b.launches = append(b.launches, flags)
	return &fakeRunning{b: b, flags: flags}, nil
}

type fakeRunning struct {
	b     *fakeBackend
	flags string
}

func (f *fakeRunning) Facts() engine.Facts {
	return engine.Facts{MaxRunningRequests: 64, StartupS: 0.1}
}

func (f *fakeRunning) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	if f.b.gate != nil {
		select {
		case <-f.b.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.b.measure != nil {
		return f.b.measure(ctx, f.flags)
	}
	if f.b.crash != nil && f.b.crash(f.flags) != nil {
		return nil, objective.ErrFailedRequests
	}
	// One point per level, the levels' hooks called as the load generator
	// calls them.
	res := &objective.Result{Kind: "chat"}
	levels := w.Chat.Concurrency
	for i, c := range levels {
		p := result(c, tokS(f.flags)*float64(c)/4, 0.1).Points[0]
		if i < len(levels)-1 {
			p.Outlier = f.b.outlier
		}
		res.Points = append(res.Points, p)
		res.Medians = objective.Medians(res.Points)
		if opt.AfterLevel != nil && i < len(levels)-1 {
			if f.b.level != nil {
				f.b.level(f.flags, c)
			}
			if err := opt.AfterLevel(c, []objective.Point{p}); err != nil {
				return res, fmt.Errorf("after concurrency %d: %w", c, err)
			}
		}
	}
	return res, nil
}

// Failure is the failure of a server that already exited on its own.
func (f *fakeRunning) Failure() *launcher.Failure {
	if f.b.exited != nil {
		return f.b.exited(f.flags)
	}
	return nil
}

// LogErr is the error that cut the server's log short.
func (f *fakeRunning) LogErr() error { return f.b.logErr }

func (f *fakeRunning) Stop(ctx context.Context) (*launcher.Failure, error) {
	if f.b.stop != nil {
		f.b.stop(f.flags)
	}
	f.b.mu.Lock()
	f.b.running[f.flags]--
	f.b.mu.Unlock()
	if f.b.crash != nil {
		return f.b.crash(f.flags), nil
	}
	return f.Failure(), nil
}

// tokS is the fake landscape: more slots and ep 4 are faster.
func tokS(flags string) float64 {
	v := 100.0
	if strings.Contains(flags, "--ep-size 4") {
		v += 50
	}
	var slots int
	if i := strings.Index(flags, "--max-mamba-cache-size "); i >= 0 {
		fmt.Sscanf(flags[i+len("--max-mamba-cache-size "):], "%d", &slots)
	}
	return v + float64(slots)/8
}

// openFake loads a study (unitStudy with the given replacements) and a
// fresh storage. The study launches no engine default first unless a
// replacement names budget.baseline: the tests that use it count the
// search's own launches (the baseline's tests say baseline: default).
func openFake(t *testing.T, replace ...string) (*space.Study, *storage.Store, string) {
	t.Helper()
	doc := strings.NewReplacer(replace...).Replace(unitStudy)
	dir := t.TempDir()
	st, err := space.Parse(filepath.Join(dir, "unit.yaml"), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "baseline:") {
		st.Budget.Baseline = space.BaselineNone
	}
	path := filepath.Join(dir, "unit.db")
	store, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return st, store, path
}

func runFake(t *testing.T, ctx context.Context, st *space.Study, store *storage.Store, b Backend, parallel int) (Summary, error, []Event) {
	t.Helper()
	var mu sync.Mutex
	var evs []Event
	sum, err := Run(ctx, Options{Study: st, Store: store, Backend: b, LogDir: t.TempDir(), Parallel: parallel,
		Getenv: func(string) string { return "" },
		Events: func(ev Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock(); t.Log(ev.Text) }})
	return sum, err, evs
}

func states(recs []Record) map[string]int {
	out := map[string]int{}
	for _, r := range recs {
		out[r.State]++
	}
	return out
}

// TestRunFakeBackend walks whole trials without processes: the budget is
// spent on launches, failures are classified and stored, nothing stays
// running, and the best trial is the fastest measured config.
func TestRunFakeBackend(t *testing.T) {
	st, store, _ := openFake(t)
	b := &fakeBackend{crash: func(flags string) *launcher.Failure {
		if strings.Contains(flags, "--max-mamba-cache-size 64") {
			return &launcher.Failure{Class: engine.ClassIllegalMemoryAccess, ExitCode: 1, Reason: "CUDA error: an illegal memory access was encountered"}
		}
		return nil
	}}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := states(sum.Records)
	if c[StateComplete]+c[StateFailed] != 6 || c[StateRunning] != 0 || c[StateWaiting] != 0 || len(b.launches) != 6 {
		t.Fatalf("states %v, %d launches", c, len(b.launches))
	}
	best := 0.0
	for _, r := range sum.Records {
		switch r.State {
		case StateFailed:
			if r.FailureClass != engine.ClassIllegalMemoryAccess || r.Reason == "" {
				t.Errorf("trial %d: failed as %q: %q", r.Number, r.FailureClass, r.Reason)
			}
		case StateComplete:
			best = math.Max(best, *r.Score)
			if len(r.Argv) == 0 || r.LogPath == "" || r.GPUs == "" || len(r.Facts) == 0 {
				t.Errorf("trial %d: launch not recorded: %+v", r.Number, r)
			}
		}
	}
	if sum.Best == nil || *sum.Best.Score != best {
		t.Errorf("best %v, want score %v", sum.Best, best)
	}
	if pts, err := store.Points(sum.Best.ID); err != nil || len(pts) != 1 {
		t.Errorf("points of the best trial: %v %v", pts, err)
	}
}

// TestInterruptQueuesRerun: Ctrl-C during a measurement ends the trial as
// interrupted with a queued copy; the next run re-runs it first with the
// same params, also at the top of a step-int range (goptuna's fixed_params
// drop that value), and the budget counts it once.
func TestInterruptQueuesRerun(t *testing.T) {
	st, store, _ := openFake(t, "budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 2, sampler: random, seed: 3, confirm: 0}",
		"low: 64, high: 512", "low: 448, high: 512")
	ctx, cancel := context.WithCancel(context.Background())
	b := &fakeBackend{measure: func(mctx context.Context, flags string) (*objective.Result, error) {
		cancel()
		<-mctx.Done()
		return nil, mctx.Err()
	}}
	sum, err, _ := runFake(t, ctx, st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Interrupted {
		t.Error("not reported as interrupted")
	}
	recs, _ := Records(store, st.Name)
	if len(recs) != 2 || recs[0].State != StateInterrupted || recs[1].State != StateWaiting || *recs[1].RetryOf != recs[0].Number {
		t.Fatalf("after Ctrl-C: %+v", recs)
	}
	first := fmt.Sprint(recs[0].Params)

	b2 := &fakeBackend{}
	sum, err, _ = runFake(t, context.Background(), st, store, b2, 1)
	if err != nil {
		t.Fatal(err)
	}
	recs = sum.Records
	if fmt.Sprint(recs[1].Params) != first || recs[1].State != StateComplete {
		t.Errorf("re-run %v (%s), want params %s", recs[1].Params, recs[1].State, first)
	}
	if len(b2.launches) != 2 || b2.launches[0] != b.launches[0] {
		t.Errorf("launches %q, want the interrupted config first: %q", b2.launches, b.launches[0])
	}
	if c := states(recs); c[StateComplete]+c[StateFailed] != 2 {
		t.Errorf("budget of 2 launches: %v", c)
	}
}

// deadOwnerTrial creates st's study and a RUNNING trial of it (ep, slots)
// whose owner is a process of this host that has ended (kill -9).
func deadOwnerTrial(t *testing.T, st *space.Study, store *storage.Store) (studyID, trialID int) {
	t.Helper()
	study, err := store.LoadOrCreateStudy(st.Name, goptuna.StudyDirectionMaximize, goptuna.StudyOptionStorage(store),
		goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	id, err := store.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	trial := &goptuna.Trial{Study: study, ID: id}
	if _, err := trial.SuggestCategorical("ep", []string{"1", "4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := trial.SuggestStepInt("slots", 64, 512, 64); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := store.SetTrialSystemAttr(id, storage.AttrOwner, fmt.Sprintf("%s:%d", hostname(), cmd.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	return study.ID, id
}

// TestResumeTakesOverDeadOwner: a trial left RUNNING by a process that
// died (kill -9) is ended as interrupted and re-run with its params.
func TestResumeTakesOverDeadOwner(t *testing.T) {
	st, store, _ := openFake(t, "trials: 6", "trials: 1")
	_, id := deadOwnerTrial(t, st, store)
	dead, _ := store.GetTrial(id)

	sum, err, _ := runFake(t, context.Background(), st, store, &fakeBackend{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	recs := sum.Records
	if len(recs) != 2 || recs[0].State != StateInterrupted || !strings.Contains(recs[0].Reason, "stopped without finishing") {
		t.Fatalf("records %+v", recs)
	}
	if recs[1].State != StateComplete || fmt.Sprint(recs[1].Params) != fmt.Sprint(dead.Params) {
		t.Errorf("re-run %+v, want params %v", recs[1], dead.Params)
	}
}

// TestRunSetsOutageWait: a run's store waits for an unreachable
// PostgreSQL server at most half the study's stale window, so that the
// worker gives a write up before other workers take its trial over.
func TestRunSetsOutageWait(t *testing.T) {
	for _, tc := range []struct {
		staleAfter time.Duration // launch.stale_after; 0: unset
		want       time.Duration
	}{
		{0, time.Minute}, // the default 2m
		{30 * time.Second, 15 * time.Second},
		{space.MinStaleAfter, space.MinStaleAfter / 2},
		{10 * time.Minute, time.Minute}, // never more than the store's minute
	} {
		st, store, _ := openFake(t)
		st.Launch.StaleAfter = tc.staleAfter
		if _, _, err := newRunner(Options{Study: st, Store: store, Backend: &fakeBackend{}, Getenv: func(string) string { return "" }}); err != nil {
			t.Fatal(err)
		}
		if got := store.OutageWait(); got != tc.want {
			t.Errorf("stale_after %v: OutageWait %v, want %v", tc.staleAfter, got, tc.want)
		}
	}
}

// TestGroupLeaseFollowsStaleAfter: the lease of the GPU group a worker
// takes lasts the study's stale window, as its trial does, so a worker
// silent that long frees its group when its trial is taken over. It
// lasted a fixed 2m: with stale_after 30s the re-run waited 90 s more for
// the group; with 10m the group was free while the trial still ran.
func TestGroupLeaseFollowsStaleAfter(t *testing.T) {
	for _, tc := range []struct {
		staleAfter time.Duration // launch.stale_after; 0: unset
		want       time.Duration
	}{
		{0, 2 * time.Minute},
		{30 * time.Second, 30 * time.Second},
		{10 * time.Minute, 10 * time.Minute},
	} {
		t.Run(tc.staleAfter.String(), func(t *testing.T) {
			st, store, _ := openFake(t)
			st.Launch.StaleAfter = tc.staleAfter
			r := testRunner(t, st, store, &fakeBackend{})
			ctx := context.Background()
			l, gpus, err := r.leaseGroup(ctx, st.GPUGroups[0])
			if err != nil || l == nil {
				t.Fatalf("leaseGroup: %v, %v", l, err)
			}
			defer l.release()
			got, held, err := store.LeaseOf(ctx, r.groupResource(gpus))
			if err != nil || !held || got.Holder != r.owner {
				t.Fatalf("lease of %v: %+v held %v, %v; want held by %s", gpus, got, held, err, r.owner)
			}
			if d := got.Expires.Sub(got.Acquired); d != tc.want {
				t.Errorf("the group's lease lasts %v, want %v", d, tc.want)
			}
		})
	}
}

// A measured (or pruned) trial is stored before its server is stopped: the
// teardown may wait minutes for the GPUs, and a tuner killed then must not
// lose the measurement. A trial that failed, or whose server exited on its
// own after its last answer, is still classified by how the server ended,
// so it is stored after.
func TestMeasuredTrialStoredBeforeStop(t *testing.T) {
	crash := func(flags string) *launcher.Failure {
		if strings.Contains(flags, "--max-mamba-cache-size 64") {
			return &launcher.Failure{Class: engine.ClassIllegalMemoryAccess, ExitCode: 1, Reason: "CUDA error: an illegal memory access was encountered"}
		}
		return nil
	}
	pruneStudy := []string{"concurrency: [4], requests: [4]", "concurrency: [1, 4], requests: [2, 4]",
		"low: 64, high: 512", "low: 64, high: 1024",
		"budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 12, sampler: random, seed: 3, confirm: 0, prune: {fraction: 0.9}}"}
	for _, tc := range []struct {
		name    string
		replace []string
		b       *fakeBackend
		want    []string // states the run must have stored
	}{
		{"crashes", nil, &fakeBackend{crash: crash}, []string{StateComplete, StateFailed}},
		{"pruned", pruneStudy, &fakeBackend{}, []string{StateComplete, StatePruned}},
		{"exited after its answers", nil, &fakeBackend{exited: crash}, []string{StateComplete, StateFailed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t, tc.replace...)
			b := tc.b
			stops := 0
			b.stop = func(flags string) {
				stops++
				recs, err := Records(store, st.Name)
				if err != nil {
					t.Error(err)
					return
				}
				last := recs[len(recs)-1]
				fails := crash(flags) != nil && (b.crash != nil || b.exited != nil)
				switch {
				case fails && last.State != StateRunning:
					t.Errorf("trial %d (%s) stored %s before its server stopped; want it classified after", last.Number, flags, last.State)
				case !fails && (last.State != StateComplete && last.State != StatePruned || !last.Stopping || len(last.Result) == 0):
					t.Errorf("trial %d (%s) is %s (stopping mark %v, %d bytes of result) when its server stops; want it stored, marked stopping",
						last.Number, flags, last.State, last.Stopping, len(last.Result))
				}
			}
			sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
			if err != nil {
				t.Fatal(err)
			}
			got := states(sum.Records)
			for _, s := range tc.want {
				if got[s] == 0 {
					t.Errorf("states %v: want some %s", got, s)
				}
			}
			if stops != len(b.launches) {
				t.Errorf("%d stops for %d launches", stops, len(b.launches))
			}
			for _, r := range sum.Records {
				if r.Stopping {
					t.Errorf("trial %d keeps its stopping mark after a clean stop", r.Number)
				}
			}
		})
	}
}

// A trial stored before its server stopped, whose owner died before the
// stop ended, may have left server processes behind: the next run kills
// them and clears the mark. A trial whose stop ended has no mark.
func TestStoppingTrialLeftoversKilled(t *testing.T) {
	st, store, _ := openFake(t, "trials: 6", "trials: 1")
	sum, err, _ := runFake(t, context.Background(), st, store, &fakeBackend{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Records) != 1 || sum.Records[0].Stopping {
		t.Fatalf("records %+v: want one, without the stopping mark after its clean stop", sum.Records)
	}

	// A trial stored by a process that died stopping its server.
	st, store, _ = openFake(t, "trials: 6", "trials: 1")
	studyID, id := deadOwnerTrial(t, st, store)
	const uid = "0badf00d"
	if err := store.SetStudySystemAttr(studyID, storage.AttrUID, uid); err != nil {
		t.Fatal(err)
	}
	if err := store.FinishTrial(id, storage.Finish{State: goptuna.TrialStateFail,
		Attrs: map[string]string{storage.AttrState: StateFailed, storage.AttrStopping: "1"}}); err != nil {
		t.Fatal(err)
	}
	leftover := exec.Command("sleep", "300")
	leftover.Env = append(os.Environ(), fmt.Sprintf("SGTUNE_TRIAL=%s/%s/0", safeName(st.Name), uid))
	leftover.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leftover.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- leftover.Wait() }()
	t.Cleanup(func() { _ = leftover.Process.Kill() })

	sum, err, evs := runFake(t, context.Background(), st, store, &fakeBackend{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the leftover server process of a trial whose owner died stopping it still runs")
	}
	if sum.Records[0].Stopping {
		t.Error("the stopping mark stays after its leftovers were killed")
	}
	killed := false
	for _, ev := range evs {
		killed = killed || strings.Contains(ev.Text, "killed 1 leftover server process group")
	}
	if !killed {
		t.Error("no event says the leftover server was killed")
	}
}

// TestRunTakesOverOwnerThatEnds: a trial whose process is alive when the
// run starts is left to it; once that process ends (kill -9, its
// heartbeat still fresh) while the run goes on, the run takes the trial
// over and re-runs it, then confirms and declares the winner, instead of
// ending with the trial running and saying another process finishes the
// study.
func TestRunTakesOverOwnerThatEnds(t *testing.T) {
	st, store, _ := openFake(t, "budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 2, sampler: random, seed: 3, confirm: 1}")
	study, err := store.LoadOrCreateStudy(st.Name, goptuna.StudyDirectionMaximize, goptuna.StudyOptionStorage(store),
		goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	id, err := store.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	trial := &goptuna.Trial{Study: study, ID: id}
	if _, err := trial.SuggestCategorical("ep", []string{"1", "4"}); err != nil {
		t.Fatal(err)
	}
	if _, err := trial.SuggestStepInt("slots", 64, 512, 64); err != nil {
		t.Fatal(err)
	}
	// The owner: a live process of this host, ended by the first launch.
	owner := exec.Command("sleep", "600")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	var endOnce sync.Once
	end := func() {
		endOnce.Do(func() {
			owner.Process.Kill()
			owner.Wait()
		})
	}
	t.Cleanup(end)
	if err := store.SetTrialSystemAttr(id, storage.AttrOwner, fmt.Sprintf("%s:%d", hostname(), owner.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.ClaimLaunch(context.Background(), id, 2); err != nil || !ok {
		t.Fatalf("claim the owner's launch: %v %v", ok, err)
	}
	orphan, err := store.GetTrial(id)
	if err != nil {
		t.Fatal(err)
	}

	var aliveState string
	b := &fakeBackend{}
	b.measure = func(ctx context.Context, flags string) (*objective.Result, error) {
		b.mu.Lock()
		first := len(b.launches) == 1
		b.mu.Unlock()
		if first {
			recs, err := Records(store, st.Name)
			if err != nil {
				return nil, err
			}
			aliveState = recs[0].State
			end()
		}
		return result(4, tokS(flags), 0.1), nil
	}
	sum, err, evs := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if aliveState != StateRunning {
		t.Errorf("trial 0 was %s while its owner was alive, want it left running", aliveState)
	}
	c := states(sum.Records)
	if c[StateRunning] != 0 || c[StateWaiting] != 0 {
		t.Fatalf("the run ended with trials running or waiting: %v", c)
	}
	recs := sum.Records
	if recs[0].State != StateInterrupted || !strings.Contains(recs[0].Reason, "stopped without finishing") {
		t.Errorf("trial 0: %s %q, want interrupted: its owner stopped", recs[0].State, recs[0].Reason)
	}
	rerun := false
	for _, rec := range recs {
		if rec.RetryOf != nil && *rec.RetryOf == 0 && rec.State == StateComplete && fmt.Sprint(rec.Params) == fmt.Sprint(orphan.Params) {
			rerun = true
		}
	}
	if !rerun {
		t.Errorf("trial 0 was not re-run with its params %v: %+v", orphan.Params, recs)
	}
	if sum.Winner == nil {
		t.Error("no winner declared")
	}
	for _, ev := range evs {
		if strings.Contains(ev.Text, "other processes") {
			t.Errorf("said %q with no other process alive", ev.Text)
		}
	}
}

// TestStoreFailureEndsTrial: a trial whose end cannot be stored (a NaN
// score is refused) is ended as interrupted with the reason, queued again,
// and the run reports the error instead of dropping it.
func TestStoreFailureEndsTrial(t *testing.T) {
	st, store, _ := openFake(t)
	b := &fakeBackend{measure: func(ctx context.Context, flags string) (*objective.Result, error) {
		return result(4, math.NaN(), 0.1), nil
	}}
	_, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Fatalf("error %v, want the refused write", err)
	}
	recs, _ := Records(store, st.Name)
	c := states(recs)
	if c[StateInterrupted] != 1 || c[StateWaiting] != 1 || c[StateRunning] != 0 {
		t.Errorf("states %v", c)
	}
	if !strings.Contains(recs[0].Reason, "NaN") {
		t.Errorf("reason %q", recs[0].Reason)
	}
}

// TestParallelNeverSameConfigAtOnce: with two GPU groups and a space of
// two configs, no config ever runs twice at the same time.
func TestParallelNeverSameConfigAtOnce(t *testing.T) {
	for _, smp := range []string{"random", "tpe", "bayes"} {
		t.Run(smp, func(t *testing.T) {
			st, store, _ := openFake(t, "low: 64, high: 512", "low: 512, high: 512", "trials: 6", "trials: 2", "sampler: random", "sampler: "+smp)
			// Measurements end together, once both workers had time to
			// start, so the second worker proposes while the first config
			// runs.
			b := &fakeBackend{gate: make(chan struct{})}
			time.AfterFunc(300*time.Millisecond, func() { close(b.gate) })
			sum, err, _ := runFake(t, context.Background(), st, store, b, 2)
			if err != nil {
				t.Fatal(err)
			}
			if b.maxSame > 1 {
				t.Errorf("a config ran %d times at once", b.maxSame)
			}
			if c := states(sum.Records); c[StateComplete] != 2 {
				t.Errorf("states %v, launches %q", c, b.launches)
			}
		})
	}
}

// TestGridSampler: the grid proposes the space in order and the study ends
// when every point was proposed.
func TestGridSampler(t *testing.T) {
	st, store, _ := openFake(t, "sampler: random", "sampler: grid", "trials: 6", "trials: 40")
	b := &fakeBackend{}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Records) != 16 || len(b.launches) != 16 {
		t.Fatalf("%d trials, %d launches; want the 16 configs once each", len(sum.Records), len(b.launches))
	}
	for i, r := range sum.Records {
		want := fmt.Sprintf("map[ep:%d slots:%d]", []int{1, 4}[i/8], 64*(1+i%8))
		if fmt.Sprint(r.Params) != want {
			t.Errorf("trial %d params %v, want %s", i, r.Params, want)
		}
	}
}

// TestGridPointsBuiltOnce: the run's grid sampler takes the points the
// preflight built instead of listing the space a second time: given a
// preflight whose grid was cut to its first three points, the study ends
// after those three.
func TestGridPointsBuiltOnce(t *testing.T) {
	st, store, _ := openFake(t, "sampler: random", "sampler: grid", "trials: 6", "trials: 40")
	pre := Check(st, func(string) string { return "" })
	if len(pre.grid) != 16 {
		t.Fatalf("the preflight built %d grid points, want the 16 configs", len(pre.grid))
	}
	pre.grid = pre.grid[:3]
	b := &fakeBackend{}
	sum, err := Run(context.Background(), Options{Study: st, Store: store, Backend: b, LogDir: t.TempDir(), Parallel: 1,
		Getenv: func(string) string { return "" }, Preflight: &pre})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Records) != 3 || len(b.launches) != 3 {
		t.Errorf("%d trials, %d launches; want the preflight's 3 points", len(sum.Records), len(b.launches))
	}
}

// groupBackend counts the servers running on each GPU group at once.
type groupBackend struct {
	fakeBackend
	gmu     sync.Mutex
	onGroup map[string]int
	maxOn   int
}

func (b *groupBackend) Start(ctx context.Context, spec launcher.Spec) (Running, error) {
	g := fmt.Sprint(spec.GPUs)
	b.gmu.Lock()
	if b.onGroup == nil {
		b.onGroup = map[string]int{}
	}
	b.onGroup[g]++
	b.maxOn = max(b.maxOn, b.onGroup[g])
	b.gmu.Unlock()
	run, err := b.fakeBackend.Start(ctx, spec)
	return &groupRunning{Running: run, b: b, group: g}, err
}

type groupRunning struct {
	Running
	b     *groupBackend
	group string
}

func (g *groupRunning) Stop(ctx context.Context) (*launcher.Failure, error) {
	f, err := g.Running.Stop(ctx)
	g.b.gmu.Lock()
	g.b.onGroup[g.group]--
	g.b.gmu.Unlock()
	return f, err
}

// TestTwoRunsShareStudy: two runs of one study on one storage and one GPU
// group never run two trials on the group at once, and together launch
// exactly the study's budget.
func TestTwoRunsShareStudy(t *testing.T) {
	st, store, path := openFake(t, "groups: [[0, 1, 2, 3], [4, 5, 6, 7]]", "groups: [[0, 1, 2, 3]]")
	second, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { second.Close() })
	b := &groupBackend{}
	b.measure = func(ctx context.Context, flags string) (*objective.Result, error) {
		time.Sleep(20 * time.Millisecond) // long enough for the other run to try the group
		return result(4, tokS(flags), 0.1), nil
	}
	defer func(d time.Duration) { leaseWait = d }(leaseWait)
	leaseWait = 10 * time.Millisecond
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range []*storage.Store{store, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Run(context.Background(), Options{Study: st, Store: s, Backend: b, LogDir: t.TempDir(),
				Getenv: func(string) string { return "" }, Name: fmt.Sprint("run", i),
				Events: func(ev Event) { t.Logf("run %d: %s", i, ev.Text) }})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if b.maxOn != 1 {
		t.Errorf("%d servers ran on the GPU group at once", b.maxOn)
	}
	recs, _ := Records(store, st.Name)
	if c := states(recs); c[StateComplete]+c[StateFailed] != 6 || len(b.launches) != 6 {
		t.Errorf("launched %d (states %v); want the budget of 6", len(b.launches), c)
	}
}

// TestPruneKeepsPartialPoints: a trial whose cheap level is far below the
// best is stopped there, stored pruned with its partial points, and never
// wins.
func TestPruneKeepsPartialPoints(t *testing.T) {
	st, store, _ := openFake(t, "concurrency: [4], requests: [4]", "concurrency: [1, 4], requests: [2, 4]",
		"low: 64, high: 512", "low: 64, high: 1024",
		"budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 12, sampler: random, seed: 3, confirm: 0, prune: {fraction: 0.9}}")
	b := &fakeBackend{}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	pruned := 0
	for _, r := range sum.Records {
		if r.State != StatePruned {
			continue
		}
		pruned++
		pts, err := store.Points(r.ID)
		if err != nil || len(pts) != 1 || pts[0].Concurrency != 1 {
			t.Errorf("trial %d: partial points %v %v", r.Number, pts, err)
		}
		// Stopped before the scored level (c=4), it read no score: none is
		// stored (a 0 read as a score in reports and exports).
		if r.Score != nil || r.ScoreOK || r.ScoreReason != "no point at concurrency 4" || !strings.Contains(r.Reason, "budget.prune: fraction 0.90") {
			t.Errorf("trial %d: score %v ok %v score reason %q reason %q", r.Number, r.Score, r.ScoreOK, r.ScoreReason, r.Reason)
		}
		if sum.Best != nil && sum.Best.Number == r.Number {
			t.Errorf("pruned trial %d is the winner", r.Number)
		}
	}
	if pruned == 0 {
		t.Errorf("nothing pruned: %v", states(sum.Records))
	}
}

// TestFlaggedLevelDoesNotPrune: the study TestPruneKeepsPartialPoints
// prunes, with every cheap level's point flagged (a single repeat far below
// its own warm-up: make demo's cold C16), prunes nothing and says so.
func TestFlaggedLevelDoesNotPrune(t *testing.T) {
	st, store, _ := openFake(t, "concurrency: [4], requests: [4]", "concurrency: [1, 4], requests: [2, 4]",
		"low: 64, high: 512", "low: 64, high: 1024",
		"budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 12, sampler: random, seed: 3, confirm: 0, prune: {fraction: 0.9}}")
	b := &fakeBackend{outlier: "1.0 tok/s < 0.50 x its warm-up's 9.0"}
	sum, err, evs := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := states(sum.Records); c[StatePruned] != 0 {
		t.Errorf("pruned on flagged points: %v", c)
	}
	kept := 0
	for _, ev := range evs {
		if ev.Kind == EventNote && strings.Contains(ev.Text, "not pruned on flagged points (1.0 tok/s < 0.50 x its warm-up's 9.0): C1: ") {
			kept++
		}
	}
	if kept == 0 {
		t.Error("no trial says it was not pruned on its flagged point")
	}
}

// TestConfirmDeclaresWinner: once the budget is spent the top configs are
// measured again, interleaved and outside the budget, and the winner is
// declared on the pooled runs; a noisy rerun that drops the first-ranked
// config below the second changes the winner.
func TestConfirmDeclaresWinner(t *testing.T) {
	st, store, _ := openFake(t, "confirm: 0}", "confirm: 2, confirm_rounds: 2}")
	var mu sync.Mutex
	runs := map[string]int{}
	b := &fakeBackend{}
	b.measure = func(ctx context.Context, flags string) (*objective.Result, error) {
		mu.Lock()
		runs[flags]++
		n := runs[flags]
		mu.Unlock()
		v := tokS(flags)
		if n > 1 && strings.Contains(flags, "--ep-size 4") {
			v *= 0.5 // ep 4 configs measure far lower when run again
		}
		return result(4, v, 0.1), nil
	}
	sum, err, evs := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	launched, confirms := 0, map[int]int{}
	for _, r := range sum.Records {
		if r.ConfirmOf != nil {
			confirms[*r.ConfirmOf]++
		} else if r.State == StateComplete || r.State == StateFailed {
			launched++
		}
	}
	if launched != 6 || len(confirms) != 2 {
		t.Fatalf("%d launched by the search, confirmations %v", launched, confirms)
	}
	for orig, n := range confirms {
		if n != 2 {
			t.Errorf("trial %d confirmed %d times, want 2", orig, n)
		}
	}
	if sum.Winner == nil || sum.Best == nil || sum.Best.Number != sum.Winner.Trial || len(sum.Winner.Runs) != 3 {
		t.Fatalf("winner %+v best %+v", sum.Winner, sum.Best)
	}
	w := sum.Winner
	for _, c := range w.Candidates {
		total := 0.0
		for _, m := range c.Runs {
			total += m.Score
		}
		if len(c.Runs) != 3 || math.Abs(c.Pooled-total/3) > 1e-9 {
			t.Errorf("candidate %+v: want 3 runs pooled by their mean", c)
		}
	}
	if again, _ := Declare(w.Candidates); again.Trial != w.Trial {
		t.Errorf("winner %d, the candidates say %d", w.Trial, again.Trial)
	}
	stored, ok, err := ReadWinner(store, st.Name)
	if err != nil || !ok || stored.Trial != w.Trial || stored.Reason == "" {
		t.Errorf("stored winner %+v %v %v", stored, ok, err)
	}
	var sawConfirm bool
	for _, ev := range evs {
		sawConfirm = sawConfirm || ev.Kind == EventConfirming
	}
	if !sawConfirm {
		t.Error("no confirming event")
	}
}

// TestConfirmingEventCountsQueuedRuns: the confirming event counts every
// confirmation run waiting to start, the live line's time left among them,
// not only those this run queued: a resumed confirmation found some or all
// of them queued already (it reported 2 of 4, or sent no event at all).
func TestConfirmingEventCountsQueuedRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before int // confirmation runs queued before the run, of the 4
	}{
		{"none queued before", 0},
		{"round one queued before", 2},
		{"all queued before", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t)
			if _, err, _ := runFake(t, context.Background(), st, store, &fakeBackend{}, 1); err != nil {
				t.Fatal(err)
			}
			doc := strings.NewReplacer("confirm: 0}", "confirm: 2, confirm_rounds: 2}").Replace(unitStudy)
			confirming, err := space.Parse(st.Path, []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			recs, err := Records(store, st.Name)
			if err != nil {
				t.Fatal(err)
			}
			top, err := topConfigs(confirming, recs, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(top) != 2 {
				t.Fatalf("top configs %v", top)
			}
			for i := range tc.before { // interleaved, as the run queues them
				orig := top[i%len(top)]
				if _, err := store.QueueCopy(orig.ID, map[string]string{storage.AttrConfirmOf: strconv.Itoa(orig.Number)}); err != nil {
					t.Fatal(err)
				}
			}
			b := &fakeBackend{}
			sum, err, evs := runFake(t, context.Background(), confirming, store, b, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.launches) != 4 || sum.Winner == nil {
				t.Fatalf("%d launches, winner %+v; want the 4 confirmation runs and a winner", len(b.launches), sum.Winner)
			}
			var queued []int
			for _, ev := range evs {
				if ev.Kind == EventConfirming {
					queued = append(queued, ev.Queued)
				}
			}
			if !slices.Equal(queued, []int{4}) {
				t.Errorf("confirming events' queued runs %v, want [4]", queued)
			}
		})
	}
}

// TestEventsCarryETAFigures: events carry what the live line's time left
// needs: the trials run at once, the confirmation runs still to run once
// the search is over (at most as many configs as were measured, less the
// runs that ran to an end: none after confirming, and on a resumed study
// those its stored runs left; it counted them all again) and, on a
// resumed study, how long its stored launches took.
func TestEventsCarryETAFigures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		confirm  string
		parallel int
		confirms int // on the search's last event
		stop     int // the first run is interrupted once this many confirmation runs ended (0: it runs to the end)
	}{
		{"no confirmation", "confirm: 0", 1, 0, 0},
		{"one config, two rounds", "confirm: 1, confirm_rounds: 2", 2, 2, 0},
		{"three configs asked, two measured", "confirm: 3, confirm_rounds: 2", 2, 4, 0},
		{"interrupted after one confirmation run", "confirm: 3, confirm_rounds: 2", 1, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t, "trials: 6", "trials: 2", "confirm: 0", tc.confirm)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := &fakeBackend{}
			if tc.stop > 0 {
				var n atomic.Int32
				b.measure = func(mctx context.Context, flags string) (*objective.Result, error) {
					if int(n.Add(1)) <= 2+tc.stop { // the 2 search trials, then the confirmation runs to end
						return result(4, tokS(flags), 0.1), nil
					}
					cancel()
					<-mctx.Done()
					return nil, mctx.Err()
				}
			}
			_, err, evs := runFake(t, ctx, st, store, b, tc.parallel)
			if err != nil {
				t.Fatal(err)
			}
			last, confirming := Event{}, false
			for _, ev := range evs {
				if ev.Parallel != tc.parallel {
					t.Fatalf("%s event: parallel %d, want %d", ev.Kind, ev.Parallel, tc.parallel)
				}
				if ev.Kind == EventStudy && (ev.Confirms != 0 || ev.Ran != 0) {
					t.Errorf("a new study's event: %d confirms, %d ran; want none", ev.Confirms, ev.Ran)
				}
				switch ev.Kind {
				case EventFinished:
					if !confirming {
						last = ev
					}
				case EventConfirming:
					confirming = true
					if ev.Queued != tc.confirms {
						t.Errorf("confirming event queued %d, want %d", ev.Queued, tc.confirms)
					}
				}
			}
			if last.Confirms != tc.confirms {
				t.Errorf("the search's last event: %d confirmation runs to come, want %d", last.Confirms, tc.confirms)
			}
			done := tc.confirms // confirmation runs that ran to an end in the first run
			if tc.stop > 0 {
				done = tc.stop
			}
			if ev := evs[len(evs)-1]; ev.Confirms != tc.confirms-done {
				t.Errorf("the first run's last event (%s): %d confirmation runs to come, want %d", ev.Kind, ev.Confirms, tc.confirms-done)
			}
			recs, err := Records(store, st.Name)
			if err != nil {
				t.Fatal(err)
			}
			ran, ranFor, confirmed := 0, time.Duration(0), 0
			for _, rec := range recs {
				if RanToEnd(rec.State) && rec.End != nil {
					ran, ranFor = ran+1, ranFor+rec.End.Sub(rec.Start)
					if rec.ConfirmOf != nil {
						confirmed++
					}
				}
			}
			if confirmed != done {
				t.Fatalf("%d confirmation runs stored as run to an end, want %d", confirmed, done)
			}
			_, err, evs = runFake(t, context.Background(), st, store, &fakeBackend{}, tc.parallel)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(evs, func(ev Event) bool { return ev.Kind == EventStudy })
			if i < 0 {
				t.Fatal("no study event")
			}
			if ev := evs[i]; ev.Ran != ran || ev.RanFor != ranFor || ran != 2+done || ranFor <= 0 {
				t.Errorf("resumed study's event: ran %d for %v, want %d for %v (2 trials + %d confirmation runs)", ev.Ran, ev.RanFor, ran, ranFor, done)
			}
			if ev := evs[i]; ev.Confirms != tc.confirms-done {
				t.Errorf("resumed study's event: %d confirmation runs to come, want %d (%d of %d ran to an end before)", ev.Confirms, tc.confirms-done, done, tc.confirms)
			}
		})
	}
}

// TestPool: a run that failed or missed counts 0 in the mean but is no
// measurement in the spread; a config with a failed rerun does not tie,
// on that 0, with a better one and win it on fewer flags.
func TestPool(t *testing.T) {
	met := func(s float64) Measurement { return Measurement{Score: s, OK: true} }
	missed := Measurement{}
	for _, tt := range []struct {
		name           string
		runs           []Measurement
		pooled, spread float64
	}{
		{"every run met", []Measurement{met(100), met(110), met(120)}, 110, 20},
		{"a missed run counts 0 in the mean, not in the spread", []Measurement{met(100), met(120), missed}, 220.0 / 3, 20},
		{"one run met: no spread measured", []Measurement{met(100), missed}, 50, 0},
		{"no run met", []Measurement{missed, missed}, 0, 0},
		{"one run", []Measurement{met(100)}, 100, 0},
	} {
		pooled, spread := Pool(tt.runs)
		if math.Abs(pooled-tt.pooled) > 1e-9 || spread != tt.spread {
			t.Errorf("%s: pooled %v spread %v, want %v %v", tt.name, pooled, spread, tt.pooled, tt.spread)
		}
	}
	// Trial 2 changes fewer flags, but its rerun crashed: pooled at half
	// of trial 1's, it is no tie.
	pool := func(trial, flags int, runs ...Measurement) Candidate {
		c := Candidate{Trial: trial, Flags: flags, Runs: runs}
		c.Pooled, c.Spread = Pool(runs)
		return c
	}
	w, ok := Declare([]Candidate{pool(1, 8, met(1000), met(1040)), pool(2, 2, met(1010), missed)})
	if !ok || w.Trial != 1 || len(w.TiedWith) != 0 {
		t.Errorf("winner %d tied with %v (%s); want trial 1 alone", w.Trial, w.TiedWith, w.Reason)
	}
}

func TestDeclare(t *testing.T) {
	run := func(trial int, scores ...float64) Candidate {
		c := Candidate{Trial: trial}
		lo, hi, sum := scores[0], scores[0], 0.0
		for _, s := range scores {
			c.Runs = append(c.Runs, Measurement{Score: s, OK: true})
			lo, hi, sum = min(lo, s), max(hi, s), sum+s
		}
		c.Pooled, c.Spread = sum/float64(len(scores)), hi-lo
		return c
	}
	simple := func(c Candidate, flags int) Candidate { c.Flags = flags; return c }
	tests := []struct {
		name  string
		cands []Candidate
		win   int
		tied  string
		say   string
	}{
		{"clear win", []Candidate{simple(run(1, 100, 102), 3), simple(run(2, 90, 91), 1)}, 1, "[]", "more than either spread"},
		{"tie within 1% goes to the simpler", []Candidate{simple(run(1, 100, 110), 5), simple(run(2, 102, 106.5), 2)}, 2, "[1]", "the simpler config wins (2 flags vs 5)"},
		// The real llama-server's two runs: 3.8% apart inside a spread of
		// 10: the best pooled score wins, though it sets a flag more.
		{"tie beyond 1% goes to the best", []Candidate{simple(run(17, 180.1, 227.3), 6), simple(run(15, 188.5, 188.5), 5)}, 17, "[15]", "no simpler config is within 1%"},
		{"tie, the best is also the simplest", []Candidate{simple(run(1, 100, 110), 1), simple(run(2, 98, 104), 2)}, 1, "[2]", "no simpler config is within 1%"},
		{"only one", []Candidate{run(7, 50)}, 7, "[]", "the only confirmed config"},
	}
	for _, tc := range tests {
		w, ok := Declare(tc.cands)
		if !ok || w.Trial != tc.win || fmt.Sprint(w.TiedWith) != tc.tied || !strings.Contains(w.Reason, tc.say) {
			t.Errorf("%s: winner %d tied %v reason %q; want %d %s %q", tc.name, w.Trial, w.TiedWith, w.Reason, tc.win, tc.tied, tc.say)
		}
	}
	if _, ok := Declare(nil); ok {
		t.Error("a winner from nothing")
	}
}

// TestTPEDoesNotStallOnDuplicates: on a space of 16 configs whose last
// param is conditional (TPE cannot tell a repeat before its last param,
// and a config without it is complete earlier), TPE fills a
// budget of 12 launches without proposing the same config over and over
// (a duplicate teaches it nothing; the loop hands the next ask to random).
func TestTPEDoesNotStallOnDuplicates(t *testing.T) {
	st, store, _ := openFake(t, "trials: 6, sampler: random", "trials: 12, sampler: tpe",
		"- {name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}",
		"- {name: slots, type: int, low: 64, high: 128, step: 64, flag: --max-mamba-cache-size}\n"+
			"  - {name: spec, type: categorical, choices: [none, EAGLE], values: {none: '', EAGLE: --speculative-algorithm EAGLE --speculative-eagle-topk 1}}\n"+
			"  - {name: steps, type: int, low: 1, high: 3, flag: --speculative-num-steps, when: \"spec == 'EAGLE'\"}")
	b := &fakeBackend{}
	sum, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := states(sum.Records)
	if len(b.launches) != 12 || len(sum.Records) > 60 {
		t.Errorf("%d launches, %d trials stored (%v); want the budget of 12 without a long run of duplicates", len(b.launches), len(sum.Records), c)
	}
}

// rerunBackend measures every config a tenth as fast from its second run on,
// level by level with the load generator's AfterLevel hook, so that a
// rerun would be pruned at its first level if reruns were pruned.
type rerunBackend struct {
	fakeBackend
	runs map[string]int
}

func (b *rerunBackend) Start(ctx context.Context, spec launcher.Spec) (Running, error) {
	r, err := b.fakeBackend.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.runs == nil {
		b.runs = map[string]int{}
	}
	flags := r.(*fakeRunning).flags
	b.runs[flags]++
	return &rerunRunning{fakeRunning: r.(*fakeRunning), slow: b.runs[flags] > 1}, nil
}

type rerunRunning struct {
	*fakeRunning
	slow bool
}

func (f *rerunRunning) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	scale := 1.0
	if f.slow {
		scale = 0.1
	}
	res := &objective.Result{Kind: "chat"}
	levels := w.Chat.Concurrency
	for i, c := range levels {
		p := result(c, scale*tokS(f.flags)*float64(c)/4, 0.1).Points[0]
		res.Points = append(res.Points, p)
		res.Medians = objective.Medians(res.Points)
		if opt.AfterLevel != nil && i < len(levels)-1 {
			if f.b.level != nil {
				f.b.level(f.flags, c)
			}
			if err := opt.AfterLevel(c, []objective.Point{p}); err != nil {
				return res, fmt.Errorf("after concurrency %d: %w", c, err)
			}
		}
	}
	return res, nil
}

// TestConfirmRunsAreNotPruned: a confirmation run measures its config in
// full even when its first level is far below the best (a pruned rerun would
// pool as 0 and decide the winner on noise).
func TestConfirmRunsAreNotPruned(t *testing.T) {
	st, store, _ := openFake(t, "concurrency: [4], requests: [4]", "concurrency: [1, 4], requests: [2, 4]",
		"budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 6, sampler: random, seed: 3, confirm: 2, prune: {fraction: 0.5, min_complete: 1}}")
	sum, err, _ := runFake(t, context.Background(), st, store, &rerunBackend{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	confirms := 0
	for _, r := range sum.Records {
		if r.ConfirmOf == nil {
			continue
		}
		confirms++
		if r.State != StateComplete {
			t.Errorf("confirmation run %d of trial %d: %s (%s)", r.Number, *r.ConfirmOf, r.State, r.Reason)
		}
	}
	if confirms != 2 || sum.Winner == nil {
		t.Fatalf("%d confirmation runs, winner %+v", confirms, sum.Winner)
	}
	for _, c := range sum.Winner.Candidates {
		for _, m := range c.Runs {
			if !m.OK || m.Score <= 0 {
				t.Errorf("candidate %d: run %+v did not count its measurement", c.Trial, m)
			}
		}
	}
}

// TestResumeRefusesChangedStudy: a study resumed from a file whose fixed
// flags, a param's or derived flag's text, workload or score changed would
// mix trials that do not compare;
// the run refuses (exit code 2) naming the sections, launches and writes
// nothing. A larger budget or a wider param keeps every trial valid and
// resumes.
func TestResumeRefusesChangedStudy(t *testing.T) {
	st, store, _ := openFake(t, "trials: 6", "trials: 2")
	b := &fakeBackend{}
	if _, err, _ := runFake(t, context.Background(), st, store, b, 1); err != nil {
		t.Fatal(err)
	}
	reparse := func(replace ...string) *space.Study {
		t.Helper()
		doc := strings.NewReplacer(replace...).Replace(unitStudy)
		edited, err := space.Parse(st.Path, []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return edited
	}
	before, err := Records(store, st.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		replace []string
		want    string
	}{
		{[]string{"--tp-size: 4", "--tp-size: 2"}, ": fixed changed since"},
		{[]string{"max_tokens: 8", "max_tokens: 16", "concurrency: 4}", "concurrency: 4, slo: [{metric: ttft, percentile: p50, max_s: 1}]}"}, ": score, workload changed since"},
		{[]string{"model: m", "model: other"}, ": model changed since"},
		// A param's values mean the flags they pass.
		{[]string{"flag: --ep-size}", "flag: --expert-parallel-size}"}, ": params.ep, params.ep[1], params.ep[4] changed since"},
		{[]string{"flag: --ep-size}", `flag: --ep-size, values: {"4": "--ep-size 4 --enable-eplb"}}`}, ": params.ep[4] changed since"},
		{[]string{"score: {", "derived: [{flag: --speculative-num-draft-tokens, value: ep + 1}]\nscore: {"}, ": derived changed since"},
	} {
		b.launches = nil
		_, err, _ := runFake(t, context.Background(), reparse(tc.replace...), store, b, 1)
		if errext.Code(err) != errext.BadInput || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%v: got %v (exit %d), want exit 2 with %q", tc.replace, err, errext.Code(err), tc.want)
		}
		if len(b.launches) != 0 {
			t.Errorf("%v: launched %d trials", tc.replace, len(b.launches))
		}
	}
	if after, err := Records(store, st.Name); err != nil || len(after) != len(before) {
		t.Fatalf("refused runs wrote trials: %d -> %d (%v)", len(before), len(after), err)
	}
	sum, err, _ := runFake(t, context.Background(), reparse("trials: 6", "trials: 4", "high: 512", "high: 1024", "choices: [1, 4]", "choices: [1, 4, 8]"), store, b, 1)
	if err != nil {
		t.Fatalf("a larger budget, a wider param and another choice: %v", err)
	}
	if c := states(sum.Records); c[StateComplete] != 4 {
		t.Errorf("resumed with a larger budget: states %v, want 4 complete", c)
	}
	// A choice dropped and brought back with other flag text is refused:
	// the dropped choice's key stays stored.
	if _, err, _ := runFake(t, context.Background(), reparse("trials: 6", "trials: 4", "choices: [1, 4]", "choices: [1]"), store, b, 1); err != nil {
		t.Fatalf("a narrower param: %v", err)
	}
	_, err, _ = runFake(t, context.Background(), reparse("trials: 6", "trials: 5", "flag: --ep-size}", `flag: --ep-size, values: {"4": "--ep-size 4 --enable-eplb"}}`), store, b, 1)
	if !strings.Contains(fmt.Sprint(err), ": params.ep[4] changed since") {
		t.Errorf("choice 4 dropped, then back with other flags: got %v, want params.ep[4] refused", err)
	}
	// A store whose fingerprint predates the params' sections resumes
	// (nothing there to compare) and stores them for the next resume.
	id, err := store.GetStudyIDFromName(st.Name)
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := store.GetStudySystemAttrs(id)
	if err != nil {
		t.Fatal(err)
	}
	var fp map[string]string
	if err := json.Unmarshal([]byte(attrs[storage.AttrFingerprint]), &fp); err != nil {
		t.Fatal(err)
	}
	maps.DeleteFunc(fp, func(k, _ string) bool { return strings.HasPrefix(k, "params.") || k == "derived" })
	old, err := json.Marshal(fp)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SetStudySystemAttr(id, storage.AttrFingerprint, string(old)); err != nil {
		t.Fatal(err)
	}
	renamed := reparse("trials: 6", "trials: 5", "flag: --ep-size}", "flag: --expert-parallel-size}")
	if _, err, _ := runFake(t, context.Background(), renamed, store, b, 1); err != nil {
		t.Fatalf("a store without the params' fingerprint: %v", err)
	}
	_, err, _ = runFake(t, context.Background(), reparse("trials: 6", "trials: 5"), store, b, 1)
	if !strings.Contains(fmt.Sprint(err), ": params.ep, params.ep[1], params.ep[4] changed since") {
		t.Errorf("the flag renamed back after the params' fingerprint was stored: got %v", err)
	}
}

// TestIdleWorkerLeavesConfirmation: a worker that finds the GPU group held
// and the budget spent neither confirms nor declares while another
// process's search trial still runs (it declared on the trials so far, and
// queued confirmation runs the busy worker's search loop never ran, so it
// spun); the busy worker confirms and declares once its trial is done.
func TestIdleWorkerLeavesConfirmation(t *testing.T) {
	// One GPU group, which a holds: b finds none free.
	st, store, path := openFake(t, "budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 2, sampler: random, seed: 3, confirm: 1}",
		"groups: [[0, 1, 2, 3], [4, 5, 6, 7]]", "groups: [[0, 1, 2, 3]]")
	store2, err := storage.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store2.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := func(name string, s *storage.Store, b Backend) Options {
		return Options{Study: st, Store: s, Backend: b, LogDir: t.TempDir(), Worker: true, Name: name, Parallel: 1,
			Getenv: func(string) string { return "" }, Events: func(ev Event) { t.Log(name, ev.Text) }}
	}
	busy := &fakeBackend{gate: make(chan struct{}, 1)}
	busy.gate <- struct{}{} // a's first trial completes, its second runs
	type result struct {
		sum Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := Run(ctx, opts("a", store, busy))
		done <- result{sum, err}
	}()
	// Wait for a's second trial to run, then run b to its end.
	for {
		recs, err := Records(store2, st.Name)
		if err != nil && !errors.Is(err, ErrNoStudy) {
			t.Fatal(err)
		}
		if c := states(recs); c[StateComplete] == 1 && c[StateRunning] == 1 {
			break
		}
		select {
		case a := <-done:
			t.Fatalf("worker a ended before its trial ran: %v", a.err)
		case <-ctx.Done():
			t.Fatal("worker a's trial never ran")
		case <-time.After(20 * time.Millisecond):
		}
	}
	idle := &fakeBackend{}
	sum, err := Run(ctx, opts("b", store2, idle))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Winner != nil || len(idle.launches) != 0 {
		t.Errorf("idle worker: winner %+v, %d launches", sum.Winner, len(idle.launches))
	}
	if recs, err := Records(store2, st.Name); err != nil || len(recs) != 2 {
		t.Errorf("idle worker queued confirmation runs while the search trial ran: %v %v", states(recs), err)
	}
	close(busy.gate)
	var a result
	select {
	case a = <-done:
	case <-ctx.Done():
		t.Fatal("the busy worker never finished (the confirmation runs were never run)")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.sum.Winner == nil || len(busy.launches) != 3 || states(a.sum.Records)[StateComplete] != 3 {
		t.Errorf("busy worker: winner %+v, %d launches, states %v", a.sum.Winner, len(busy.launches), states(a.sum.Records))
	}
}

// TestLostBudgetRaceIsUnlaunched: two workers start together on a budget
// of one launch; the proposal that loses the race is stored unlaunched
// (not interrupted: it is never re-run) and the study counts one launch.
// Both workers nearly always ask before either claims; the study is run
// until they did.
func TestLostBudgetRaceIsUnlaunched(t *testing.T) {
	for try := 0; try < 20; try++ {
		st, store, _ := openFake(t, "budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 1, sampler: random, seed: 3, confirm: 0}")
		b := &fakeBackend{}
		sum, err, evs := runFake(t, context.Background(), st, store, b, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(evs[0].Text, "; 2 trials at a time") {
			t.Errorf("the study's first line: %q, want it to say 2 trials at a time", evs[0].Text)
		}
		c := states(sum.Records)
		if c[StateComplete] != 1 || c[StateInterrupted] != 0 || c[StateUnlaunched] > 1 || len(b.launches) != 1 {
			t.Fatalf("states %v, %d launches; want 1 complete and at most 1 unlaunched", c, len(b.launches))
		}
		if c[StateUnlaunched] == 1 {
			return
		}
	}
	t.Error("in 20 studies no proposal lost the race for the last launch")
}

// TestRerunsKeepTheirConfig: a confirmation run or the retry of an
// interrupted trial launches the config of the trial it re-runs, also
// when the study file changed the space between runs (choices reordered,
// or the trial's value dropped). The re-run took the stored internal
// params (a choice's index) decoded against the edited file, so another
// config ran, and was pooled, under the original's name.
func TestRerunsKeepTheirConfig(t *testing.T) {
	for _, tc := range []struct {
		name      string
		interrupt bool
		edit      string
	}{
		{"confirmation after reordered choices", false, "choices: [4, 1]"},
		{"confirmation after the value was dropped", false, "choices: [2, 3]"},
		{"retry after reordered choices", true, "choices: [4, 1]"},
		{"retry after the value was dropped", true, "choices: [2, 3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b := &fakeBackend{}
			if tc.interrupt {
				b.measure = func(mctx context.Context, flags string) (*objective.Result, error) {
					cancel()
					<-mctx.Done()
					return nil, mctx.Err()
				}
			}
			if _, err, _ := runFake(t, ctx, st, store, b, 1); err != nil {
				t.Fatal(err)
			}
			doc := strings.NewReplacer("choices: [1, 4]", tc.edit, "confirm: 0}", "confirm: 2, confirm_rounds: 2}").Replace(unitStudy)
			edited, err := space.Parse(st.Path, []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			sum, err, _ := runFake(t, context.Background(), edited, store, &fakeBackend{}, 1)
			if err != nil {
				t.Fatal(err)
			}
			byNumber := map[int]Record{}
			for _, r := range sum.Records {
				byNumber[r.Number] = r
			}
			reruns := 0
			for _, r := range sum.Records {
				src := cmp.Or(r.RetryOf, r.ConfirmOf)
				if src == nil {
					continue
				}
				reruns++
				orig := byNumber[*src]
				if r.State != StateComplete || fmt.Sprint(r.Argv) != fmt.Sprint(orig.Argv) ||
					r.ConfigKey != orig.ConfigKey || fmt.Sprint(r.Params) != fmt.Sprint(orig.Params) {
					t.Errorf("trial %d (%s) re-runs trial %d: launched %q with %v, want %q with %v",
						r.Number, r.State, orig.Number, r.Argv, r.Params, orig.Argv, orig.Params)
				}
			}
			if reruns == 0 {
				t.Fatalf("no re-run: %v", states(sum.Records))
			}
			if tc.interrupt {
				return
			}
			if sum.Winner == nil || len(sum.Winner.Runs) != 3 {
				t.Fatalf("winner %+v", sum.Winner)
			}
			for _, m := range sum.Winner.Runs {
				if got := byNumber[m.Trial].ConfigKey; got != byNumber[sum.Winner.Trial].ConfigKey {
					t.Errorf("the winner, trial %d, pools trial %d, which ran %q", sum.Winner.Trial, m.Trial, got)
				}
			}
		})
	}
}

// TestReadWinnerPoolsAsNow: a winner stored before a missed run was left
// out of the spread (its 0 made the spread the whole score) reads with the
// spread of the runs that met, as Pool gives it now.
func TestReadWinnerPoolsAsNow(t *testing.T) {
	st, store, _ := openFake(t, "trials: 6", "trials: 1")
	if _, err, _ := runFake(t, context.Background(), st, store, &fakeBackend{}, 1); err != nil {
		t.Fatal(err)
	}
	id, err := store.GetStudyIDFromName(st.Name)
	if err != nil {
		t.Fatal(err)
	}
	runs := []Measurement{{Trial: 0, Score: 1800, OK: true}, {Trial: 2, Score: 1900, OK: true}, {Trial: 3, Score: 0}}
	old, err := json.Marshal(Winner{Trial: 0, Pooled: 1233.3, Spread: 1900, Runs: runs,
		Candidates: []Candidate{{Trial: 0, Pooled: 1233.3, Spread: 1900, Runs: runs}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SetStudySystemAttr(id, storage.AttrWinner, string(old)); err != nil {
		t.Fatal(err)
	}
	w, ok, err := ReadWinner(store, st.Name)
	if err != nil || !ok || w.Spread != 100 || w.Candidates[0].Spread != 100 {
		t.Errorf("stored winner read: spread %v, candidate %+v (%v %v), want 100", w.Spread, w.Candidates, ok, err)
	}
}

// TestSameConfigProposedAtOnce: two workers propose one config at once;
// each sees the other's trial running. Neither is a duplicate until one
// claimed the config (storage's ClaimConfig): before, both were skipped
// and the config never launched.
func TestSameConfigProposedAtOnce(t *testing.T) {
	recs := []Record{
		{ID: 7, Number: 3, State: StateRunning, ConfigKey: "--x 1"},
		{ID: 8, Number: 4, State: StateRunning, ConfigKey: "--x 1"},
		{ID: 9, Number: 5, State: StateComplete, ConfigKey: "--x 2"},
	}
	for _, tc := range []struct {
		id   int
		key  string
		want int // the trial number it duplicates, -1 none
	}{
		{7, "--x 1", -1}, // neither claimed the config yet: ClaimConfig decides
		{8, "--x 1", -1},
		{10, "--x 2", 5}, // a measured config, whenever proposed
	} {
		prev, ok := sameConfigIn(recs, tc.id, tc.key)
		if got := map[bool]int{true: prev.Number, false: -1}[ok]; got != tc.want {
			t.Errorf("trial id %d (%s): duplicate of %d, want %d", tc.id, tc.key, got, tc.want)
		}
	}
	// Once one claimed it, the other is its duplicate.
	recs[1].Launching = true
	for _, tc := range []struct {
		id   int
		key  string
		want int
	}{
		{7, "--x 1", 4},
		{6, "--x 1", 4},
	} {
		prev, ok := sameConfigIn(recs, tc.id, tc.key)
		if got := map[bool]int{true: prev.Number, false: -1}[ok]; got != tc.want {
			t.Errorf("trial id %d (%s): duplicate of %d, want %d", tc.id, tc.key, got, tc.want)
		}
	}
}

// testRunner sets a run of st up as Run does (its study opened, its
// stale trials taken over), for a test that walks part of it.
func testRunner(t *testing.T, st *space.Study, store *storage.Store, b Backend) *runner {
	t.Helper()
	r, target, err := newRunner(Options{Study: st, Store: store, Backend: b, LogDir: t.TempDir(),
		Getenv: func(string) string { return "" }, Events: func(ev Event) { t.Log(ev.Text) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.open(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	if err := r.resume(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCtrlCBeforeStorageCall: Ctrl-C that comes as a storage call taking
// the run's context begins (the next trial's launch claimed right after a
// trial completed, the confirmation lease) is an interrupt like at any
// other moment: no error (exit 130, not 1), and a trial stopped before
// its launch is stored interrupted with a human reason and queued again.
// The claim failed with "storage: begin: context canceled", which ended
// the run and became the trial's stored reason.
func TestCtrlCBeforeStorageCall(t *testing.T) {
	for _, tc := range []struct {
		name string
		walk func(ctx context.Context, r *runner) error
	}{
		{"claim a launch", func(ctx context.Context, r *runner) error { return r.trial(ctx, nil) }},
		{"confirmation lease", func(ctx context.Context, r *runner) error {
			r.st.Budget.Confirm = 2
			return r.confirm(ctx, [][]int{nil})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t)
			b := &fakeBackend{}
			// A trial measured first gives the confirmation its top config.
			if _, err := Run(context.Background(), Options{Study: st, Store: store, Backend: b, LogDir: t.TempDir(), Trials: 1, Parallel: 1,
				Getenv: func(string) string { return "" }}); err != nil {
				t.Fatal(err)
			}
			r := testRunner(t, st, store, b)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := tc.walk(ctx, r); err != nil {
				t.Fatalf("interrupted walk: %v, want no error", err)
			}
			recs, err := Records(store, st.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range recs[1:] {
				if strings.Contains(rec.Reason, "context canceled") || strings.Contains(rec.Reason, "storage") {
					t.Errorf("trial %d: reason %q", rec.Number, rec.Reason)
				}
			}
			if tc.name != "claim a launch" {
				return
			}
			if len(recs) != 3 || recs[1].State != StateInterrupted || recs[1].Reason != "interrupted before launch" ||
				recs[2].State != StateWaiting || recs[2].RetryOf == nil || *recs[2].RetryOf != recs[1].Number {
				t.Errorf("trials %v, want the second interrupted before launch and queued again", brief(recs))
			}
			if len(b.launches) != 1 {
				t.Errorf("launches %q, want only the first trial's", b.launches)
			}
		})
	}
}

// brief is recs as number:state (reason), for messages.
func brief(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%d:%s (%s)", r.Number, r.State, r.Reason)
	}
	return out
}

// TestPruneReadFailureIsNoFailedTrial: a storage read that fails as a
// level decides on pruning (a database outage) ends the trial as a
// storage failure: abandoned as interrupted, queued again, and the run's
// error; the sampler is not told its config failed. It was stored failed
// (class measurement) and told PRUNED: a healthy config blamed for the
// outage.
func TestPruneReadFailureIsNoFailedTrial(t *testing.T) {
	st, store, _ := openFake(t, "concurrency: [4], requests: [4]", "concurrency: [1, 4], requests: [2, 4]",
		"budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 6, sampler: random, seed: 3, confirm: 0, prune: {fraction: 0.9}}")
	outage := errors.New("database unreachable")
	old := levelRecords
	t.Cleanup(func() { levelRecords = old })
	levelRecords = func(StudyStore, string) ([]Record, error) { return nil, outage }
	levels := 0
	b := &fakeBackend{level: func(string, int) { levels++ }}
	_, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if !errors.Is(err, outage) {
		t.Fatalf("run error %v, want the storage failure", err)
	}
	if levels != 1 {
		t.Fatalf("%d levels measured before the failed read, want 1", levels)
	}
	recs, err := Records(store, st.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].State != StateInterrupted || recs[0].FailureClass != "" || !strings.Contains(recs[0].Reason, outage.Error()) ||
		recs[1].State != StateWaiting || recs[1].RetryOf == nil || *recs[1].RetryOf != recs[0].Number {
		t.Fatalf("trials %v, want the first interrupted by the read and queued again", brief(recs))
	}
	ft, err := store.GetTrial(recs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if ft.State != goptuna.TrialStateFail {
		t.Errorf("the sampler sees trial 0 as %v, want FAIL (not a pruned config)", ft.State)
	}
}

// TestAbandonFailureReported: a trial whose walk failed on the storage
// (here closed as a level decides on pruning) and that could not even be
// ended as interrupted (the trial stays running until another run takes
// it over) says so in the run's error; the deferred abandon dropped that.
func TestAbandonFailureReported(t *testing.T) {
	st, store, _ := openFake(t, "concurrency: [4], requests: [4]", "concurrency: [1, 4], requests: [2, 4]",
		"budget: {trials: 6, sampler: random, seed: 3, confirm: 0}", "budget: {trials: 6, sampler: random, seed: 3, confirm: 0, prune: {fraction: 0.9}}")
	b := &fakeBackend{level: func(string, int) { store.Close() }}
	_, err, _ := runFake(t, context.Background(), st, store, b, 1)
	if err == nil || !strings.Contains(err.Error(), "decide whether to prune") || !strings.Contains(err.Error(), "mark the trial interrupted") {
		t.Fatalf("run error %v, want the failed read and the failure to mark the trial interrupted", err)
	}
}

// TestStudyUIDRace: processes (store handles) opening a new study at once
// all take one study id, which tags their servers, names the confirmation
// lease and the log directory. Each kept the id it made when they raced.
func TestStudyUIDRace(t *testing.T) {
	const rounds, handles = 20, 4
	for round := range rounds {
		st, _, path := openFake(t)
		uids := make([]string, handles)
		errs := make([]error, handles)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range handles {
			store, err := storage.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			r, target, err := newRunner(Options{Study: st, Store: store, Backend: &fakeBackend{}, Getenv: func(string) string { return "" }})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				<-start
				errs[i] = r.open(context.Background(), target)
				uids[i] = r.uid
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		for _, uid := range uids {
			if uid == "" || uid != uids[0] {
				t.Fatalf("round %d: the processes took study ids %q, want one", round, uids)
			}
		}
	}
}

// TestCheckRefusesUnbuildableSampler: a study whose sampler cannot be
// built for its space is refused by the preflight (check and run's
// Check), before run writes its database and logs: run refused it only
// as it built the sampler. The loader refuses such files itself (with
// their line); the preflight is the backstop that keeps check and run
// agreeing on whatever else the sampler refuses.
func TestCheckRefusesUnbuildableSampler(t *testing.T) {
	const continuous = "{name: mf, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static}"
	for _, tc := range []struct {
		name, sampler, param, want string
	}{
		{"grid over a continuous space", "grid", continuous, `budget.sampler: sampler "grid" needs a finite space`},
		// 2 ep x 500001 slots: counted, not listed (the preflight
		// listed all of them, and out of memory in a larger space).
		{"grid past its cap", "grid", "{name: slots, type: int, low: 1, high: 500001, flag: --max-mamba-cache-size}",
			`budget.sampler: sampler "grid" lists every config, and the space has more than 1000000 (up to 1000002)`},
		{"unknown sampler", "cmaes", continuous, `budget.sampler: unknown sampler "cmaes"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, _ := openFake(t, "{name: slots, type: int, low: 64, high: 512, step: 64, flag: --max-mamba-cache-size}", tc.param)
			st.Budget.Sampler = tc.sampler // past the loader's own check
			p := Check(st, func(string) string { return "" })
			err := p.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) || errext.Code(err) != errext.BadInput {
				t.Errorf("preflight error %v (exit %d), want bad input with %q", err, errext.Code(err), tc.want)
			}
		})
	}
	st, _, _ := openFake(t)
	if p := Check(st, func(string) string { return "" }); p.Err() != nil || len(p.Invalid) > 0 {
		t.Errorf("valid study: %v %v", p.Err(), p.Invalid)
	}
}

// A stopping mark is taken for a dead owner's when the owner is a process
// of this host that ended, or, on Slurm (whose jobs any host can cancel),
// an owner elsewhere whose mark outlived any stop; never a live owner's.
func TestDiedStopping(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	here := hostname()
	old, recent := time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)
	for _, tc := range []struct {
		name      string
		scheduler string
		owner     string
		end       *time.Time
		want      bool
	}{
		{"ended process here", space.SchedulerLocal, fmt.Sprintf("%s:%d", here, dead.Process.Pid), &recent, true},
		{"live process here", space.SchedulerLocal, fmt.Sprintf("%s:%d", here, os.Getpid()), &old, false},
		{"elsewhere, local scheduler", space.SchedulerLocal, "other-host:12", &old, false},
		{"elsewhere on Slurm, long ago", space.SchedulerSlurm, "other-host:12", &old, true},
		{"elsewhere on Slurm, just now", space.SchedulerSlurm, "other-host:12", &recent, false},
		{"live process here on Slurm", space.SchedulerSlurm, fmt.Sprintf("%s:%d", here, os.Getpid()), &old, false},
	} {
		st := &space.Study{}
		st.Launch.Scheduler = tc.scheduler
		r := &runner{st: st, host: here}
		if got := r.diedStopping(Record{Owner: tc.owner, End: tc.end, Stopping: true}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Ctrl-C while the run checks its GPUs (nvidia-smi takes the run's
// context) is an interrupt, not a failure of the check (exit 1).
func TestCtrlCDuringGPUCheck(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	st, store, _ := openFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	b := &fakeBackend{}
	sum, err, _ := runFake(t, ctx, st, store, b, 1)
	if err != nil || !sum.Interrupted {
		t.Fatalf("Ctrl-C during the GPU check: interrupted %v, error %v; want an interrupt and no error", sum.Interrupted, err)
	}
	if len(b.launches) != 0 {
		t.Errorf("%d launches after Ctrl-C", len(b.launches))
	}
}

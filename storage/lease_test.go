package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/c-bata/goptuna"
)

func testLeases(t *testing.T, b *backend) {
	ctx := context.Background()
	s := b.open(t)
	study := mustStudy(t, s, "lease", goptuna.StudyDirectionMaximize)
	other := mustStudy(t, s, "other", goptuna.StudyDirectionMaximize)
	const gpus = "gpus@node1:0,1"
	acquire := func(study int, holder string) bool {
		t.Helper()
		ok, err := s.AcquireLease(ctx, study, gpus, holder, time.Minute)
		must(t, err)
		return ok
	}
	holderOf := func() Lease {
		t.Helper()
		ls, err := s.Leases(ctx, study)
		must(t, err)
		if len(ls) != 1 {
			t.Fatalf("Leases = %+v; want one", ls)
		}
		return ls[0]
	}

	if !acquire(study, "a:1") {
		t.Fatal("a free resource was refused")
	}
	first := holderOf()
	if first.Holder != "a:1" || first.StudyID != study || first.Expired(time.Now()) ||
		first.Expires.Sub(first.Acquired) != time.Minute {
		t.Fatalf("lease = %+v", first)
	}
	if acquire(study, "b:2") || acquire(other, "b:2") {
		t.Fatal("a held lease was given to a second holder (same or another study)")
	}
	if l, ok, err := s.LeaseOf(ctx, gpus); err != nil || !ok || l.Holder != "a:1" || l.StudyID != study {
		t.Fatalf("LeaseOf = %+v %v %v", l, ok, err)
	}
	if _, ok, err := s.LeaseOf(ctx, "gpus@nowhere"); err != nil || ok {
		t.Fatalf("LeaseOf a free resource = %v %v", ok, err)
	}
	if !acquire(study, "a:1") {
		t.Fatal("the holder could not re-acquire its own lease")
	}
	if again := holderOf(); !again.Acquired.Equal(first.Acquired) || again.Expires.Before(first.Expires) {
		t.Fatalf("re-acquire: %+v after %+v; want the same acquisition, extended", again, first)
	}
	if err := s.RenewLease(ctx, gpus, "b:2", time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("RenewLease by a non-holder = %v; want ErrLeaseLost", err)
	}
	must(t, s.RenewLease(ctx, gpus, "a:1", time.Hour))
	if l := holderOf(); l.Expires.Sub(time.Now()) < 59*time.Minute {
		t.Fatalf("renewed lease expires %v", l.Expires)
	}

	// Expired: another holder takes it, and the first learns it lost it.
	execSQL(t, s, "UPDATE leases SET expires_ns = ? WHERE resource = ?", time.Now().Add(-time.Second).UnixNano(), gpus)
	if !holderOf().Expired(time.Now()) {
		t.Fatal("backdated lease not expired")
	}
	if !acquire(study, "b:2") {
		t.Fatal("an expired lease was not given to a new holder")
	}
	if l := holderOf(); l.Holder != "b:2" || !l.Acquired.After(first.Acquired) {
		t.Fatalf("taken-over lease = %+v", l)
	}
	if err := s.RenewLease(ctx, gpus, "a:1", time.Minute); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("RenewLease after takeover = %v; want ErrLeaseLost", err)
	}
	if err := s.ReleaseLease(ctx, gpus, "a:1"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("ReleaseLease after takeover = %v; want ErrLeaseLost", err)
	}

	// Broken: a dead holder's unexpired lease goes at once.
	if broken, err := s.BreakLease(ctx, gpus, "a:1"); err != nil || broken {
		t.Fatalf("BreakLease of a non-holder = %v, %v; want false", broken, err)
	}
	if broken, err := s.BreakLease(ctx, gpus, "b:2"); err != nil || !broken {
		t.Fatalf("BreakLease of the holder = %v, %v; want true", broken, err)
	}
	if !acquire(other, "c:3") {
		t.Fatal("a broken lease could not be taken")
	}
	if ls, err := s.Leases(ctx, study); err != nil || len(ls) != 0 {
		t.Fatalf("the study's leases after another study took the resource: %+v, %v", ls, err)
	}
	must(t, s.ReleaseLease(ctx, gpus, "c:3"))
	if ls, err := s.Leases(ctx, other); err != nil || len(ls) != 0 {
		t.Fatalf("leases after release: %+v, %v", ls, err)
	}

	// Bad arguments and unknown studies.
	for name, err := range map[string]error{
		"zero ttl":     func() error { _, err := s.AcquireLease(ctx, study, gpus, "a", 0); return err }(),
		"no holder":    func() error { _, err := s.AcquireLease(ctx, study, gpus, "", time.Second); return err }(),
		"no resource":  func() error { _, err := s.AcquireLease(ctx, study, "", "a", time.Second); return err }(),
		"renew no ttl": s.RenewLease(ctx, gpus, "a", -time.Second),
	} {
		if err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	if _, err := s.AcquireLease(ctx, 999, gpus, "a", time.Second); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("AcquireLease for a missing study = %v", err)
	}
	if _, err := s.Leases(ctx, 999); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("Leases of a missing study = %v", err)
	}
	// Deleting a study drops its leases.
	if !acquire(study, "d:4") {
		t.Fatal("free resource refused")
	}
	must(t, s.DeleteStudy(study))
	if !acquire(other, "e:5") {
		t.Fatal("the lease of a deleted study survived it")
	}
}

func testLaunchBudget(t *testing.T, b *backend) {
	ctx := context.Background()
	s := b.open(t)
	study := mustStudy(t, s, "budget", goptuna.StudyDirectionMaximize)
	claim := func(id, budget int) bool {
		t.Helper()
		ok, err := s.ClaimLaunch(ctx, id, budget)
		must(t, err)
		return ok
	}
	count := func(want int) {
		t.Helper()
		n, err := s.LaunchedCount(ctx, study)
		if err != nil || n != want {
			t.Fatalf("LaunchedCount = %d, %v; want %d", n, err, want)
		}
	}
	t1, t2, t3 := mustTrial(t, s, study), mustTrial(t, s, study), mustTrial(t, s, study)
	count(0)
	if !claim(t1, 2) || !claim(t1, 2) {
		t.Fatal("claim (or re-claim) of the first trial refused")
	}
	count(1)
	if !claim(t2, 2) {
		t.Fatal("second claim refused with budget 2")
	}
	if claim(t3, 2) {
		t.Fatal("third claim granted with budget 2")
	}
	count(2)
	if l, err := s.Launched(ctx, t3); err != nil || l {
		t.Fatalf("Launched(refused trial) = %v, %v", l, err)
	}

	// An interrupted trial gives its launch back; a finished one keeps it.
	must(t, s.FailTrial(t2, "interrupted"))
	count(1)
	if !claim(t3, 2) {
		t.Fatal("claim refused after an interrupted trial gave its launch back")
	}
	must(t, s.SetTrialValue(t1, 1))
	must(t, s.SetTrialState(t1, goptuna.TrialStateComplete))
	count(2)
	if l, err := s.Launched(ctx, t1); err != nil || !l {
		t.Fatalf("Launched(complete trial) = %v, %v", l, err)
	}
	if _, err := s.ClaimLaunch(ctx, t1, 5); !errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
		t.Fatalf("ClaimLaunch of a finished trial = %v", err)
	}
	if err := s.UncountLaunch(ctx, t1); !errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
		t.Fatalf("UncountLaunch of a finished trial = %v", err)
	}

	// A reaped trial gives its launch back; its retry claims again.
	setHeartbeat(t, s, t3, time.Now().Add(-time.Hour))
	reaped, err := s.ReapStale(study, time.Minute, 1)
	must(t, err)
	if len(reaped) != 1 || reaped[0].TrialID != t3 {
		t.Fatalf("ReapStale = %+v", reaped)
	}
	count(1)
	retry, ok, err := s.ClaimWaitingTrial(study)
	if err != nil || !ok || retry != reaped[0].RetryID {
		t.Fatalf("ClaimWaitingTrial = %d, %v, %v", retry, ok, err)
	}
	if !claim(retry, 2) {
		t.Fatal("the retry of a reaped trial could not claim its launch")
	}
	count(2)

	// RequeueTrial and SetTrialState(Fail) give back too; PRUNED keeps.
	again, err := s.RequeueTrial(retry, "interrupted by Ctrl-C")
	must(t, err)
	count(1)
	must(t, s.SetTrialState(again, goptuna.TrialStateRunning))
	if !claim(again, 2) {
		t.Fatal("claim of a requeued trial refused")
	}
	must(t, s.SetTrialState(again, goptuna.TrialStateFail))
	count(1)
	t4 := mustTrial(t, s, study)
	if !claim(t4, 2) {
		t.Fatal("claim refused")
	}
	must(t, s.SetTrialState(t4, goptuna.TrialStatePruned))
	count(2)

	// UncountLaunch gives back an unfinished trial's launch.
	t5 := mustTrial(t, s, study)
	if claim(t5, 2) {
		t.Fatal("claim over budget")
	}
	if !claim(t5, 3) {
		t.Fatal("claim refused under a larger budget")
	}
	must(t, s.UncountLaunch(ctx, t5))
	count(2)
	must(t, s.UncountLaunch(ctx, t5)) // not counted: nothing happens

	if _, err := s.ClaimLaunch(ctx, t5, 0); err == nil {
		t.Fatal("zero budget accepted")
	}
	if _, err := s.ClaimLaunch(ctx, 999, 1); !errors.Is(err, goptuna.ErrInvalidTrialID) {
		t.Fatalf("ClaimLaunch of a missing trial = %v", err)
	}
	if _, err := s.LaunchedCount(ctx, 999); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("LaunchedCount of a missing study = %v", err)
	}
	must(t, s.IntegrityCheck())
}

// workerConfig is one tuner process (or goroutine) in the lease and budget
// tests.
type workerConfig struct {
	study    string
	resource string // "" = claim the budget without a lease
	holder   string
	budget   int
	marker   string // file held exclusively while "running" a trial on resource
}

type workerResult struct {
	complete, interrupted, refused int
}

// runWorker plays a tuner: with a resource, it waits for the resource's
// lease, claims a launch, "runs" the trial while holding a marker file
// (created O_EXCL, so two holders at once would be caught), then releases.
// Without one, it claims launches racing the other workers. Its second
// launched trial is interrupted (FailTrial: the launch goes back). It stops
// when a claim is refused.
func runWorker(ctx context.Context, s *Store, cfg workerConfig) (workerResult, error) {
	var res workerResult
	study, err := s.GetStudyIDFromName(cfg.study)
	if err != nil {
		return res, err
	}
	for launched := 0; ; {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if cfg.resource != "" {
			ok, err := s.AcquireLease(ctx, study, cfg.resource, cfg.holder, time.Minute)
			if err != nil {
				return res, err
			}
			if !ok {
				time.Sleep(time.Millisecond)
				continue
			}
		}
		id, err := s.CreateNewTrial(study)
		if err != nil {
			return res, err
		}
		if err := s.SetTrialSystemAttr(id, AttrOwner, cfg.holder); err != nil {
			return res, err
		}
		ok, err := s.ClaimLaunch(ctx, id, cfg.budget)
		if err != nil {
			return res, err
		}
		if !ok {
			res.refused++
			if err := s.FailTrial(id, "budget spent; not launched"); err != nil {
				return res, err
			}
			if cfg.resource != "" {
				if err := s.ReleaseLease(ctx, cfg.resource, cfg.holder); err != nil {
					return res, err
				}
			}
			return res, nil
		}
		launched++
		if cfg.marker != "" {
			f, err := os.OpenFile(cfg.marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return res, fmt.Errorf("%s runs trial %d on %s while another holder does: %w", cfg.holder, id, cfg.resource, err)
			}
			f.Close()
		}
		time.Sleep(2 * time.Millisecond)
		if launched == 2 {
			res.interrupted++
			err = s.FailTrial(id, "interrupted")
		} else {
			res.complete++
			if err = s.SetTrialValue(id, float64(id)); err == nil {
				err = s.SetTrialState(id, goptuna.TrialStateComplete)
			}
		}
		if err != nil {
			return res, err
		}
		if cfg.marker != "" {
			if err := os.Remove(cfg.marker); err != nil {
				return res, err
			}
		}
		if cfg.resource != "" {
			if err := s.ReleaseLease(ctx, cfg.resource, cfg.holder); err != nil {
				return res, err
			}
		}
	}
}

// checkBudget checks a study run by workers against budget: never more
// launched than the budget, and (when full) exactly the budget complete.
func checkBudget(t *testing.T, s *Store, name string, budget int, sum workerResult, full bool) {
	t.Helper()
	study, err := s.GetStudyIDFromName(name)
	must(t, err)
	all, err := s.GetAllTrials(study)
	must(t, err)
	complete := 0
	for _, tr := range all {
		if tr.State == goptuna.TrialStateComplete {
			complete++
		}
	}
	n, err := s.LaunchedCount(context.Background(), study)
	must(t, err)
	if complete != sum.complete || n != complete || complete > budget || (full && complete != budget) {
		t.Fatalf("study %s, budget %d: %d complete in the database, %d reported, %d counted as launched",
			name, budget, complete, sum.complete, n)
	}
}

// Goroutines on two Stores (as two processes would) share one GPU group and
// one budget: never two holders at once, exactly the budget launched.
func testGoroutinesLeaseAndBudget(t *testing.T, b *backend) {
	dsn := b.newDSN(t)
	stores := []*Store{openDSN(t, dsn), openDSN(t, dsn)}
	for _, name := range []string{"lease", "race"} {
		if _, _, err := stores[0].EnsureStudy(name, goptuna.StudyDirectionMaximize); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(t.TempDir(), "gpus-in-use")
	for _, tc := range []struct {
		study, resource string
		budget, workers int
	}{
		{"lease", "gpus@host:0", 9, 4},
		{"race", "", 10, 6},
	} {
		var mu sync.Mutex
		var sum workerResult
		var wg sync.WaitGroup
		errs := make(chan error, tc.workers)
		for w := range tc.workers {
			wg.Go(func() {
				cfg := workerConfig{study: tc.study, resource: tc.resource, holder: fmt.Sprintf("host:%d", w), budget: tc.budget}
				if tc.resource != "" {
					cfg.marker = marker
				}
				r, err := runWorker(context.Background(), stores[w%2], cfg)
				mu.Lock()
				sum.complete += r.complete
				sum.interrupted += r.interrupted
				mu.Unlock()
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, err)
		}
		// With a lease the claims are serialized and the budget ends full.
		// Racing claimers may stop while an interrupted trial gives its
		// launch back; never above the budget.
		checkBudget(t, stores[0], tc.study, tc.budget, sum, tc.resource != "")
		t.Logf("%s: %d workers, budget %d: %d complete, %d interrupted", tc.study, tc.workers, tc.budget, sum.complete, sum.interrupted)
	}
}

// Many openers create one study and number trials at once.
func testConcurrentEnsureAndNumbering(t *testing.T, b *backend) {
	const stores, perStore = 6, 10
	dsn := b.newDSN(t)
	var created atomic.Int32
	ids := make([]int, stores)
	trials := make([][]int, stores)
	var wg sync.WaitGroup
	errs := make(chan error, stores)
	for i := range stores {
		s := openDSN(t, dsn)
		wg.Go(func() {
			id, c, err := s.EnsureStudy("shared", goptuna.StudyDirectionMinimize)
			if err != nil {
				errs <- err
				return
			}
			if c {
				created.Add(1)
			}
			ids[i] = id
			for range perStore {
				tid, err := s.CreateNewTrial(id)
				if err != nil {
					errs <- err
					return
				}
				trials[i] = append(trials[i], tid)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	if created.Load() != 1 {
		t.Fatalf("%d openers created the study; want 1", created.Load())
	}
	s := openDSN(t, dsn)
	all, err := s.GetAllTrials(ids[0])
	must(t, err)
	if len(all) != stores*perStore {
		t.Fatalf("%d trials; want %d", len(all), stores*perStore)
	}
	for i, tr := range all {
		if tr.Number != i {
			t.Fatalf("trial %d has number %d: numbers not unique and contiguous", i, tr.Number)
		}
	}
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("openers got study IDs %v", ids)
		}
	}
}

// TestClaimConfig: of trials claiming one config at once exactly one gets
// it; the others learn which trial has it. Another config is free.
func TestClaimConfig(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { claimConfigOn(t, filepath.Join(t.TempDir(), "c.db")) })
	t.Run("postgres", func(t *testing.T) { claimConfigOn(t, postgresBackend(t).newDSN(t)) })
}

func claimConfigOn(t *testing.T, dsn string) {
	s, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sid, err := s.CreateNewStudy("c")
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	ids := make([]int, n)
	for i := range ids {
		if ids[i], err = s.CreateNewTrial(sid); err != nil {
			t.Fatal(err)
		}
		if err := s.SetTrialUserAttr(ids[i], AttrConfigKey, "--x 1"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	oks, others := make([]bool, n), make([]int, n)
	errs := make([]error, n)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			others[i], oks[i], errs[i] = s.ClaimConfig(context.Background(), ids[i], "--x 1")
		}()
	}
	wg.Wait()
	winner := -1
	for i := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if oks[i] {
			if winner >= 0 {
				t.Fatalf("trials %d and %d both claimed the config", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no trial claimed the config")
	}
	for i := range ids {
		if !oks[i] && others[i] != winner {
			t.Errorf("trial %d lost to trial %d, want %d", i, others[i], winner)
		}
	}
	id, err := s.CreateNewTrial(sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.ClaimConfig(context.Background(), id, "--x 2"); err != nil || !ok {
		t.Errorf("another config: %v %v", ok, err)
	}
}

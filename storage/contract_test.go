package storage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/c-bata/goptuna"
)

var allDists = map[string]interface{}{
	"u":   goptuna.UniformDistribution{Low: 0.5, High: 0.95},
	"log": goptuna.LogUniformDistribution{Low: 1e-3, High: 1},
	"int": goptuna.IntUniformDistribution{Low: 1, High: 8},
	"sti": goptuna.StepIntUniformDistribution{Low: 0, High: 512, Step: 64},
	"dis": goptuna.DiscreteUniformDistribution{Low: 0, High: 1, Q: 0.25},
	"cat": goptuna.CategoricalDistribution{Choices: []string{"fa3", "triton", "flashinfer"}},
}

var allInternal = map[string]float64{"u": 0.8, "log": 0.01, "int": 4, "sti": 128, "dis": 0.75, "cat": 1}

func mustStudy(t *testing.T, s *Store, name string, d goptuna.StudyDirection) int {
	t.Helper()
	id, err := s.CreateNewStudy(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetStudyDirection(id, d); err != nil {
		t.Fatal(err)
	}
	return id
}

func mustTrial(t *testing.T, s *Store, study int) int {
	t.Helper()
	id, err := s.CreateNewTrial(study)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func testTrialRoundTrip(t *testing.T, b *backend) {
	s := b.open(t)
	study := mustStudy(t, s, "rt", goptuna.StudyDirectionMaximize)
	before := time.Now()
	id := mustTrial(t, s, study)
	for name, d := range allDists {
		if err := s.SetTrialParam(id, name, allInternal[name], d); err != nil {
			t.Fatalf("SetTrialParam %s: %v", name, err)
		}
	}
	steps := map[int]float64{0: 1.5, 3: -2, 7: math.Inf(1)}
	for st, v := range steps {
		if err := s.SetTrialIntermediateValue(id, st, v); err != nil {
			t.Fatal(err)
		}
	}
	// overwrite a step and a param (Optuna >= 2 semantics)
	if err := s.SetTrialIntermediateValue(id, 3, -3); err != nil {
		t.Fatal(err)
	}
	steps[3] = -3
	must(t, s.SetTrialUserAttr(id, "sgtune.config", `{"flags":["--tp","4"]}`))
	must(t, s.SetTrialUserAttr(id, "k", "v1"))
	must(t, s.SetTrialUserAttr(id, "k", "v2"))
	must(t, s.SetTrialSystemAttr(id, "sys", "x"))
	must(t, s.SetTrialValue(id, 1234.5))
	must(t, s.SetTrialState(id, goptuna.TrialStateComplete))

	got, err := s.GetTrial(id)
	if err != nil {
		t.Fatal(err)
	}
	wantParams := map[string]interface{}{
		"u": 0.8, "log": 0.01, "int": 4, "sti": 128, "dis": 0.75, "cat": "triton",
	}
	if got.ID != id || got.StudyID != study || got.Number != 0 || got.State != goptuna.TrialStateComplete || got.Value != 1234.5 {
		t.Fatalf("trial header = %+v", got)
	}
	if !reflect.DeepEqual(got.Params, wantParams) {
		t.Fatalf("Params = %#v; want %#v", got.Params, wantParams)
	}
	if !reflect.DeepEqual(got.InternalParams, allInternal) {
		t.Fatalf("InternalParams = %v", got.InternalParams)
	}
	if !reflect.DeepEqual(got.Distributions, allDists) {
		t.Fatalf("Distributions = %#v", got.Distributions)
	}
	if !reflect.DeepEqual(got.IntermediateValues, steps) {
		t.Fatalf("IntermediateValues = %v", got.IntermediateValues)
	}
	if got.UserAttrs["k"] != "v2" || got.UserAttrs["sgtune.config"] == "" || got.SystemAttrs["sys"] != "x" {
		t.Fatalf("attrs = %v %v", got.UserAttrs, got.SystemAttrs)
	}
	if got.DatetimeStart.Before(before.Add(-time.Second)) || got.DatetimeComplete.Before(got.DatetimeStart) {
		t.Fatalf("times: start %v complete %v", got.DatetimeStart, got.DatetimeComplete)
	}

	// Single-field getters agree with GetTrial.
	if p, err := s.GetTrialParams(id); err != nil || !reflect.DeepEqual(p, wantParams) {
		t.Fatalf("GetTrialParams = %v, %v", p, err)
	}
	if v, err := s.GetTrialParam(id, "sti"); err != nil || v != 128 {
		t.Fatalf("GetTrialParam = %v, %v", v, err)
	}
	if _, err := s.GetTrialParam(id, "absent"); err == nil {
		t.Fatal("GetTrialParam of an absent param succeeded")
	}
	if n, err := s.GetTrialNumberFromID(id); err != nil || n != 0 {
		t.Fatalf("GetTrialNumberFromID = %v, %v", n, err)
	}
	if sid, err := s.GetStudyIDFromTrialID(id); err != nil || sid != study {
		t.Fatalf("GetStudyIDFromTrialID = %v, %v", sid, err)
	}
	if ua, err := s.GetTrialUserAttrs(id); err != nil || !reflect.DeepEqual(ua, got.UserAttrs) {
		t.Fatalf("GetTrialUserAttrs = %v, %v", ua, err)
	}
	if sa, err := s.GetTrialSystemAttrs(id); err != nil || !reflect.DeepEqual(sa, got.SystemAttrs) {
		t.Fatalf("GetTrialSystemAttrs = %v, %v", sa, err)
	}

	// CloneTrial copies everything but ID and number.
	cid, err := s.CloneTrial(study, got)
	if err != nil {
		t.Fatal(err)
	}
	clone, err := s.GetTrial(cid)
	if err != nil {
		t.Fatal(err)
	}
	if clone.Number != 1 || cid == id {
		t.Fatalf("clone id %d number %d", cid, clone.Number)
	}
	clone.ID, clone.Number = got.ID, got.Number
	if !reflect.DeepEqual(clone, got) {
		t.Fatalf("clone differs:\n got %+v\nwant %+v", clone, got)
	}
	all, err := s.GetAllTrials(study)
	if err != nil || len(all) != 2 || all[0].ID != id || all[1].ID != cid {
		t.Fatalf("GetAllTrials = %d trials, %v", len(all), err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually calls cond every step until it reports true, and fails the
// test with its last message once within has passed.
func eventually(t *testing.T, within, step time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(step)
	}
}

func testFinishedTrialSettersFail(t *testing.T, b *backend) {
	s := b.open(t)
	study := mustStudy(t, s, "fin", goptuna.StudyDirectionMinimize)
	setters := map[string]func(id int) error{
		"SetTrialValue":             func(id int) error { return s.SetTrialValue(id, 1) },
		"SetTrialIntermediateValue": func(id int) error { return s.SetTrialIntermediateValue(id, 1, 1) },
		"SetTrialParam":             func(id int) error { return s.SetTrialParam(id, "int", 2, allDists["int"]) },
		"SetTrialState(Running)":    func(id int) error { return s.SetTrialState(id, goptuna.TrialStateRunning) },
		"SetTrialState(Fail)":       func(id int) error { return s.SetTrialState(id, goptuna.TrialStateFail) },
		"SetTrialUserAttr":          func(id int) error { return s.SetTrialUserAttr(id, "a", "b") },
		"SetTrialSystemAttr":        func(id int) error { return s.SetTrialSystemAttr(id, "a", "b") },
		"FailTrial":                 func(id int) error { return s.FailTrial(id, "x") },
		"Heartbeat":                 func(id int) error { return s.Heartbeat(id) },
	}
	for _, final := range []goptuna.TrialState{goptuna.TrialStateComplete, goptuna.TrialStatePruned, goptuna.TrialStateFail} {
		for name, set := range setters {
			t.Run(final.String()+"/"+name, func(t *testing.T) {
				id := mustTrial(t, s, study)
				must(t, s.SetTrialState(id, final))
				if err := set(id); !errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
					t.Fatalf("%s on %s trial = %v; want ErrTrialCannotBeUpdated", name, final, err)
				}
			})
		}
	}
	// The escape hatch works on finished trials.
	id := mustTrial(t, s, study)
	must(t, s.SetTrialState(id, goptuna.TrialStateComplete))
	must(t, s.AnnotateTrial(id, "note", "late"))
	if ua, _ := s.GetTrialUserAttrs(id); ua["note"] != "late" {
		t.Fatalf("AnnotateTrial not stored: %v", ua)
	}
}

func testSetTrialStateTransitions(t *testing.T, b *backend) {
	tests := []struct {
		name    string
		from    goptuna.TrialState
		to      goptuna.TrialState
		wantErr error
	}{
		{"running to running", goptuna.TrialStateRunning, goptuna.TrialStateRunning, goptuna.ErrTrialCannotBeUpdated},
		{"waiting to waiting", goptuna.TrialStateWaiting, goptuna.TrialStateWaiting, goptuna.ErrTrialCannotBeUpdated},
		{"waiting to running", goptuna.TrialStateWaiting, goptuna.TrialStateRunning, nil},
		{"running to complete", goptuna.TrialStateRunning, goptuna.TrialStateComplete, nil},
		{"running to pruned", goptuna.TrialStateRunning, goptuna.TrialStatePruned, nil},
		{"running to waiting", goptuna.TrialStateRunning, goptuna.TrialStateWaiting, nil},
		{"complete to complete", goptuna.TrialStateComplete, goptuna.TrialStateComplete, goptuna.ErrTrialCannotBeUpdated},
		{"fail to running", goptuna.TrialStateFail, goptuna.TrialStateRunning, goptuna.ErrTrialCannotBeUpdated},
	}
	s := b.open(t)
	study := mustStudy(t, s, "st", goptuna.StudyDirectionMinimize)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := s.CloneTrial(study, goptuna.FrozenTrial{State: tc.from, DatetimeStart: time.Now(), DatetimeComplete: time.Now()})
			must(t, err)
			err = s.SetTrialState(id, tc.to)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("SetTrialState(%s -> %s) = %v; want %v", tc.from, tc.to, err, tc.wantErr)
			}
			got, err := s.GetTrial(id)
			must(t, err)
			want := tc.to
			if tc.wantErr != nil {
				want = tc.from
			}
			if got.State != want {
				t.Fatalf("state = %s; want %s", got.State, want)
			}
			if tc.wantErr == nil && tc.to.IsFinished() && got.DatetimeComplete.IsZero() {
				t.Fatal("finished trial has no completion time")
			}
		})
	}
}

func testGetBestTrial(t *testing.T, b *backend) {
	type tr struct {
		state goptuna.TrialState
		value float64
	}
	tests := []struct {
		name      string
		direction goptuna.StudyDirection
		trials    []tr
		wantNum   int
		wantErr   error
	}{
		{"empty", goptuna.StudyDirectionMaximize, nil, 0, goptuna.ErrNoCompletedTrials},
		{"only pruned and failed", goptuna.StudyDirectionMaximize,
			[]tr{{goptuna.TrialStatePruned, 9}, {goptuna.TrialStateFail, 0}, {goptuna.TrialStateRunning, 0}}, 0, goptuna.ErrNoCompletedTrials},
		{"maximize", goptuna.StudyDirectionMaximize,
			[]tr{{goptuna.TrialStateComplete, 3}, {goptuna.TrialStateComplete, 7}, {goptuna.TrialStatePruned, 100}, {goptuna.TrialStateComplete, -1}}, 1, nil},
		{"minimize", goptuna.StudyDirectionMinimize,
			[]tr{{goptuna.TrialStateComplete, 3}, {goptuna.TrialStateComplete, 7}, {goptuna.TrialStatePruned, -100}, {goptuna.TrialStateComplete, -1}}, 3, nil},
		{"tie takes lowest number", goptuna.StudyDirectionMaximize,
			[]tr{{goptuna.TrialStateComplete, 1}, {goptuna.TrialStateComplete, 5}, {goptuna.TrialStateComplete, 5}}, 1, nil},
	}
	s := b.open(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			study := mustStudy(t, s, tc.name, tc.direction)
			for _, x := range tc.trials {
				id := mustTrial(t, s, study)
				must(t, s.SetTrialValue(id, x.value))
				if x.state != goptuna.TrialStateRunning {
					must(t, s.SetTrialState(id, x.state))
				}
			}
			best, err := s.GetBestTrial(study)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("GetBestTrial err = %v; want %v", err, tc.wantErr)
			}
			if err == nil && best.Number != tc.wantNum {
				t.Fatalf("best = #%d (%v); want #%d", best.Number, best.Value, tc.wantNum)
			}
		})
	}
}

func testStudies(t *testing.T, b *backend) {
	s := b.open(t)
	a := mustStudy(t, s, "a", goptuna.StudyDirectionMaximize)
	if _, err := s.CreateNewStudy("a"); !errors.Is(err, ErrDuplicateStudy) {
		t.Fatalf("duplicate study: %v", err)
	}
	b2, err := s.CreateNewStudy("")
	must(t, err)
	if id, err := s.GetStudyIDFromName("a"); err != nil || id != a {
		t.Fatalf("GetStudyIDFromName = %v, %v", id, err)
	}
	if _, err := s.GetStudyIDFromName("zzz"); !errors.Is(err, ErrStudyNotFound) {
		t.Fatalf("missing study: %v", err)
	}
	if d, err := s.GetStudyDirection(a); err != nil || d != goptuna.StudyDirectionMaximize {
		t.Fatalf("direction = %v, %v", d, err)
	}
	if err := s.SetStudyDirection(a, "sideways"); err == nil {
		t.Fatal("bad direction accepted")
	}
	must(t, s.SetStudyUserAttr(a, "space", "demo"))
	must(t, s.SetStudyUserAttr(a, "space", "demo2"))
	must(t, s.SetStudySystemAttr(a, "sys", "1"))
	if ua, err := s.GetStudyUserAttrs(a); err != nil || ua["space"] != "demo2" || len(ua) != 1 {
		t.Fatalf("user attrs = %v, %v", ua, err)
	}
	if sa, err := s.GetStudySystemAttrs(a); err != nil || sa["sys"] != "1" {
		t.Fatalf("system attrs = %v, %v", sa, err)
	}
	id := mustTrial(t, s, a)
	must(t, s.SetTrialValue(id, 42))
	must(t, s.SetTrialState(id, goptuna.TrialStateComplete))

	sums, err := s.GetAllStudySummaries()
	must(t, err)
	if len(sums) != 2 || sums[0].Name != "a" || sums[0].BestTrial.Value != 42 || sums[0].UserAttrs["space"] != "demo2" ||
		sums[0].DatetimeStart.IsZero() || sums[1].ID != b2 || sums[1].BestTrial.ID != 0 {
		t.Fatalf("summaries = %+v", sums)
	}
	names, err := s.StudyNames()
	must(t, err)
	if len(names) != 2 || names[0] != "a" {
		t.Fatalf("names = %v", names)
	}

	// Invalid IDs.
	if _, err := s.CreateNewTrial(999); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("CreateNewTrial(999) = %v", err)
	}
	if _, err := s.GetTrial(999); !errors.Is(err, goptuna.ErrInvalidTrialID) {
		t.Fatalf("GetTrial(999) = %v", err)
	}
	if err := s.SetTrialValue(999, 1); !errors.Is(err, goptuna.ErrInvalidTrialID) {
		t.Fatalf("SetTrialValue(999) = %v", err)
	}
	if err := s.SetStudyUserAttr(999, "a", "b"); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("SetStudyUserAttr(999) = %v", err)
	}
	if _, err := s.GetAllTrials(999); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("GetAllTrials(999) = %v", err)
	}
	// NaN is refused, unknown distributions too.
	id2 := mustTrial(t, s, a)
	if err := s.SetTrialValue(id2, math.NaN()); err == nil {
		t.Fatal("NaN value accepted")
	}
	if err := s.SetTrialParam(id2, "x", 1, struct{}{}); err == nil {
		t.Fatal("unknown distribution accepted")
	}

	// DeleteStudy cascades.
	must(t, s.SavePoints(id, samplePoints()))
	must(t, s.DeleteStudy(a))
	if _, err := s.GetTrial(id); !errors.Is(err, goptuna.ErrInvalidTrialID) {
		t.Fatalf("trial survived DeleteStudy: %v", err)
	}
	var n int
	must(t, queryRow(s, "SELECT count(*) FROM points").Scan(&n))
	if n != 0 {
		t.Fatalf("%d points survived DeleteStudy", n)
	}
	if err := s.DeleteStudy(a); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Fatalf("second DeleteStudy = %v", err)
	}
	must(t, s.IntegrityCheck())
}

func testEnsureStudy(t *testing.T, b *backend) {
	s := b.open(t)
	id, created, err := s.EnsureStudy("demo", goptuna.StudyDirectionMaximize)
	if err != nil || !created {
		t.Fatalf("first EnsureStudy = %d, %v, %v", id, created, err)
	}
	id2, created, err := s.EnsureStudy("demo", goptuna.StudyDirectionMaximize)
	if err != nil || created || id2 != id {
		t.Fatalf("second EnsureStudy = %d, %v, %v", id2, created, err)
	}
	if _, _, err := s.EnsureStudy("demo", goptuna.StudyDirectionMinimize); err == nil {
		t.Fatal("direction mismatch accepted")
	}
	st, err := s.LoadOrCreateStudy("demo", goptuna.StudyDirectionMaximize, goptuna.StudyOptionLogger(nil))
	must(t, err)
	if st.ID != id || st.Direction() != goptuna.StudyDirectionMaximize {
		t.Fatalf("LoadOrCreateStudy: id %d direction %s", st.ID, st.Direction())
	}
}

// EnsureStudySystemAttr stores a study attribute once: a value that is
// there (not empty) is kept, and of processes (store handles) and
// goroutines racing to set a new study's, every one gets the same value,
// the one stored.
func testEnsureStudySystemAttr(t *testing.T, b *backend) {
	dsn := b.newDSN(t)
	s := openDSN(t, dsn)
	study := mustStudy(t, s, "attr", goptuna.StudyDirectionMaximize)
	for _, tc := range []struct {
		key         string
		before      []string // the value stored first, if any
		value, want string
	}{
		{"none stored", nil, "a", "a"},
		{"one stored", []string{"b"}, "c", "b"},
		{"an empty one stored", []string{""}, "d", "d"},
	} {
		for _, v := range tc.before {
			must(t, s.SetStudySystemAttr(study, tc.key, v))
		}
		got, err := s.EnsureStudySystemAttr(study, tc.key, tc.value)
		attrs, aerr := s.GetStudySystemAttrs(study)
		must(t, aerr)
		if err != nil || got != tc.want || attrs[tc.key] != tc.want {
			t.Errorf("%s: EnsureStudySystemAttr(%q) = %q, %v, stored %q; want %q", tc.key, tc.value, got, err, attrs[tc.key], tc.want)
		}
	}
	if _, err := s.EnsureStudySystemAttr(study+1000, "uid", "x"); !errors.Is(err, goptuna.ErrInvalidStudyID) {
		t.Errorf("unknown study: %v, want ErrInvalidStudyID", err)
	}

	const rounds, handles, perHandle = 10, 3, 3
	stores := []*Store{s}
	for range handles - 1 {
		stores = append(stores, openDSN(t, dsn))
	}
	for round := range rounds {
		key := fmt.Sprintf("uid%d", round)
		got := make([]string, handles*perHandle)
		errs := make([]error, len(got))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range got {
			wg.Go(func() {
				<-start
				got[i], errs[i] = stores[i%handles].EnsureStudySystemAttr(study, key, fmt.Sprintf("v%d", i))
			})
		}
		close(start)
		wg.Wait()
		attrs, err := s.GetStudySystemAttrs(study)
		must(t, err)
		for i := range got {
			if errs[i] != nil || got[i] != attrs[key] {
				t.Fatalf("round %d: racer %d got %q (%v), the study stores %q; racers got %q", round, i, got[i], errs[i], attrs[key], got)
			}
		}
	}
}

// Two processes ending one trial at once (its owner completing it, a reaper
// failing it): exactly one wins and the other gets ErrTrialCannotBeUpdated,
// and the winner's state and attributes are what is stored.
func testConcurrentFinish(t *testing.T, b *backend) {
	const trials = 40
	dsn := b.newDSN(t)
	owner, reaper := openDSN(t, dsn), openDSN(t, dsn)
	study := mustStudy(t, owner, "race", goptuna.StudyDirectionMaximize)
	ids := make([]int, trials)
	for i := range ids {
		ids[i] = mustTrial(t, owner, study)
	}
	completeErr := make([]error, trials)
	failErr := make([]error, trials)
	for i, id := range ids {
		// Both start together on each trial, so their transactions overlap.
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; completeErr[i] = owner.SetTrialState(id, goptuna.TrialStateComplete) })
		wg.Go(func() { <-start; failErr[i] = reaper.FailTrial(id, "reaped") })
		close(start)
		wg.Wait()
	}
	wins := map[string]int{}
	for i, id := range ids {
		tr, err := owner.GetTrial(id)
		must(t, err)
		switch {
		case completeErr[i] == nil && errors.Is(failErr[i], goptuna.ErrTrialCannotBeUpdated):
			if tr.State != goptuna.TrialStateComplete || tr.UserAttrs[AttrReason] != "" {
				t.Fatalf("trial %d: complete won but stored %s %v", id, tr.State, tr.UserAttrs)
			}
			wins["complete"]++
		case failErr[i] == nil && errors.Is(completeErr[i], goptuna.ErrTrialCannotBeUpdated):
			if tr.State != goptuna.TrialStateFail || tr.UserAttrs[AttrReason] != "reaped" {
				t.Fatalf("trial %d: fail won but stored %s %v", id, tr.State, tr.UserAttrs)
			}
			wins["fail"]++
		default:
			t.Fatalf("trial %d: SetTrialState = %v, FailTrial = %v; want exactly one to succeed", id, completeErr[i], failErr[i])
		}
	}
	t.Logf("%d trials ended by two racing processes: %v", trials, wins)
}

// testInterruptRerunAfterOtherEnded: InterruptTrial's transaction is
// re-run after a retryable error (here a PostgreSQL deadlock with a
// process that ends the trial meanwhile); the re-run finds the trial
// ended and reports that it changed nothing (ended false, no retry), not
// what the aborted attempt had set (ended true, retry ID -1): the caller
// then reported a takeover it never made.
func testInterruptRerunAfterOtherEnded(t *testing.T, b *backend) {
	if b.d != dialectPostgres {
		t.Skip("needs a retryable error inside the transaction, a PostgreSQL deadlock: SQLite's writers queue on one lock")
	}
	s := b.open(t)
	study := mustStudy(t, s, "rerun", goptuna.StudyDirectionMaximize)
	id := mustTrial(t, s, study)
	ctx := context.Background()
	// Another process holds the study's row (as numbering a trial does)...
	other, err := s.wdb.BeginTx(ctx, nil)
	must(t, err)
	defer other.Rollback() //nolint:errcheck // committed below
	// It checks for a deadlock long after InterruptTrial does, so that
	// InterruptTrial is the one aborted (setting it takes a superuser, as
	// the throwaway cluster's is; elsewhere the timing decides).
	_, err = other.Exec("SAVEPOINT before_timeout")
	must(t, err)
	if _, err := other.Exec("SET LOCAL deadlock_timeout = '60s'"); err != nil {
		_, err = other.Exec("ROLLBACK TO SAVEPOINT before_timeout")
		must(t, err)
	}
	_, err = other.Exec(s.d.rebind("SELECT 1 FROM studies WHERE study_id = ? FOR UPDATE"), study)
	must(t, err)
	type result struct {
		retryID int
		ended   bool
		err     error
	}
	done := make(chan result, 1)
	go func() { // ends once the deadlock is resolved
		retryID, ended, err := s.InterruptTrial(id, "interrupted", "Ctrl-C", true)
		done <- result{retryID, ended, err}
	}()
	// ... InterruptTrial locks the trial and waits for the study's row ...
	eventually(t, 10*time.Second, 10*time.Millisecond, func() (bool, string) {
		var n int
		err := s.wdb.QueryRow(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'SELECT 1 FROM studies%'`).Scan(&n)
		return err == nil && n > 0, fmt.Sprintf("InterruptTrial never waited for the study's row: %d waiting, %v", n, err)
	})
	// ... and the other process ends the trial, waiting for its row: a
	// deadlock, which aborts InterruptTrial (it waited first).
	_, err = other.Exec(s.d.rebind("UPDATE trials SET state = 'COMPLETE' WHERE trial_id = ?"), id)
	if pgCode(err) == "40P01" {
		t.Skipf("the other transaction was the deadlock's victim (its deadlock_timeout could not be raised): %v", err)
	}
	must(t, err)
	must(t, other.Commit())
	got := <-done
	if got.err != nil || got.ended || got.retryID != 0 {
		t.Fatalf("InterruptTrial of a trial another process ended = %d, %v, %v; want 0, false, nil", got.retryID, got.ended, got.err)
	}
	trials, err := s.GetAllTrials(study)
	must(t, err)
	if len(trials) != 1 || trials[0].State != goptuna.TrialStateComplete {
		t.Errorf("trials %+v, want the one, complete", trials)
	}
}

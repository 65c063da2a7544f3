package storage

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/objective"
)

func samplePoints() []objective.Point {
	var pts []objective.Point
	for i, c := range []int{1, 16, 64} {
		pts = append(pts, objective.Point{
			Concurrency: c, Repeat: i % 2, State: "passed", Requested: 8 * c, Issued: 8 * c, Completed: 8*c - i, Failed: i,
			OutputTokens: 256 * 8 * c, DurationS: 12.5, OutputTokS: 160.25 * float64(c), RequestsPerS: 0.5,
			TTFT:    objective.Stats{Mean: 0.1, P50: 0.09, P90: 0.2, P99: 0.4},
			Latency: objective.Stats{Mean: 3, P50: 2.9, P90: 4, P99: 5.5},
			ITL:     objective.Stats{P50: 0.011},
			Audit:   objective.Audit{RawCount: true, Completed: i == 0, Tokens: true, AllRequested: true},
		})
	}
	pts = append(pts, objective.Point{Phase: "decode", Context: 32768, Concurrency: 8, State: "failed", Status: "Over capacity"})
	return pts
}

func testPointsRoundTrip(t *testing.T, b *backend) {
	s := b.open(t)
	study := mustStudy(t, s, "pts", goptuna.StudyDirectionMaximize)
	a, tb := mustTrial(t, s, study), mustTrial(t, s, study)
	pts := samplePoints()

	if got, err := s.Points(a); err != nil || got != nil {
		t.Fatalf("Points of a fresh trial = %v, %v", got, err)
	}
	must(t, s.SavePoints(a, pts))
	got, err := s.Points(a)
	must(t, err)
	if !reflect.DeepEqual(got, pts) {
		t.Fatalf("Points round trip:\n got %+v\nwant %+v", got, pts)
	}
	// SavePoints replaces; AppendPoints appends; both work on finished trials.
	must(t, s.SetTrialState(a, goptuna.TrialStateComplete))
	must(t, s.SavePoints(a, pts[:2]))
	must(t, s.AppendPoints(a, pts[3:]))
	got, err = s.Points(a)
	must(t, err)
	want := append(append([]objective.Point{}, pts[:2]...), pts[3:]...)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after replace+append: %d points, want %d", len(got), len(want))
	}
	must(t, s.SavePoints(tb, pts[2:3]))

	// Typed columns are queryable without decoding JSON.
	var c int
	var tok, ttft99 float64
	var status string
	must(t, queryRow(s, `SELECT concurrency, output_tok_s, ttft_p99_s, status FROM points WHERE trial_id = ? AND seq = 1`, a).
		Scan(&c, &tok, &ttft99, &status))
	if c != 16 || tok != 160.25*16 || ttft99 != 0.4 || status != "" {
		t.Fatalf("typed columns: c=%d tok=%v ttft99=%v status=%q", c, tok, ttft99, status)
	}

	all, err := s.StudyPoints(study)
	must(t, err)
	if len(all) != 2 || len(all[a]) != 3 || len(all[tb]) != 1 || all[tb][0].Concurrency != 64 {
		t.Fatalf("StudyPoints = %v", all)
	}
	if err := s.SavePoints(12345, pts); !errors.Is(err, goptuna.ErrInvalidTrialID) {
		t.Fatalf("SavePoints on a missing trial = %v", err)
	}
	if _, err := s.Points(12345); !errors.Is(err, goptuna.ErrInvalidTrialID) {
		t.Fatalf("Points of a missing trial = %v", err)
	}

	recs := []RequestRecord{
		{Concurrency: 16, Repeat: 1, Index: 0, TTFT: 0.12, Latency: 3.4, OutputTokens: 256, OK: true},
		{Phase: "decode", Concurrency: 16, Repeat: 1, Context: 4096, Index: 1, OK: false, Error: "context deadline exceeded"},
	}
	must(t, s.SaveRequests(a, recs[:1]))
	must(t, s.SaveRequests(a, recs[1:]))
	gotR, err := s.Requests(a)
	must(t, err)
	if !reflect.DeepEqual(gotR, recs) {
		t.Fatalf("Requests = %+v", gotR)
	}
}

// setHeartbeat backdates a trial's heartbeat, standing in for the passage
// of time.
func setHeartbeat(t *testing.T, s *Store, id int, at time.Time) {
	t.Helper()
	execSQL(t, s, "UPDATE trials SET heartbeat_ns = ? WHERE trial_id = ?", at.UnixNano(), id)
}

func testHeartbeatAndStale(t *testing.T, b *backend) {
	s := b.open(t)
	study := mustStudy(t, s, "hb", goptuna.StudyDirectionMaximize)
	old := time.Now().Add(-10 * time.Minute)
	fresh, stale, done := mustTrial(t, s, study), mustTrial(t, s, study), mustTrial(t, s, study)
	dist := goptuna.CategoricalDistribution{Choices: []string{"a", "b", "c"}}
	must(t, s.SetTrialParam(stale, "attn", 2, dist))
	must(t, s.SetTrialParam(stale, "mem", 0.85, goptuna.UniformDistribution{Low: 0.5, High: 0.95}))
	setHeartbeat(t, s, stale, old)
	setHeartbeat(t, s, done, old)
	must(t, s.SetTrialState(done, goptuna.TrialStateComplete))
	// A trial that never beat is judged by its start time.
	never := mustTrial(t, s, study)
	execSQL(t, s, "UPDATE trials SET heartbeat_ns = NULL, start_ns = ? WHERE trial_id = ?", old.UnixNano(), never)

	ids, err := s.StaleRunning(study, 5*time.Minute)
	must(t, err)
	if !reflect.DeepEqual(ids, []int{stale, never}) {
		t.Fatalf("StaleRunning = %v; want [%d %d]", ids, stale, never)
	}
	if ids, _ := s.StaleRunning(study, time.Hour); len(ids) != 0 {
		t.Fatalf("StaleRunning(1h) = %v", ids)
	}
	if hb, err := s.LastHeartbeat(stale); err != nil || !hb.Equal(time.Unix(0, old.UnixNano())) {
		t.Fatalf("LastHeartbeat = %v, %v", hb, err)
	}
	must(t, s.Heartbeat(never))
	if ids, _ := s.StaleRunning(study, 5*time.Minute); !reflect.DeepEqual(ids, []int{stale}) {
		t.Fatalf("after Heartbeat, StaleRunning = %v", ids)
	}
	_ = fresh

	// Reap with one retry allowed: the stale trial fails, a WAITING retry
	// with the same params is queued.
	reaped, err := s.ReapStale(study, 5*time.Minute, 1)
	must(t, err)
	if len(reaped) != 1 || reaped[0].TrialID != stale || reaped[0].RetryID == 0 {
		t.Fatalf("ReapStale = %+v", reaped)
	}
	st, _ := s.GetTrial(stale)
	if st.State != goptuna.TrialStateFail || st.UserAttrs[AttrState] != StateInterrupted || st.UserAttrs[AttrReason] == "" {
		t.Fatalf("reaped trial = %v %v", st.State, st.UserAttrs)
	}
	if err := s.Heartbeat(stale); !errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
		t.Fatalf("Heartbeat of a reaped trial = %v; the owner must learn it was reaped", err)
	}
	retry, _ := s.GetTrial(reaped[0].RetryID)
	if retry.State != goptuna.TrialStateWaiting || retry.SystemAttrs[AttrRetryOf] != "1" || retry.UserAttrs[AttrRetries] != "1" {
		t.Fatalf("retry = %v %v %v", retry.State, retry.SystemAttrs, retry.UserAttrs)
	}
	var fixed map[string]float64
	must(t, json.Unmarshal([]byte(retry.SystemAttrs[AttrFixedParams]), &fixed))
	if !reflect.DeepEqual(fixed, map[string]float64{"attn": 2, "mem": 0.85}) {
		t.Fatalf("fixed_params = %v", fixed)
	}
	// Reaping again finds nothing.
	if again, err := s.ReapStale(study, 5*time.Minute, 1); err != nil || len(again) != 0 {
		t.Fatalf("second ReapStale = %v, %v", again, err)
	}

	// goptuna's Optimize claims the retry and its Suggest* reuse the params.
	gs, err := goptuna.LoadStudy("hb", goptuna.StudyOptionStorage(s), goptuna.StudyOptionLogger(nil))
	must(t, err)
	var seen []interface{}
	must(t, gs.Optimize(func(tr goptuna.Trial) (float64, error) {
		a, err := tr.SuggestCategorical("attn", []string{"a", "b", "c"})
		if err != nil {
			return 0, err
		}
		m, err := tr.SuggestFloat("mem", 0.5, 0.95)
		seen = append(seen, a, m)
		return 1, err
	}, 1))
	if !reflect.DeepEqual(seen, []interface{}{"c", 0.85}) {
		t.Fatalf("retry suggested %v; want [c 0.85]", seen)
	}

	// RequeueTrial and ClaimWaitingTrial for an ask/tell loop.
	nid, err := s.RequeueTrial(fresh, "interrupted by Ctrl-C")
	must(t, err)
	if f, _ := s.GetTrial(fresh); f.State != goptuna.TrialStateFail || f.UserAttrs[AttrReason] != "interrupted by Ctrl-C" {
		t.Fatalf("requeued original = %v %v", f.State, f.UserAttrs)
	}
	got, ok, err := s.ClaimWaitingTrial(study)
	if err != nil || !ok || got != nid {
		t.Fatalf("ClaimWaitingTrial = %d, %v, %v; want %d", got, ok, err, nid)
	}
	if _, ok, err := s.ClaimWaitingTrial(study); ok || err != nil {
		t.Fatalf("second ClaimWaitingTrial = %v, %v", ok, err)
	}

	// That claimed retry goes stale too: with maxRetries=1 it is failed,
	// not retried again.
	setHeartbeat(t, s, nid, old)
	reaped2, err := s.ReapStale(study, 5*time.Minute, 1)
	must(t, err)
	if len(reaped2) != 1 || reaped2[0].TrialID != nid || reaped2[0].RetryID != 0 {
		t.Fatalf("second-generation reap = %+v", reaped2)
	}
	if f, _ := s.GetTrial(nid); f.State != goptuna.TrialStateFail {
		t.Fatalf("exhausted retry state = %v", f.State)
	}
	nid = mustTrial(t, s, study)
	must(t, s.FailTrial(nid, "boom"))
	if f, _ := s.GetTrial(nid); f.State != goptuna.TrialStateFail || f.UserAttrs[AttrReason] != "boom" {
		t.Fatalf("FailTrial = %v %v", f.State, f.UserAttrs)
	}
	must(t, s.IntegrityCheck())
}

func testKeepAlive(t *testing.T, b *backend) {
	s := b.open(t)
	study := mustStudy(t, s, "ka", goptuna.StudyDirectionMaximize)
	id := mustTrial(t, s, study)
	old := time.Now().Add(-time.Hour)
	setHeartbeat(t, s, id, old)

	// Runs until its context ends, beating meanwhile.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.KeepAlive(ctx, id, 2*time.Millisecond) }()
	eventually(t, 10*time.Second, time.Millisecond, func() (bool, string) {
		hb, err := s.LastHeartbeat(id)
		must(t, err)
		return hb.After(old.Add(time.Minute)), "KeepAlive never beat"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("KeepAlive after cancel = %v", err)
	}

	// Stops with ErrTrialCannotBeUpdated once someone else ends the trial.
	go func() { done <- s.KeepAlive(context.Background(), id, 2*time.Millisecond) }()
	must(t, s.FailTrial(id, "reaped elsewhere"))
	select {
	case err := <-done:
		if !errors.Is(err, goptuna.ErrTrialCannotBeUpdated) {
			t.Fatalf("KeepAlive on a failed trial = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("KeepAlive did not stop when its trial was failed")
	}
	if err := s.KeepAlive(context.Background(), id, 0); err == nil {
		t.Fatal("zero interval accepted")
	}
}

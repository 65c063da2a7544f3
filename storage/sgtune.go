package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/objective"
)

// SavePoints stores the measured points of a trial, replacing any points
// stored before, in one transaction: a reader sees all of them or the old
// set. Calling it again with a longer slice as a sweep progresses is fine.
// It works in any trial state (points may be saved after the trial ended).
func (s *Store) SavePoints(trialID int, pts []objective.Point) error {
	return s.write(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		if _, err := tx.Exec("DELETE FROM points WHERE trial_id = ?", trialID); err != nil {
			return err
		}
		return insertPoints(tx, trialID, 0, pts)
	})
}

// AppendPoints adds points after those already stored for a trial.
func (s *Store) AppendPoints(trialID int, pts []objective.Point) error {
	return s.write(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		var next int
		if err := tx.QueryRow("SELECT COALESCE(MAX(seq) + 1, 0) FROM points WHERE trial_id = ?", trialID).Scan(&next); err != nil {
			return err
		}
		return insertPoints(tx, trialID, next, pts)
	})
}

// finite maps NaN and infinities (which SQLite stores as NULL or refuses in
// NOT NULL columns) to 0 for the typed columns; the JSON column keeps the
// point as measured.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func insertPoints(tx *txn, trialID, seq int, pts []objective.Point) error {
	if len(pts) == 0 {
		return nil
	}
	stmt, err := tx.Prepare(`INSERT INTO points(trial_id, seq, phase, concurrency, repeat, context, state, status,
		requested, issued, completed, failed, output_tokens, duration_s, output_tok_s, requests_s,
		ttft_p50_s, ttft_p99_s, latency_p50_s, latency_p99_s, itl_p50_s, json)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i, p := range pts {
		js, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("storage: point %d of trial ID %d: %w", i, trialID, err)
		}
		if _, err := stmt.Exec(trialID, seq+i, p.Phase, p.Concurrency, p.Repeat, p.Context, p.State, p.Status,
			p.Requested, p.Issued, p.Completed, p.Failed, p.OutputTokens, finite(p.DurationS), finite(p.OutputTokS),
			finite(p.RequestsPerS), finite(p.TTFT.P50), finite(p.TTFT.P99), finite(p.Latency.P50),
			finite(p.Latency.P99), finite(p.ITL.P50), string(js)); err != nil {
			return err
		}
	}
	return nil
}

// Points returns the stored points of a trial in measurement order (nil
// when none; ErrInvalidTrialID when the trial does not exist).
func (s *Store) Points(trialID int) ([]objective.Point, error) {
	var out []objective.Point
	err := s.read(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		m, err := loadPoints(tx, "p.trial_id = ?", trialID)
		out = m[trialID]
		return err
	})
	return out, err
}

// StudyPoints returns the points of every trial of a study, keyed by trial
// ID, from one snapshot.
func (s *Store) StudyPoints(studyID int) (map[int][]objective.Point, error) {
	var out map[int][]objective.Point
	err := s.read(func(tx *txn) error {
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		var err error
		out, err = loadPoints(tx, "t.study_id = ?", studyID)
		return err
	})
	return out, err
}

func loadPoints(q queryer, where string, arg any) (map[int][]objective.Point, error) {
	rows, err := q.Query(`SELECT p.trial_id, p.json FROM points p JOIN trials t ON t.trial_id = p.trial_id
		WHERE `+where+` ORDER BY p.trial_id, p.seq`, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int][]objective.Point{}
	for rows.Next() {
		var id int
		var js string
		if err := rows.Scan(&id, &js); err != nil {
			return nil, err
		}
		var p objective.Point
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			return nil, fmt.Errorf("storage: point of trial ID %d: %w", id, err)
		}
		out[id] = append(out[id], p)
	}
	return out, rows.Err()
}

// RequestRecord is one request of a sweep, for per-request analysis.
type RequestRecord struct {
	Phase        string  `json:"phase,omitempty"`
	Concurrency  int     `json:"concurrency"`
	Repeat       int     `json:"repeat"`
	Context      int     `json:"context,omitempty"`
	Index        int     `json:"index"`
	TTFT         float64 `json:"ttft_s"`
	Latency      float64 `json:"latency_s"`
	OutputTokens int     `json:"output_tokens"`
	OK           bool    `json:"ok"`
	Error        string  `json:"error,omitempty"`
}

// SaveRequests appends request records to a trial in one transaction.
func (s *Store) SaveRequests(trialID int, recs []RequestRecord) error {
	if len(recs) == 0 {
		return nil
	}
	return s.write(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		return insertRequests(tx, trialID, recs)
	})
}

// insertRequests appends request records after those stored for a trial.
func insertRequests(tx *txn, trialID int, recs []RequestRecord) error {
	if len(recs) == 0 {
		return nil
	}
	var next int
	if err := tx.QueryRow("SELECT COALESCE(MAX(seq) + 1, 0) FROM requests WHERE trial_id = ?", trialID).Scan(&next); err != nil {
		return err
	}
	stmt, err := tx.Prepare(`INSERT INTO requests(trial_id, seq, phase, concurrency, repeat, context, idx,
		ttft_s, latency_s, output_tokens, ok, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i, r := range recs {
		if _, err := stmt.Exec(trialID, next+i, r.Phase, r.Concurrency, r.Repeat, r.Context, r.Index,
			finite(r.TTFT), finite(r.Latency), r.OutputTokens, r.OK, r.Error); err != nil {
			return err
		}
	}
	return nil
}

// Requests returns a trial's request records in the order they were saved.
func (s *Store) Requests(trialID int) ([]RequestRecord, error) {
	var out []RequestRecord
	err := s.read(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		rows, err := tx.Query(`SELECT phase, concurrency, repeat, context, idx, ttft_s, latency_s, output_tokens, ok, error
			FROM requests WHERE trial_id = ? ORDER BY seq`, trialID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r RequestRecord
			if err := rows.Scan(&r.Phase, &r.Concurrency, &r.Repeat, &r.Context, &r.Index, &r.TTFT, &r.Latency,
				&r.OutputTokens, &r.OK, &r.Error); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	return out, err
}

// Heartbeat records that the trial's owner is alive. It returns
// goptuna.ErrTrialCannotBeUpdated when the trial is no longer RUNNING (for
// example another process reaped it as stale): the owner should stop.
func (s *Store) Heartbeat(trialID int) error {
	return s.heartbeat(context.Background(), trialID)
}

func (s *Store) heartbeat(ctx context.Context, trialID int) error {
	return s.writeCtx(ctx, func(tx *txn) error {
		st, err := trialState(tx, trialID)
		if err != nil {
			return err
		}
		if st != goptuna.TrialStateRunning {
			return goptuna.ErrTrialCannotBeUpdated
		}
		_, err = tx.Exec("UPDATE trials SET heartbeat_ns = ? WHERE trial_id = ?", time.Now().UnixNano(), trialID)
		return err
	})
}

// KeepAlive beats the trial's heartbeat every interval until ctx is done
// (then it returns nil) or a beat fails (it returns that error;
// goptuna.ErrTrialCannotBeUpdated means the trial was finished or reaped by
// someone else and its runner should stop). It blocks: run it in a goroutine
// owned by the trial's runner and cancel ctx when the trial ends.
func (s *Store) KeepAlive(ctx context.Context, trialID int, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("storage: heartbeat interval %v must be positive", interval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := s.heartbeat(ctx, trialID); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("storage: heartbeat of trial ID %d: %w", trialID, err)
			}
		}
	}
}

// LastHeartbeat returns when the trial last beat (its start when it never
// did; zero when neither is known).
func (s *Store) LastHeartbeat(trialID int) (time.Time, error) {
	var ns sql.NullInt64
	err := s.read(func(tx *txn) error {
		err := tx.QueryRow("SELECT COALESCE(heartbeat_ns, start_ns) FROM trials WHERE trial_id = ?", trialID).Scan(&ns)
		if errors.Is(err, sql.ErrNoRows) {
			return goptuna.ErrInvalidTrialID
		}
		return err
	})
	return nsTime(ns), err
}

const staleQuery = `SELECT trial_id FROM trials WHERE study_id = ? AND state = 'RUNNING'
	AND COALESCE(heartbeat_ns, start_ns, 0) < ? ORDER BY number`

// StaleRunning lists (by number) the IDs of RUNNING trials of a study whose
// heartbeat, or start when they never beat, is older than d.
func (s *Store) StaleRunning(studyID int, d time.Duration) ([]int, error) {
	var out []int
	err := s.read(func(tx *txn) error {
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		var err error
		out, err = ints(tx, staleQuery, studyID, time.Now().Add(-d).UnixNano())
		return err
	})
	return out, err
}

func ints(q queryer, query string, args ...any) ([]int, error) {
	rows, err := q.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// FailTrial sets an unfinished trial to FAIL with user attr AttrReason in
// one transaction (goptuna.ErrTrialCannotBeUpdated when already finished).
// Like every move to FAIL, it gives the trial's launch back to the study's
// budget (see ClaimLaunch).
func (s *Store) FailTrial(trialID int, reason string) error {
	return s.write(func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return err
		}
		if err := setTrialAttr(tx, trialID, "user", AttrReason, reason); err != nil {
			return err
		}
		return setState(tx, trialID, goptuna.TrialStateFail, "FAIL")
	})
}

// RequeueTrial schedules a retry of a trial with the same parameters: in one
// transaction, an unfinished trial becomes FAIL with AttrReason (a finished
// one keeps its state), and a WAITING trial is added with the next number,
// system attrs AttrFixedParams (its internal params, which goptuna's
// Suggest* use) and AttrRetryOf (the original number), and user attr
// AttrRetries. goptuna's Optimize, or ClaimWaitingTrial, picks it up. The
// failed original gives its launch back (see ClaimLaunch); the retry is
// not counted until it is claimed.
func (s *Store) RequeueTrial(trialID int, reason string) (int, error) {
	var id int
	err := s.write(func(tx *txn) error {
		var err error
		id, err = requeue(tx, trialID, reason, "")
		return err
	})
	if err != nil {
		return -1, err
	}
	return id, nil
}

func requeue(tx *txn, trialID int, reason, state string) (int, error) {
	old, err := lockedTrial(tx, trialID)
	if err != nil {
		return -1, err
	}
	if !old.State.IsFinished() {
		if err := failInTx(tx, trialID, reason, state); err != nil {
			return -1, err
		}
	}
	retries, _ := strconv.Atoi(old.UserAttrs[AttrRetries])
	sys := map[string]string{AttrRetryOf: strconv.Itoa(old.Number)}
	// A re-run of a confirmation run is a confirmation run.
	if c, ok := old.SystemAttrs[AttrConfirmOf]; ok {
		sys[AttrConfirmOf] = c
	}
	// A re-run of the engine's default config is that config.
	if b, ok := old.SystemAttrs[AttrBaseline]; ok {
		sys[AttrBaseline] = b
	}
	return queueCopy(tx, old, sys, map[string]string{AttrRetries: strconv.Itoa(retries + 1)})
}

// lockedTrial locks a trial (PostgreSQL) and loads it.
func lockedTrial(tx *txn, trialID int) (goptuna.FrozenTrial, error) {
	if _, err := trialState(tx, trialID); err != nil { // lock it first (PostgreSQL)
		return goptuna.FrozenTrial{}, err
	}
	ts, err := loadTrials(tx, "t.trial_id = ?", trialID)
	if err != nil {
		return goptuna.FrozenTrial{}, err
	}
	if len(ts) == 0 {
		return goptuna.FrozenTrial{}, goptuna.ErrInvalidTrialID
	}
	return ts[0], nil
}

// queueCopy adds a WAITING trial with old's parameters (system attr
// AttrFixedParams, which goptuna's Suggest* use) and the given attributes.
func queueCopy(tx *txn, old goptuna.FrozenTrial, sys, user map[string]string) (int, error) {
	fixed, err := json.Marshal(old.InternalParams)
	if err != nil {
		return -1, err
	}
	id, err := newTrial(tx, old.StudyID, "WAITING", 0.0, nil, nil, nil)
	if err != nil {
		return -1, err
	}
	if err := setTrialAttr(tx, id, "system", AttrFixedParams, string(fixed)); err != nil {
		return -1, err
	}
	for _, kind := range []struct {
		name  string
		attrs map[string]string
	}{{"system", sys}, {"user", user}} {
		for _, k := range slices.Sorted(maps.Keys(kind.attrs)) {
			if err := setTrialAttr(tx, id, kind.name, k, kind.attrs[k]); err != nil {
				return -1, err
			}
		}
	}
	return id, nil
}

func failInTx(tx *txn, trialID int, reason, state string) error {
	if reason != "" {
		if err := setTrialAttr(tx, trialID, "user", AttrReason, reason); err != nil {
			return err
		}
	}
	if state != "" {
		if err := setTrialAttr(tx, trialID, "user", AttrState, state); err != nil {
			return err
		}
	}
	return setState(tx, trialID, goptuna.TrialStateFail, "FAIL")
}

// Reaped says what ReapStale did with one stale trial.
type Reaped struct {
	TrialID int // the stale trial, now FAIL
	Number  int
	RetryID int // the WAITING retry's trial ID; 0 when not retried
}

// ReapStale turns every RUNNING trial of a study whose heartbeat is older
// than olderThan into FAIL (AttrState "interrupted", AttrReason saying so)
// and, while it has been retried fewer than maxRetries times, queues a
// WAITING retry with the same params (see RequeueTrial). It runs in one
// write transaction that locks the trials it reaps, so two processes reaping
// at once never reap (or retry) one trial twice. A reaped trial gives its
// launch back to the study's budget (see ClaimLaunch).
func (s *Store) ReapStale(studyID int, olderThan time.Duration, maxRetries int) ([]Reaped, error) {
	var out []Reaped
	err := s.write(func(tx *txn) error {
		out = nil
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		// SKIP LOCKED (PostgreSQL): a trial another reaper is reaping, or
		// whose owner is beating right now, is left to them.
		now := time.Now()
		ids, err := ints(tx, staleQuery+tx.lockSkip(), studyID, now.Add(-olderThan).UnixNano())
		if err != nil {
			return err
		}
		for _, id := range ids {
			var number int
			var last sql.NullInt64
			var retries sql.NullString
			if err := tx.QueryRow(`SELECT number, COALESCE(heartbeat_ns, start_ns),
				(SELECT value FROM trial_attrs WHERE trial_id = ? AND kind = 'user' AND key = ?)
				FROM trials WHERE trial_id = ?`, id, AttrRetries, id).Scan(&number, &last, &retries); err != nil {
				return err
			}
			reason := "stale: no heartbeat since " + nsTime(last).UTC().Format(time.RFC3339)
			r := Reaped{TrialID: id, Number: number}
			n, _ := strconv.Atoi(retries.String)
			if n < maxRetries {
				if r.RetryID, err = requeue(tx, id, reason, StateInterrupted); err != nil {
					return err
				}
			} else if err := failInTx(tx, id, reason+"; retries exhausted", StateInterrupted); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// ClaimWaitingTrial atomically moves the study's lowest-numbered WAITING
// trial to RUNNING and returns its ID; ok is false when none waits. Use it
// in an ask/tell loop (goptuna's Optimize does the same on its own).
func (s *Store) ClaimWaitingTrial(studyID int) (trialID int, ok bool, err error) {
	err = s.write(func(tx *txn) error {
		ok = false // write may re-run this after a transient failure
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		// SKIP LOCKED (PostgreSQL): concurrent claimers take different
		// trials instead of queueing on the first.
		err := tx.QueryRow("SELECT trial_id FROM trials WHERE study_id = ? AND state = 'WAITING' ORDER BY number LIMIT 1"+
			tx.lockSkip(), studyID).Scan(&trialID)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		return setState(tx, trialID, goptuna.TrialStateRunning, "RUNNING")
	})
	if err != nil || !ok {
		return -1, false, err
	}
	return trialID, true, nil
}

// AnnotateTrial sets a user attribute of a trial in any state, for notes
// written after it finished (a recomputed score, a report link). goptuna's
// SetTrialUserAttr refuses finished trials.
func (s *Store) AnnotateTrial(trialID int, key, value string) error {
	return s.write(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		return setTrialAttr(tx, trialID, "user", key, value)
	})
}

// StudyNames returns the names of all studies, oldest first.
func (s *Store) StudyNames() ([]string, error) {
	var out []string
	err := s.read(func(tx *txn) error {
		rows, err := tx.Query("SELECT name FROM studies ORDER BY study_id")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			out = append(out, n)
		}
		return rows.Err()
	})
	return out, err
}

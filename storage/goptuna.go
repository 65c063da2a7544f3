package storage

import (
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/c-bata/goptuna"
	sqlite3 "github.com/mattn/go-sqlite3"
)

// The goptuna.Storage methods. Semantics follow goptuna's in-memory storage
// and rdb.v2 (see each method), with these choices:
//   - setters on a finished trial return goptuna.ErrTrialCannotBeUpdated;
//   - SetTrialState also fails with it when the state does not change, so
//     two processes popping one WAITING trial cannot both claim it;
//   - WAITING -> RUNNING resets the start time and heartbeat (Optuna does);
//   - NaN values are refused (SQLite would store NULL and TPE's sort breaks);
//   - SetTrialParam and SetTrialIntermediateValue overwrite an existing
//     name/step (Optuna >= 2 behaviour).

var stateNames = map[goptuna.TrialState]string{
	goptuna.TrialStateRunning:  "RUNNING",
	goptuna.TrialStateComplete: "COMPLETE",
	goptuna.TrialStatePruned:   "PRUNED",
	goptuna.TrialStateFail:     "FAIL",
	goptuna.TrialStateWaiting:  "WAITING",
}

func stateName(s goptuna.TrialState) (string, error) {
	n, ok := stateNames[s]
	if !ok {
		return "", fmt.Errorf("storage: unknown trial state %d", int(s))
	}
	return n, nil
}

func parseState(n string) (goptuna.TrialState, error) {
	for s, name := range stateNames {
		if name == n {
			return s, nil
		}
	}
	return 0, fmt.Errorf("storage: unknown trial state %q in database", n)
}

func nsTime(ns sql.NullInt64) time.Time {
	if !ns.Valid {
		return time.Time{}
	}
	return time.Unix(0, ns.Int64)
}

func timeNS(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func checkValue(v float64) error {
	if math.IsNaN(v) {
		return errors.New("storage: NaN value refused (report a finite value or prune the trial)")
	}
	return nil
}

// isUnique reports a unique or primary-key violation from either driver.
func isUnique(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrConstraint &&
			(se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey)
	}
	return pgCode(err) == "23505"
}

// IsFull reports whether err says the disk holding the storage, or a file
// being written, is full: SQLite's SQLITE_FULL, PostgreSQL's disk_full
// (53100) or ENOSPC.
func IsFull(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrFull {
		return true
	}
	return pgCode(err) == "53100" || errors.Is(err, syscall.ENOSPC)
}

type queryer interface {
	QueryRow(query string, args ...any) *sql.Row
	Query(query string, args ...any) (*sql.Rows, error)
}

func studyExists(q queryer, studyID int) error {
	var one int
	err := q.QueryRow("SELECT 1 FROM studies WHERE study_id = ?", studyID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return goptuna.ErrInvalidStudyID
	}
	return err
}

// lockStudy fails with ErrInvalidStudyID unless the study exists; in a
// PostgreSQL write transaction it also locks the study's row, which
// serializes what depends on all of a study's trials (the next trial
// number, the launch count).
func lockStudy(tx *txn, studyID int) error {
	var one int
	err := tx.QueryRow("SELECT 1 FROM studies WHERE study_id = ?"+tx.lock(), studyID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return goptuna.ErrInvalidStudyID
	}
	return err
}

// trialState returns a trial's state, or ErrInvalidTrialID. In a PostgreSQL
// write transaction it locks the trial's row first, so the state cannot
// change before the transaction that checked it commits: every write to a
// trial goes through here (or through updatable).
func trialState(tx *txn, trialID int) (goptuna.TrialState, error) {
	var n string
	err := tx.QueryRow("SELECT state FROM trials WHERE trial_id = ?"+tx.lock(), trialID).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, goptuna.ErrInvalidTrialID
	}
	if err != nil {
		return 0, err
	}
	return parseState(n)
}

// updatable fails unless the trial exists and is RUNNING or WAITING.
func updatable(tx *txn, trialID int) error {
	st, err := trialState(tx, trialID)
	if err != nil {
		return err
	}
	if st.IsFinished() {
		return goptuna.ErrTrialCannotBeUpdated
	}
	return nil
}

// CreateNewStudy creates a study named name (a generated name when empty)
// and returns its ID. An existing name gives an error wrapping
// ErrDuplicateStudy.
func (s *Store) CreateNewStudy(name string) (int, error) {
	var id int64
	err := s.write(func(tx *txn) error {
		if name == "" {
			var next int64
			if err := tx.QueryRow("SELECT COALESCE(MAX(study_id), 0) + 1 FROM studies").Scan(&next); err != nil {
				return err
			}
			name = fmt.Sprintf("%s%d-%d", goptuna.DefaultStudyNamePrefix, next, time.Now().UnixNano())
		}
		err := tx.QueryRow("INSERT INTO studies(name, direction, created_ns) VALUES (?, 'minimize', ?) RETURNING study_id",
			name, time.Now().UnixNano()).Scan(&id)
		if isUnique(err) {
			return fmt.Errorf("storage: %q: %w", name, ErrDuplicateStudy)
		}
		return err
	})
	if err != nil {
		return -1, err
	}
	return int(id), nil
}

// DeleteStudy deletes a study with its trials, points and requests.
func (s *Store) DeleteStudy(studyID int) error {
	return s.write(func(tx *txn) error {
		res, err := tx.Exec("DELETE FROM studies WHERE study_id = ?", studyID)
		if err != nil {
			return err
		}
		return affectedStudy(res)
	})
}

// affectedStudy is ErrInvalidStudyID when a statement on one study changed
// no row.
func affectedStudy(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return goptuna.ErrInvalidStudyID
	}
	return nil
}

// SetStudyDirection sets whether the study minimises or maximises.
func (s *Store) SetStudyDirection(studyID int, direction goptuna.StudyDirection) error {
	if direction != goptuna.StudyDirectionMaximize && direction != goptuna.StudyDirectionMinimize {
		return fmt.Errorf("storage: invalid study direction %q", direction)
	}
	return s.write(func(tx *txn) error {
		res, err := tx.Exec("UPDATE studies SET direction = ? WHERE study_id = ?", string(direction), studyID)
		if err != nil {
			return err
		}
		return affectedStudy(res)
	})
}

func (s *Store) setStudyAttr(studyID int, kind, key, value string) error {
	return s.write(func(tx *txn) error {
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO study_attrs(study_id, kind, key, value) VALUES (?, ?, ?, ?)
			ON CONFLICT(study_id, kind, key) DO UPDATE SET value = excluded.value`, studyID, kind, key, value)
		return err
	})
}

// SetStudyUserAttr sets a user attribute of a study.
func (s *Store) SetStudyUserAttr(studyID int, key, value string) error {
	return s.setStudyAttr(studyID, "user", key, value)
}

// SetStudySystemAttr sets a system attribute of a study.
func (s *Store) SetStudySystemAttr(studyID int, key, value string) error {
	return s.setStudyAttr(studyID, "system", key, value)
}

// EnsureStudySystemAttr returns the study's system attribute key, storing
// value first when the study has none (or an empty one), in one
// transaction: of processes that race to set it, every one gets the value
// the first of them stored. SetStudySystemAttr after a read that found
// none left each racer with its own value, the last one stored.
func (s *Store) EnsureStudySystemAttr(studyID int, key, value string) (stored string, err error) {
	if value == "" {
		return "", fmt.Errorf("storage: study %s: empty value", key)
	}
	err = s.write(func(tx *txn) error {
		stored = "" // write may re-run this after a transient failure
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		// A PostgreSQL transaction that loses the race waits for the
		// winner's commit, changes nothing, and (READ COMMITTED) reads
		// the winner's value in its next statement.
		if _, err := tx.Exec(`INSERT INTO study_attrs(study_id, kind, key, value) VALUES (?, 'system', ?, ?)
			ON CONFLICT(study_id, kind, key) DO UPDATE SET value = excluded.value WHERE study_attrs.value = ''`,
			studyID, key, value); err != nil {
			return err
		}
		return tx.QueryRow("SELECT value FROM study_attrs WHERE study_id = ? AND kind = 'system' AND key = ?",
			studyID, key).Scan(&stored)
	})
	if err != nil {
		return "", err
	}
	return stored, nil
}

// GetStudyIDFromName returns the ID of the named study, or an error wrapping
// ErrStudyNotFound.
func (s *Store) GetStudyIDFromName(name string) (int, error) {
	id := -1
	err := s.read(func(tx *txn) error {
		err := tx.QueryRow("SELECT study_id FROM studies WHERE name = ?", name).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("storage: %q: %w", name, ErrStudyNotFound)
		}
		return err
	})
	if err != nil {
		return -1, err
	}
	return id, nil
}

// GetStudyIDFromTrialID returns the study a trial belongs to.
func (s *Store) GetStudyIDFromTrialID(trialID int) (int, error) {
	id := -1
	err := s.read(func(tx *txn) error {
		err := tx.QueryRow("SELECT study_id FROM trials WHERE trial_id = ?", trialID).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return goptuna.ErrInvalidTrialID
		}
		return err
	})
	if err != nil {
		return -1, err
	}
	return id, nil
}

// GetStudyNameFromID returns a study's name.
func (s *Store) GetStudyNameFromID(studyID int) (string, error) {
	var name string
	err := s.read(func(tx *txn) error {
		err := tx.QueryRow("SELECT name FROM studies WHERE study_id = ?", studyID).Scan(&name)
		if errors.Is(err, sql.ErrNoRows) {
			return goptuna.ErrInvalidStudyID
		}
		return err
	})
	return name, err
}

// GetStudyDirection returns a study's direction.
func (s *Store) GetStudyDirection(studyID int) (goptuna.StudyDirection, error) {
	var d string
	err := s.read(func(tx *txn) error {
		return studyDirection(tx, studyID, &d)
	})
	if err != nil {
		return goptuna.StudyDirectionMinimize, err
	}
	return goptuna.StudyDirection(d), nil
}

func studyDirection(q queryer, studyID int, d *string) error {
	err := q.QueryRow("SELECT direction FROM studies WHERE study_id = ?", studyID).Scan(d)
	if errors.Is(err, sql.ErrNoRows) {
		return goptuna.ErrInvalidStudyID
	}
	return err
}

func attrs(q queryer, query string, args ...any) (map[string]string, error) {
	rows, err := q.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, rows.Err()
}

func (s *Store) studyAttrs(studyID int, kind string) (map[string]string, error) {
	var m map[string]string
	err := s.read(func(tx *txn) error {
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		var err error
		m, err = attrs(tx, "SELECT key, value FROM study_attrs WHERE study_id = ? AND kind = ?", studyID, kind)
		return err
	})
	return m, err
}

// GetStudyUserAttrs returns a study's user attributes.
func (s *Store) GetStudyUserAttrs(studyID int) (map[string]string, error) {
	return s.studyAttrs(studyID, "user")
}

// GetStudySystemAttrs returns a study's system attributes.
func (s *Store) GetStudySystemAttrs(studyID int) (map[string]string, error) {
	return s.studyAttrs(studyID, "system")
}

// GetAllStudySummaries returns every study with its best COMPLETE trial (a
// zero FrozenTrial when none) and its earliest trial start, from one
// consistent snapshot.
func (s *Store) GetAllStudySummaries() ([]goptuna.StudySummary, error) {
	var out []goptuna.StudySummary
	err := s.read(func(tx *txn) error {
		rows, err := tx.Query(`SELECT s.study_id, s.name, s.direction,
			(SELECT MIN(start_ns) FROM trials t WHERE t.study_id = s.study_id)
			FROM studies s ORDER BY s.study_id`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var sum goptuna.StudySummary
			var d string
			var start sql.NullInt64
			if err := rows.Scan(&sum.ID, &sum.Name, &d, &start); err != nil {
				rows.Close()
				return err
			}
			sum.Direction = goptuna.StudyDirection(d)
			sum.DatetimeStart = nsTime(start)
			out = append(out, sum)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for i := range out {
			sum := &out[i]
			if sum.UserAttrs, err = attrs(tx, "SELECT key, value FROM study_attrs WHERE study_id = ? AND kind = 'user'", sum.ID); err != nil {
				return err
			}
			if sum.SystemAttrs, err = attrs(tx, "SELECT key, value FROM study_attrs WHERE study_id = ? AND kind = 'system'", sum.ID); err != nil {
				return err
			}
			best, err := bestTrial(tx, sum.ID, string(sum.Direction))
			if err != nil && !errors.Is(err, goptuna.ErrNoCompletedTrials) {
				return err
			}
			sum.BestTrial = best
		}
		return nil
	})
	return out, err
}

// insertTrial gives a new trial the next number of its study: numbers are unique per
// study (UNIQUE constraint) and continue across processes and resumes.
const insertTrial = `INSERT INTO trials(study_id, number, state, value, start_ns, complete_ns, heartbeat_ns)
	VALUES (?, (SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE study_id = ?), ?, ?, ?, ?, ?)
	RETURNING trial_id`

// newTrial inserts a trial with the next number of its study and returns its
// ID. The study's row lock (PostgreSQL) makes concurrent inserters number
// one after the other; SQLite's write lock already does.
func newTrial(tx *txn, studyID int, state string, value, start, complete, heartbeat any) (int, error) {
	if err := lockStudy(tx, studyID); err != nil {
		return -1, err
	}
	var id int
	err := tx.QueryRow(insertTrial, studyID, studyID, state, value, start, complete, heartbeat).Scan(&id)
	return id, err
}

// CreateNewTrial creates a RUNNING trial with the next number of the study.
func (s *Store) CreateNewTrial(studyID int) (int, error) {
	var id int
	err := s.write(func(tx *txn) error {
		now := time.Now().UnixNano()
		var err error
		id, err = newTrial(tx, studyID, "RUNNING", nil, now, nil, now)
		return err
	})
	if err != nil {
		return -1, err
	}
	return id, nil
}

// CloneTrial creates a trial with the next number of the study and the
// state, value, times, params, intermediate values and attributes of base
// (goptuna's Study.EnqueueTrial uses it to add WAITING trials).
func (s *Store) CloneTrial(studyID int, base goptuna.FrozenTrial) (int, error) {
	st, err := stateName(base.State)
	if err != nil {
		return -1, err
	}
	if err := checkValue(base.Value); err != nil {
		return -1, err
	}
	type param struct {
		name string
		v    float64
		js   string
	}
	params := make([]param, 0, len(base.InternalParams))
	for name, v := range base.InternalParams {
		d, ok := base.Distributions[name]
		if !ok {
			return -1, fmt.Errorf("storage: clone: distribution of %q not found", name)
		}
		js, err := goptuna.DistributionToJSON(d)
		if err != nil {
			return -1, fmt.Errorf("storage: clone: param %q: %w", name, err)
		}
		params = append(params, param{name, v, string(js)})
	}
	var id int
	err = s.write(func(tx *txn) error {
		var hb any
		if base.State == goptuna.TrialStateRunning {
			hb = time.Now().UnixNano()
		}
		start := base.DatetimeStart
		if start.IsZero() && base.State != goptuna.TrialStateWaiting {
			start = time.Now()
		}
		var err error
		id, err = newTrial(tx, studyID, st, base.Value, timeNS(start), timeNS(base.DatetimeComplete), hb)
		if err != nil {
			return err
		}
		for _, p := range params {
			if _, err := tx.Exec("INSERT INTO trial_params(trial_id, name, value, distribution) VALUES (?, ?, ?, ?)", id, p.name, p.v, p.js); err != nil {
				return err
			}
		}
		for step, v := range base.IntermediateValues {
			if err := checkValue(v); err != nil {
				return err
			}
			if _, err := tx.Exec("INSERT INTO trial_values(trial_id, step, value) VALUES (?, ?, ?)", id, step, v); err != nil {
				return err
			}
		}
		for kind, m := range map[string]map[string]string{"user": base.UserAttrs, "system": base.SystemAttrs} {
			for k, v := range m {
				if _, err := tx.Exec("INSERT INTO trial_attrs(trial_id, kind, key, value) VALUES (?, ?, ?, ?)", id, kind, k, v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return -1, err
	}
	return id, nil
}

// SetTrialValue sets the objective value of an unfinished trial.
func (s *Store) SetTrialValue(trialID int, value float64) error {
	if err := checkValue(value); err != nil {
		return err
	}
	return s.write(func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return err
		}
		_, err := tx.Exec("UPDATE trials SET value = ? WHERE trial_id = ?", value, trialID)
		return err
	})
}

// SetTrialIntermediateValue sets (or replaces) the value reported at a step.
func (s *Store) SetTrialIntermediateValue(trialID int, step int, value float64) error {
	if err := checkValue(value); err != nil {
		return err
	}
	return s.write(func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO trial_values(trial_id, step, value) VALUES (?, ?, ?)
			ON CONFLICT(trial_id, step) DO UPDATE SET value = excluded.value`, trialID, step, value)
		return err
	})
}

// SetTrialParam sets a sampled parameter (internal representation) and its
// distribution, stored as goptuna.DistributionToJSON.
func (s *Store) SetTrialParam(trialID int, name string, internal float64, distribution interface{}) error {
	js, err := goptuna.DistributionToJSON(distribution)
	if err != nil {
		return fmt.Errorf("storage: param %q: %w", name, err)
	}
	if _, err := goptuna.ToExternalRepresentation(distribution, internal); err != nil {
		return fmt.Errorf("storage: param %q: %w", name, err)
	}
	if err := checkValue(internal); err != nil {
		return err
	}
	return s.write(func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return err
		}
		_, err := tx.Exec(`INSERT INTO trial_params(trial_id, name, value, distribution) VALUES (?, ?, ?, ?)
			ON CONFLICT(trial_id, name) DO UPDATE SET value = excluded.value, distribution = excluded.distribution`,
			trialID, name, internal, string(js))
		return err
	})
}

// SetTrialState changes a trial's state. It returns
// goptuna.ErrTrialCannotBeUpdated when the trial is finished or already in
// that state; goptuna's popWaitingTrialID relies on this to claim a WAITING
// trial atomically.
func (s *Store) SetTrialState(trialID int, state goptuna.TrialState) error {
	name, err := stateName(state)
	if err != nil {
		return err
	}
	return s.write(func(tx *txn) error {
		return setState(tx, trialID, state, name)
	})
}

func setState(tx *txn, trialID int, state goptuna.TrialState, name string) error {
	prev, err := trialState(tx, trialID)
	if err != nil {
		return err
	}
	if prev.IsFinished() || prev == state {
		return goptuna.ErrTrialCannotBeUpdated
	}
	now := time.Now().UnixNano()
	switch {
	case state == goptuna.TrialStateFail:
		// FAIL is how an interrupted or reaped trial ends: it gives its
		// launch back to the study's budget (its retry claims one again);
		// COMPLETE and PRUNED trials keep theirs.
		_, err = tx.Exec("UPDATE trials SET state = ?, complete_ns = ?, launch_ns = NULL WHERE trial_id = ?", name, now, trialID)
	case state.IsFinished():
		_, err = tx.Exec("UPDATE trials SET state = ?, complete_ns = ? WHERE trial_id = ?", name, now, trialID)
	case state == goptuna.TrialStateRunning:
		_, err = tx.Exec("UPDATE trials SET state = ?, start_ns = ?, heartbeat_ns = ? WHERE trial_id = ?", name, now, now, trialID)
	default:
		_, err = tx.Exec("UPDATE trials SET state = ? WHERE trial_id = ?", name, trialID)
	}
	return err
}

func setTrialAttr(tx *txn, trialID int, kind, key, value string) error {
	_, err := tx.Exec(`INSERT INTO trial_attrs(trial_id, kind, key, value) VALUES (?, ?, ?, ?)
		ON CONFLICT(trial_id, kind, key) DO UPDATE SET value = excluded.value`, trialID, kind, key, value)
	return err
}

func (s *Store) setTrialAttr(trialID int, kind, key, value string) error {
	return s.write(func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return err
		}
		return setTrialAttr(tx, trialID, kind, key, value)
	})
}

// SetTrialUserAttr sets a user attribute of an unfinished trial.
func (s *Store) SetTrialUserAttr(trialID int, key, value string) error {
	return s.setTrialAttr(trialID, "user", key, value)
}

// SetTrialSystemAttr sets a system attribute of an unfinished trial.
func (s *Store) SetTrialSystemAttr(trialID int, key, value string) error {
	return s.setTrialAttr(trialID, "system", key, value)
}

// GetTrialNumberFromID returns a trial's number within its study.
func (s *Store) GetTrialNumberFromID(trialID int) (int, error) {
	n := -1
	err := s.read(func(tx *txn) error {
		err := tx.QueryRow("SELECT number FROM trials WHERE trial_id = ?", trialID).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return goptuna.ErrInvalidTrialID
		}
		return err
	})
	if err != nil {
		return -1, err
	}
	return n, nil
}

// GetTrialParam returns a parameter's internal representation.
func (s *Store) GetTrialParam(trialID int, name string) (float64, error) {
	v := -1.0
	err := s.read(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		err := tx.QueryRow("SELECT value FROM trial_params WHERE trial_id = ? AND name = ?", trialID, name).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("storage: trial ID %d has no param %q", trialID, name)
		}
		return err
	})
	if err != nil {
		return -1, err
	}
	return v, nil
}

// GetTrial returns one trial.
func (s *Store) GetTrial(trialID int) (goptuna.FrozenTrial, error) {
	var out goptuna.FrozenTrial
	err := s.read(func(tx *txn) error {
		ts, err := loadTrials(tx, "t.trial_id = ?", trialID)
		if err != nil {
			return err
		}
		if len(ts) == 0 {
			return goptuna.ErrInvalidTrialID
		}
		out = ts[0]
		return nil
	})
	return out, err
}

// GetAllTrials returns every trial of a study, by number, read in one
// transaction so the trials and their params/values/attrs agree.
func (s *Store) GetAllTrials(studyID int) ([]goptuna.FrozenTrial, error) {
	var out []goptuna.FrozenTrial
	err := s.read(func(tx *txn) error {
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		var err error
		out, err = loadTrials(tx, "t.study_id = ?", studyID)
		return err
	})
	return out, err
}

// GetBestTrial returns the COMPLETE trial with the best value for the
// study's direction (lowest number on ties), or
// goptuna.ErrNoCompletedTrials.
func (s *Store) GetBestTrial(studyID int) (goptuna.FrozenTrial, error) {
	var out goptuna.FrozenTrial
	err := s.read(func(tx *txn) error {
		var d string
		if err := studyDirection(tx, studyID, &d); err != nil {
			return err
		}
		var err error
		out, err = bestTrial(tx, studyID, d)
		return err
	})
	return out, err
}

func bestTrial(q queryer, studyID int, direction string) (goptuna.FrozenTrial, error) {
	order := "ASC"
	if direction == string(goptuna.StudyDirectionMaximize) {
		order = "DESC"
	}
	var id int
	err := q.QueryRow(`SELECT trial_id FROM trials WHERE study_id = ? AND state = 'COMPLETE'
		ORDER BY COALESCE(value, 0) `+order+`, number ASC LIMIT 1`, studyID).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return goptuna.FrozenTrial{}, goptuna.ErrNoCompletedTrials
	}
	if err != nil {
		return goptuna.FrozenTrial{}, err
	}
	ts, err := loadTrials(q, "t.trial_id = ?", id)
	if err != nil {
		return goptuna.FrozenTrial{}, err
	}
	if len(ts) == 0 {
		return goptuna.FrozenTrial{}, goptuna.ErrInvalidTrialID
	}
	return ts[0], nil
}

// GetTrialParams returns a trial's parameters in external representation.
func (s *Store) GetTrialParams(trialID int) (map[string]interface{}, error) {
	t, err := s.GetTrial(trialID)
	if err != nil {
		return nil, err
	}
	return t.Params, nil
}

func (s *Store) trialAttrs(trialID int, kind string) (map[string]string, error) {
	var m map[string]string
	err := s.read(func(tx *txn) error {
		if _, err := trialState(tx, trialID); err != nil {
			return err
		}
		var err error
		m, err = attrs(tx, "SELECT key, value FROM trial_attrs WHERE trial_id = ? AND kind = ?", trialID, kind)
		return err
	})
	return m, err
}

// GetTrialUserAttrs returns a trial's user attributes.
func (s *Store) GetTrialUserAttrs(trialID int) (map[string]string, error) {
	return s.trialAttrs(trialID, "user")
}

// GetTrialSystemAttrs returns a trial's system attributes.
func (s *Store) GetTrialSystemAttrs(trialID int) (map[string]string, error) {
	return s.trialAttrs(trialID, "system")
}

// loadTrials reads the trials matching where (on alias t) with 4 queries.
func loadTrials(q queryer, where string, arg any) ([]goptuna.FrozenTrial, error) {
	rows, err := q.Query(`SELECT t.trial_id, t.study_id, t.number, t.state, t.value, t.start_ns, t.complete_ns
		FROM trials t WHERE `+where+` ORDER BY t.number`, arg)
	if err != nil {
		return nil, err
	}
	var out []goptuna.FrozenTrial
	index := map[int]int{}
	for rows.Next() {
		var t goptuna.FrozenTrial
		var st string
		var v sql.NullFloat64
		var start, done sql.NullInt64
		if err := rows.Scan(&t.ID, &t.StudyID, &t.Number, &st, &v, &start, &done); err != nil {
			rows.Close()
			return nil, err
		}
		if t.State, err = parseState(st); err != nil {
			rows.Close()
			return nil, err
		}
		t.Value = v.Float64
		t.DatetimeStart = nsTime(start)
		t.DatetimeComplete = nsTime(done)
		t.IntermediateValues = map[int]float64{}
		t.InternalParams = map[string]float64{}
		t.Params = map[string]interface{}{}
		t.Distributions = map[string]interface{}{}
		t.UserAttrs = map[string]string{}
		t.SystemAttrs = map[string]string{}
		index[t.ID] = len(out)
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return out, nil
	}

	// Params: many trials share a few distinct distributions; decode once.
	dists := map[string]interface{}{}
	rows, err = q.Query(`SELECT p.trial_id, p.name, p.value, p.distribution
		FROM trial_params p JOIN trials t ON t.trial_id = p.trial_id WHERE `+where, arg)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id int
		var name, js string
		var v float64
		if err := rows.Scan(&id, &name, &v, &js); err != nil {
			rows.Close()
			return nil, err
		}
		d, ok := dists[js]
		if !ok {
			if d, err = goptuna.JSONToDistribution([]byte(js)); err != nil {
				rows.Close()
				return nil, fmt.Errorf("storage: trial ID %d param %q: %w", id, name, err)
			}
			dists[js] = d
		}
		ext, err := goptuna.ToExternalRepresentation(d, v)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("storage: trial ID %d param %q: %w", id, name, err)
		}
		t := &out[index[id]]
		t.InternalParams[name] = v
		t.Distributions[name] = d
		t.Params[name] = ext
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = q.Query(`SELECT v.trial_id, v.step, v.value
		FROM trial_values v JOIN trials t ON t.trial_id = v.trial_id WHERE `+where, arg)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, step int
		var v float64
		if err := rows.Scan(&id, &step, &v); err != nil {
			rows.Close()
			return nil, err
		}
		out[index[id]].IntermediateValues[step] = v
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = q.Query(`SELECT a.trial_id, a.kind, a.key, a.value
		FROM trial_attrs a JOIN trials t ON t.trial_id = a.trial_id WHERE `+where, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var kind, k, v string
		if err := rows.Scan(&id, &kind, &k, &v); err != nil {
			return nil, err
		}
		t := &out[index[id]]
		if strings.EqualFold(kind, "system") {
			t.SystemAttrs[k] = v
		} else {
			t.UserAttrs[k] = v
		}
	}
	return out, rows.Err()
}

// EnsureStudy returns the ID of the named study, creating it with the given
// direction in one transaction when absent (created is then true). Unlike
// goptuna.CreateStudy, which creates the study and sets its direction in two
// steps, no other process can load the study in between and see the default
// direction. An existing study with the other direction is an error.
func (s *Store) EnsureStudy(name string, direction goptuna.StudyDirection) (id int, created bool, err error) {
	if direction != goptuna.StudyDirectionMaximize && direction != goptuna.StudyDirectionMinimize {
		return -1, false, fmt.Errorf("storage: invalid study direction %q", direction)
	}
	if name == "" {
		return -1, false, errors.New("storage: empty study name")
	}
	err = s.write(func(tx *txn) error {
		created = false // write may re-run this after a transient failure
		var d string
		err := tx.QueryRow("SELECT study_id, direction FROM studies WHERE name = ?", name).Scan(&id, &d)
		if err == nil {
			if d != string(direction) {
				return fmt.Errorf("storage: study %q exists with direction %s, not %s", name, d, direction)
			}
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// DO NOTHING: a PostgreSQL transaction that loses the race waits
		// for the winner's commit, inserts nothing, and (READ COMMITTED)
		// sees the winner's row in its next statement.
		err = tx.QueryRow(`INSERT INTO studies(name, direction, created_ns) VALUES (?, ?, ?)
			ON CONFLICT(name) DO NOTHING RETURNING study_id`, name, string(direction), time.Now().UnixNano()).Scan(&id)
		if err == nil {
			created = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := tx.QueryRow("SELECT study_id, direction FROM studies WHERE name = ?", name).Scan(&id, &d); err != nil {
			return err
		}
		if d != string(direction) {
			return fmt.Errorf("storage: study %q exists with direction %s, not %s", name, d, direction)
		}
		return nil
	})
	if err != nil {
		return -1, false, err
	}
	return id, created, nil
}

// LoadOrCreateStudy is the race-free way for several processes to open one
// study: EnsureStudy, then goptuna.LoadStudy with this Store as storage and
// opts (sampler, pruner, logger...).
func (s *Store) LoadOrCreateStudy(name string, direction goptuna.StudyDirection, opts ...goptuna.StudyOption) (*goptuna.Study, error) {
	if _, _, err := s.EnsureStudy(name, direction); err != nil {
		return nil, err
	}
	opts = append(append([]goptuna.StudyOption{}, opts...), goptuna.StudyOptionStorage(s))
	st, err := goptuna.LoadStudy(name, opts...)
	if err != nil {
		return nil, fmt.Errorf("storage: load study %q: %w", name, err)
	}
	return st, nil
}

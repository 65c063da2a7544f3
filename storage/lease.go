package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/c-bata/goptuna"
)

// Leases let processes share resources through the storage: a process runs
// a trial on a GPU group only while it holds that group's lease. A lease has
// one holder at a time across the whole database (a GPU group is physical,
// so two studies on one database must not share it either), and lasts ttl
// after it was last acquired or renewed; an expired lease may be taken by
// another holder. Expiry compares the hosts' clocks, so hosts sharing a
// PostgreSQL database need synchronized clocks (NTP) and a ttl well above
// their skew.
//
// Resource and holder names are the caller's: for example "gpus@host:0,1"
// and "host:pid".

// ErrLeaseLost is returned (wrapped) by RenewLease and ReleaseLease when the
// holder no longer holds the lease: it expired and another holder took it,
// or it was broken. The holder must stop using the resource.
var ErrLeaseLost = errors.New("lease not held")

// Lease is one held (or expired, not yet taken) lease.
type Lease struct {
	Resource string
	StudyID  int // the study the holder uses the resource for
	Holder   string
	Acquired time.Time // when this holder took it
	Expires  time.Time // when another holder may take it unless renewed
}

// Expired reports whether another holder may take the lease at time now.
func (l Lease) Expired(now time.Time) bool { return !now.Before(l.Expires) }

func checkLeaseArgs(resource, holder string, ttl time.Duration) error {
	if resource == "" || holder == "" {
		return fmt.Errorf("storage: lease needs a resource and a holder (got %q, %q)", resource, holder)
	}
	if ttl <= 0 {
		return fmt.Errorf("storage: lease ttl %v must be positive", ttl)
	}
	return nil
}

// AcquireLease takes the lease on resource for holder, to use for the study,
// for ttl: ok is true when the resource was free, its lease expired, or
// holder already held it (then it is renewed and moves to this study); false
// when another holder holds an unexpired lease. One statement decides, so
// two acquirers never both succeed.
func (s *Store) AcquireLease(ctx context.Context, studyID int, resource, holder string, ttl time.Duration) (ok bool, err error) {
	if err := checkLeaseArgs(resource, holder, ttl); err != nil {
		return false, err
	}
	err = s.writeCtx(ctx, func(tx *txn) error {
		ok = false
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		now := time.Now()
		// The conflicting row is locked while the WHERE is evaluated
		// (PostgreSQL) or the database is (SQLite).
		var got string
		err := tx.QueryRow(`INSERT INTO leases(resource, study_id, holder, acquired_ns, expires_ns) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(resource) DO UPDATE SET study_id = excluded.study_id, holder = excluded.holder,
				acquired_ns = CASE WHEN leases.holder = excluded.holder THEN leases.acquired_ns ELSE excluded.acquired_ns END,
				expires_ns = excluded.expires_ns
			WHERE leases.holder = excluded.holder OR leases.expires_ns <= ?
			RETURNING holder`,
			resource, studyID, holder, now.UnixNano(), now.Add(ttl).UnixNano(), now.UnixNano()).Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = got == holder
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("storage: acquire lease %s for %s: %w", resource, holder, err)
	}
	return ok, nil
}

// RenewLease extends holder's lease on resource to ttl from now. It fails
// with ErrLeaseLost when holder no longer holds it; a lease that expired but
// that nobody took is still the holder's and is renewed.
func (s *Store) RenewLease(ctx context.Context, resource, holder string, ttl time.Duration) error {
	if err := checkLeaseArgs(resource, holder, ttl); err != nil {
		return err
	}
	return s.writeCtx(ctx, func(tx *txn) error {
		res, err := tx.Exec("UPDATE leases SET expires_ns = ? WHERE resource = ? AND holder = ?",
			time.Now().Add(ttl).UnixNano(), resource, holder)
		if err != nil {
			return fmt.Errorf("storage: renew lease %s for %s: %w", resource, holder, err)
		}
		return leaseChanged(res, resource, holder)
	})
}

// ReleaseLease gives up holder's lease on resource. It fails with
// ErrLeaseLost when holder did not hold it (any more): someone else may
// have used the resource meanwhile, which the caller may want to report.
func (s *Store) ReleaseLease(ctx context.Context, resource, holder string) error {
	return s.writeCtx(ctx, func(tx *txn) error {
		res, err := tx.Exec("DELETE FROM leases WHERE resource = ? AND holder = ?", resource, holder)
		if err != nil {
			return fmt.Errorf("storage: release lease %s of %s: %w", resource, holder, err)
		}
		return leaseChanged(res, resource, holder)
	})
}

// BreakLease removes deadHolder's lease on resource whether or not it
// expired, so that another holder can take it at once. The caller must know
// that deadHolder is gone (for example: the same host, and its pid no longer
// runs). broken is false when deadHolder did not hold the lease (any more).
func (s *Store) BreakLease(ctx context.Context, resource, deadHolder string) (broken bool, err error) {
	err = s.writeCtx(ctx, func(tx *txn) error {
		res, err := tx.Exec("DELETE FROM leases WHERE resource = ? AND holder = ?", resource, deadHolder)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		broken = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("storage: break lease %s of %s: %w", resource, deadHolder, err)
	}
	return broken, nil
}

func leaseChanged(res sql.Result, resource, holder string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("storage: lease %s of %s: %w", resource, holder, ErrLeaseLost)
	}
	return nil
}

// Leases returns the leases held for a study, expired ones included (see
// Lease.Expired), by resource.
func (s *Store) Leases(ctx context.Context, studyID int) ([]Lease, error) {
	var out []Lease
	err := s.readCtx(ctx, func(tx *txn) error {
		out = nil
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		rows, err := tx.Query(`SELECT resource, study_id, holder, acquired_ns, expires_ns FROM leases
			WHERE study_id = ? ORDER BY resource`, studyID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l Lease
			var acq, exp int64
			if err := rows.Scan(&l.Resource, &l.StudyID, &l.Holder, &acq, &exp); err != nil {
				return err
			}
			l.Acquired, l.Expires = time.Unix(0, acq), time.Unix(0, exp)
			out = append(out, l)
		}
		return rows.Err()
	})
	return out, err
}

// LeaseOf returns the lease on a resource, whoever holds it and for any
// study (ok is false when nobody holds one).
func (s *Store) LeaseOf(ctx context.Context, resource string) (l Lease, ok bool, err error) {
	err = s.readCtx(ctx, func(tx *txn) error {
		var acq, exp int64
		err := tx.QueryRow(`SELECT resource, study_id, holder, acquired_ns, expires_ns FROM leases WHERE resource = ?`,
			resource).Scan(&l.Resource, &l.StudyID, &l.Holder, &acq, &exp)
		if errors.Is(err, sql.ErrNoRows) {
			ok = false
			return nil
		}
		if err != nil {
			return err
		}
		l.Acquired, l.Expires, ok = time.Unix(0, acq), time.Unix(0, exp), true
		return nil
	})
	return l, ok, err
}

// The launched-trial budget: a study launches at most its budget of trials,
// counted across all processes. A trial is counted from ClaimLaunch until it
// ends: COMPLETE and PRUNED trials stay counted; one that ends FAIL (how
// FailTrial, RequeueTrial and ReapStale end an interrupted or dead trial)
// gives its launch back, and its retry claims one again when launched.

// lockUnfinished locks an unfinished trial's row (the trial row first,
// then the study row: the order every write transaction takes its locks
// in) and returns its study and whether its launch is claimed already.
// goptuna.ErrTrialCannotBeUpdated when it is finished.
func lockUnfinished(tx *txn, trialID int) (studyID int, launched bool, err error) {
	var state string
	var launch sql.NullInt64
	err = tx.QueryRow("SELECT study_id, state, launch_ns FROM trials WHERE trial_id = ?"+tx.lock(), trialID).
		Scan(&studyID, &state, &launch)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, goptuna.ErrInvalidTrialID
	}
	if err != nil {
		return 0, false, err
	}
	st, err := parseState(state)
	if err != nil {
		return 0, false, err
	}
	if st.IsFinished() {
		return 0, false, goptuna.ErrTrialCannotBeUpdated
	}
	return studyID, launch.Valid, nil
}

// ClaimLaunch counts an unfinished trial against its study's launched-trial
// budget, in one transaction: ok is true when the trial is now counted
// (also when it already was), false when budget trials of the study are
// counted already. goptuna.ErrTrialCannotBeUpdated when the trial is
// finished.
func (s *Store) ClaimLaunch(ctx context.Context, trialID, budget int) (ok bool, err error) {
	if budget <= 0 {
		return false, fmt.Errorf("storage: launch budget %d must be positive", budget)
	}
	err = s.writeCtx(ctx, func(tx *txn) error {
		ok = false
		studyID, launched, err := lockUnfinished(tx, trialID)
		if err != nil {
			return err
		}
		if launched {
			ok = true
			return nil
		}
		// The study's row lock makes claimers count one after the other
		// (PostgreSQL; SQLite's write lock already does).
		if err := lockStudy(tx, studyID); err != nil {
			return err
		}
		n, err := launchedCount(tx, studyID)
		if err != nil {
			return err
		}
		if n >= budget {
			return nil
		}
		if _, err := tx.Exec("UPDATE trials SET launch_ns = ? WHERE trial_id = ?", time.Now().UnixNano(), trialID); err != nil {
			return err
		}
		ok = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("storage: claim launch of trial ID %d: %w", trialID, err)
	}
	return ok, nil
}

// UncountLaunch gives an unfinished trial's launch back to the budget, for a
// trial that claimed one and then did not launch (nothing happens when it
// was not counted). goptuna.ErrTrialCannotBeUpdated when the trial is
// finished: a finished trial's count is settled by how it ended.
func (s *Store) UncountLaunch(ctx context.Context, trialID int) error {
	return s.writeCtx(ctx, func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return fmt.Errorf("storage: uncount launch of trial ID %d: %w", trialID, err)
		}
		_, err := tx.Exec("UPDATE trials SET launch_ns = NULL WHERE trial_id = ?", trialID)
		return err
	})
}

// LaunchedCount returns how many of a study's trials count against its
// launched-trial budget.
func (s *Store) LaunchedCount(ctx context.Context, studyID int) (int, error) {
	var n int
	err := s.readCtx(ctx, func(tx *txn) error {
		if err := studyExists(tx, studyID); err != nil {
			return err
		}
		var err error
		n, err = launchedCount(tx, studyID)
		return err
	})
	return n, err
}

// Launched reports whether a trial counts against its study's budget.
func (s *Store) Launched(ctx context.Context, trialID int) (bool, error) {
	var launch sql.NullInt64
	err := s.readCtx(ctx, func(tx *txn) error {
		err := tx.QueryRow("SELECT launch_ns FROM trials WHERE trial_id = ?", trialID).Scan(&launch)
		if errors.Is(err, sql.ErrNoRows) {
			return goptuna.ErrInvalidTrialID
		}
		return err
	})
	return launch.Valid, err
}

func launchedCount(tx *txn, studyID int) (int, error) {
	var n int
	err := tx.QueryRow("SELECT count(*) FROM trials WHERE study_id = ? AND launch_ns IS NOT NULL", studyID).Scan(&n)
	return n, err
}

// ClaimConfig marks an unfinished trial as launching its config (user
// attribute AttrLaunching) unless another running trial of the study
// with the same config (user attribute AttrConfigKey = key) already is:
// then it returns that trial's number and false. The check and the mark
// are one transaction under the study's lock, so of two trials that claim
// one config at once exactly one gets it.
func (s *Store) ClaimConfig(ctx context.Context, trialID int, key string) (other int, ok bool, err error) {
	err = s.writeCtx(ctx, func(tx *txn) error {
		other, ok = -1, false
		studyID, _, err := lockUnfinished(tx, trialID)
		if err != nil {
			return err
		}
		if err := lockStudy(tx, studyID); err != nil {
			return err
		}
		err = tx.QueryRow(`SELECT t.number FROM trials t
			JOIN trial_attrs k ON k.trial_id = t.trial_id AND k.kind = 'user' AND k.key = ? AND k.value = ?
			JOIN trial_attrs l ON l.trial_id = t.trial_id AND l.kind = 'user' AND l.key = ?
			WHERE t.study_id = ? AND t.trial_id <> ? AND t.state = 'RUNNING'
			ORDER BY t.number LIMIT 1`, AttrConfigKey, key, AttrLaunching, studyID, trialID).Scan(&other)
		if err == nil {
			return nil // another trial launches this config
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		other, ok = -1, true
		return setTrialAttr(tx, trialID, "user", AttrLaunching, "1")
	})
	return other, ok, err
}

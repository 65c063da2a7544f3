package storage

import (
	"fmt"
	"maps"
	"slices"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/objective"
)

// Finish is everything a trial stores when it ends.
type Finish struct {
	// State is the final goptuna state (COMPLETE, PRUNED or FAIL).
	State goptuna.TrialState
	// Value is the objective value the sampler sees; nil leaves it unset.
	Value *float64
	// Attrs are user attributes to set.
	Attrs map[string]string
	// Points replace the trial's stored points when not nil; Requests are
	// appended.
	Points   []objective.Point
	Requests []RequestRecord
	// Retry queues a WAITING copy of the trial with the same parameters
	// (see RequeueTrial); State must then be FAIL.
	Retry bool
}

// FinishTrial stores a trial's end in one transaction: its attributes,
// points, request records, value and final state (and, with Retry, a
// queued copy). A reader sees all of it
// or none; a trial that is already finished refuses with
// goptuna.ErrTrialCannotBeUpdated and keeps what it had.
func (s *Store) FinishTrial(trialID int, f Finish) error {
	if !f.State.IsFinished() {
		return fmt.Errorf("storage: finish trial ID %d with unfinished state %v", trialID, f.State)
	}
	if f.Value != nil {
		if err := checkValue(*f.Value); err != nil {
			return err
		}
	}
	name, err := stateName(f.State)
	if err != nil {
		return err
	}
	if f.Retry && f.State != goptuna.TrialStateFail {
		return fmt.Errorf("storage: trial ID %d: a retried trial ends FAIL, not %s", trialID, name)
	}
	return s.write(func(tx *txn) error {
		if err := updatable(tx, trialID); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(f.Attrs)) {
			if err := setTrialAttr(tx, trialID, "user", k, f.Attrs[k]); err != nil {
				return err
			}
		}
		if f.Points != nil {
			if _, err := tx.Exec("DELETE FROM points WHERE trial_id = ?", trialID); err != nil {
				return err
			}
			if err := insertPoints(tx, trialID, 0, f.Points); err != nil {
				return err
			}
		}
		if err := insertRequests(tx, trialID, f.Requests); err != nil {
			return err
		}
		if f.Value != nil {
			if _, err := tx.Exec("UPDATE trials SET value = ? WHERE trial_id = ?", *f.Value, trialID); err != nil {
				return err
			}
		}
		if f.Retry {
			_, err := requeue(tx, trialID, "", "")
			return err
		}
		return setState(tx, trialID, f.State, name)
	})
}

// InterruptTrial ends a trial that stopped through no fault of its config
// (Ctrl-C, its owner died, a storage write failed): in one transaction, if
// the trial is still unfinished it becomes FAIL with user attrs AttrState
// (state) and AttrReason (reason), and, when retry is set, a WAITING copy
// with the same parameters is queued (see RequeueTrial). ended is false,
// and nothing changes, when the trial had already finished (another
// process took it over first).
func (s *Store) InterruptTrial(trialID int, state, reason string, retry bool) (retryID int, ended bool, err error) {
	err = s.write(func(tx *txn) error {
		retryID, ended = 0, false // write may re-run this after a transient failure
		st, err := trialState(tx, trialID)
		if err != nil {
			return err
		}
		if st.IsFinished() {
			return nil
		}
		ended = true
		if retry {
			retryID, err = requeue(tx, trialID, reason, state)
			return err
		}
		return failInTx(tx, trialID, reason, state)
	})
	if err != nil || !ended {
		return 0, false, err
	}
	return retryID, true, nil
}

// QueueCopy queues a WAITING trial with the parameters of trial trialID
// (finished or not) and the given system attributes, in one transaction;
// the study's loop runs it like any queued trial (ClaimWaitingTrial). It
// returns the new trial's ID.
func (s *Store) QueueCopy(trialID int, sys map[string]string) (int, error) {
	var id int
	err := s.write(func(tx *txn) error {
		old, err := lockedTrial(tx, trialID)
		if err != nil {
			return err
		}
		id, err = queueCopy(tx, old, sys, nil)
		return err
	})
	return id, err
}

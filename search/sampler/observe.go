package sampler

import (
	"fmt"
	"math"

	"github.com/c-bata/goptuna"
)

// ObsKind says what a stored trial teaches the sampler.
type ObsKind int

const (
	// ObsIgnore: the trial is not an observation (interrupted, waiting).
	ObsIgnore ObsKind = iota
	// ObsValue: the trial is an observation with its objective value.
	ObsValue
	// ObsWorst: the trial is an observation ranked below every ObsValue
	// (failed, crashed, infeasible).
	ObsWorst
	// ObsPending: the trial is running; not a finished observation.
	ObsPending
)

// Classifier tells how a stored trial is observed: its value (used for
// ObsValue only, in the study's direction) and its kind. A NaN or infinite
// value with ObsValue is taken as ObsWorst.
type Classifier func(goptuna.FrozenTrial) (value float64, kind ObsKind)

// DefaultClassifier observes COMPLETE trials with their value, PRUNED trials
// (sgtune's failed, crashed and infeasible configs) as worst, RUNNING
// trials as pending, and ignores FAIL (interrupted) and WAITING trials.
func DefaultClassifier(t goptuna.FrozenTrial) (float64, ObsKind) {
	switch t.State {
	case goptuna.TrialStateComplete:
		return t.Value, ObsValue
	case goptuna.TrialStatePruned:
		return 0, ObsWorst
	case goptuna.TrialStateRunning:
		return 0, ObsPending
	}
	return 0, ObsIgnore
}

// finished counts the study's finished observations (values and worst),
// the current trial left out: all of them, and those that set param name.
func finished(study *goptuna.Study, current goptuna.FrozenTrial, name string, classify Classifier) (all, withParam int, err error) {
	trials, err := study.GetTrials()
	if err != nil {
		return 0, 0, fmt.Errorf("sampler: read trials: %w", err)
	}
	for _, t := range trials {
		if t.ID == current.ID {
			continue
		}
		v, kind := classify(t)
		if kind == ObsValue && (math.IsNaN(v) || math.IsInf(v, 0)) {
			kind = ObsWorst
		}
		if kind != ObsValue && kind != ObsWorst {
			continue
		}
		all++
		if _, ok := t.InternalParams[name]; ok {
			withParam++
		}
	}
	return all, withParam, nil
}

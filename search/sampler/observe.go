package sampler

import (
	"fmt"
	"math"
	"sort"

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
	// (failed, crashed, infeasible): it never joins the good group l(x)
	// and teaches g(x) to keep away from its region.
	ObsWorst
	// ObsPending: the trial is running; it counts as a worst observation
	// (the constant liar) so that concurrent asks are pushed apart, but not
	// as a finished one (start-up count, gamma).
	ObsPending
)

// String names the kind.
func (k ObsKind) String() string {
	switch k {
	case ObsIgnore:
		return "ignore"
	case ObsValue:
		return "value"
	case ObsWorst:
		return "worst"
	case ObsPending:
		return "pending"
	}
	return fmt.Sprintf("ObsKind(%d)", int(k))
}

// Classifier tells how a stored trial is observed: its value (used for
// ObsValue only, in the study's direction) and its kind. It is called for
// every trial of the study except the one being sampled; a NaN or infinite
// value with ObsValue is taken as ObsWorst.
type Classifier func(goptuna.FrozenTrial) (value float64, kind ObsKind)

// DefaultClassifier observes COMPLETE trials with their value, PRUNED trials
// (sgtune's failed, crashed and infeasible configs) as worst, RUNNING
// trials as pending (the constant liar), and ignores FAIL (interrupted) and
// WAITING trials.
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

// observation is one classified trial.
type observation struct {
	t     *goptuna.FrozenTrial
	kind  ObsKind
	score float64 // ObsValue only: lower is better whatever the direction
	// x holds the observed values of the params being modelled.
	x []float64
}

// finished reports whether the observation is a finished one (value or worst).
func (o observation) finished() bool { return o.kind == ObsValue || o.kind == ObsWorst }

// observe classifies the study's trials, the current one left out, in
// trial-number order. It also returns all trials as read.
func observe(study *goptuna.Study, current goptuna.FrozenTrial, classify Classifier) ([]observation, []goptuna.FrozenTrial, error) {
	trials, err := study.GetTrials()
	if err != nil {
		return nil, nil, fmt.Errorf("sampler: read trials: %w", err)
	}
	sort.SliceStable(trials, func(i, j int) bool { return trials[i].Number < trials[j].Number })
	sign := 1.0
	if study.Direction() == goptuna.StudyDirectionMaximize {
		sign = -1
	}
	obs := make([]observation, 0, len(trials))
	for i := range trials {
		t := &trials[i]
		if t.ID == current.ID {
			continue
		}
		v, kind := classify(*t)
		switch kind {
		case ObsValue:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				kind = ObsWorst
			}
		case ObsWorst, ObsPending:
		default:
			continue
		}
		obs = append(obs, observation{t: t, kind: kind, score: sign * v})
	}
	return obs, trials, nil
}

// countFinished is the number of finished observations.
func countFinished(obs []observation) int {
	n := 0
	for _, o := range obs {
		if o.finished() {
			n++
		}
	}
	return n
}

// split divides observations into the good group (below, fits l(x)) and
// the rest (above, fits g(x)) as Optuna's TPESampler does: the best
// gamma(n) of the n finished observations by value are below; worst and
// pending observations are always above (a failure never counts as good).
// Both groups come back in trial-number order, which the weights' ramp
// needs.
func split(obs []observation, gamma func(int) int) (below, above []observation) {
	var values []observation
	for _, o := range obs {
		if o.kind == ObsValue {
			values = append(values, o)
		}
	}
	sort.SliceStable(values, func(i, j int) bool { return values[i].score < values[j].score })
	// values keeps trial order among equal scores: the older trial is better.
	nb := min(max(gamma(countFinished(obs)), 0), len(values))
	good := make(map[*goptuna.FrozenTrial]bool, nb)
	for _, o := range values[:nb] {
		good[o.t] = true
	}
	for _, o := range obs {
		if good[o.t] {
			below = append(below, o)
		} else {
			above = append(above, o)
		}
	}
	return below, above
}

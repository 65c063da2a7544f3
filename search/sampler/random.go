package sampler

import (
	"math/rand/v2"

	"github.com/c-bata/goptuna"
)

// Random samples every param uniformly: discrete params over all their
// values, upper bound included (goptuna's RandomSampler never returns an
// int range's upper bound), floats over their range, log floats uniformly
// in log space. Each draw's source is derived from (seed, trial number,
// param name), so a draw is reproducible in any process and holds no state.
type Random struct {
	seed int64
}

var _ goptuna.Sampler = (*Random)(nil)

// NewRandom returns a Random sampler.
func NewRandom(seed int64) *Random { return &Random{seed: seed} }

// Sample implements goptuna.Sampler.
func (s *Random) Sample(_ *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	p, err := newParam(name, dist)
	if err != nil {
		return 0, err
	}
	if p.single() {
		return p.low, nil
	}
	return uniformValue(drawRNG(s.seed, trial.Number, name, "random"), p), nil
}

// uniformValue draws a value of p uniformly (a log param uniformly in its
// log; a discrete one among its values).
func uniformValue(rng *rand.Rand, p param) float64 {
	if p.discrete() {
		return p.value(rng.IntN(p.count()))
	}
	return p.untransform(p.lo + rng.Float64()*(p.hi-p.lo))
}

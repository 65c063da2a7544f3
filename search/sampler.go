package search

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"sync"

	"github.com/c-bata/goptuna"
	"github.com/c-bata/goptuna/tpe"

	"github.com/sgtune/sgtune/storage"
)

// randomSampler samples uniformly with inclusive upper bounds. goptuna's own
// random sampler never returns an int range's upper bound and ignores its
// seed for categoricals (reference/go-libraries.md §1).
type randomSampler struct {
	mu  sync.Mutex
	rng *rand.Rand
}

var _ goptuna.Sampler = (*randomSampler)(nil)

func newRandomSampler(seed int64) *randomSampler {
	return &randomSampler{rng: rand.New(rand.NewSource(seed))}
}

// Sample implements goptuna.Sampler.
func (s *randomSampler) Sample(_ *goptuna.Study, _ goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch d := dist.(type) {
	case goptuna.UniformDistribution:
		return d.Low + s.rng.Float64()*(d.High-d.Low), nil
	case goptuna.LogUniformDistribution:
		lo, hi := math.Log(d.Low), math.Log(d.High)
		return math.Exp(lo + s.rng.Float64()*(hi-lo)), nil
	case goptuna.IntUniformDistribution:
		return float64(d.Low + s.rng.Intn(d.High-d.Low+1)), nil
	case goptuna.StepIntUniformDistribution:
		n := (d.High - d.Low) / d.Step
		return float64(d.Low + s.rng.Intn(n+1)*d.Step), nil
	case goptuna.DiscreteUniformDistribution:
		n := int(math.Round((d.High - d.Low) / d.Q))
		return d.Low + float64(s.rng.Intn(n+1))*d.Q, nil
	case goptuna.CategoricalDistribution:
		return float64(s.rng.Intn(len(d.Choices))), nil
	}
	return 0, fmt.Errorf("param %s: %w", name, goptuna.ErrUnsupportedSearchSpace)
}

// startupSampler samples at random until n trials have finished, then hands
// over to the model-based sampler. Unlike TPE's built-in start-up phase it
// reaches every value of the space, upper bounds included.
type startupSampler struct {
	random *randomSampler
	model  goptuna.Sampler
	n      int
	// skips counts consecutive proposals that launched nothing; TPE scores
	// small discrete spaces deterministically and would propose the same
	// skipped config again, so two skips in a row switch to random.
	skips func() int
}

// Sample implements goptuna.Sampler.
func (s *startupSampler) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	trials, err := study.GetTrials()
	if err != nil {
		return 0, err
	}
	finished := 0
	for _, t := range trials {
		if t.State == goptuna.TrialStateComplete || t.State == goptuna.TrialStatePruned {
			finished++
		}
	}
	if finished < s.n || (s.skips != nil && s.skips() >= 2) {
		return s.random.Sample(study, trial, name, dist)
	}
	v, err := s.model.Sample(study, trial, name, dist)
	if err != nil || math.IsNaN(v) {
		return s.random.Sample(study, trial, name, dist)
	}
	return v, nil
}

// newSampler builds the sampler a study names.
func newSampler(name string, seed int64) (goptuna.Sampler, error) {
	switch name {
	case "random":
		return newRandomSampler(seed), nil
	case "", "tpe":
		return &startupSampler{
			random: newRandomSampler(seed),
			model:  tpe.NewSampler(tpe.SamplerOptionSeed(seed), tpe.SamplerOptionNumberOfStartupTrials(0)),
			n:      5,
		}, nil
	}
	return nil, fmt.Errorf("unknown sampler %q (valid: tpe, random)", name)
}

// fixedFirst hands a queued re-run its stored parameters. goptuna's own
// fixed_params lookup drops a value its distribution's Contains refuses,
// and StepIntUniformDistribution.Contains refuses the upper bound
// (reference/go-libraries.md §1): the re-run of a config at the top of a
// step-int range would silently get another value.
type fixedFirst struct{ next goptuna.Sampler }

// Sample implements goptuna.Sampler.
func (f fixedFirst) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	if js, ok := trial.SystemAttrs[storage.AttrFixedParams]; ok {
		var fixed map[string]float64
		if err := json.Unmarshal([]byte(js), &fixed); err != nil {
			return 0, fmt.Errorf("trial %d: stored params: %w", trial.Number, err)
		}
		if v, ok := fixed[name]; ok {
			return v, nil
		}
	}
	return f.next.Sample(study, trial, name, dist)
}

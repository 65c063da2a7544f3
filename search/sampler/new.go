package sampler

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/c-bata/goptuna"
	"github.com/c-bata/goptuna/tpe"
)

// builders are the samplers New knows, by name.
var builders = map[string]func(seed int64, opts []Option) (goptuna.Sampler, error){
	"random": func(seed int64, _ []Option) (goptuna.Sampler, error) {
		return NewRandom(seed), nil
	},
	"grid": func(seed int64, opts []Option) (goptuna.Sampler, error) {
		cfg := defaultConfig()
		for _, o := range opts {
			o(&cfg)
		}
		if len(cfg.gridPoints) == 0 {
			return nil, errors.New(`sampler "grid" needs its points (WithGridPoints)`)
		}
		return NewGrid(cfg.gridPoints, seed, opts...)
	},
	"tpe": func(seed int64, opts []Option) (goptuna.Sampler, error) {
		cfg := defaultConfig()
		for _, o := range opts {
			o(&cfg)
		}
		if err := cfg.validate(); err != nil {
			return nil, err
		}
		model := tpe.NewSampler(tpe.SamplerOptionSeed(seed), tpe.SamplerOptionNumberOfStartupTrials(0))
		return &startupSampler{cfg: cfg, random: NewRandom(seed), model: model}, nil
	},
}

// Names lists the sampler names New accepts, sorted.
func Names() []string {
	names := make([]string, 0, len(builders))
	for n := range builders {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds a sampler by name: "random", "grid" (needs WithGridPoints) or
// "tpe" (goptuna v0.9.0's TPE behind seeded start-up draws, a baseline;
// its own draws come from the process-global math/rand, so it is not
// reproducible unless the program seeds that source). Options that do not
// concern the sampler are ignored.
func New(name string, seed int64, opts ...Option) (goptuna.Sampler, error) {
	b, ok := builders[name]
	if !ok {
		return nil, fmt.Errorf("unknown sampler %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	return b(seed, opts)
}

// startupSampler draws the first cfg.startup finished observations with
// Random, then hands over to a model sampler (goptuna's TPE), falling back
// to Random where the model errs, returns NaN or a value outside the range,
// or has no observation of the param.
type startupSampler struct {
	cfg    config
	random *Random
	model  goptuna.Sampler
}

// Sample implements goptuna.Sampler.
func (s *startupSampler) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	p, err := newParam(name, dist)
	if err != nil {
		return 0, err
	}
	all, with, err := finished(study, trial, name, s.cfg.classify)
	if err != nil {
		return 0, err
	}
	if all < s.cfg.startup || with == 0 {
		return s.random.Sample(study, trial, name, dist)
	}
	v, err := s.model.Sample(study, trial, name, dist)
	if err != nil || math.IsNaN(v) || !p.contains(v) {
		return s.random.Sample(study, trial, name, dist)
	}
	return p.snap(v), nil
}

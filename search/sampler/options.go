package sampler

import (
	"fmt"

	"github.com/c-bata/goptuna"
)

// Option configures a sampler built by New or a New* constructor. Options
// that do not concern a sampler are ignored by it.
type Option func(*config)

// config holds every sampler's settings.
type config struct {
	startup      int
	candidates   int
	multivariate bool
	classify     Classifier
	gamma        func(int) int
	avoidDup     bool
	parzen       parzenConfig

	gridPoints  []map[string]float64
	gridShuffle bool
	gridCounts  func(goptuna.FrozenTrial) bool
}

// DefaultStartup is the number of finished observations drawn at random
// before TPE models the space. Optuna uses 10 for budgets of hundreds of
// trials; an sgtune study has 20-40 launches of 5-30 minutes each, and 10
// would spend a third of it at random. On the toy problems of the quality
// check (median of 30 seeds; budgets 25 and 40) neither won consistently:
// 5 was better or equal in 15 of 24 univariate and 11 of 16 multivariate
// (problem, seed set, budget) comparisons, so the budget argument decides.
const DefaultStartup = 5

func defaultConfig() config {
	return config{
		startup:    DefaultStartup,
		candidates: 24,
		classify:   DefaultClassifier,
		gamma:      defaultGamma,
		avoidDup:   true,
		parzen: parzenConfig{
			priorWeight: 1,
			magicClip:   true,
			endpoints:   false,
			weights:     defaultWeights,
		},
	}
}

func (c *config) validate() error {
	switch {
	case c.startup < 0:
		return fmt.Errorf("sampler: start-up trials must be >= 0, got %d", c.startup)
	case c.candidates < 1:
		return fmt.Errorf("sampler: EI candidates must be >= 1, got %d", c.candidates)
	case !(c.parzen.priorWeight >= 0):
		return fmt.Errorf("sampler: prior weight must be >= 0, got %g", c.parzen.priorWeight)
	case c.classify == nil || c.gamma == nil || c.parzen.weights == nil:
		return fmt.Errorf("sampler: classifier, gamma and weights must not be nil")
	}
	return nil
}

// WithStartup sets how many finished observations (value or worst) are
// drawn uniformly at random before TPE models the space (DefaultStartup).
func WithStartup(n int) Option { return func(c *config) { c.startup = n } }

// WithCandidates sets how many candidates TPE draws from l(x) and ranks by
// log l(x) - log g(x) (Optuna's n_ei_candidates, 24).
func WithCandidates(n int) Option { return func(c *config) { c.candidates = n } }

// WithMultivariate makes TPE model the params that all observations share
// jointly (Optuna's multivariate=True): one product kernel per observation
// over those params, Scott's-rule widths; other (conditional) params stay
// univariate.
func WithMultivariate(on bool) Option { return func(c *config) { c.multivariate = on } }

// WithClassifier replaces DefaultClassifier: how each stored trial is
// observed (the search loop's own states: infeasible, failed, running...).
func WithClassifier(f Classifier) Option { return func(c *config) { c.classify = f } }

// WithGamma sets how many of n finished observations form l(x) (Optuna's
// gamma; default min(ceil(0.1 n), 25)).
func WithGamma(f func(n int) int) Option { return func(c *config) { c.gamma = f } }

// WithWeights sets the observations' kernel weights in trial-number order
// (Optuna's weights; default flat up to 25, then a ramp for the oldest).
func WithWeights(f func(n int) []float64) Option {
	return func(c *config) { c.parzen.weights = f }
}

// WithPriorWeight sets the weight of the prior kernel (1; 0 turns it off).
func WithPriorWeight(w float64) Option { return func(c *config) { c.parzen.priorWeight = w } }

// WithMagicClip bounds kernel widths below by range/min(100, 1+kernels)
// (on by default, as in Optuna).
func WithMagicClip(on bool) Option { return func(c *config) { c.parzen.magicClip = on } }

// WithConsiderEndpoints lets the range's ends count as neighbours when
// sizing the outermost kernels (off by default, as in Optuna).
func WithConsiderEndpoints(on bool) Option { return func(c *config) { c.parzen.endpoints = on } }

// WithAvoidDuplicates makes TPE (and its start-up draws) avoid proposing a
// config equal to one already observed (running, finished or failed), when
// the space leaves another choice (on by default). A duplicate costs a
// proposal that the search loop refuses to launch; see TPE's doc for how
// duplicates are detected param by param.
func WithAvoidDuplicates(on bool) Option { return func(c *config) { c.avoidDup = on } }

// WithGridPoints gives the grid sampler its points, in goptuna's internal
// representation (a categorical is its choice index).
func WithGridPoints(points []map[string]float64) Option {
	return func(c *config) { c.gridPoints = points }
}

// WithGridShuffle makes the grid visit its points in an order shuffled by
// the seed instead of the given order.
func WithGridShuffle(on bool) Option { return func(c *config) { c.gridShuffle = on } }

// WithGridCounts sets which earlier trials consumed a grid point (by
// default every trial with a smaller number), e.g. to skip re-runs of
// interrupted trials whose params were replayed.
func WithGridCounts(f func(goptuna.FrozenTrial) bool) Option {
	return func(c *config) { c.gridCounts = f }
}

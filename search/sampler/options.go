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
	startup  int
	classify Classifier

	gridPoints  []map[string]float64
	gridShuffle bool
	gridCounts  func(goptuna.FrozenTrial) bool
}

// DefaultStartup is the number of finished observations drawn at random
// before TPE models the space: an sgtune study has 20-40 launches, and
// Optuna's 10 would spend a third of it at random.
const DefaultStartup = 5

func defaultConfig() config {
	return config{startup: DefaultStartup, classify: DefaultClassifier}
}

func (c *config) validate() error {
	switch {
	case c.startup < 0:
		return fmt.Errorf("sampler: start-up trials must be >= 0, got %d", c.startup)
	case c.classify == nil:
		return fmt.Errorf("sampler: the classifier must not be nil")
	}
	return nil
}

// WithStartup sets how many finished observations TPE draws at random first.
func WithStartup(n int) Option { return func(c *config) { c.startup = n } }

// WithClassifier sets how stored trials are observed (see Classifier).
func WithClassifier(f Classifier) Option { return func(c *config) { c.classify = f } }

// WithGridPoints gives the grid sampler its points, in goptuna's internal
// form, in the order they are proposed.
func WithGridPoints(points []map[string]float64) Option {
	return func(c *config) { c.gridPoints = points }
}

// WithGridShuffle proposes the grid's points in an order drawn from the seed.
func WithGridShuffle(on bool) Option { return func(c *config) { c.gridShuffle = on } }

// WithGridCounts tells which stored trials move the grid forward (nil: all).
func WithGridCounts(f func(goptuna.FrozenTrial) bool) Option {
	return func(c *config) { c.gridCounts = f }
}

package sampler

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/c-bata/goptuna"
)

// ErrGridExhausted is returned when a trial asks for a grid point past the
// last one: the grid does not wrap, since a second pass would only repeat
// configs; the search loop should end the study.
var ErrGridExhausted = errors.New("grid exhausted")

// GridIndexAttr is the trial system attribute that, when set to an integer,
// chooses the trial's grid point explicitly (the search loop's cursor)
// instead of counting earlier trials.
const GridIndexAttr = "sgtune:grid_index"

// Grid proposes the points of a finite space in order: the k-th trial to
// reach the grid gets point k, k being the number of trials of the study
// with a smaller trial number (those WithGridCounts accepts, by default all)
// or the trial's GridIndexAttr. The order is the given one (the caller's,
// e.g. GridPoints' lexicographic order) or, with WithGridShuffle, a
// permutation drawn from the seed. A param the point does not hold (a
// conditional param active in this trial but not in the point) is drawn
// uniformly like Random; past the last point Sample returns
// ErrGridExhausted.
type Grid struct {
	seed   int64
	points []map[string]float64
	counts func(goptuna.FrozenTrial) bool
	random *Random
}

var _ goptuna.Sampler = (*Grid)(nil)

// NewGrid returns a Grid sampler over points (WithGridPoints is not needed
// here; WithGridShuffle and WithGridCounts apply).
func NewGrid(points []map[string]float64, seed int64, opts ...Option) (*Grid, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if len(points) == 0 {
		return nil, errors.New("sampler: grid has no points")
	}
	ps := make([]map[string]float64, len(points))
	copy(ps, points)
	if cfg.gridShuffle {
		rng := drawRNG(seed, 0, "", "grid-order")
		rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	}
	return &Grid{seed: seed, points: ps, counts: cfg.gridCounts, random: NewRandom(seed)}, nil
}

// Len is the number of grid points.
func (s *Grid) Len() int { return len(s.points) }

// Sample implements goptuna.Sampler.
func (s *Grid) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	p, err := newParam(name, dist)
	if err != nil {
		return 0, err
	}
	k, err := s.index(study, trial)
	if err != nil {
		return 0, err
	}
	if k < 0 || k >= len(s.points) {
		return 0, fmt.Errorf("trial %d asks for grid point %d of %d: %w", trial.Number, k, len(s.points), ErrGridExhausted)
	}
	v, ok := s.points[k][name]
	if !ok {
		return s.random.Sample(study, trial, name, dist)
	}
	if !p.contains(v) || (p.discrete() && !p.same(v, p.snap(v))) {
		return 0, fmt.Errorf("grid point %d: param %s = %g is not a value of %s: %w",
			k, name, v, describe(p), goptuna.ErrUnsupportedSearchSpace)
	}
	return p.snap(v), nil
}

// index is the trial's grid position.
func (s *Grid) index(study *goptuna.Study, trial goptuna.FrozenTrial) (int, error) {
	if a, ok := trial.SystemAttrs[GridIndexAttr]; ok {
		k, err := strconv.Atoi(a)
		if err != nil {
			return 0, fmt.Errorf("trial %d: system attr %s = %q: want an integer", trial.Number, GridIndexAttr, a)
		}
		return k, nil
	}
	trials, err := study.GetTrials()
	if err != nil {
		return 0, fmt.Errorf("sampler: read trials: %w", err)
	}
	k := 0
	for _, t := range trials {
		if t.Number < trial.Number && (s.counts == nil || s.counts(t)) {
			k++
		}
	}
	return k, nil
}

// describe names a param's values for messages.
func describe(p param) string {
	switch {
	case p.categorical():
		return fmt.Sprintf("choice indices 0..%d", p.cat-1)
	case p.discrete():
		return fmt.Sprintf("%g..%g step %g", p.low, p.high, p.step)
	}
	return fmt.Sprintf("[%g, %g]", p.low, p.high)
}

// maxGridPoints bounds GridPoints' product.
const maxGridPoints = 1 << 20

// GridPoints enumerates every combination of finite distributions (ints,
// step ints, discrete floats, categoricals; upper bounds included) in
// lexicographic order of the sorted param names, the last name varying
// fastest. A space with conditional params is not a product: build its
// points from the space's own rules instead.
func GridPoints(dists map[string]interface{}) ([]map[string]float64, error) {
	names := make([]string, 0, len(dists))
	for n := range dists {
		names = append(names, n)
	}
	sort.Strings(names)
	params := make([]param, len(names))
	total := 1.0
	for i, n := range names {
		p, err := newParam(n, dists[n])
		if err != nil {
			return nil, err
		}
		if !p.discrete() && !p.single() {
			return nil, fmt.Errorf("param %s: a continuous range has no grid; give it a step", n)
		}
		params[i] = p
		if !p.single() {
			total *= float64(p.count())
		}
	}
	if total > maxGridPoints || math.IsInf(total, 0) {
		return nil, fmt.Errorf("grid of %.0f points exceeds %d", total, maxGridPoints)
	}
	points := []map[string]float64{{}}
	for _, p := range params {
		n := 1
		if !p.single() {
			n = p.count()
		}
		next := make([]map[string]float64, 0, len(points)*n)
		for _, pt := range points {
			for k := 0; k < n; k++ {
				q := make(map[string]float64, len(pt)+1)
				for a, b := range pt {
					q[a] = b
				}
				q[p.name] = p.value(k)
				next = append(next, q)
			}
		}
		points = next
	}
	return points, nil
}

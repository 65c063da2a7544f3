package sampler

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"
)

// fresh is a trial that is not stored, for calling Sample directly: a new
// ask with the given number and params set so far.
func fresh(number int, params map[string]float64, dists map[string]interface{}) goptuna.FrozenTrial {
	if params == nil {
		params, dists = map[string]float64{}, map[string]interface{}{}
	}
	return goptuna.FrozenTrial{ID: -1000 - number, Number: number, InternalParams: params, Distributions: dists}
}

// valid reports whether v is a value of dist (upper bound included).
func valid(t *testing.T, dist interface{}, v float64) bool {
	t.Helper()
	p, err := newParam("x", dist)
	if err != nil {
		t.Fatal(err)
	}
	return !math.IsNaN(v) && v >= p.low && v <= p.high && (!p.discrete() || p.same(v, p.snap(v)) && v == p.snap(v))
}

var boundCases = []struct {
	name string
	dist interface{}
	want []float64 // every value of a discrete dist, upper bound included
}{
	{"int", goptuna.IntUniformDistribution{Low: 1, High: 4}, []float64{1, 2, 3, 4}},
	{"step-int", goptuna.StepIntUniformDistribution{Low: 0, High: 64, Step: 16}, []float64{0, 16, 32, 48, 64}},
	{"step-int off-grid high", goptuna.StepIntUniformDistribution{Low: 0, High: 70, Step: 16}, []float64{0, 16, 32, 48, 64}},
	{"discrete", goptuna.DiscreteUniformDistribution{Low: 0.7, High: 0.95, Q: 0.05}, []float64{0.7, 0.75, 0.8, 0.85, 0.9, 0.95}},
	{"categorical", cat("a", "b", "c"), []float64{0, 1, 2}},
	{"uniform", goptuna.UniformDistribution{Low: -1, High: 1}, nil},
	{"log-uniform", goptuna.LogUniformDistribution{Low: 1e-3, High: 10}, nil},
}

// reached checks draws: all valid; a discrete dist's every value drawn; a
// float range covered to within 5% of each end.
func reached(t *testing.T, dist interface{}, want []float64, got []float64) {
	t.Helper()
	seen := map[float64]bool{}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range got {
		if !valid(t, dist, v) {
			t.Fatalf("draw %v is not a value of %#v", v, dist)
		}
		seen[math.Round(v*1e9)/1e9] = true
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if want != nil {
		for _, w := range want {
			if !seen[math.Round(w*1e9)/1e9] {
				t.Errorf("%#v: value %v never drawn in %d draws (seen %v)", dist, w, len(got), seen)
			}
		}
		return
	}
	p, _ := newParam("x", dist)
	span := p.hi - p.lo
	if p.transform(lo) > p.lo+0.05*span || p.transform(hi) < p.hi-0.05*span {
		t.Errorf("%#v: draws cover only [%g, %g]", dist, lo, hi)
	}
}

func TestRandomReachesEveryValue(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewRandom(3)
			var got []float64
			for n := 0; n < 300; n++ {
				v, err := s.Sample(nil, fresh(n, nil, nil), "x", tc.dist)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, v)
			}
			reached(t, tc.dist, tc.want, got)
		})
	}
}

func TestTPEStartupReachesEveryValue(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
			s := mustTPE(t, 3)
			var got []float64
			for n := 0; n < 300; n++ {
				v, err := s.Sample(study, fresh(n, nil, nil), "x", tc.dist)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, v)
			}
			reached(t, tc.dist, tc.want, got)
		})
	}
}

func TestUnsupportedDistribution(t *testing.T) {
	for _, d := range []interface{}{
		goptuna.LogUniformDistribution{Low: 0, High: 1},
		goptuna.StepIntUniformDistribution{Low: 0, High: 8, Step: 0},
		goptuna.CategoricalDistribution{},
		goptuna.UniformDistribution{Low: 2, High: 1},
		"nonsense",
	} {
		for _, s := range []goptuna.Sampler{NewRandom(1), mustTPE(t, 1)} {
			study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
			_, err := s.Sample(study, fresh(0, nil, nil), "bad", d)
			if !errors.Is(err, goptuna.ErrUnsupportedSearchSpace) || !strings.Contains(err.Error(), "param bad") {
				t.Errorf("%T on %#v: error %v, want ErrUnsupportedSearchSpace naming the param", s, d, err)
			}
		}
	}
}

func mustTPE(t testing.TB, seed int64) goptuna.Sampler {
	t.Helper()
	s, err := New("tpe", seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNew(t *testing.T) {
	for _, name := range []string{"tpe", "random"} {
		if _, err := New(name, 1); err != nil {
			t.Errorf("New(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "bayes", "tpe-univariate", "goptuna-tpe"} {
		_, err := New(name, 1)
		if err == nil || !strings.Contains(err.Error(), "grid, random, tpe") {
			t.Errorf("New(%q) error %v, want the valid names", name, err)
		}
	}
	if _, err := New("grid", 1); err == nil {
		t.Error("New(grid) without points: want an error")
	}
	if _, err := New("grid", 1, WithGridPoints([]map[string]float64{{"x": 1}})); err != nil {
		t.Errorf("New(grid): %v", err)
	}
	for _, opt := range []Option{WithStartup(-1), WithClassifier(nil)} {
		if _, err := New("tpe", 1, opt); err == nil {
			t.Error("bad option: want an error")
		}
	}
}

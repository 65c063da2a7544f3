package sampler

import (
	"errors"
	"math"
	"reflect"
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

func mustTPE(t testing.TB, seed int64, opts ...Option) *TPE {
	t.Helper()
	s, err := NewTPE(seed, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ignoreRunning observes like DefaultClassifier but without the liar.
func ignoreRunning(ft goptuna.FrozenTrial) (float64, ObsKind) {
	v, k := DefaultClassifier(ft)
	if k == ObsPending {
		return 0, ObsIgnore
	}
	return v, k
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

// TestTPEModelReachesUpperBound: observations in the lower part of the
// range, improving upwards; the model's proposals must reach the top value
// (or come within 5% of a float range's top) and stay valid.
func TestTPEModelReachesUpperBound(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := newParam("x", tc.dist)
			space := []spaceParam{{name: "x", dist: tc.dist}}
			study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
			for i := 0; i < 8; i++ { // values in the lower 60% of the range
				v := p.untransform(p.lo + (p.hi-p.lo)*0.6*float64(i)/7)
				if p.discrete() && v >= p.high {
					v = p.high - p.step
				}
				store(t, study, space, map[string]float64{"x": v}, goptuna.TrialStateComplete, -v)
			}
			s := mustTPE(t, 5, WithAvoidDuplicates(false))
			top := math.Inf(-1)
			for n := 100; n < 300; n++ {
				v, err := s.Sample(study, fresh(n, nil, nil), "x", tc.dist)
				if err != nil {
					t.Fatal(err)
				}
				if !valid(t, tc.dist, v) {
					t.Fatalf("proposal %v is not a value of %#v", v, tc.dist)
				}
				top = math.Max(top, v)
			}
			if p.discrete() && top != p.high {
				t.Errorf("highest proposal %v, want the upper bound %v", top, p.high)
			}
			if !p.discrete() && p.transform(top) < p.hi-0.05*(p.hi-p.lo) {
				t.Errorf("highest proposal %v, want within 5%% of %v", top, p.high)
			}
		})
	}
}

// runSeq runs n trials of a problem and returns every trial's params.
func runSeq(t *testing.T, pr problem, s goptuna.Sampler, n int) []map[string]float64 {
	t.Helper()
	study := newStudy(t, s, goptuna.StudyDirectionMinimize)
	var seq []map[string]float64
	for i := 0; i < n; i++ {
		id, v := ask(t, study, pr.space)
		y, _ := pr.f(v)
		tell(t, study, id, goptuna.TrialStateComplete, y)
		seq = append(seq, v)
	}
	return seq
}

// TestReproducible: the same seed and the same stored trials give the same
// proposals from a new sampler (a resumed process); different seeds differ.
func TestReproducible(t *testing.T) {
	mixed := problems()[1]
	for _, name := range []string{"tpe", "tpe-univariate", "random"} {
		t.Run(name, func(t *testing.T) {
			build := func(seed int64) goptuna.Sampler {
				s, err := New(name, seed)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			a, b := runSeq(t, mixed, build(7), 25), runSeq(t, mixed, build(7), 25)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("same seed, different runs:\n%v\n%v", a, b)
			}
			// A new sampler over the stored trials of run a, asked for the
			// next trial twice (two processes), proposes the same.
			study := newStudy(t, build(7), goptuna.StudyDirectionMinimize)
			for _, v := range a {
				y, _ := mixed.f(v)
				store(t, study, mixed.space, v, goptuna.TrialStateComplete, y)
			}
			var proposals []map[string]float64
			for _, s := range []goptuna.Sampler{build(7), build(7)} {
				next := fresh(len(a), map[string]float64{}, map[string]interface{}{})
				got := map[string]float64{}
				for _, sp := range mixed.space {
					v, err := s.Sample(study, next, sp.name, sp.dist)
					if err != nil {
						t.Fatal(err)
					}
					got[sp.name] = v
					next.InternalParams[sp.name], next.Distributions[sp.name] = v, sp.dist
				}
				proposals = append(proposals, got)
			}
			if !reflect.DeepEqual(proposals[0], proposals[1]) {
				t.Errorf("resumed proposals differ: %v vs %v", proposals[0], proposals[1])
			}
			// Other seeds: every run's float sequence differs from the rest.
			seen := map[float64]int64{}
			for seed := int64(1); seed <= 8; seed++ {
				x := runSeq(t, mixed, build(seed), 12)[11]["x"]
				if prev, ok := seen[x]; ok {
					t.Errorf("seeds %d and %d proposed the same x=%v at trial 11", prev, seed, x)
				}
				seen[x] = seed
			}
		})
	}
}

// TestPendingAsksDrawDifferently: two asks from the same stored state
// (nothing telling them apart but their numbers) get different draws.
func TestPendingAsksDrawDifferently(t *testing.T) {
	mixed := problems()[1]
	study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
	for _, v := range runSeq(t, mixed, NewRandom(1), 15) {
		y, _ := mixed.f(v)
		store(t, study, mixed.space, v, goptuna.TrialStateComplete, y)
	}
	for _, s := range []goptuna.Sampler{NewRandom(2), mustTPE(t, 2, WithClassifier(ignoreRunning), WithAvoidDuplicates(false))} {
		a, err := s.Sample(study, fresh(15, nil, nil), "x", mixed.space[2].dist)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Sample(study, fresh(16, nil, nil), "x", mixed.space[2].dist)
		if err != nil {
			t.Fatal(err)
		}
		if a == b {
			t.Errorf("%T: trials 15 and 16 both got x=%v", s, a)
		}
	}
}

// liarSpace is a 16-config space: 4 choices x 4 ints.
var liarSpace = []spaceParam{
	{name: "c", dist: cat("a", "b", "c", "d")},
	{name: "n", dist: goptuna.IntUniformDistribution{Low: 1, High: 4}},
}

// liarStudy stores 10 finished trials whose best region is c=a, n high,
// and 3 RUNNING trials on the three most promising configs.
func liarStudy(t *testing.T) (*goptuna.Study, []map[string]float64) {
	study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
	done := []map[string]float64{
		{"c": 0, "n": 3}, {"c": 0, "n": 2}, {"c": 1, "n": 3}, {"c": 1, "n": 1}, {"c": 2, "n": 4},
		{"c": 2, "n": 2}, {"c": 3, "n": 1}, {"c": 3, "n": 3}, {"c": 1, "n": 4}, {"c": 2, "n": 1},
	}
	for _, v := range done {
		y := []float64{0, 2, 3, 4}[int(v["c"])] + (4 - v["n"])
		store(t, study, liarSpace, v, goptuna.TrialStateComplete, y)
	}
	pending := []map[string]float64{{"c": 0, "n": 4}, {"c": 0, "n": 3}, {"c": 0, "n": 2}}
	for _, v := range pending {
		store(t, study, liarSpace, v, goptuna.TrialStateRunning, 0)
	}
	return study, pending
}

// collisions asks one trial per seed and counts proposals equal to a
// pending config.
func collisions(t *testing.T, seeds int, opts ...Option) int {
	study, pending := liarStudy(t)
	n := 0
	for seed := 1; seed <= seeds; seed++ {
		s := mustTPE(t, int64(seed), opts...)
		next := fresh(13, map[string]float64{}, map[string]interface{}{})
		for _, sp := range liarSpace {
			v, err := s.Sample(study, next, sp.name, sp.dist)
			if err != nil {
				t.Fatal(err)
			}
			next.InternalParams[sp.name], next.Distributions[sp.name] = v, sp.dist
		}
		for _, p := range pending {
			if reflect.DeepEqual(p, next.InternalParams) {
				n++
			}
		}
	}
	return n
}

// TestConstantLiar: with 3 running trials on the most promising configs of
// a 16-config space, a new ask is never one of them, in either mode, while
// a TPE that ignores running trials repeats them. In univariate mode the
// liar alone cannot see which combination runs (it models each param's
// marginal), so duplicate avoidance does the work; multivariate kernels see
// the combination and the liar alone avoids most repeats.
func TestConstantLiar(t *testing.T) {
	const seeds = 60
	for _, multi := range []bool{false, true} {
		mode := WithMultivariate(multi)
		blind := collisions(t, seeds, mode, WithClassifier(ignoreRunning), WithAvoidDuplicates(false))
		liar := collisions(t, seeds, mode, WithAvoidDuplicates(false))
		full := collisions(t, seeds, mode)
		t.Logf("multivariate=%v: asks equal to a running config over %d seeds: no liar %d, liar %d, liar+dedup %d",
			multi, seeds, blind, liar, full)
		if blind < seeds/2 {
			t.Fatalf("control: TPE without the liar repeated a running config %d/%d times; the setup no longer makes them attractive", blind, seeds)
		}
		if full != 0 {
			t.Errorf("multivariate=%v: with the liar and duplicate avoidance, %d/%d asks repeat a running config", multi, full, seeds)
		}
		if multi && liar*3 > blind {
			t.Errorf("multivariate liar alone: %d/%d repeats, want under a third of the %d without it", liar, seeds, blind)
		}
	}
}

// TestLiarPushesFloatsApart: on a float param, running trials at the best
// region push the next ask away from them (near-identical configs).
func TestLiarPushesFloatsApart(t *testing.T) {
	space := []spaceParam{{name: "x", dist: goptuna.UniformDistribution{Low: 0, High: 10}}}
	study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
	for _, x := range []float64{0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5} {
		store(t, study, space, map[string]float64{"x": x}, goptuna.TrialStateComplete, math.Abs(x-3))
	}
	pending := []float64{2.6, 2.9, 3.2, 3.5}
	for _, x := range pending {
		store(t, study, space, map[string]float64{"x": x}, goptuna.TrialStateRunning, 0)
	}
	dist := func(opts ...Option) float64 {
		var d []float64
		for seed := 1; seed <= 60; seed++ {
			v, err := mustTPE(t, int64(seed), opts...).Sample(study, fresh(20, nil, nil), "x", space[0].dist)
			if err != nil {
				t.Fatal(err)
			}
			near := math.Inf(1)
			for _, p := range pending {
				near = math.Min(near, math.Abs(v-p))
			}
			d = append(d, near)
		}
		return median(d)
	}
	blind, liar := dist(WithClassifier(ignoreRunning)), dist()
	t.Logf("median distance to the nearest running x: no liar %.3f, liar %.3f", blind, liar)
	if liar < 2*blind {
		t.Errorf("liar median distance %.3f, want at least twice %.3f without it", liar, blind)
	}
}

// TestFailuresPushAway: the objective improves towards low x but x < 3
// crashes (PRUNED); proposals must mostly stay out of the crash region,
// far more than when the failures are not observed.
func TestFailuresPushAway(t *testing.T) {
	space := []spaceParam{{name: "x", dist: goptuna.UniformDistribution{Low: 0, High: 10}}}
	study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
	for _, x := range []float64{3.2, 4, 5, 6, 7, 8, 9} {
		store(t, study, space, map[string]float64{"x": x}, goptuna.TrialStateComplete, x)
	}
	for _, x := range []float64{0.4, 0.9, 1.4, 1.9, 2.4, 2.8} {
		store(t, study, space, map[string]float64{"x": x}, goptuna.TrialStateFail, 0)
		store(t, study, space, map[string]float64{"x": x}, goptuna.TrialStatePruned, 0)
	}
	ignorePruned := func(ft goptuna.FrozenTrial) (float64, ObsKind) {
		if ft.State == goptuna.TrialStatePruned {
			return 0, ObsIgnore
		}
		return DefaultClassifier(ft)
	}
	inCrash := func(opts ...Option) int {
		n := 0
		for seed := 1; seed <= 100; seed++ {
			v, err := mustTPE(t, int64(seed), opts...).Sample(study, fresh(30, nil, nil), "x", space[0].dist)
			if err != nil {
				t.Fatal(err)
			}
			if v < 3 {
				n++
			}
		}
		return n
	}
	blind, taught := inCrash(WithClassifier(ignorePruned)), inCrash()
	t.Logf("proposals in the crash region x<3 of 100: failures ignored %d, failures observed %d", blind, taught)
	if taught > 10 || taught*3 > blind {
		t.Errorf("failures observed: %d/100 in the crash region, want <= 10 and under a third of %d", taught, blind)
	}
}

// conditional space: steps exists only with spec = eagle.
var condSpace = []spaceParam{
	{name: "spec", dist: cat("none", "eagle")},
	{name: "steps", dist: goptuna.IntUniformDistribution{Low: 1, High: 8}, when: func(v map[string]float64) bool { return v["spec"] == 1 }},
	{name: "x", dist: goptuna.UniformDistribution{Low: 0, High: 1}},
}

// TestConditionalParams: a conditional param is fit on the trials that have
// it: with eagle trials best at high step counts, eagle asks propose high
// steps, in both modes; trials without it do not disturb it.
func TestConditionalParams(t *testing.T) {
	for _, multi := range []bool{false, true} {
		study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
		for i := 0; i < 8; i++ {
			x := float64(i) / 8
			store(t, study, condSpace, map[string]float64{"spec": 0, "x": x}, goptuna.TrialStateComplete, 5+x)
		}
		for _, st := range []float64{1, 2, 3, 4, 5, 6} {
			store(t, study, condSpace, map[string]float64{"spec": 1, "steps": st, "x": 0.5}, goptuna.TrialStateComplete, 10-st)
		}
		if multi {
			obs, _, _ := observe(study, fresh(99, nil, nil), DefaultClassifier)
			var names []string
			for _, p := range jointSpace(obs) {
				names = append(names, p.name)
			}
			if !reflect.DeepEqual(names, []string{"spec", "x"}) {
				t.Errorf("joint space %v, want [spec x]", names)
			}
		}
		high := 0
		for seed := 1; seed <= 50; seed++ {
			s := mustTPE(t, int64(seed), WithMultivariate(multi))
			tr := fresh(20, map[string]float64{"spec": 1}, map[string]interface{}{"spec": condSpace[0].dist})
			v, err := s.Sample(study, tr, "steps", condSpace[1].dist)
			if err != nil {
				t.Fatal(err)
			}
			if v >= 6 {
				high++
			}
		}
		t.Logf("multivariate=%v: steps >= 6 in %d/50 eagle asks", multi, high)
		if high < 35 { // uniform over 1..8: 3/8 of asks
			t.Errorf("multivariate=%v: steps >= 6 in %d/50 asks, want >= 35", multi, high)
		}
	}
}

// TestConditionalStudy runs whole studies over a conditional space in
// both modes: every proposal valid, the conditional param only when active.
func TestConditionalStudy(t *testing.T) {
	for _, name := range []string{"tpe", "tpe-univariate"} {
		s, err := New(name, 4)
		if err != nil {
			t.Fatal(err)
		}
		study := newStudy(t, s, goptuna.StudyDirectionMinimize)
		for i := 0; i < 30; i++ {
			id, v := ask(t, study, condSpace)
			if _, ok := v["steps"]; ok != (v["spec"] == 1) {
				t.Fatalf("%s: trial %d params %v", name, i, v)
			}
			y := v["x"]
			if v["spec"] == 1 {
				y -= v["steps"] / 8
			}
			tell(t, study, id, goptuna.TrialStateComplete, y)
		}
	}
}

// TestNeverNaN: NaN and infinite values from the classifier are taken as
// failures; proposals stay valid.
func TestNeverNaN(t *testing.T) {
	mixed := problems()[1]
	nan := func(ft goptuna.FrozenTrial) (float64, ObsKind) {
		switch ft.Number % 3 {
		case 0:
			return math.NaN(), ObsValue
		case 1:
			return math.Inf(1), ObsValue
		}
		return DefaultClassifier(ft)
	}
	for _, multi := range []bool{false, true} {
		s := mustTPE(t, 9, WithClassifier(nan), WithMultivariate(multi))
		study := newStudy(t, s, goptuna.StudyDirectionMaximize)
		for i := 0; i < 25; i++ {
			id, v := ask(t, study, mixed.space)
			for _, sp := range mixed.space {
				if !valid(t, sp.dist, v[sp.name]) {
					t.Fatalf("trial %d: %s = %v", i, sp.name, v[sp.name])
				}
			}
			y, _ := mixed.f(v)
			tell(t, study, id, goptuna.TrialStateComplete, y)
		}
	}
}

// TestRelativeSampler: TPE also works as goptuna's RelativeSampler (with a
// defined search space: goptuna's own intersection panics on categoricals).
func TestRelativeSampler(t *testing.T) {
	mixed := problems()[1]
	s := mustTPE(t, 2, WithMultivariate(true))
	defined := map[string]interface{}{}
	for _, sp := range mixed.space {
		defined[sp.name] = sp.dist
	}
	study, err := goptuna.CreateStudy("rel",
		goptuna.StudyOptionStorage(goptuna.NewInMemoryStorage()),
		goptuna.StudyOptionSampler(s), goptuna.StudyOptionRelativeSampler(s),
		goptuna.StudyOptionDefineSearchSpace(defined), goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	best := runProblemOn(t, study, mixed, 30)
	t.Logf("best after 30 trials: %g", best)
	if best > 0.5 { // random: median 1.15 after 40 trials
		t.Errorf("best %g after 30 trials", best)
	}
}

func runProblemOn(t *testing.T, study *goptuna.Study, pr problem, n int) float64 {
	err := study.Optimize(func(tr goptuna.Trial) (float64, error) {
		v, err := suggestAll(tr, pr.space)
		if err != nil {
			return 0, err
		}
		y, _ := pr.f(v)
		return y, nil
	}, n)
	if err != nil {
		t.Fatal(err)
	}
	best, err := study.GetBestValue()
	if err != nil {
		t.Fatal(err)
	}
	return best
}

func TestNew(t *testing.T) {
	for _, name := range []string{"", "tpe", "tpe-univariate", "random", "goptuna-tpe"} {
		if _, err := New(name, 1); err != nil {
			t.Errorf("New(%q): %v", name, err)
		}
	}
	_, err := New("bayes", 1)
	if err == nil || !strings.Contains(err.Error(), "goptuna-tpe, grid, random, tpe, tpe-univariate") {
		t.Errorf("New(bayes) error %v, want the valid names", err)
	}
	if _, err := New("grid", 1); err == nil {
		t.Error("New(grid) without points: want an error")
	}
	if _, err := New("grid", 1, WithGridPoints([]map[string]float64{{"x": 1}})); err != nil {
		t.Errorf("New(grid): %v", err)
	}
	for _, opt := range []Option{WithStartup(-1), WithCandidates(0), WithPriorWeight(-1), WithClassifier(nil)} {
		if _, err := New("tpe", 1, opt); err == nil {
			t.Error("bad option: want an error")
		}
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

// TestConcurrentAsks: asks sampled from many goroutines at once (parallel
// workers) get exactly what sequential asks get: no shared random state.
func TestConcurrentAsks(t *testing.T) {
	mixed := problems()[1]
	study := newStudy(t, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
	for _, v := range runSeq(t, mixed, NewRandom(5), 20) {
		y, _ := mixed.f(v)
		store(t, study, mixed.space, v, goptuna.TrialStateComplete, y)
	}
	for _, multi := range []bool{false, true} {
		sample := func(s *TPE, number int) (map[string]float64, error) {
			tr := fresh(number, map[string]float64{}, map[string]interface{}{})
			for _, sp := range mixed.space {
				v, err := s.Sample(study, tr, sp.name, sp.dist)
				if err != nil {
					return nil, err
				}
				tr.InternalParams[sp.name], tr.Distributions[sp.name] = v, sp.dist
			}
			return tr.InternalParams, nil
		}
		const asks = 16
		want := make([]map[string]float64, asks)
		for i := range want {
			v, err := sample(mustTPE(t, 8, WithMultivariate(multi)), 100+i)
			if err != nil {
				t.Fatal(err)
			}
			want[i] = v
		}
		s := mustTPE(t, 8, WithMultivariate(multi))
		got := make([]map[string]float64, asks)
		errs := make(chan error, asks)
		for i := range got {
			go func(i int) {
				v, err := sample(s, 100+i)
				got[i] = v
				errs <- err
			}(i)
		}
		for range got {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("multivariate=%v: concurrent asks differ from sequential ones", multi)
		}
	}
}

// BenchmarkTPESample measures one ask (four params) over 200 stored trials.
func BenchmarkTPESample(b *testing.B) {
	mixed := problems()[1]
	study := newStudy(b, goptuna.NewRandomSampler(), goptuna.StudyDirectionMinimize)
	r := NewRandom(1)
	for i := 0; i < 200; i++ {
		v := map[string]float64{}
		for _, sp := range mixed.space {
			x, err := r.Sample(study, fresh(i, nil, nil), sp.name, sp.dist)
			if err != nil {
				b.Fatal(err)
			}
			v[sp.name] = x
		}
		y, _ := mixed.f(v)
		store(b, study, mixed.space, v, goptuna.TrialStateComplete, y)
	}
	for _, multi := range []bool{false, true} {
		b.Run(map[bool]string{false: "univariate", true: "multivariate"}[multi], func(b *testing.B) {
			s := mustTPE(b, 1, WithMultivariate(multi))
			for i := 0; i < b.N; i++ {
				tr := fresh(1000+i, map[string]float64{}, map[string]interface{}{})
				for _, sp := range mixed.space {
					v, err := s.Sample(study, tr, sp.name, sp.dist)
					if err != nil {
						b.Fatal(err)
					}
					tr.InternalParams[sp.name], tr.Distributions[sp.name] = v, sp.dist
				}
			}
		})
	}
}

package sampler

import (
	"math"
	"testing"

	"github.com/c-bata/goptuna"
)

// Expected values below were computed by hand from the formulas (Python's
// math.erfc for the normal CDF), not by this package.

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %.15g, want %.15g (±%g)", what, got, want, tol)
	}
}

func TestLogNdtr(t *testing.T) {
	for _, tc := range []struct {
		z, want float64
	}{
		{0, math.Log(0.5)},
		{-25, -316.63940800802015}, // asymptotic branch
		{-30, -454.3212439563431},
		{-37, -689.0305855768905},
		{3, math.Log(0.9986501019683699)},
	} {
		near(t, "logNdtr", logNdtr(tc.z), tc.want, 1e-9*math.Max(1, math.Abs(tc.want)))
	}
	// Just past where the branches meet.
	near(t, "logNdtr(-20.5)", logNdtr(-20.5), math.Log(ndtr(-20.5)), 1e-9)
	// Far tails stay finite where ndtr underflows.
	if v := logNdtr(-60); math.IsInf(v, 0) || math.IsNaN(v) || v > -1800 {
		t.Errorf("logNdtr(-60) = %g, want finite near -1804", v)
	}
}

func TestLogGaussMass(t *testing.T) {
	for _, tc := range []struct {
		name       string
		a, b, want float64
	}{
		{"central", -1, 2, math.Log(0.9772498680518208 - 0.15865525393145707)},
		{"left tail", -3, -2, math.Log(0.022750131948179195 - 0.0013498980316301035)},
		{"right tail", 2, 3, math.Log(0.022750131948179195 - 0.0013498980316301035)},
		{"far left tail", -41, -40, logDiffExp(logNdtr(-40), logNdtr(-41))},
	} {
		got := logGaussMass(tc.a, tc.b)
		near(t, tc.name, got, tc.want, 1e-9*math.Max(1, math.Abs(tc.want)))
		if math.IsInf(got, 0) {
			t.Errorf("%s: mass %g is not finite", tc.name, got)
		}
	}
}

func TestTruncNormLogPDF(t *testing.T) {
	near(t, "N(0,1) on [-1,2] at 0.5", truncNormLogPDF(0.5, 0, 1, -1, 2), -0.84377223888021, 1e-12)
	if v := truncNormLogPDF(2.5, 0, 1, -1, 2); !math.IsInf(v, -1) {
		t.Errorf("outside the range: %g, want -Inf", v)
	}
	near(t, "discrete cell", discTruncNormLogPMF(2, 1, 1, 1, -0.5, 4.5), -1.35053971249117, 1e-12)
}

func univariateCfg() parzenConfig {
	return parzenConfig{priorWeight: 1, magicClip: true, weights: defaultWeights}
}

// TestNumericKernels checks Optuna's univariate bandwidths and the mixture
// density on observations 2, 7, 9 in [0, 10]: centres sorted with the
// prior's 5 are 2 5 7 9; gaps to neighbours (ends 0 and 10 not counted at
// the outer kernels) give 3 2 2; the magic clip's floor is 10/(1+4) = 2;
// the prior kernel is (5, 10); weights are 1/4 each.
func TestNumericKernels(t *testing.T) {
	p, err := newParam("x", goptuna.UniformDistribution{Low: 0, High: 10})
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMixture([]param{p}, [][]float64{{2}, {7}, {9}}, univariateCfg())
	if err != nil {
		t.Fatal(err)
	}
	kr := m.dims[0]
	wantMu, wantSigma := []float64{2, 7, 9, 5}, []float64{3, 2, 2, 10}
	for k := range wantMu {
		near(t, "mu", kr.mus[k], wantMu[k], 0)
		near(t, "sigma", kr.sigmas[k], wantSigma[k], 1e-12)
		near(t, "weight", math.Exp(m.logW[k]), 0.25, 1e-12)
	}
	near(t, "log l(4)", m.logPDF([]float64{4}), -2.498191486184201, 1e-12)

	// Without the magic clip a kernel next to the prior keeps its narrow
	// gap; consider_endpoints lets the outer kernels use the gap to the end.
	cfg := univariateCfg()
	cfg.magicClip = false
	m, err = newMixture([]param{p}, [][]float64{{4.5}, {9}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// centres 4.5 5 9 with ends 0, 10: 4.5 -> inner gap 0.5 (endpoints off),
	// 9 -> inner gap 4.
	near(t, "sigma 4.5", m.dims[0].sigmas[0], 0.5, 1e-12)
	near(t, "sigma 9", m.dims[0].sigmas[1], 4, 1e-12)
	cfg.endpoints = true
	m, err = newMixture([]param{p}, [][]float64{{4.5}, {9}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "sigma 4.5 with endpoints", m.dims[0].sigmas[0], 4.5, 1e-12)
}

// TestCategoricalKernels: choices 3, observations 0, 2, 2, prior weight 1:
// 4 kernels, each row 1/4 everywhere plus 1 on its choice, over 1.75; the
// prior row 1/3. p(0) = 1/4 (1.25/1.75 + 2 (.25/1.75) + 1/3) = 1/3,
// p(1) = 1/4 (3 (.25/1.75) + 1/3) = 4/21, p(2) = 10/21.
func TestCategoricalKernels(t *testing.T) {
	p, err := newParam("c", cat("a", "b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := newMixture([]param{p}, [][]float64{{0}, {2}, {2}}, univariateCfg())
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range []float64{1.0 / 3, 4.0 / 21, 10.0 / 21} {
		near(t, "p(c)", math.Exp(m.logPDF([]float64{float64(c)})), want, 1e-12)
	}
	// No observations: uniform.
	m, err = newMixture([]param{p}, nil, univariateCfg())
	if err != nil {
		t.Fatal(err)
	}
	near(t, "empty p(1)", math.Exp(m.logPDF([]float64{1})), 1.0/3, 1e-12)
}

// TestDiscreteMixtureSumsToOne checks every discrete estimator is a
// probability distribution over the param's values, upper bound included.
func TestDiscreteMixtureSumsToOne(t *testing.T) {
	for _, tc := range []struct {
		dist interface{}
		obs  [][]float64
	}{
		{goptuna.IntUniformDistribution{Low: 1, High: 8}, [][]float64{{1}, {8}, {3}}},
		{goptuna.StepIntUniformDistribution{Low: 0, High: 64, Step: 16}, [][]float64{{64}, {16}}},
		{goptuna.StepIntUniformDistribution{Low: 0, High: 70, Step: 16}, [][]float64{{64}}}, // top snaps to 64
		{goptuna.DiscreteUniformDistribution{Low: 0.7, High: 0.95, Q: 0.05}, [][]float64{{0.95}, {0.7}}},
	} {
		p, err := newParam("x", tc.dist)
		if err != nil {
			t.Fatal(err)
		}
		for _, multi := range []bool{false, true} {
			cfg := univariateCfg()
			cfg.multivariate = multi
			m, err := newMixture([]param{p}, tc.obs, cfg)
			if err != nil {
				t.Fatal(err)
			}
			sum := 0.0
			for k := 0; k < p.count(); k++ {
				sum += math.Exp(m.logPDF([]float64{p.value(k)}))
			}
			near(t, "sum of probabilities", sum, 1, 1e-9)
		}
	}
}

func TestDefaultGammaAndWeights(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 1, 10: 1, 11: 2, 100: 10, 251: 25, 1000: 25} {
		if got := defaultGamma(n); got != want {
			t.Errorf("defaultGamma(%d) = %d, want %d", n, got, want)
		}
	}
	w := defaultWeights(30) // ramp linspace(1/30, 1, 5) then 25 ones
	want := []float64{1.0 / 30, 1.0/30 + (1-1.0/30)/4, 1.0/30 + (1-1.0/30)/2, 1.0/30 + 3*(1-1.0/30)/4, 1}
	for i, x := range want {
		near(t, "ramp", w[i], x, 1e-12)
	}
	for i := 5; i < 30; i++ {
		near(t, "flat", w[i], 1, 0)
	}
	if len(defaultWeights(7)) != 7 || defaultWeights(7)[0] != 1 {
		t.Errorf("defaultWeights(7) = %v, want seven ones", defaultWeights(7))
	}
}

// TestSplit checks failures and pending trials never join the good group
// and pending ones do not count towards gamma.
func TestSplit(t *testing.T) {
	trials := make([]goptuna.FrozenTrial, 14)
	var obs []observation
	for i := range trials {
		trials[i].Number = i
		o := observation{t: &trials[i]}
		switch {
		case i < 8:
			o.kind, o.score = ObsValue, float64(10-i) // 7 is best
		case i < 11:
			o.kind = ObsWorst
		default:
			o.kind = ObsPending
		}
		obs = append(obs, o)
	}
	below, above := split(obs, defaultGamma) // n = 11 finished: gamma 2
	if len(below) != 2 || below[0].t.Number != 6 || below[1].t.Number != 7 {
		t.Fatalf("below = %v, want trials 6 and 7 in number order", numbers(below))
	}
	if len(above) != 12 {
		t.Fatalf("above has %d, want 12", len(above))
	}
	for i := 1; i < len(above); i++ {
		if above[i].t.Number < above[i-1].t.Number {
			t.Fatalf("above not in trial order: %v", numbers(above))
		}
	}
	// Only failures: nothing is good.
	below, _ = split(obs[8:], defaultGamma)
	if len(below) != 0 {
		t.Errorf("with failures only, below = %v, want none", numbers(below))
	}
}

func numbers(obs []observation) []int {
	var n []int
	for _, o := range obs {
		n = append(n, o.t.Number)
	}
	return n
}

// TestAcquisitionNeverNaN: a point impossible under both estimators ranks
// last instead of producing -Inf - -Inf.
func TestAcquisitionNeverNaN(t *testing.T) {
	p, _ := newParam("c", cat("a", "b", "c"))
	cfg := univariateCfg()
	cfg.priorWeight = 0
	l, _ := newMixture([]param{p}, [][]float64{{0}}, cfg)
	g, _ := newMixture([]param{p}, [][]float64{{1}}, cfg)
	for c, want := range []float64{math.Inf(1), math.Inf(-1), math.Inf(-1)} {
		if got := acquisition(l, g, []float64{float64(c)}); got != want {
			t.Errorf("acquisition(%d) = %g, want %g", c, got, want)
		}
	}
}

package sampler

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// parzenConfig holds the Parzen-estimator settings of Optuna's TPESampler.
type parzenConfig struct {
	priorWeight float64
	magicClip   bool
	endpoints   bool
	weights     func(n int) []float64
	// multivariate selects Optuna's multivariate bandwidth (one sigma per
	// param from Scott's rule) instead of the univariate neighbour rule.
	multivariate bool
}

// kernels is one param's kernels, one per mixture component.
type kernels struct {
	p param
	// numeric params: centre and width in transformed units, and the log
	// of each kernel's normaliser (log sigma for the density, log of the
	// truncated mass).
	mus, sigmas, logSigma, logMass []float64
	// categorical params: probs[k][c] of choice c under component k.
	probs [][]float64
}

// mixture is a Parzen estimator: a weighted mixture of product kernels, one
// component per observation plus one prior component, over one or more
// params (one for univariate TPE, the shared params for multivariate).
type mixture struct {
	logW []float64 // log component weights (normalised)
	cumW []float64 // cumulative weights, for drawing a component
	dims []kernels
}

// defaultGamma is Optuna's default_gamma: the best 10% (at most 25) of the
// observations form l(x).
func defaultGamma(n int) int {
	return min(int(math.Ceil(0.1*float64(n))), 25)
}

// defaultWeights is Optuna's default_weights: flat for up to 25
// observations, beyond that a ramp from 1/n to 1 over the oldest n-25 and
// flat over the newest 25 (observations in trial-number order).
func defaultWeights(n int) []float64 {
	w := make([]float64, n)
	if n < 25 {
		for i := range w {
			w[i] = 1
		}
		return w
	}
	ramp := n - 25
	for i := 0; i < ramp; i++ {
		// numpy.linspace(1/n, 1, ramp): endpoints included.
		if ramp == 1 {
			w[i] = 1 / float64(n)
		} else {
			w[i] = 1/float64(n) + (1-1/float64(n))*float64(i)/float64(ramp-1)
		}
	}
	for i := ramp; i < n; i++ {
		w[i] = 1
	}
	return w
}

// newMixture fits the estimator to observations obs[i][d] (values of
// params[d] in trial-number order, each inside its range).
func newMixture(params []param, obs [][]float64, cfg parzenConfig) (*mixture, error) {
	n := len(obs)
	var w []float64
	if n == 0 {
		w = []float64{1}
	} else {
		raw := cfg.weights(n)
		if len(raw) < n {
			return nil, fmt.Errorf("weights function returned %d weights for %d observations", len(raw), n)
		}
		sum := 0.0
		for _, x := range raw[:n] {
			if !(x >= 0) || math.IsInf(x, 0) {
				return nil, fmt.Errorf("weights function returned %g; weights must be finite and >= 0", x)
			}
			sum += x
		}
		if sum <= 0 {
			return nil, fmt.Errorf("weights function returned only zeros for %d observations", n)
		}
		w = append(append(make([]float64, 0, n+1), raw[:n]...), cfg.priorWeight)
	}
	total := 0.0
	for _, x := range w {
		total += x
	}
	m := &mixture{logW: make([]float64, len(w)), cumW: make([]float64, len(w))}
	acc := 0.0
	for k, x := range w {
		m.logW[k] = math.Log(x / total)
		acc += x / total
		m.cumW[k] = acc
	}
	for d, p := range params {
		col := make([]float64, n)
		for i := range obs {
			col[i] = obs[i][d]
		}
		if p.categorical() {
			m.dims = append(m.dims, categoricalKernels(p, col, cfg))
		} else {
			m.dims = append(m.dims, numericKernels(p, col, len(params), cfg))
		}
	}
	return m, nil
}

// categoricalKernels is Optuna's categorical Parzen estimator: each
// observation's row puts weight 1 on its choice plus priorWeight/K spread
// over every choice (K kernels including the prior), normalised; the prior
// row is uniform.
func categoricalKernels(p param, obs []float64, cfg parzenConfig) kernels {
	kr := kernels{p: p}
	if len(obs) == 0 {
		row := make([]float64, p.cat)
		for c := range row {
			row[c] = 1 / float64(p.cat)
		}
		kr.probs = [][]float64{row}
		return kr
	}
	nk := len(obs) + 1
	for k := 0; k < nk; k++ {
		row := make([]float64, p.cat)
		for c := range row {
			row[c] = cfg.priorWeight / float64(nk)
		}
		if k < len(obs) {
			row[int(obs[k])]++
		}
		sum := 0.0
		for _, x := range row {
			sum += x
		}
		if sum > 0 {
			for c := range row {
				row[c] /= sum
			}
		}
		kr.probs = append(kr.probs, row)
	}
	return kr
}

// numericKernels places a truncated Gaussian on each observation and one
// prior kernel (centre of the range, width of the range). Univariate width:
// the larger gap to the neighbouring centres (the prior's centre counted,
// the range's ends as neighbours when consider_endpoints, else the nearest
// inner gap); multivariate width: 0.2 * n^(-1/(d+4)) * range. Both clipped
// to [range/min(100, 1+K), range] with the magic clip, K kernels.
func numericKernels(p param, obs []float64, ndims int, cfg parzenConfig) kernels {
	kr := kernels{p: p}
	n := len(obs)
	width := p.hi - p.lo
	prior := 0.5 * (p.lo + p.hi)
	mus := make([]float64, n, n+1)
	for i, v := range obs {
		mus[i] = p.transform(v)
	}
	sigmas := make([]float64, n, n+1)
	if cfg.multivariate {
		s := 0.2 * math.Pow(float64(max(n, 1)), -1/float64(ndims+4)) * width
		for i := range sigmas {
			sigmas[i] = s
		}
	} else if n > 0 {
		// Centres with the prior's, sorted (stable: ties keep trial order).
		all := append(append([]float64(nil), mus...), prior)
		idx := make([]int, len(all))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return all[idx[a]] < all[idx[b]] })
		ext := make([]float64, len(all)+2) // with the range's ends
		ext[0], ext[len(ext)-1] = p.lo, p.hi
		for i, j := range idx {
			ext[i+1] = all[j]
		}
		sorted := make([]float64, len(all))
		for i := range sorted {
			sorted[i] = math.Max(ext[i+1]-ext[i], ext[i+2]-ext[i+1])
		}
		if !cfg.endpoints && len(ext) >= 4 {
			sorted[0] = ext[2] - ext[1]
			sorted[len(sorted)-1] = ext[len(ext)-2] - ext[len(ext)-3]
		}
		for i, j := range idx {
			if j < n {
				sigmas[j] = sorted[i]
			}
		}
	}
	minSigma := 1e-12
	if cfg.magicClip {
		minSigma = width / math.Min(100, 1+float64(n+1))
	}
	for i := range sigmas {
		sigmas[i] = math.Min(math.Max(sigmas[i], minSigma), width)
	}
	kr.mus = append(mus, prior)
	kr.sigmas = append(sigmas, width)
	for k := range kr.mus {
		mu, s := kr.mus[k], kr.sigmas[k]
		kr.logSigma = append(kr.logSigma, math.Log(s))
		kr.logMass = append(kr.logMass, logGaussMass((p.lo-mu)/s, (p.hi-mu)/s))
	}
	return kr
}

// logKernel is log k(x) of component k for value x of the param.
func (kr *kernels) logKernel(k int, x float64) float64 {
	p := kr.p
	if p.categorical() {
		return math.Log(kr.probs[k][int(x)])
	}
	mu, s := kr.mus[k], kr.sigmas[k]
	if p.discrete() {
		a, b := math.Max(x-p.step/2, p.lo), math.Min(x+p.step/2, p.hi)
		if a >= b {
			return math.Inf(-1)
		}
		return logGaussMass((a-mu)/s, (b-mu)/s) - kr.logMass[k]
	}
	t := p.transform(x)
	if t < p.lo || t > p.hi {
		return math.Inf(-1)
	}
	z := (t - mu) / s
	return -0.5*z*z - logSqrt2Pi - kr.logSigma[k] - kr.logMass[k]
}

// logPDF is log of the mixture's density (probability for discrete params)
// at x, one value per param.
func (m *mixture) logPDF(x []float64) float64 {
	terms := make([]float64, len(m.logW))
	for k := range terms {
		t := m.logW[k]
		for d := range m.dims {
			if math.IsInf(t, -1) {
				break
			}
			t += m.dims[d].logKernel(k, x[d])
		}
		terms[k] = t
	}
	return logSumExp(terms)
}

// sample draws one point: a component by weight, then each param from that
// component's kernel; values are valid for their params (on the grid,
// inside the range).
func (m *mixture) sample(rng *rand.Rand) []float64 {
	u := rng.Float64()
	k := sort.SearchFloat64s(m.cumW, u)
	if k >= len(m.cumW) {
		k = len(m.cumW) - 1
	}
	for k > 0 && math.IsInf(m.logW[k], -1) { // never draw a zero-weight kernel
		k--
	}
	x := make([]float64, len(m.dims))
	for d := range m.dims {
		kr := &m.dims[d]
		if kr.p.categorical() {
			row := kr.probs[k]
			c := len(row) - 1
			for c > 0 && row[c] == 0 { // rounding never picks a zero-weight choice
				c--
			}
			v, acc := rng.Float64(), 0.0
			for i, pr := range row {
				acc += pr
				if v < acc {
					c = i
					break
				}
			}
			x[d] = float64(c)
			continue
		}
		t := sampleTruncNorm(rng, kr.mus[k], kr.sigmas[k], kr.p.lo, kr.p.hi)
		x[d] = kr.p.untransform(t)
	}
	return x
}

package search

import (
	"math"
	"slices"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/sgtune/sgtune/engine"
)

// predictor is what a study learned from the startup facts of its launched
// trials and from what its servers counted (an engine.Learned). The search
// owns it and passes it to space.Study.Resolve explicitly, so the study
// stays what the file said. Safe for concurrent use.
type predictor struct {
	mu        sync.Mutex
	obs       []engine.Observation
	ratios    map[string]int
	promptSum float64
	promptN   int
}

var _ engine.Learned = (*predictor)(nil)

func newPredictor() *predictor { return &predictor{ratios: map[string]int{}} }

// add keeps one launched config's observation.
func (p *predictor) add(o engine.Observation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.obs = append(p.obs, o)
	if o.RatioKey != "" && o.Ratio > 0 {
		p.ratios[o.RatioKey] = o.Ratio
	}
}

// addPrompts records the prompt tokens per request a server counted over n
// requests.
func (p *predictor) addPrompts(mean float64, n int) {
	if n <= 0 || mean <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.promptSum += mean * float64(n)
	p.promptN += n
}

// Exact implements engine.Learned: the latest observation with the key.
func (p *predictor) Exact(memKey string) (engine.Observation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.obs) - 1; i >= 0; i-- {
		if p.obs[i].MemKey == memKey {
			return p.obs[i], true
		}
	}
	return engine.Observation{}, false
}

// Ratio implements engine.Learned.
func (p *predictor) Ratio(key string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.ratios[key]
	return r, ok
}

// PromptTokens implements engine.Learned: the mean prompt size the servers
// counted (chat template included), rounded up.
func (p *predictor) PromptTokens() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.promptN == 0 {
		return 0
	}
	return int(math.Ceil(p.promptSum/float64(p.promptN) - 1e-9))
}

// minFit is how many observations a linear fit needs beyond the number of
// features that vary; with fewer, the nearest observation's residual
// corrects the hint (a hint from another machine is mostly a constant
// offset away from this one).
const minFit = 2

// KV implements engine.Learned. With a hint (prior != 0) it models the
// residual kv - hint as linear in the features, which converges to this
// machine from a hint taken on another; without one it fits kv directly.
// The fit is ridge-regularised least squares on the features that vary
// among the observations (gonum/mat); its standard error is the residual
// standard deviation scaled for the leverage of x.
func (p *predictor) KV(x []float64, prior float64) (kv, stderr float64, ok bool) {
	p.mu.Lock()
	var xs [][]float64
	var ys []float64
	for _, o := range p.obs {
		if o.KVTokens <= 0 || len(o.X) != len(x) || (prior != 0) != (o.Prior != 0) {
			continue
		}
		xs = append(xs, o.X)
		ys = append(ys, float64(o.KVTokens)-o.Prior)
	}
	p.mu.Unlock()
	if len(ys) == 0 {
		return 0, 0, false
	}
	varying := varyingColumns(xs)
	if len(ys) < len(varying)+minFit || len(varying) == 0 {
		if prior == 0 && (len(varying) > 0 || !slices.Equal(xs[0], x)) {
			// A direct fit needs more observations than features, and
			// observations that all share one config's features say
			// nothing of another's.
			return 0, 0, false
		}
		i := nearest(xs, x, varying)
		return prior + ys[i], 0, true
	}
	fit, se, ok := ridge(xs, ys, varying, x, prior != 0)
	if !ok {
		i := nearest(xs, x, varying)
		return prior + ys[i], 0, true
	}
	return prior + fit, se, true
}

// varyingColumns lists the feature columns whose values differ.
func varyingColumns(xs [][]float64) []int {
	var out []int
	for j := range xs[0] {
		for i := 1; i < len(xs); i++ {
			if xs[i][j] != xs[0][j] {
				out = append(out, j)
				break
			}
		}
	}
	return out
}

// scales returns each column's spread (1 for a constant column).
func scales(xs [][]float64) []float64 {
	out := make([]float64, len(xs[0]))
	for j := range out {
		lo, hi := xs[0][j], xs[0][j]
		for _, r := range xs {
			lo, hi = math.Min(lo, r[j]), math.Max(hi, r[j])
		}
		out[j] = hi - lo
		if out[j] == 0 {
			out[j] = 1
		}
	}
	return out
}

// nearest returns the observation closest to x over the given columns,
// each scaled by its spread; a difference in any other column (a
// speculative mode the observations share) counts more than any spread.
func nearest(xs [][]float64, x []float64, cols []int) int {
	sc := scales(append(xs[:len(xs):len(xs)], x))
	best, bestD := 0, math.Inf(1)
	for i, r := range xs {
		d := 0.0
		for j := range r {
			d += math.Abs(r[j]-x[j]) / sc[j]
		}
		if d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// ridge fits y ~ b0 + sum b_j x_j over cols with a ridge penalty on
// standardised features (strong when y is a residual from a hint) and
// returns the prediction at x with its standard error.
func ridge(xs [][]float64, ys []float64, cols []int, x []float64, hinted bool) (pred, se float64, ok bool) {
	n, k := len(ys), len(cols)+1
	mean := make([]float64, len(cols))
	sd := make([]float64, len(cols))
	for c, j := range cols {
		for _, r := range xs {
			mean[c] += r[j]
		}
		mean[c] /= float64(n)
		for _, r := range xs {
			sd[c] += (r[j] - mean[c]) * (r[j] - mean[c])
		}
		sd[c] = math.Sqrt(sd[c] / float64(n))
		if sd[c] == 0 {
			sd[c] = 1
		}
	}
	row := func(r []float64) []float64 {
		out := make([]float64, k)
		out[0] = 1
		for c, j := range cols {
			out[c+1] = (r[j] - mean[c]) / sd[c]
		}
		return out
	}
	A := mat.NewDense(n, k, nil)
	for i, r := range xs {
		A.SetRow(i, row(r))
	}
	y := mat.NewVecDense(n, ys)
	var ata mat.Dense
	ata.Mul(A.T(), A)
	// The slopes are shrunk hard (a penalty of 0.1 per observation on
	// standardised features): with a hint, a residual that is the same
	// everywhere (another machine's offset) needs no slope, and a slope
	// fitted to a few, collinear startups would extrapolate wildly (seen:
	// 33k predicted for an EAGLE config whose engine reported 23.5k).
	// Without a hint the data have to carry the slopes; a light penalty
	// only keeps the system solvable.
	lambda := 1e-6
	if hinted {
		lambda = 0.1
	}
	for j := 1; j < k; j++ { // the intercept is not penalised
		ata.Set(j, j, ata.At(j, j)+lambda*float64(n))
	}
	var aty mat.VecDense
	aty.MulVec(A.T(), y)
	var beta mat.VecDense
	if err := beta.SolveVec(&ata, &aty); err != nil {
		return 0, 0, false
	}
	var fitted mat.VecDense
	fitted.MulVec(A, &beta)
	sse := 0.0
	for i := range ys {
		d := ys[i] - fitted.AtVec(i)
		sse += d * d
	}
	dof := n - k
	sigma2 := 0.0
	if dof > 0 {
		sigma2 = sse / float64(dof)
	}
	xr := mat.NewVecDense(k, row(x))
	pred = mat.Dot(xr, &beta)
	// Leverage of x: x' (A'A)^-1 x.
	var inv mat.Dense
	if err := inv.Inverse(&ata); err != nil {
		return pred, math.Sqrt(sigma2), true
	}
	var tmp mat.VecDense
	tmp.MulVec(&inv, xr)
	h := mat.Dot(xr, &tmp)
	return pred, math.Sqrt(sigma2 * (1 + h)), true
}

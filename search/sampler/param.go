package sampler

import (
	"fmt"
	"math"
	"reflect"

	"github.com/c-bata/goptuna"
)

// param is one goptuna distribution in the space the estimators work in:
// numbers are modelled on [lo, hi] (log-scaled for LogUniform, widened by
// half a step on each side for discrete ones, as Optuna does), categoricals
// as choice indices.
type param struct {
	name string
	dist interface{}
	cat  int // number of choices; 0 for a numeric param

	low, high float64 // the value range, inclusive (high snapped onto the grid)
	step      float64 // grid step; 0 = continuous
	log       bool

	lo, hi float64 // the modelled range in transformed units
}

// newParam checks a goptuna distribution and describes it.
func newParam(name string, dist interface{}) (param, error) {
	p := param{name: name, dist: dist}
	bad := func(why string) (param, error) {
		return param{}, fmt.Errorf("param %s: %s: %w", name, why, goptuna.ErrUnsupportedSearchSpace)
	}
	switch d := dist.(type) {
	case goptuna.UniformDistribution:
		p.low, p.high = d.Low, d.High
	case goptuna.LogUniformDistribution:
		if d.Low <= 0 {
			return bad(fmt.Sprintf("log range needs low > 0, got %g", d.Low))
		}
		p.low, p.high, p.log = d.Low, d.High, true
	case goptuna.IntUniformDistribution:
		p.low, p.high, p.step = float64(d.Low), float64(d.High), 1
	case goptuna.StepIntUniformDistribution:
		if d.Step <= 0 {
			return bad(fmt.Sprintf("step must be > 0, got %d", d.Step))
		}
		p.step = float64(d.Step)
		p.low = float64(d.Low)
		if d.High >= d.Low {
			p.high = float64(d.Low + (d.High-d.Low)/d.Step*d.Step)
		} else {
			p.high = float64(d.High)
		}
	case goptuna.DiscreteUniformDistribution:
		if !(d.Q > 0) {
			return bad(fmt.Sprintf("q must be > 0, got %g", d.Q))
		}
		p.step, p.low = d.Q, d.Low
		if d.High >= d.Low {
			p.high = d.Low + float64(discreteCount(d.Low, d.High, d.Q)-1)*d.Q
			if p.high > d.High {
				p.high = d.High
			}
		} else {
			p.high = d.High
		}
	case goptuna.CategoricalDistribution:
		if len(d.Choices) == 0 {
			return bad("no choices")
		}
		p.cat = len(d.Choices)
		p.low, p.high, p.step = 0, float64(len(d.Choices)-1), 1
		return p, nil
	default:
		return bad(fmt.Sprintf("unknown distribution %T", dist))
	}
	if math.IsNaN(p.low) || math.IsNaN(p.high) || math.IsInf(p.low, 0) || math.IsInf(p.high, 0) {
		return bad("range must be finite")
	}
	if p.high < p.low {
		return bad(fmt.Sprintf("low %g > high %g", p.low, p.high))
	}
	p.lo, p.hi = p.low-p.step/2, p.high+p.step/2
	if p.log {
		p.lo, p.hi = math.Log(p.low), math.Log(p.high)
	}
	return p, nil
}

// discreteCount is the number of grid values low, low+q, ... <= high,
// tolerating float noise in (high-low)/q.
func discreteCount(low, high, q float64) int {
	return int(math.Floor((high-low)/q+1e-9)) + 1
}

// single reports whether the param has one value only.
func (p param) single() bool { return p.high == p.low }

// categorical reports whether the param is a categorical.
func (p param) categorical() bool { return p.cat > 0 }

// discrete reports whether the param takes grid values (ints, steps, choices).
func (p param) discrete() bool { return p.step > 0 }

// count is the number of values of a discrete param.
func (p param) count() int {
	if p.categorical() {
		return p.cat
	}
	return int(math.Round((p.high-p.low)/p.step)) + 1
}

// value is the k-th value of a discrete param.
func (p param) value(k int) float64 {
	if p.categorical() {
		return float64(k)
	}
	return math.Min(p.low+float64(k)*p.step, p.high)
}

// transform maps a value into the modelled units.
func (p param) transform(v float64) float64 {
	if p.log {
		return math.Log(v)
	}
	return v
}

// untransform maps modelled units back to a valid value: exp for log
// params, the nearest grid value for discrete ones, clipped to the range.
func (p param) untransform(t float64) float64 {
	v := t
	if p.log {
		v = math.Exp(t)
	}
	return p.snap(v)
}

// snap clips v to the range and, for a discrete param, rounds it to the grid.
func (p param) snap(v float64) float64 {
	if p.discrete() {
		k := math.Round((v - p.low) / p.step)
		v = p.low + k*p.step
	}
	return math.Min(math.Max(v, p.low), p.high)
}

// contains reports whether an observed value belongs to this param's range
// (upper bound included; an old trial of a narrower or wider space may hold
// values outside it, and those are not used).
func (p param) contains(v float64) bool {
	tol := 1e-9 * math.Max(1, math.Abs(p.high-p.low))
	if math.IsNaN(v) || v < p.low-tol || v > p.high+tol {
		return false
	}
	if p.categorical() {
		return v == math.Trunc(v)
	}
	return true
}

// same reports whether two values of this param are the same config value.
func (p param) same(a, b float64) bool {
	if p.discrete() {
		return math.Abs(a-b) < p.step/2
	}
	return a == b
}

// compatible reports whether an observation made under distribution d can
// be used for this param: same kind, same choices for categoricals.
func (p param) compatible(d interface{}) bool {
	if p.categorical() {
		return reflect.DeepEqual(p.dist, d)
	}
	return reflect.TypeOf(p.dist) == reflect.TypeOf(d)
}

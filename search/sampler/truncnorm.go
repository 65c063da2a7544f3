package sampler

import (
	"math"
	"math/rand/v2"
)

// Truncated normal helpers in standard units (z = (x-mu)/sigma), computed in
// log space so that kernels far from a candidate give finite log-densities
// instead of 0 and then -Inf or NaN.

var logSqrt2Pi = 0.5 * math.Log(2*math.Pi)

// ndtr is the standard normal CDF.
func ndtr(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// logNdtr is log ndtr(z), accurate in both tails: the right tail through
// log1p of the upper tail, the far left tail (z < -20, where ndtr has no
// more digits to give) through the asymptotic series of the Mills ratio.
func logNdtr(z float64) float64 {
	switch {
	case z > 0:
		return math.Log1p(-ndtr(-z))
	case z > -20:
		return math.Log(ndtr(z))
	}
	// ndtr(z) = phi(z)/|z| * (1 - 1/z^2 + 3/z^4 - 15/z^6 + 105/z^8 - ...);
	// for z <= -20 the next term is below 1e-13 relative.
	u := 1 / (z * z)
	series := 1 - u*(1-u*(3-u*(15-u*105)))
	return -0.5*z*z - logSqrt2Pi - math.Log(-z) + math.Log(series)
}

// logDiffExp is log(exp(a) - exp(b)) for a >= b.
func logDiffExp(a, b float64) float64 {
	if b == math.Inf(-1) {
		return a
	}
	if b >= a {
		return math.Inf(-1)
	}
	return a + math.Log(-math.Expm1(b-a))
}

// logGaussMass is log P(a <= Z <= b) for a standard normal Z, a <= b. Both
// tails are handled in the left tail by symmetry; the central case avoids
// the cancellation of 1 - (small) - (small).
func logGaussMass(a, b float64) float64 {
	switch {
	case b <= 0:
		return logDiffExp(logNdtr(b), logNdtr(a))
	case a > 0:
		return logDiffExp(logNdtr(-a), logNdtr(-b))
	}
	return math.Log1p(-ndtr(a) - ndtr(-b))
}

// truncNormLogPDF is the log-density at x of N(mu, sigma) truncated to
// [lo, hi]; -Inf outside.
func truncNormLogPDF(x, mu, sigma, lo, hi float64) float64 {
	if x < lo || x > hi {
		return math.Inf(-1)
	}
	z := (x - mu) / sigma
	return -0.5*z*z - logSqrt2Pi - math.Log(sigma) - logGaussMass((lo-mu)/sigma, (hi-mu)/sigma)
}

// discTruncNormLogPMF is the log-probability of the grid cell
// [x-step/2, x+step/2] under N(mu, sigma) truncated to [lo, hi] (lo and hi
// already include the half steps at the ends).
func discTruncNormLogPMF(x, step, mu, sigma, lo, hi float64) float64 {
	a, b := math.Max(x-step/2, lo), math.Min(x+step/2, hi)
	if a >= b {
		return math.Inf(-1)
	}
	return logGaussMass((a-mu)/sigma, (b-mu)/sigma) - logGaussMass((lo-mu)/sigma, (hi-mu)/sigma)
}

// sampleTruncNorm draws from N(mu, sigma) truncated to [lo, hi] by inverting
// the CDF. A kernel is always centred inside its range, so the interval
// holds a good share of the mass and the inversion is well conditioned; the
// result is clipped against rounding.
func sampleTruncNorm(rng *rand.Rand, mu, sigma, lo, hi float64) float64 {
	a, b := (lo-mu)/sigma, (hi-mu)/sigma
	flip := a > 0 // work in the left tail, where ndtr keeps its digits
	if flip {
		a, b = -b, -a
	}
	pa, pb := ndtr(a), ndtr(b)
	var z float64
	if pb > pa {
		u := pa + rng.Float64()*(pb-pa)
		z = -math.Sqrt2 * math.Erfcinv(2*u)
	} else {
		z = b // no mass left in float64: take the nearer end
	}
	z = math.Min(math.Max(z, a), b)
	if flip {
		z = -z
	}
	return math.Min(math.Max(mu+sigma*z, lo), hi)
}

// logSumExp is log(sum(exp(x))), -Inf for an empty or all -Inf x.
func logSumExp(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

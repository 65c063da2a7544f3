package objective

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals returns the send offsets of n requests of an open-loop level
// offered at rate requests per second, for (*client).openLoop: offsets[0]
// is 0 and the gap before each later request is drawn from a gamma
// distribution with shape burstiness and scale 1/(rate*burstiness), as
// `vllm bench serve --request-rate R --burstiness B` draws them. The mean
// gap is 1/rate whatever the burstiness; the gaps' coefficient of variation
// is 1/sqrt(burstiness): burstiness 1 is a Poisson process (exponential
// gaps), below 1 the arrivals come in bursts, above 1 they are more even.
//
// The schedule depends on (n, rate, burstiness, seed) alone: the same seed
// gives the same offsets on every machine (math/rand/v2's PCG). It returns
// an error for n < 0, a rate that is not positive and finite, or a
// burstiness that is not positive and finite.
func Arrivals(n int, rate, burstiness float64, seed uint64) ([]time.Duration, error) {
	switch {
	case n < 0:
		return nil, fmt.Errorf("arrivals: %d requests", n)
	case !(rate > 0) || math.IsInf(rate, 1):
		return nil, fmt.Errorf("arrivals: rate %g requests/s must be positive and finite", rate)
	case !(burstiness > 0) || math.IsInf(burstiness, 1):
		return nil, fmt.Errorf("arrivals: burstiness %g must be positive and finite", burstiness)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6f70656e6c6f6f70)) // "openloop"
	scale := 1 / (rate * burstiness)
	out := make([]time.Duration, n)
	t := 0.0 // seconds, summed in float64 so rounding does not accumulate
	for k := 1; k < n; k++ {
		var gap float64
		if burstiness == 1 {
			gap = rng.ExpFloat64() / rate
		} else {
			gap = gammaDraw(rng, burstiness) * scale
		}
		t += gap
		out[k] = time.Duration(t * float64(time.Second))
	}
	return out, nil
}

// gammaDraw draws from the gamma distribution of the given shape and scale
// 1 (Marsaglia and Tsang, "A simple method for generating gamma variables",
// 2000); a shape below 1 is boosted by one and scaled by U^(1/shape).
func gammaDraw(rng *rand.Rand, shape float64) float64 {
	if shape < 1 {
		u := rng.Float64()
		for u == 0 {
			u = rng.Float64()
		}
		return gammaDraw(rng, shape+1) * math.Pow(u, 1/shape)
	}
	d := shape - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if u < 1-0.0331*x*x*x*x {
			return d * v
		}
		if u > 0 && math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

package objective

import (
	"math"
	"sort"
)

// Percentile returns the q-th percentile (q in [0,100]) of sorted xs with
// numpy's default linear interpolation (Hyndman-Fan type 7), the definition
// sglang bench_serving and vLLM use. gonum's stat.Quantile has no type 7.
// It returns NaN for an empty sample.
func Percentile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if q <= 0 {
		return sorted[0]
	}
	if q >= 100 {
		return sorted[n-1]
	}
	h := q / 100 * float64(n-1)
	i := int(math.Floor(h))
	if i+1 >= n {
		return sorted[n-1]
	}
	return sorted[i] + (h-float64(i))*(sorted[i+1]-sorted[i])
}

// Summarize returns mean, p50, p90 and p99 of xs (which it sorts in place).
// An empty sample gives the zero Stats (JSON cannot carry NaN).
func Summarize(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	sort.Float64s(xs)
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return Stats{
		Mean: sum / float64(len(xs)),
		P50:  Percentile(xs, 50),
		P90:  Percentile(xs, 90),
		P99:  Percentile(xs, 99),
	}
}

// median of xs (copied, not modified); 0 for an empty sample.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	c := append([]float64(nil), xs...)
	sort.Float64s(c)
	return Percentile(c, 50)
}

// Get returns the named statistic: mean, p50, p90 or p99.
func (s Stats) Get(name string) (float64, bool) {
	switch name {
	case "mean":
		return s.Mean, true
	case "p50", "median":
		return s.P50, true
	case "p90":
		return s.P90, true
	case "p99":
		return s.P99, true
	}
	return 0, false
}

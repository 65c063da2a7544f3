package objective

import (
	"math"
	"slices"
	"testing"
	"time"
)

// gapStats returns the mean and coefficient of variation of the gaps
// between consecutive offsets, in seconds.
func gapStats(offs []time.Duration) (mean, cv float64) {
	var sum, sq float64
	n := float64(len(offs) - 1)
	for k := 1; k < len(offs); k++ {
		g := (offs[k] - offs[k-1]).Seconds()
		sum += g
		sq += g * g
	}
	mean = sum / n
	sd := math.Sqrt(sq/n - mean*mean)
	return mean, sd / mean
}

func TestArrivalsMeanAndBurstiness(t *testing.T) {
	const n = 40001 // 40,000 gaps: the sample mean is within ~1.5% at CV 2
	for _, tc := range []struct {
		name             string
		rate, burstiness float64
		wantCV           float64 // 1/sqrt(burstiness)
	}{
		// Poisson: exponential gaps, CV 1.
		{"poisson 20/s", 20, 1, 1},
		// Gamma shape 0.25: bursts, CV 2.
		{"bursty 20/s", 20, 0.25, 2},
		// Gamma shape 0.5 at another rate.
		{"bursty 3/s", 3, 0.5, math.Sqrt2},
		// Gamma shape 4: more regular than Poisson, CV 0.5.
		{"even 50/s", 50, 4, 0.5},
		// A large shape: nearly constant gaps.
		{"nearly constant 5/s", 5, 100, 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			offs, err := Arrivals(n, tc.rate, tc.burstiness, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(offs) != n || offs[0] != 0 {
				t.Fatalf("%d offsets, first %v; want %d, first 0", len(offs), offs[0], n)
			}
			if !slices.IsSorted(offs) {
				t.Fatal("offsets are not in order")
			}
			mean, cv := gapStats(offs)
			if want := 1 / tc.rate; math.Abs(mean-want)/want > 0.04 {
				t.Errorf("mean gap %.5f s, want %.5f s within 4%%", mean, want)
			}
			if math.Abs(cv-tc.wantCV)/tc.wantCV > 0.08 {
				t.Errorf("gap CV %.3f, want %.3f within 8%%", cv, tc.wantCV)
			}
		})
	}
}

func TestArrivalsDeterministic(t *testing.T) {
	a, _ := Arrivals(500, 10, 0.5, 42)
	b, _ := Arrivals(500, 10, 0.5, 42)
	c, _ := Arrivals(500, 10, 0.5, 43)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave two schedules")
	}
	if slices.Equal(a, c) {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
	// Pinned: a change of generator or algorithm changes stored studies.
	p, _ := Arrivals(3, 10, 1, 1)
	g, _ := Arrivals(3, 10, 2, 1)
	if want := []time.Duration{0, 133528211, 151931521}; !slices.Equal(p, want) {
		t.Errorf("poisson schedule %v, pinned %v", p, want)
	}
	if want := []time.Duration{0, 76280348, 197296135}; !slices.Equal(g, want) {
		t.Errorf("gamma schedule %v, pinned %v", g, want)
	}
}

func TestArrivalsRejects(t *testing.T) {
	for _, tc := range []struct {
		n       int
		rate, b float64
	}{
		{-1, 1, 1},
		{10, 0, 1},
		{10, -2, 1},
		{10, math.Inf(1), 1},
		{10, math.NaN(), 1},
		{10, 1, 0},
		{10, 1, math.NaN()},
		{10, 1, math.Inf(1)},
	} {
		if _, err := Arrivals(tc.n, tc.rate, tc.b, 1); err == nil {
			t.Errorf("Arrivals(%d, %g, %g) gave no error", tc.n, tc.rate, tc.b)
		}
	}
	if offs, err := Arrivals(0, 1, 1, 1); err != nil || len(offs) != 0 {
		t.Errorf("0 requests: %v, %v", offs, err)
	}
}

package objective

import (
	"errors"
	"strings"
	"testing"
)

// fakeRates is a server whose probes pass up to capacity req/s.
func fakeRates(capacity float64) probeRate {
	return func(rate float64, index int) (Point, error) {
		kept := rate <= capacity
		p := Point{Phase: PhaseRate, Rate: rate, Repeat: index, State: "passed", Requested: 64, Issued: 64, Completed: 64,
			OfferedRateS: rate, AchievedRateS: min(rate, capacity), KeptUp: &kept, TTFT: Stats{P99: 0.05}}
		if !kept {
			p.Behind = "achieved below offered"
		}
		return p, nil
	}
}

func TestSearchRate(t *testing.T) {
	tests := []struct {
		name     string
		rs       RateSearch
		capacity float64
		lo, hi   float64 // the best rate found lies in [lo, hi]
		probes   int     // at most
	}{
		{"doubles then bisects", RateSearch{Start: 1, Tolerance: 0.1}, 37, 33.7, 37, 11},
		{"first probe fails: halves", RateSearch{Start: 16, Tolerance: 0.1}, 5, 4.5, 5, 9},
		{"capped at max", RateSearch{Start: 4, Max: 20}, 1000, 20, 20, 4},
		{"nothing holds", RateSearch{Start: 1}, 0.001, 0, 0, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := tt.rs.WithDefaults()
			pts, err := searchRate(rs, fakeRates(tt.capacity), 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(pts) > tt.probes {
				t.Errorf("%d probes, want at most %d", len(pts), tt.probes)
			}
			v, ok, why := maxRate(ScoreSpec{Metric: MetricMaxRate}, &Result{Points: pts})
			if tt.lo == 0 {
				if ok || !strings.Contains(why, "no probed rate met the SLO") {
					t.Errorf("score %v %v %q, want none", v, ok, why)
				}
				return
			}
			if !ok || v < tt.lo || v > tt.hi {
				t.Errorf("max rate %.3g (%v, %s), want in [%g, %g]", v, ok, why, tt.lo, tt.hi)
			}
		})
	}
}

// The stored probes score under another SLO without relaunching: a
// tighter TTFT bound lowers the rate found.
func TestMaxRateRescore(t *testing.T) {
	var pts []Point
	for i, r := range []float64{10, 20, 40, 30} {
		kept := true
		pts = append(pts, Point{Phase: PhaseRate, Rate: r, Repeat: i + 1, State: "passed", Completed: 64, Issued: 64,
			KeptUp: &kept, TTFT: Stats{P99: r / 100}})
	}
	res := &Result{Points: pts}
	loose, ok, _ := maxRate(ScoreSpec{Metric: MetricMaxRate, SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 1}}}, res)
	tight, ok2, why := maxRate(ScoreSpec{Metric: MetricMaxRate, SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 0.25}}}, res)
	if !ok || !ok2 || loose != 40 || tight != 20 {
		t.Errorf("loose %v (%v), tight %v (%v, %s); want 40 and 20", loose, ok, tight, ok2, why)
	}
	if !strings.Contains(why, "30 req/s: ttft p99") {
		t.Errorf("reason %q does not say what stopped it", why)
	}
}

// A probe that fails at or below the floor (half the best rate so far)
// prunes the search.
func TestSearchRatePrunes(t *testing.T) {
	rs := RateSearch{Start: 8}.WithDefaults()
	pts, err := searchRate(rs, fakeRates(3), 10)
	if !errors.Is(err, ErrRatePruned) || len(pts) != 1 {
		t.Errorf("%d probes, err %v; want 1 and ErrRatePruned", len(pts), err)
	}
}

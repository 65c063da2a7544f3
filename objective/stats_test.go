package objective

import (
	"math"
	"testing"
)

func TestPercentileNumpyType7(t *testing.T) {
	oneToTen := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		// Values from numpy.percentile(range(1, 11), q).
		{"1..10 p50", oneToTen, 50, 5.5},
		{"1..10 p90", oneToTen, 90, 9.1},
		{"1..10 p99", oneToTen, 99, 9.91},
		{"1..10 p0", oneToTen, 0, 1},
		{"1..10 p100", oneToTen, 100, 10},
		{"1..10 p25", oneToTen, 25, 3.25},
		{"single", []float64{7}, 99, 7},
		{"two p50", []float64{1, 3}, 50, 2},
		{"two p99", []float64{1, 3}, 99, 2.98},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Percentile(tt.xs, tt.q)
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.q, got, tt.want)
			}
		})
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("empty sample: want NaN")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1})
	want := Stats{Mean: 5.5, P50: 5.5, P90: 9.1, P99: 9.91}
	if math.Abs(s.Mean-want.Mean)+math.Abs(s.P50-want.P50)+math.Abs(s.P90-want.P90)+math.Abs(s.P99-want.P99) > 1e-9 {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if (Summarize(nil) != Stats{}) {
		t.Error("empty: want zero Stats")
	}
}

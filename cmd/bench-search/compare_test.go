package main

import (
	"slices"
	"testing"
)

// The bootstrap interval of a median holds the median, stays within the
// data, collapses when every seed agrees and is wide when they disagree.
func TestMedianCI(t *testing.T) {
	spread := []float64{17, 31, 12, 12, 3, 1, 27, 3, 4, 31, 19, 24, 1, 10, 18, 17, 24, 8, 7, 31}
	for _, tt := range []struct {
		name    string
		xs      []float64
		minWide float64
		maxWide float64
	}{
		{"every seed agrees", []float64{9, 9, 9, 9, 9}, 0, 0},
		{"one seed", []float64{4}, 0, 0},
		{"20 seeds of the GLM study", spread, 5, 30},
	} {
		lo, hi := medianCI(tt.xs)
		m := median(tt.xs)
		if lo > m || hi < m || lo < slices.Min(tt.xs) || hi > slices.Max(tt.xs) {
			t.Errorf("%s: interval %g-%g, median %g, data %g-%g", tt.name, lo, hi, m, slices.Min(tt.xs), slices.Max(tt.xs))
		}
		if w := hi - lo; w < tt.minWide || w > tt.maxWide {
			t.Errorf("%s: interval %g-%g is %g wide, want %g-%g", tt.name, lo, hi, w, tt.minWide, tt.maxWide)
		}
		if lo2, hi2 := medianCI(tt.xs); lo2 != lo || hi2 != hi {
			t.Errorf("%s: a second call gave %g-%g, want the same %g-%g", tt.name, lo2, hi2, lo, hi)
		}
	}
	if lo, hi := medianCI(nil); lo != 0 || hi != 0 {
		t.Errorf("no seeds: %g-%g", lo, hi)
	}
}

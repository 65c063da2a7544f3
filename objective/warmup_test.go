package objective

import (
	"strings"
	"testing"
)

func TestMaxDecoding(t *testing.T) {
	rec := func(start, ttft, lat float64) RequestRecord {
		return RequestRecord{OK: true, OutputTokens: 8, StartS: start, TTFT: ttft, Latency: lat}
	}
	tests := []struct {
		name string
		recs []RequestRecord
		want int
	}{
		{"none", nil, 0},
		{"one", []RequestRecord{rec(0, 0.1, 1)}, 1},
		{"all together", []RequestRecord{rec(0, 0.1, 1), rec(0, 0.2, 1), rec(0.05, 0.1, 1), rec(0.1, 0.1, 1)}, 4},
		// Short requests: each ends before the next starts decoding, the
		// batch never held more than two (the make-demo cold C16 case).
		{"staggered short", []RequestRecord{rec(0, 0.1, 0.3), rec(0, 0.25, 0.5), rec(0, 0.45, 0.7), rec(0, 0.65, 0.9)}, 2},
		{"failed ones do not count", []RequestRecord{rec(0, 0.1, 1), {OK: false, StartS: 0, TTFT: 0.1, Latency: 1}}, 1},
	}
	for _, tc := range tests {
		if got := maxDecoding(tc.recs); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestFlagOutliers(t *testing.T) {
	pt := func(tokS, ttft float64) Point { return Point{OutputTokS: tokS, TTFT: Stats{P50: ttft}} }
	pts := []Point{pt(3713, 0.9), pt(19000, 0.4), pt(19500, 0.41)}
	flagOutliers(pts)
	if !strings.Contains(pts[0].Outlier, "3713.0 tok/s vs the repeats' median 19000.0") || pts[1].Outlier != "" || pts[2].Outlier != "" {
		t.Errorf("outliers %q %q %q", pts[0].Outlier, pts[1].Outlier, pts[2].Outlier)
	}
	pts = []Point{pt(100, 0.1), pt(104, 0.35), pt(98, 0.11)}
	flagOutliers(pts)
	if !strings.Contains(pts[1].Outlier, "TTFT p50 0.350 s") || pts[0].Outlier != "" {
		t.Errorf("TTFT outlier not flagged: %q", pts[1].Outlier)
	}
	two := []Point{pt(1, 1), pt(100, 1)}
	flagOutliers(two)
	if two[0].Outlier != "" {
		t.Error("two repeats have no majority to be an outlier against")
	}
}

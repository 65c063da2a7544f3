package objective

import (
	"context"
	"strings"
	"testing"
	"time"
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

// scriptLoop answers closed loop i with waves[i]: every request streams
// tokens tokens, its first after ttft(j) (j: the request's index), all
// starting together; the loop lasts dur.
type scriptLoop struct {
	calls int
	waves []scriptWave
}

type scriptWave struct {
	dur    time.Duration
	tokens int
	ttft   func(j int) float64
}

func (f *scriptLoop) ClosedLoop(_ context.Context, bodies [][]byte, _ int, _ time.Duration, _ bool) (LoopResult, error) {
	w := f.waves[min(f.calls, len(f.waves)-1)]
	f.calls++
	lr := LoopResult{Duration: w.dur}
	for j := range bodies {
		rec := RequestRecord{OK: true, TTFT: w.ttft(j), Latency: w.dur.Seconds(), OutputTokens: w.tokens, Chunks: w.tokens + 3}
		lr.Exchanges = append(lr.Exchanges, Exchange{Record: rec})
		lr.Issued++
		lr.Completed++
		lr.Tokens += w.tokens
	}
	return lr, nil
}

// TestFlagBelowWarmup: a single repeat far below its own warm-up (the
// first-time cost landed in the measured repeat: make demo's C16 read
// 3,715 tok/s with TTFT p99 0.46 s after a 0.12 s warm-up) or below a lower
// level is flagged, in its progress line and in the point AfterLevel sees;
// a repeat after a warm-up that paid the cost is not.
func TestFlagBelowWarmup(t *testing.T) {
	on, off := true, false
	const tok = 64
	flat := func(s float64) func(int) float64 { return func(int) float64 { return s } }
	firstWave := func(j int) float64 { // the first 16 wait for the cold step
		if j < 16 {
			return 0.45
		}
		return 0.01
	}
	c1 := scriptWave{100 * time.Millisecond, tok, flat(0.009)}
	tests := []struct {
		name   string
		warmup *bool
		waves  []scriptWave // C1 warm-up, C1 r1, C16 warm-up, C16 r1 (no warm-ups when off)
		want   []string     // substrings of C16 r1's Outlier; none: not flagged
	}{
		{"cold repeat after a warm warm-up", &on, []scriptWave{c1, c1,
			{120 * time.Millisecond, tok, flat(0.012)}, {550 * time.Millisecond, tok, firstWave}},
			[]string{"3723.6 tok/s < 0.50 x its warm-up's 8533.3", "TTFT p99 0.450 s > 3 x its warm-up's 0.012 s"}},
		{"warm-up paid, repeat warm", &on, []scriptWave{c1, c1,
			{550 * time.Millisecond, tok, flat(0.45)}, {120 * time.Millisecond, tok, flat(0.012)}}, nil},
		{"below a lower level", &off, []scriptWave{{25 * time.Millisecond, tok, flat(0.009)}, {550 * time.Millisecond, tok, flat(0.012)}},
			[]string{"3723.6 tok/s < 0.50 x C1's 10240.0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// C64 (the last level, after which AfterLevel is not called)
			// repeats the last wave.
			w := Workload{Kind: "chat", Chat: ChatSpec{Concurrency: []int{1, 16, 64}, Requests: []int{4, 32, 64}, MaxTokens: tok, Repeats: 1, Warmup: tc.warmup}}
			var lines []string
			seen := map[int][]Point{}
			opt := Options{
				Progress:   func(l string) { lines = append(lines, l) },
				AfterLevel: func(c int, pts []Point) error { seen[c] = append(seen[c], pts...); return nil },
			}
			res, err := RunLoop(context.Background(), &scriptLoop{waves: tc.waves}, "m", w, opt)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Points) != 3 || len(seen[16]) != 1 {
				t.Fatalf("%d points, AfterLevel saw %d at C16", len(res.Points), len(seen[16]))
			}
			p := res.Points[1]
			if res.Points[0].Outlier != "" {
				t.Errorf("C1 flagged: %s", res.Points[0].Outlier)
			}
			if seen[16][0].Outlier != p.Outlier {
				t.Errorf("AfterLevel saw %q, the result has %q", seen[16][0].Outlier, p.Outlier)
			}
			last := ""
			for _, l := range lines {
				if strings.HasPrefix(l, "c=16 r=1/1") {
					last = l
				}
			}
			if len(tc.want) == 0 {
				if p.Outlier != "" || strings.Contains(last, "FLAGGED") {
					t.Errorf("flagged: %q (%s)", p.Outlier, last)
				}
				return
			}
			for _, s := range tc.want {
				if !strings.Contains(p.Outlier, s) {
					t.Errorf("outlier %q lacks %q", p.Outlier, s)
				}
			}
			if !strings.Contains(last, "FLAGGED: "+p.Outlier) {
				t.Errorf("progress line %q does not say it is flagged", last)
			}
		})
	}
}

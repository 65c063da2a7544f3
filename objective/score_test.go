package objective

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/objective/fakesse"
)

// sweep builds a result with 3 passed repeats at each level; tokS and
// ttftP99 give the per-level values of the three repeats.
func sweep(levels map[int][3][2]float64) *Result {
	r := &Result{}
	for c, reps := range levels {
		for i, v := range reps {
			p := Point{Concurrency: c, Repeat: i + 1, State: "passed", Requested: 4, Issued: 4, Completed: 4,
				OutputTokS: v[0], DurationS: 10, TTFT: Stats{P50: v[1] / 2, P99: v[1]}, Latency: Stats{P99: 5}, ITL: Stats{P99: 0.02}}
			r.Points = append(r.Points, p)
			for k := range 4 {
				r.Requests = append(r.Requests, RequestRecord{Concurrency: c, Repeat: i + 1, OK: true,
					TTFT: v[1] * float64(k+1) / 4, Latency: 5, ITLMean: 0.01, OutputTokens: int(v[0] * 10 / 4)})
			}
		}
	}
	return r
}

// threeLevels is a sweep at concurrency 1, 16 and 64: median tok/s 51,
// 510 and 1550, median TTFT p99 0.1, 0.6 and 1.8 s.
func threeLevels() *Result {
	return sweep(map[int][3][2]float64{
		1:  {{50, 0.1}, {52, 0.1}, {51, 0.2}},
		16: {{500, 0.5}, {520, 0.6}, {510, 0.7}},
		64: {{1500, 1.5}, {1600, 2.5}, {1550, 1.8}},
	})
}

func TestScore(t *testing.T) {
	base := threeLevels()
	failedGate := *base
	failedGate.Quality = &Quality{Before: &QualityCheck{Pass: true}, After: &QualityCheck{Pass: false, Summary: QualitySummary{JSON: "12/24", Tool: "0/8"}}}
	failedLevel := sweep(map[int][3][2]float64{16: {{500, 0.5}, {520, 0.6}, {510, 0.7}}})
	failedLevel.Points[1].State = "failed"
	ttft2 := []SLO{{Metric: "ttft", Percentile: "p99", Max: 2}}
	tests := []struct {
		name      string
		spec      ScoreSpec
		r         *Result
		want      float64
		ok        bool
		reasonHas string
	}{
		{"default metric at highest level", ScoreSpec{}, base, 1550, true, "c=64"},
		{"output_tok_s at c16", ScoreSpec{Metric: "output_tok_s", Concurrency: 16}, base, 510, true, "median of 3"},
		{"slo holds at c64 (median p99 1.8)", ScoreSpec{Concurrency: 64, SLO: ttft2}, base, 1550, true, ""},
		{"slo fails at c64", ScoreSpec{Concurrency: 64, SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 1.6}}}, base, 1550, false, "ttft p99 1.800 s > 1.600 s"},
		{"slo on p50", ScoreSpec{Concurrency: 64, SLO: []SLO{{Metric: "ttft", Percentile: "p50", Max: 0.5}}}, base, 1550, false, "ttft p50"},
		{"itl slo", ScoreSpec{Concurrency: 16, SLO: []SLO{{Metric: "itl", Percentile: "p99", Max: 0.01}}}, base, 510, false, "itl p99"},
		{"latency slo holds", ScoreSpec{Concurrency: 16, SLO: []SLO{{Metric: "latency", Percentile: "p99", Max: 6}}}, base, 510, true, ""},
		{"missing level", ScoreSpec{Concurrency: 128}, base, 0, false, "no point at concurrency 128"},
		{"gate failed", ScoreSpec{}, &failedGate, 0, false, "quality gate failed after"},
		{"failed repeat", ScoreSpec{Concurrency: 16}, failedLevel, 0, false, "repeat 2 failed"},
		{"capacity with slo", ScoreSpec{Metric: "capacity", SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 1}}}, base, 16, true, "capacity c=16 at 510.0 tok/s"},
		{"capacity no slo", ScoreSpec{Metric: "capacity"}, base, 64, true, "c=64"},
		{"capacity none", ScoreSpec{Metric: "capacity", SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 0.05}}}, base, 0, false, "no concurrency meets"},
		// c=64 TTFTs by repeat: .375/.75/1.125/1.5, .625/1.25/1.875/2.5, .45/.9/1.35/1.8;
		// within 1 s: 2, 1, 2 requests of 3750, 4000, 3875 tokens over 10 s.
		{"goodput", ScoreSpec{Metric: "goodput", Concurrency: 64, SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 1}}}, base, 750, true, "goodput"},
		{"goodput all good", ScoreSpec{Metric: "goodput", Concurrency: 64, SLO: []SLO{{Metric: "ttft", Percentile: "p99", Max: 3}}}, base, 1550, true, "goodput"},
		{"goodput without records", ScoreSpec{Metric: "goodput", Concurrency: 64}, &Result{Points: base.Points}, 0, false, "per-request records"},
		{"bad metric", ScoreSpec{Metric: "joy"}, base, 0, false, "metric"},
		{"bad percentile", ScoreSpec{SLO: []SLO{{Metric: "ttft", Percentile: "p95", Max: 1}}}, base, 0, false, "percentile"},
		{"no points", ScoreSpec{}, &Result{}, 0, false, "no measured points"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok, reason := Score(tt.spec, tt.r)
			if ok != tt.ok || math.Abs(v-tt.want) > 1e-9 || !strings.Contains(reason, tt.reasonHas) {
				t.Errorf("Score = (%v, %v, %q), want (%v, %v, ~%q)", v, ok, reason, tt.want, tt.ok, tt.reasonHas)
			}
		})
	}
}

// TestSLOSlack: the slack read from a run's medians is at most 0 exactly
// when Score finds the SLOs held, and measures the worst SLO's distance
// from its bound.
func TestSLOSlack(t *testing.T) {
	base := threeLevels()
	ttft := func(max float64) []SLO { return []SLO{{Metric: "ttft", Percentile: "p99", Max: max}} }
	tests := []struct {
		name string
		spec ScoreSpec
		r    *Result
		want float64
		ok   bool
	}{
		{"holds: median p99 1.8 under 2", ScoreSpec{Concurrency: 64, SLO: ttft(2)}, base, math.Log(0.9), true},
		{"missed: 1.8 over 1.2", ScoreSpec{Concurrency: 64, SLO: ttft(1.2)}, base, math.Log(1.5), true},
		{"on the bound", ScoreSpec{Concurrency: 64, SLO: ttft(1.8)}, base, 0, true},
		{"the worst SLO counts", ScoreSpec{Concurrency: 16, SLO: []SLO{
			{Metric: "ttft", Percentile: "p99", Max: 1.2}, {Metric: "itl", Percentile: "p99", Max: 0.01}}}, base, math.Log(2), true},
		{"p50", ScoreSpec{Concurrency: 64, SLO: []SLO{{Metric: "ttft", Percentile: "p50", Max: 0.45}}}, base, math.Log(2), true},
		{"latency", ScoreSpec{Concurrency: 16, SLO: []SLO{{Metric: "latency", Percentile: "p99", Max: 10}}}, base, math.Log(0.5), true},
		{"highest level by default", ScoreSpec{SLO: ttft(3.6)}, base, math.Log(0.5), true},
		{"no SLO", ScoreSpec{Concurrency: 64}, base, 0, false},
		{"goodput judges per request", ScoreSpec{Metric: "goodput", Concurrency: 64, SLO: ttft(2)}, base, 0, false},
		{"missing level", ScoreSpec{Concurrency: 128, SLO: ttft(2)}, base, 0, false},
		{"a percentile the medians do not keep", ScoreSpec{Concurrency: 64, SLO: []SLO{{Metric: "ttft", Percentile: "p90", Max: 2}}}, base, 0, false},
		{"nothing measured", ScoreSpec{Concurrency: 64, SLO: ttft(2)}, &Result{}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := SLOSlack(tt.spec, Medians(tt.r.Points))
			if ok != tt.ok || math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("SLOSlack = (%v, %v), want (%v, %v)", got, ok, tt.want, tt.ok)
			}
			if _, met, _ := Score(tt.spec, tt.r); ok && met != (got <= 0) {
				t.Errorf("slack %v but Score says met=%v", got, met)
			}
		})
	}
}

// TestCapacitySearch: a server that runs 8 streams at once makes later
// requests wait a whole stream (>= 120 ms); the bisection between the
// measured 4 (passes) and 16 (fails) finds 8.
func TestCapacitySearch(t *testing.T) {
	srv := &fakesse.Server{RunLimit: 8, TokenInterval: 10 * time.Millisecond}
	slo := []SLO{{Metric: "ttft", Percentile: "p99", Max: 0.06}}
	w := Workload{Chat: ChatSpec{Concurrency: []int{4, 16}, Requests: []int{4, 16}, MaxTokens: 12, Repeats: 1, Warmup: boolp(false),
		CapacitySearch: &CapacitySearch{SLO: slo, MaxProbes: 4}}}
	var lines []string
	res, err := Run(context.Background(), fake(t, srv), w, Options{Progress: func(l string) { lines = append(lines, l) }})
	if err != nil {
		t.Fatal(err)
	}
	var probes []int
	for _, p := range res.Points {
		if p.Phase == PhaseCapacity {
			probes = append(probes, p.Concurrency)
		}
	}
	// 4 ok / 16 bad -> 10 bad -> 7 ok -> 8 ok -> 9 bad.
	if want := []int{10, 7, 8, 9}; !slices.Equal(probes, want) {
		t.Errorf("probes %v, want %v\n%s", probes, want, strings.Join(lines, "\n"))
	}
	if v, ok, why := Score(ScoreSpec{Metric: MetricCapacity, SLO: slo}, res); !ok || v != 8 {
		t.Errorf("capacity = %v %v %s, want 8", v, ok, why)
	}
	if len(res.Medians) != 2 {
		t.Errorf("medians %v: probes must not be in them", res.Medians)
	}
}

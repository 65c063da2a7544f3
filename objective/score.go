package objective

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Score metrics.
const (
	MetricOutputTokS = "output_tok_s"
	MetricGoodput    = "goodput"
	MetricCapacity   = "capacity"
)

// Score computes the study's score from stored points (and, for goodput,
// stored request records), so a study can be rescored without relaunching.
// ok is false when the SLO or a gate is not met; reason says why. value is
// still the measured number when ok is false, for display.
//
//   - output_tok_s: median over repeats of output tok/s at the target
//     concurrency; the SLOs must hold there.
//   - goodput: median over repeats of tok/s counting only requests whose own
//     TTFT, latency and mean ITL are within every SLO bound.
//   - capacity: the highest measured concurrency whose points all passed
//     and whose SLOs hold; reason carries its tok/s.
//
// An SLO holds at a level when the median over repeats of the named
// statistic of its points is at most Max.
func Score(spec ScoreSpec, r *Result) (value float64, ok bool, reason string) {
	if r == nil {
		return 0, false, "no result"
	}
	if err := spec.Validate(); err != nil {
		return 0, false, err.Error()
	}
	if r.Quality != nil {
		for _, g := range []struct {
			when string
			c    *QualityCheck
		}{{"before", r.Quality.Before}, {"after", r.Quality.After}} {
			if g.c != nil && !g.c.Pass {
				return 0, false, fmt.Sprintf("quality gate failed %s the sweep: json %s, tool %s", g.when, g.c.Summary.JSON, g.c.Summary.Tool)
			}
		}
	}
	if spec.Metric == MetricMaxRate {
		return maxRate(spec, r)
	}
	levels, ctxLen := scoredLevels(r, spec.Context)
	if len(levels) == 0 {
		return 0, false, "no measured points"
	}
	switch spec.Metric {
	case MetricCapacity:
		conc, tokS, ok, why := capacity(spec, withProbes(levels, r))
		if !ok {
			return 0, false, why
		}
		return float64(conc), true, fmt.Sprintf("capacity c=%d at %.1f tok/s", conc, tokS)
	}
	target := scoredLevel(spec, levels)
	pts, found := levels[target]
	if !found {
		return 0, false, fmt.Sprintf("no point at concurrency %d", target)
	}
	if bad := failedPoints(pts); bad != "" {
		return 0, false, fmt.Sprintf("concurrency %d: %s", target, bad)
	}
	switch spec.Metric {
	case "", MetricOutputTokS:
		v := medianOf(pts, func(p Point) float64 { return p.OutputTokS })
		if why := sloViolation(spec.SLO, pts); why != "" {
			return v, false, fmt.Sprintf("concurrency %d: %s", target, why)
		}
		return v, true, fmt.Sprintf("%.1f output tok/s at c=%d (median of %d)", v, target, len(pts))
	case MetricGoodput:
		v, n, why := goodput(spec.SLO, pts, r.Requests, target, ctxLen)
		if why != "" {
			return 0, false, why
		}
		return v, true, fmt.Sprintf("goodput %.1f tok/s at c=%d (median of %d repeats)", v, target, n)
	}
	return 0, false, fmt.Sprintf("unknown metric %q", spec.Metric)
}

// Validate reports a score spec Score cannot use.
func (s ScoreSpec) Validate() error {
	switch s.Metric {
	case "", MetricOutputTokS, MetricGoodput, MetricCapacity, MetricMaxRate:
	default:
		return fmt.Errorf("score: metric %q: want output_tok_s, goodput, capacity or max_rate", s.Metric)
	}
	if s.Concurrency < 0 {
		return fmt.Errorf("score: concurrency %d < 0", s.Concurrency)
	}
	for _, o := range s.SLO {
		switch o.Metric {
		case "ttft", "latency", "itl":
		default:
			return fmt.Errorf("score: slo metric %q: want ttft, latency or itl", o.Metric)
		}
		if _, ok := (Stats{}).Get(o.Percentile); !ok {
			return fmt.Errorf("score: slo percentile %q: want mean, p50, p90 or p99", o.Percentile)
		}
		if o.Max <= 0 {
			return fmt.Errorf("score: slo %s %s: max_s must be > 0", o.Metric, o.Percentile)
		}
	}
	return nil
}

// scoredLevels groups the scored points by concurrency: measured chat
// points, or the matrix decode cells of one context (0 = smallest).
func scoredLevels(r *Result, ctxLen int) (map[int][]Point, int) {
	out := map[int][]Point{}
	if ctxLen == 0 {
		for _, p := range r.Points {
			if p.Phase == PhaseDecode && p.Status != StatusOverCapacity && p.Status != StatusNotRun && (ctxLen == 0 || p.Context < ctxLen) {
				ctxLen = p.Context
			}
		}
	}
	for _, p := range r.Points {
		switch p.Phase {
		case "":
		case PhaseDecode:
			if p.Context != ctxLen || p.Status == StatusOverCapacity || p.Status == StatusNotRun {
				continue
			}
		default:
			continue
		}
		out[p.Concurrency] = append(out[p.Concurrency], p)
	}
	return out, ctxLen
}

// failedPoints says which points of a level did not pass ("" if all did).
func failedPoints(pts []Point) string {
	var bad []string
	for _, p := range pts {
		if p.State != "passed" {
			bad = append(bad, fmt.Sprintf("repeat %d %s (%d/%d completed)", p.Repeat, p.State, p.Completed, p.Requested))
		} else if p.Status == StatusQueued {
			bad = append(bad, fmt.Sprintf("repeat %d: requests queued", p.Repeat))
		}
	}
	return strings.Join(bad, ", ")
}

func medianOf(pts []Point, f func(Point) float64) float64 {
	xs := make([]float64, len(pts))
	for i, p := range pts {
		xs[i] = f(p)
	}
	return median(xs)
}

func pointStats(p Point, metric string) Stats {
	switch metric {
	case "ttft":
		return p.TTFT
	case "latency":
		return p.Latency
	}
	return p.ITL
}

// sloViolation returns "" when every SLO holds for pts, else why not.
func sloViolation(slos []SLO, pts []Point) string {
	var bad []string
	for _, o := range slos {
		v := medianOf(pts, func(p Point) float64 { x, _ := pointStats(p, o.Metric).Get(o.Percentile); return x })
		if v > o.Max {
			bad = append(bad, fmt.Sprintf("%s %s %.3f s > %.3f s", o.Metric, o.Percentile, v, o.Max))
		}
	}
	return strings.Join(bad, ", ")
}

// scoredLevel is the concurrency an output_tok_s score is read at: the
// spec's, else the highest level measured.
func scoredLevel[V any](spec ScoreSpec, levels map[int]V) int {
	if spec.Concurrency > 0 {
		return spec.Concurrency
	}
	target := 0
	for c := range levels {
		target = max(target, c)
	}
	return target
}

// SLOSlack is how far an output_tok_s score's SLOs are from their
// bounds at the scored level, read from a run's stored medians (Medians):
// the largest over the SLOs of log(v / max_s), v the median over repeats
// of the named percentile, the statistic Score judges. It is at most 0
// exactly when every SLO holds there. ok is false when there is nothing to
// judge: no SLO, another metric (goodput, capacity and max_rate judge the
// SLO per request or per level), no passed repeat at the scored level, or
// a percentile the medians do not keep (they keep p50 and p99).
func SLOSlack(spec ScoreSpec, meds map[int]Median) (slack float64, ok bool) {
	if !spec.HasSlack() || spec.Validate() != nil {
		return 0, false
	}
	m, found := meds[scoredLevel(spec, meds)]
	if !found || m.Repeats == 0 {
		return 0, false
	}
	slack = math.Inf(-1)
	for _, o := range spec.SLO {
		v, kept := m.stat(o.Metric, o.Percentile)
		if !kept || !(v > 0) {
			return 0, false
		}
		slack = math.Max(slack, math.Log(v/o.Max))
	}
	return slack, true
}

// HasSlack reports whether the score has SLOs of its own that SLOSlack
// reads: output tok/s with SLOs (goodput, capacity and max_rate judge the
// SLO per request or per level). Such a score is a run's tok/s where the
// SLOs hold, and a run that misses them keeps its tok/s (Score).
func (s ScoreSpec) HasSlack() bool {
	return len(s.SLO) > 0 && (s.Metric == "" || s.Metric == MetricOutputTokS)
}

// stat is the median over repeats of an SLO's statistic (false for a
// percentile the medians do not keep).
func (m Median) stat(metric, percentile string) (float64, bool) {
	var p50, p99 float64
	switch metric {
	case "ttft":
		p50, p99 = m.TTFTP50, m.TTFTP99
	case "latency":
		p50, p99 = m.LatencyP50, m.LatencyP99
	case "itl":
		p50, p99 = m.ITLP50, m.ITLP99
	default:
		return 0, false
	}
	switch percentile {
	case "p50":
		return p50, true
	case "p99":
		return p99, true
	}
	return 0, false
}

// capacity finds the highest level whose points passed and SLOs hold.
func capacity(spec ScoreSpec, levels map[int][]Point) (conc int, tokS float64, ok bool, why string) {
	var reasons []string
	for _, c := range slices.Sorted(maps.Keys(levels)) {
		pts := levels[c]
		if bad := failedPoints(pts); bad != "" {
			reasons = append(reasons, fmt.Sprintf("c=%d: %s", c, bad))
			continue
		}
		if v := sloViolation(spec.SLO, pts); v != "" {
			reasons = append(reasons, fmt.Sprintf("c=%d: %s", c, v))
			continue
		}
		conc, tokS, ok = c, medianOf(pts, func(p Point) float64 { return p.OutputTokS }), true
	}
	if !ok {
		return 0, 0, false, "no concurrency meets the SLO: " + strings.Join(reasons, "; ")
	}
	return conc, tokS, true, ""
}

// Capacity returns the highest measured concurrency of r whose points all
// passed and whose SLOs hold, with its median output tok/s.
func Capacity(spec ScoreSpec, r *Result) (conc int, tokS float64, ok bool) {
	levels, _ := scoredLevels(r, spec.Context)
	conc, tokS, ok, _ = capacity(spec, withProbes(levels, r))
	return conc, tokS, ok
}

// meetsSLO reports whether one request is within every SLO bound, using
// its own TTFT, latency and mean ITL.
func meetsSLO(slos []SLO, rec RequestRecord) bool {
	if !rec.OK {
		return false
	}
	for _, o := range slos {
		v := rec.ITLMean
		switch o.Metric {
		case "ttft":
			v = rec.TTFT
		case "latency":
			v = rec.Latency
		}
		if v > o.Max {
			return false
		}
	}
	return true
}

// goodput is the median over repeats at conc of the tokens of requests
// meeting the SLO per second of the point's duration.
func goodput(slos []SLO, pts []Point, recs []RequestRecord, conc, ctxLen int) (float64, int, string) {
	phase := ""
	if len(pts) > 0 {
		phase = pts[0].Phase
	}
	good := map[int]float64{}
	seen := map[int]bool{}
	for _, rec := range recs {
		if rec.Phase != phase || rec.Concurrency != conc || (phase == PhaseDecode && rec.Context != ctxLen) {
			continue
		}
		seen[rec.Repeat] = true
		if meetsSLO(slos, rec) {
			good[rec.Repeat] += float64(rec.OutputTokens)
		}
	}
	var xs []float64
	for _, p := range pts {
		if !seen[p.Repeat] {
			return 0, 0, fmt.Sprintf("goodput needs per-request records; none stored for c=%d repeat %d", conc, p.Repeat)
		}
		if p.DurationS > 0 {
			xs = append(xs, good[p.Repeat]/p.DurationS)
		}
	}
	if len(xs) == 0 {
		return 0, 0, fmt.Sprintf("no measured repeat at c=%d", conc)
	}
	return median(xs), len(xs), ""
}

// withProbes adds the capacity-search probes to the measured levels.
func withProbes(levels map[int][]Point, r *Result) map[int][]Point {
	out := map[int][]Point{}
	for c, pts := range levels {
		out[c] = pts
	}
	for _, p := range r.Points {
		if p.Phase == PhaseCapacity {
			out[p.Concurrency] = append(out[p.Concurrency], p)
		}
	}
	return out
}

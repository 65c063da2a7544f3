package objective

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// MetricMaxRate scores the highest request rate a config serves with
// every SLO holding and the server keeping up (RateSearch).
const MetricMaxRate = "max_rate"

// Arrival processes of the rate search's probes.
const (
	ArrivalPoisson = "poisson"
	ArrivalGamma   = "gamma"
	ArrivalTrace   = "trace"
)

// PhaseRate marks the open-loop probes of the rate search.
const PhaseRate = "rate"

// RateSearch finds, per config, the highest request rate at which every
// SLO holds and the server keeps up (workload.chat.rate_search, scored by
// score.metric max_rate): open-loop probes of Requests requests each,
// sent at Poisson (or gamma) arrivals, the rate doubling from Start until a
// probe fails, then bisected between the last good and the first failed
// rate until they are within Tolerance of each other. A failed first
// probe halves the rate instead, down to Start/64. GuideLLM's goodput
// profile does the same with concurrency.
type RateSearch struct {
	Start     float64 `yaml:"start" json:"start"`         // requests/s of the first probe (default 1)
	Max       float64 `yaml:"max" json:"max"`             // highest rate probed (default 1024)
	Requests  int     `yaml:"requests" json:"requests"`   // requests per probe (default 64)
	Tolerance float64 `yaml:"tolerance" json:"tolerance"` // relative width the bisection stops at (default 0.1)
	// Arrival: poisson (default), gamma (with Burstiness), or trace: the
	// source dataset's own timestamps (a trace) replayed in order, sped
	// up or slowed down to each probe's rate, so that the search finds
	// the highest speed factor within the SLO.
	Arrival    string  `yaml:"arrival" json:"arrival"`
	Burstiness float64 `yaml:"burstiness" json:"burstiness"` // gamma's shape: 1 is Poisson, < 1 burstier (default 1)
	MaxProbes  int     `yaml:"max_probes" json:"max_probes"` // bound on the probes (default 16)
	// SLO holds at a probe when every bound does on that probe's own
	// requests; the study's score.slo.
	SLO []SLO `yaml:"slo" json:"slo"`
}

// WithDefaults fills the zero fields.
func (r RateSearch) WithDefaults() RateSearch {
	if r.Start <= 0 {
		r.Start = 1
	}
	if r.Max <= 0 {
		r.Max = 1024
	}
	if r.Requests <= 0 {
		r.Requests = 64
	}
	if r.Tolerance <= 0 {
		r.Tolerance = 0.1
	}
	if r.Arrival == "" {
		r.Arrival = "poisson"
	}
	if r.Burstiness <= 0 || r.Arrival != ArrivalGamma {
		r.Burstiness = 1
	}
	if r.MaxProbes <= 0 {
		r.MaxProbes = 16
	}
	return r
}

// Check says what is wrong with r (after WithDefaults), "" when nothing.
func (r RateSearch) Check() string {
	switch {
	case r.Arrival != ArrivalPoisson && r.Arrival != ArrivalGamma && r.Arrival != ArrivalTrace:
		return fmt.Sprintf("arrival %q (poisson, gamma or trace)", r.Arrival)
	case r.Max < r.Start:
		return fmt.Sprintf("max %g below start %g", r.Max, r.Start)
	case r.Requests < 8:
		return fmt.Sprintf("requests %d; valid: at least 8 per probe (a p99 of fewer is its maximum)", r.Requests)
	case r.Tolerance >= 1:
		return fmt.Sprintf("tolerance %g; valid: a fraction below 1", r.Tolerance)
	}
	return ""
}

// rateGood reports whether a rate probe met the search's bar: every
// request completed, the server kept up with the schedule, and every SLO
// holds; why says what failed.
func rateGood(p Point, slo []SLO) (ok bool, why string) {
	switch {
	case p.State != "passed":
		return false, fmt.Sprintf("probe %s", p.State)
	case p.Failed > 0:
		return false, fmt.Sprintf("%d of %d requests failed", p.Failed, p.Issued)
	case p.KeptUp != nil && !*p.KeptUp:
		return false, "fell behind: " + p.Behind
	}
	if v := sloViolation(slo, []Point{p}); v != "" {
		return false, v
	}
	return true, ""
}

// probeRate is one open-loop probe at rate; index numbers the probes.
type probeRate func(rate float64, index int) (Point, error)

// searchRate runs the doubling-then-bisecting search with probe and
// returns the probes in the order run. floor, when > 0, prunes: a probe at
// or below it that fails ends the search with ErrRatePruned (the config
// cannot reach half the best rate found so far).
func searchRate(rs RateSearch, probe probeRate, floor float64) ([]Point, error) {
	var pts []Point
	run := func(rate float64) (bool, error) {
		p, err := probe(rate, len(pts)+1)
		pts = append(pts, p)
		if err != nil {
			return false, err
		}
		ok, _ := rateGood(p, rs.SLO)
		if !ok && floor > 0 && rate <= floor {
			return false, fmt.Errorf("%w: %.3g req/s failed, at most half the best rate so far (%.3g)", ErrRatePruned, rate, 2*floor)
		}
		return ok, nil
	}
	lo, hi := 0.0, 0.0
	rate := rs.Start
	for len(pts) < rs.MaxProbes {
		ok, err := run(rate)
		if err != nil {
			return pts, err
		}
		if ok {
			lo = rate
			if hi > 0 || rate >= rs.Max {
				break
			}
			rate = min(rate*2, rs.Max)
			continue
		}
		hi = rate
		if lo > 0 {
			break
		}
		if rate <= rs.Start/64 {
			return pts, nil // nothing holds: the score says so
		}
		rate /= 2
	}
	for lo > 0 && hi > 0 && (hi-lo)/lo > rs.Tolerance && len(pts) < rs.MaxProbes {
		mid := math.Sqrt(lo * hi) // rates spread over orders of magnitude
		ok, err := run(mid)
		if err != nil {
			return pts, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return pts, nil
}

// ErrRatePruned ends a rate search that failed at or below half the best
// rate so far (Options.RateFloor): the config cannot come near the best.
var ErrRatePruned = errors.New("rate search pruned")

// maxRate scores the rate probes of r under spec's SLO: the highest rate
// whose probe was good, with what stopped it going higher.
func maxRate(spec ScoreSpec, r *Result) (value float64, ok bool, reason string) {
	var probes []Point
	for _, p := range r.Points {
		if p.Phase == PhaseRate {
			probes = append(probes, p)
		}
	}
	if len(probes) == 0 {
		return 0, false, "no rate probes (workload.chat.rate_search)"
	}
	slices.SortStableFunc(probes, func(a, b Point) int { return cmp.Compare(a.Rate, b.Rate) })
	best, bestIdx := 0.0, -1
	for i, p := range probes {
		if good, _ := rateGood(p, spec.SLO); good && p.Rate > best {
			best, bestIdx = p.Rate, i
		}
	}
	// The lowest failed probe above the best says what stopped the search.
	stop := ""
	for _, p := range probes {
		if p.Rate > best {
			if good, why := rateGood(p, spec.SLO); !good {
				stop = fmt.Sprintf("; %.3g req/s: %s", p.Rate, why)
				break
			}
		}
	}
	if bestIdx < 0 {
		_, why := rateGood(probes[0], spec.SLO)
		return 0, false, fmt.Sprintf("no probed rate met the SLO (lowest %.3g req/s: %s)", probes[0].Rate, why)
	}
	b := probes[bestIdx]
	return best, true, fmt.Sprintf("max rate %.3g req/s within the SLO (achieved %.3g req/s, TTFT p99 %.3f s)%s", best, b.AchievedRateS, b.TTFT.P99, stop)
}

// rateProgress is the progress line of a rate probe.
func rateProgress(p Point, slo []SLO) string {
	verdict := "ok"
	if good, why := rateGood(p, slo); !good {
		verdict = "FAILS: " + why
	}
	return fmt.Sprintf("rate %.3g req/s (probe %d): %d/%d ok, achieved %.3g req/s, TTFT p50 %.3f s p99 %.3f s, latency p99 %.2f s, max in flight %d; %s",
		p.Rate, p.Repeat, p.Completed, p.Requested, p.AchievedRateS, p.TTFT.P50, p.TTFT.P99, p.Latency.P99, p.MaxInFlight, verdict)
}

// exactRate rescales a schedule so that its offered rate, (n - 1) /
// span, is rate: a probe of a hundred Poisson arrivals otherwise offers
// its nominal rate give or take a tenth, and the search would bisect on
// the draws' luck. The gaps keep their shape (burstiness).
func exactRate(offsets []time.Duration, rate float64) {
	n := len(offsets)
	if n < 2 {
		return
	}
	span := (offsets[n-1] - offsets[0]).Seconds()
	if span <= 0 {
		return
	}
	f := float64(n-1) / rate / span
	for i := range offsets {
		offsets[i] = time.Duration(float64(offsets[i]-offsets[0]) * f)
	}
}

// rateSeed is the seed of a probe's arrival schedule: fixed per rate, so
// every config is probed with the same schedule at the same rate.
func rateSeed(seed uint64, rate float64) uint64 {
	return seed ^ math.Float64bits(rate)
}

// runRateSearch is the chat workload's rate search: probes sent open-loop
// with bodies from synth, each warmed up like a level is.
// reuse, when set, is called after synth and gives the share of its
// prompts' words a perfect prefix cache could serve;
// trace, for arrival trace, gives a level's schedule at the trace's own
// pace.
func runRateSearch(ctx context.Context, c looper, rs RateSearch, seed uint64, hang time.Duration, opt Options, res *Result,
	synth func(level, repeat, n, maxTokens int) ([][]byte, error), reuse func() float64,
	trace func(level, n int) []time.Duration, maxTokens int) error {
	probe := func(rate float64, index int) (Point, error) {
		opt.phase("rate %.3g/s", rate)
		// The bodies of a probe depend on its index, not its rate: a
		// different set of prompts per probe, the same for every config.
		level, repeat := -1000-index, 1
		if trace != nil {
			// The same stretch of the trace at every rate (only the speed
			// changes), with fresh prompt texts per probe.
			level, repeat = -1000, index
		}
		bodies, err := synth(level, repeat, rs.Requests, maxTokens)
		if err != nil {
			return Point{}, err
		}
		var offsets []time.Duration
		if trace != nil {
			offsets = trace(level, len(bodies))
		} else if offsets, err = Arrivals(len(bodies), rate, rs.Burstiness, rateSeed(seed, rate)); err != nil {
			return Point{}, err
		}
		exactRate(offsets, rate)
		b, err := c.openLoop(ctx, bodies, offsets, hang, false)
		p, recs := b.point(PhaseRate, 0, index, 0)
		p.Rate = rate
		if reuse != nil {
			p.PrefixReusable = reuse()
		}
		res.Points = append(res.Points, p)
		res.Requests = append(res.Requests, recs...)
		opt.progress("%s", rateProgress(p, rs.SLO))
		if opt.Point != nil {
			opt.Point(p)
		}
		return p, err
	}
	_, err := searchRate(rs, probe, opt.RateFloor)
	return err
}

package objective

// Open-loop levels: requests are sent at times fixed in advance (a
// schedule from Arrivals), whatever the server does, as
// `vllm bench serve --request-rate` sends them, instead of by a fixed
// number of clients that each wait for their previous answer.
//
// Measurement semantics:
//   - Request k is sent at start + offsets[k] by a pacer (the calling
//     goroutine), whether or not earlier requests were answered: every
//     request gets its own goroutine, so a slow server never delays the
//     sends (no coordinated omission). The only bound is openLoopCap
//     requests in flight, a safety cap far above what a measured level
//     should reach; at the cap the pacer waits and its lateness shows.
//   - TTFT and latency count from the request's SCHEDULED send time, not
//     from when it was actually handed to the transport: the wait a user
//     arriving at that moment would see, including any lateness of the
//     client. RequestRecord keeps both: StartS (actual send), ScheduledS,
//     and SendLagS = StartS - ScheduledS.
//   - The point's DurationS runs from the first scheduled send to the end
//     of the last request. OfferedRateS = (requests - 1) / (the
//     schedule's span); AchievedRateS = (completed - 1) / (the span of
//     the completions), the rate the answers came back at: a server that
//     keeps up answers at the schedule's pace, shifted by its latency,
//     whatever the level's length.
//   - In flight counts a request from its scheduled send to its end; the
//     point reports the maximum and the time-averaged count over each half
//     of the schedule's span. KeptUp is false when the achieved rate is
//     below keptUpRate of the offered one or the mean TTFT grew through
//     the level (requests scheduled in the second half waited more than
//     ttftGrowth x as long as those of the first, and by more than a
//     twentieth of the span: a backlog).
//   - It stops sending early, like closedLoop, when ctx is done, when the
//     hang watchdog fires (no token for hang while requests are in
//     flight; a new send is not progress), or after openGiveUp failures
//     in a row (a dead server); requests not yet sent then count as not
//     issued.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// openLoopCap bounds the requests in flight in one open-loop level. It is a
// safety net, not a concurrency level: each in-flight request holds a
// goroutine, a connection and a file descriptor, and 4096 outstanding
// requests is already a server hopelessly behind (kept_up false); beyond
// it more connections would measure the client's file-descriptor limit
// instead. At the cap the pacer waits for a request to end; the wait shows
// as send lag and the TTFTs still count from the schedule.
const openLoopCap = 4096

// openGiveUp is how many failures in a row stop an open-loop level: a dead
// server fails every request at once (closedLoop uses the number of
// workers, at least 8).
const openGiveUp = 8

// keptUpRate and ttftGrowth are the thresholds of the kept-up verdict
// (see Point.KeptUp).
const (
	// The achieved rate of a short level reads its answers' spread of
	// latencies too (a hundred requests with output lengths drawn from a
	// dataset move it by a tenth and more): only a gross shortfall counts,
	// and a backlog shows in the latency growth first.
	keptUpRate = 0.8
	ttftGrowth = 1.5
)

// openLoop sends bodies[k] at start+offsets[k] (offsets non-decreasing,
// one per body, from Arrivals), each request on its own goroutine however
// many are in flight, and measures each from its scheduled send time. hang
// and collect are as for closedLoop. The batch's point carries the
// open-loop figures (offered and achieved rate, in flight, kept up). The
// error is the cause of an early stop; a schedule that does not match
// bodies is an error before anything is sent (with an empty batch).
func (c *client) openLoop(ctx context.Context, bodies [][]byte, offsets []time.Duration, hang time.Duration, collect bool) (*batch, error) {
	if err := checkSchedule(bodies, offsets); err != nil {
		return &batch{requested: len(bodies), stop: err}, err
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &watch{open: true}
	w.tick(time.Now())
	wdDone := make(chan struct{})
	go func() { defer close(wdDone); w.run(pctx, cancel, hang) }()

	b := &batch{requested: len(bodies), schedule: offsets}
	slots := make([]*streamResult, len(bodies))
	var n tally
	slot := make(chan struct{}, openLoopCap)
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	start := time.Now()
pace:
	for k, off := range offsets {
		due := start.Add(off)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-pctx.Done():
				break pace
			case <-timer.C:
			}
		}
		if pctx.Err() != nil || n.failRun.Load() >= openGiveUp {
			break
		}
		select {
		case slot <- struct{}{}:
		case <-pctx.Done():
			break pace
		}
		n.issued.Add(1)
		wg.Go(func() {
			defer func() { <-slot }()
			r := c.streamFrom(pctx, bodies[k], w, collect, due)
			r.rec.StartS = r.start.Sub(start).Seconds()
			r.rec.ScheduledS = off.Seconds()
			r.rec.SendLagS = r.start.Sub(due).Seconds()
			n.add(pctx, r)
			slots[k] = r
		})
	}
	wg.Wait()
	b.wall = time.Since(start)
	if len(offsets) > 0 {
		b.wall -= offsets[0]
	}
	return b, b.end(pctx, cancel, wdDone, slots, &n)
}

// checkSchedule reports a schedule that cannot drive bodies: one offset
// per body, none negative, in order.
func checkSchedule(bodies [][]byte, offsets []time.Duration) error {
	if len(offsets) != len(bodies) {
		return fmt.Errorf("open loop: %d send offsets for %d requests", len(offsets), len(bodies))
	}
	if len(offsets) > 0 && offsets[0] < 0 {
		return fmt.Errorf("open loop: negative send offset %v", offsets[0])
	}
	if !slices.IsSorted(offsets) {
		return fmt.Errorf("open loop: send offsets out of order")
	}
	return nil
}

// openFigures fills p's open-loop fields from the schedule and the records
// of the requests issued (each outstanding from ScheduledS to ScheduledS +
// Latency).
func openFigures(p *Point, schedule []time.Duration, recs []RequestRecord) {
	if n := len(schedule); n >= 2 {
		if span := (schedule[n-1] - schedule[0]).Seconds(); span > 0 {
			p.OfferedRateS = float64(n-1) / span
		}
	}
	p.AchievedRateS = p.RequestsPerS
	first, last, done := 0.0, 0.0, 0
	for _, r := range recs {
		if !r.OK {
			continue
		}
		end := r.ScheduledS + r.Latency
		if done == 0 || end < first {
			first = end
		}
		last = max(last, end)
		done++
	}
	if done >= 2 && last > first {
		p.AchievedRateS = float64(done-1) / (last - first)
	}
	type edge struct {
		t     float64
		delta int
	}
	edges := make([]edge, 0, 2*len(recs))
	for _, r := range recs {
		p.SendLagMaxS = max(p.SendLagMaxS, r.SendLagS)
		edges = append(edges, edge{r.ScheduledS, 1}, edge{r.ScheduledS + r.Latency, -1})
	}
	// Intervals are half-open: an end sorts before a start at the same
	// instant.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.t != b.t {
			if a.t < b.t {
				return -1
			}
			return 1
		}
		return a.delta - b.delta
	})
	n := 0
	for _, e := range edges {
		n += e.delta
		p.MaxInFlight = max(p.MaxInFlight, n)
	}
	var behind []string
	if len(schedule) >= 2 {
		lo, hi := schedule[0].Seconds(), schedule[len(schedule)-1].Seconds()
		if mid := (lo + hi) / 2; hi > lo {
			p.InFlightFirstHalf = meanInFlight(recs, lo, mid)
			p.InFlightSecondHalf = meanInFlight(recs, mid, hi)
		}
	}
	if p.OfferedRateS > 0 && p.AchievedRateS < keptUpRate*p.OfferedRateS {
		behind = append(behind, fmt.Sprintf("achieved %.3g req/s < %.0f%% of offered %.3g req/s",
			p.AchievedRateS, 100*keptUpRate, p.OfferedRateS))
	}
	if len(schedule) >= 2 {
		// A backlog shows as a wait that grows through the level: the
		// requests scheduled in its second half waited longer for their
		// first token (from the schedule) than those of the first, by more
		// than a twentieth of the level's span. TTFT, not latency: a
		// latency is mostly its output's length, which a dataset draws
		// per request; and not the in-flight count, which follows the
		// arrivals' own fluctuation.
		// The first window starts once the server had one typical
		// latency to fill its batch (at most a quarter of the level):
		// requests that found it empty are faster without any backlog.
		lo, hi := schedule[0].Seconds(), schedule[len(schedule)-1].Seconds()
		mid := (lo + hi) / 2
		var lats []float64
		for _, r := range recs {
			if r.OK {
				lats = append(lats, r.Latency)
			}
		}
		ramp := 0.0
		if len(lats) > 0 {
			slices.Sort(lats)
			ramp = min(lats[len(lats)/2], (hi-lo)/4)
		}
		var sum [2]float64
		var n [2]int
		for _, r := range recs {
			if !r.OK || r.ScheduledS < lo+ramp {
				continue
			}
			h := 0
			if r.ScheduledS >= mid {
				h = 1
			}
			sum[h] += r.TTFT
			n[h]++
		}
		if n[0] > 0 && n[1] > 0 && sum[0] > 0 {
			a, z := sum[0]/float64(n[0]), sum[1]/float64(n[1])
			p.TTFTGrowth = z / a
			if z > ttftGrowth*a && z-a > (hi-lo)/20 {
				behind = append(behind, fmt.Sprintf("mean TTFT grew from %.3g s to %.3g s (first to second half of the schedule)", a, z))
			}
		}
	}
	kept := len(behind) == 0
	p.KeptUp = &kept
	for i, s := range behind {
		if i > 0 {
			p.Behind += "; "
		}
		p.Behind += s
	}
}

// meanInFlight is the time-averaged number of requests outstanding over
// [lo, hi) (seconds from the start of the point).
func meanInFlight(recs []RequestRecord, lo, hi float64) float64 {
	var area float64
	for _, r := range recs {
		a, z := max(lo, r.ScheduledS), min(hi, r.ScheduledS+r.Latency)
		if z > a {
			area += z - a
		}
	}
	return area / (hi - lo)
}

package objective

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// runChat is the seed-000 sweep: per concurrency level an uncounted
// warm-up, then Repeats measured points; quality gates before and after.
func runChat(ctx context.Context, c looper, model string, w Workload, opt Options, res *Result) error {
	spec := w.Chat
	hang := time.Duration(w.HangTimeout * float64(time.Second))
	res.ReusePrompts = spec.ReusePrompts
	var file []string
	if spec.PromptsFile != "" {
		var err error
		if file, err = ReadPrompts(spec.PromptsFile); err != nil {
			return err
		}
	}
	var src *source
	if spec.Source != nil {
		var err error
		if src, err = newSource(spec); err != nil {
			return err
		}
	}
	if w.Quality.Enabled {
		if err := runGate(ctx, c, model, w, opt, res, "before"); err != nil {
			return err
		}
	}
	fileNext := 0
	prompts := func(level, repeat, n int) []string {
		out := make([]string, n)
		rng := rand.New(rand.NewPCG(uint64(level), uint64(repeat)))
		for i := range out {
			tag := fmt.Sprintf("[c%d r%d #%d]", level, repeat, i)
			if spec.ReusePrompts {
				tag = fmt.Sprintf("[c%d #%d]", level, i)
			}
			if file != nil {
				k := fileNext
				if spec.ReusePrompts {
					k = i
				} else {
					fileNext++
				}
				// A tag in front keeps fresh prompts fresh when the file repeats.
				out[i] = file[k%len(file)]
				if !spec.ReusePrompts && k >= len(file) {
					out[i] = tag + " " + out[i]
				}
				continue
			}
			out[i] = syntheticPrompt(rng, tag, spec.PromptTokens)
		}
		return out
	}
	bodiesFor := func(ps []string, maxTokens int) ([][]byte, error) {
		out := make([][]byte, len(ps))
		for i, p := range ps {
			b, err := chatBody(model, userMsg(p), maxTokens, spec.IgnoreEOS, nil, nil)
			if err != nil {
				return nil, err
			}
			out[i] = b
		}
		return out, nil
	}
	// Synthetic prompts depend on the level and repeat alone: their bodies
	// are memoised across trials (a search sends the same ones to every
	// config); prompts from a file are read in order and are not.
	// sent holds the prompt prefixes a source's requests sent so far, and
	// reusable the share of the last batch's prompt words a perfect prefix
	// cache could have served from them (PrefixReuse); warm-ups count, as
	// they fill the server's cache too.
	// Source batches are memoised across trials too (sourceMemo), and so
	// is what a prefix cache could reuse of them after the batches sent
	// before (prefixReuser).
	var reuser prefixReuser
	var srcID string
	if src != nil {
		id, err := json.Marshal(struct {
			Source                  *SourceSpec
			MaxTokens, PromptTokens int
			IgnoreEOS, Reuse, Trace bool
		}{spec.Source, spec.MaxTokens, spec.PromptTokens, spec.IgnoreEOS, spec.ReusePrompts, src.inOrder})
		if err != nil {
			return fmt.Errorf("workload source: %w", err)
		}
		srcID = string(id)
	}
	reusable := 0.0
	synth := func(level, repeat, n, maxTokens int) ([][]byte, error) {
		if src != nil {
			k := sourceKey{model: model, source: srcID, level: level, repeat: repeat, n: n, maxTokens: maxTokens}
			b, err := sourceMemo.load(k, func() (*sourceBatch, error) {
				reqs := src.requests(level, repeat, n)
				bodies, err := sourceBodies(model, reqs, maxTokens, spec)
				return &sourceBatch{reqs: reqs, bodies: bodies}, err
			})
			if err != nil {
				return nil, err
			}
			if hit, words := reuser.add(k, b); words > 0 {
				reusable = float64(hit) / float64(words)
			}
			return b.bodies, nil
		}
		if file != nil {
			return bodiesFor(prompts(level, repeat, n), maxTokens)
		}
		k := bodyKey{model, level, repeat, n, maxTokens, spec.PromptTokens, spec.IgnoreEOS, spec.ReusePrompts}
		return bodyMemo.load(k, func() ([][]byte, error) { return bodiesFor(prompts(level, repeat, n), maxTokens) })
	}
	warm := func(conc, n int) (note string, err error) {
		// Waves at the level's concurrency: they capture the batch size's
		// CUDA graphs and JIT paths, so repeat 1 is not cold (seed: r1 TTFT
		// 11-14 s). A wave counts only once its requests were decoding
		// together at the level's full running batch (a wave of short
		// requests can end before the last one is admitted, leaving the
		// first-time batch shape to the measured repeat).
		target := min(conc, n)
		if opt.MaxRunning > 0 {
			target = min(target, opt.MaxRunning)
		}
		reached := 0
		for wave := 1; wave <= maxWarmupWaves; wave++ {
			opt.phase("warm-up C%d", conc)
			bodies, err := synth(conc, -wave, min(conc, n), spec.MaxTokens)
			if err != nil {
				return "", err
			}
			b, err := c.closedLoop(ctx, bodies, conc, hang, false)
			p, recs := b.point("warmup", conc, 0, 0)
			b.emitTrace(opt, "warmup", conc, 0)
			reached = maxDecoding(recs)
			p.Note = fmt.Sprintf("%d of %d requests decoding together", reached, target)
			res.Warmup = append(res.Warmup, p)
			opt.progress("c=%d warm-up: %d/%d ok in %.2f s, %d of %d decoding together", conc, p.Completed, p.Requested, p.DurationS, reached, target)
			if err != nil {
				return "", fmt.Errorf("warm-up at concurrency %d: %w", conc, err)
			}
			if p.Failed > 0 {
				return "", fmt.Errorf("warm-up at concurrency %d: %d of %d %w: %s", conc, p.Failed, p.Issued, ErrFailedRequests, b.firstError())
			}
			if reached >= target {
				return "", nil
			}
		}
		return fmt.Sprintf("cold: the warm-up reached %d of %d requests decoding together in %d waves", reached, target, maxWarmupWaves), nil
	}
	for li, conc := range spec.Concurrency {
		n := spec.Requests[li]
		cold := ""
		lower := Medians(res.Points)
		w0 := len(res.Warmup)
		if *spec.Warmup {
			var err error
			if cold, err = warm(conc, n); err != nil {
				return err
			}
		}
		waves := res.Warmup[w0:]
		first := len(res.Points)
		for r := 1; r <= spec.Repeats; r++ {
			opt.phase("C%d r%d", conc, r)
			rep := r
			if spec.ReusePrompts {
				rep = 1
			}
			bodies, err := synth(conc, rep, n, spec.MaxTokens)
			if err != nil {
				return err
			}
			probe := c.startTokenProbe(ctx)
			b, err := c.closedLoop(ctx, bodies, conc, hang, false)
			p, recs := b.point("", conc, r, 0)
			if src != nil {
				p.PrefixReusable = reusable
			}
			if p.State != StateInterrupted {
				p.checkTokens(probe.finish(ctx, c, p.OutputTokens))
			}
			b.emitTrace(opt, "", conc, r)
			if r == 1 && cold != "" {
				p.Note = cold
			}
			if p.State == "passed" {
				flagBelow(&p, waves, lower)
			}
			res.Points = append(res.Points, p)
			res.Requests = append(res.Requests, recs...)
			opt.progress("%s", progressLine(p, spec.Repeats))
			if opt.Point != nil {
				opt.Point(p)
			}
			if err != nil {
				return fmt.Errorf("concurrency %d repeat %d: %w", conc, r, err)
			}
			if p.Failed > 0 {
				return fmt.Errorf("concurrency %d repeat %d: %d of %d %w: %s", conc, r, p.Failed, p.Issued, ErrFailedRequests, b.firstError())
			}
		}
		before := make([]string, len(res.Points)-first)
		for i, p := range res.Points[first:] {
			before[i] = p.Outlier
		}
		flagOutliers(res.Points[first:])
		for i, p := range res.Points[first:] {
			if p.Outlier != before[i] {
				opt.progress("c=%d r=%d/%d FLAGGED: %s", p.Concurrency, p.Repeat, spec.Repeats, p.Outlier)
			}
		}
		if opt.AfterLevel != nil && li < len(spec.Concurrency)-1 {
			if err := opt.AfterLevel(conc, res.Points[first:]); err != nil {
				return fmt.Errorf("after concurrency %d: %w", conc, err)
			}
		}
	}
	// shortWarmup is one uncounted wave of n short requests at conc.
	shortWarmup := func(conc, n int) error {
		bodies, err := synth(conc, 0, n, min(spec.MaxTokens, 32))
		if err != nil {
			return err
		}
		b, err := c.closedLoop(ctx, bodies, conc, hang, false)
		wp, _ := b.point("warmup", conc, 0, 0)
		res.Warmup = append(res.Warmup, wp)
		return err
	}
	if rs := spec.RateSearch; rs != nil {
		if len(spec.Concurrency) == 0 && *spec.Warmup {
			// No level warmed the server up: one short closed-loop wave.
			n := min(rs.Requests, 16)
			if err := shortWarmup(n, n); err != nil {
				return fmt.Errorf("warm-up before the rate search: %w", err)
			}
		}
		seed := uint64(0)
		if spec.Source != nil {
			seed = spec.Source.Seed
		}
		var reuse func() float64
		if src != nil {
			reuse = func() float64 { return reusable }
		}
		var trace func(level, n int) []time.Duration
		if rs.Arrival == ArrivalTrace {
			if src == nil || src.data == nil || !src.data.Timed {
				return errors.New("rate search: arrival trace needs a source dataset with a timestamp on every request")
			}
			trace = src.traceOffsets
		}
		if err := runRateSearch(ctx, c, *rs, seed, hang, opt, res, synth, reuse, trace, spec.MaxTokens); err != nil {
			return fmt.Errorf("rate search: %w", err)
		}
	}
	if cs := spec.CapacitySearch; cs != nil {
		measure := func(conc, n int) (Point, error) {
			if *spec.Warmup {
				if err := shortWarmup(conc, min(conc, n)); err != nil {
					return Point{}, err
				}
			}
			bodies, err := synth(conc, 1000, n, spec.MaxTokens)
			if err != nil {
				return Point{}, err
			}
			probe := c.startTokenProbe(ctx)
			b, err := c.closedLoop(ctx, bodies, conc, hang, false)
			p, recs := b.point(PhaseCapacity, conc, 1, 0)
			if p.State != StateInterrupted {
				p.checkTokens(probe.finish(ctx, c, p.OutputTokens))
			}
			res.Points = append(res.Points, p)
			res.Requests = append(res.Requests, recs...)
			opt.progress("capacity probe %s", progressLine(p, 1))
			return p, err
		}
		if err := searchCapacity(res.Points, spec, cs, measure, opt); err != nil {
			return fmt.Errorf("capacity search: %w", err)
		}
	}
	if w.Quality.Enabled {
		if err := runGate(ctx, c, model, w, opt, res, "after"); err != nil {
			return err
		}
	}
	return nil
}

// maxWarmupWaves bounds the warm-up waves of one level.
const maxWarmupWaves = 3

// maxDecoding is the most requests that were streaming tokens at the same
// moment: the overlap of their [first token, last token] intervals.
func maxDecoding(recs []RequestRecord) int {
	type edge struct {
		t     float64
		delta int
	}
	var edges []edge
	for _, r := range recs {
		if !r.OK || r.OutputTokens < 1 {
			continue
		}
		edges = append(edges, edge{r.StartS + r.TTFT, 1}, edge{r.StartS + r.Latency, -1})
	}
	// Intervals are closed: starts sort before ends at the same instant.
	slices.SortFunc(edges, func(a, b edge) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(b.delta, a.delta)
	})
	best, cur := 0, 0
	for _, e := range edges {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

// Outlier thresholds: a repeat whose output tok/s is this far from the
// median of its level's repeats, or whose TTFT p50 is this many times the
// median's (or less than its inverse), is flagged.
const (
	outlierTokS = 0.25
	outlierTTFT = 2.0
)

// flagOutliers marks the repeats of one level that disagree with their
// siblings (Point.Outlier), so a cold or disturbed repeat is visible.
func flagOutliers(pts []Point) {
	if len(pts) < 3 {
		return
	}
	tokS := make([]float64, len(pts))
	ttft := make([]float64, len(pts))
	for i, p := range pts {
		tokS[i], ttft[i] = p.OutputTokS, p.TTFT.P50
	}
	mt, mf := median(tokS), median(ttft)
	for i := range pts {
		p := &pts[i]
		var why []string
		if mt > 0 && math.Abs(p.OutputTokS-mt)/mt > outlierTokS {
			why = append(why, fmt.Sprintf("%.1f tok/s vs the repeats' median %.1f", p.OutputTokS, mt))
		}
		if mf > 0 && p.TTFT.P50 > 0 && (p.TTFT.P50/mf > outlierTTFT || mf/p.TTFT.P50 > outlierTTFT) {
			why = append(why, fmt.Sprintf("TTFT p50 %.3f s vs the repeats' median %.3f s", p.TTFT.P50, mf))
		}
		p.flag(why...)
	}
}

// Thresholds for a measured point against its own level's warm-up waves
// and the levels below it. A warm-up wave sends the level's concurrency
// once and pays the batch shape's first-time costs; a warm repeat runs
// more requests in steady state, so it reads at least about the wave's
// tok/s and a first-wave TTFT no worse than the wave's (a queue beyond the
// running cap makes both wait alike). Throughput does not halve with more
// concurrency. A repeat far below these references most likely paid a
// first-time cost its warm-up did not (make demo: C16 3,715 tok/s and TTFT
// p99 0.46 s after a 0.12 s warm-up, against about 19,000 tok/s), or was
// disturbed; with one repeat there are no siblings to tell.
const (
	belowWarmupTokS = 0.5 // output tok/s under this fraction of the best wave's
	aboveWarmupTTFT = 3.0 // TTFT p99 over this multiple of the waves' worst p99
	ttftJitterS     = 0.1 // and over it by more than this (client jitter)
	belowLowerTokS  = 0.5 // output tok/s under this fraction of a lower level's median
)

// flagBelow marks p (Point.Outlier) when it reads far below what its
// level's warm-up waves or a lower concurrency level (lower: the medians
// so far) showed the server doing, so a single cold repeat is not taken
// for the config's throughput: multi-fidelity pruning does not prune on a
// flagged point.
func flagBelow(p *Point, waves []Point, lower map[int]Median) {
	var why []string
	bestTokS, worstTTFT := 0.0, 0.0
	for _, w := range waves {
		if w.State != "passed" {
			continue
		}
		bestTokS = max(bestTokS, w.OutputTokS)
		worstTTFT = max(worstTTFT, w.TTFT.P99)
	}
	if p.OutputTokS < belowWarmupTokS*bestTokS {
		why = append(why, fmt.Sprintf("%.1f tok/s < %.2f x its warm-up's %.1f", p.OutputTokS, belowWarmupTokS, bestTokS))
	}
	if worstTTFT > 0 && p.TTFT.P99 > aboveWarmupTTFT*worstTTFT && p.TTFT.P99-worstTTFT > ttftJitterS {
		why = append(why, fmt.Sprintf("TTFT p99 %.3f s > %.0f x its warm-up's %.3f s", p.TTFT.P99, aboveWarmupTTFT, worstTTFT))
	}
	lc := 0
	for c, m := range lower {
		if c < p.Concurrency && (lc == 0 || m.OutputTokS > lower[lc].OutputTokS) {
			lc = c
		}
	}
	if lc > 0 && p.OutputTokS < belowLowerTokS*lower[lc].OutputTokS {
		why = append(why, fmt.Sprintf("%.1f tok/s < %.2f x C%d's %.1f", p.OutputTokS, belowLowerTokS, lc, lower[lc].OutputTokS))
	}
	p.flag(why...)
}

// flag adds reasons to p.Outlier.
func (p *Point) flag(why ...string) {
	for _, w := range why {
		if p.Outlier != "" {
			p.Outlier += "; "
		}
		p.Outlier += w
	}
}

// PhaseCapacity marks the points of the capacity bisection.
const PhaseCapacity = "capacity"

// searchCapacity bisects between the highest measured level meeting the
// SLO and the next measured level above it, measuring one repeat per
// probe, until the bracket is within 1/16 of the lower level or MaxProbes
// probes were made.
func searchCapacity(points []Point, spec ChatSpec, cs *CapacitySearch, measure func(conc, n int) (Point, error), opt Options) error {
	levels := map[int][]Point{}
	for _, p := range points {
		if p.Phase == "" {
			levels[p.Concurrency] = append(levels[p.Concurrency], p)
		}
	}
	good := func(pts []Point) bool { return failedPoints(pts) == "" && sloViolation(cs.SLO, pts) == "" }
	lo, hi, loN := 0, 0, 0
	for i, c := range spec.Concurrency {
		pts, ok := levels[c]
		if !ok {
			continue
		}
		if good(pts) {
			if hi == 0 {
				lo, loN = c, spec.Requests[i]
			}
		} else if lo > 0 && hi == 0 {
			hi = c
		}
	}
	if lo == 0 || hi == 0 {
		opt.progress("capacity search: nothing to bisect (lowest passing level %d, first failing level above it %d)", lo, hi)
		return nil
	}
	probes := cs.MaxProbes
	if probes == 0 {
		probes = 3
	}
	for range probes {
		if hi-lo <= max(1, lo/16) {
			break
		}
		mid := (lo + hi) / 2
		n := max(mid, loN*mid/lo)
		p, err := measure(mid, n)
		if err != nil {
			return err
		}
		if good([]Point{p}) {
			lo = mid
		} else {
			hi = mid
		}
	}
	opt.progress("capacity search: highest concurrency meeting the SLO is between %d and %d", lo, hi-1)
	return nil
}

// progressLine is one human-readable line about a finished point.
func progressLine(p Point, repeats int) string {
	var extra string
	if p.Retried > 0 {
		extra += fmt.Sprintf(", %d retried on a new connection", p.Retried)
	}
	if tc := p.Audit.ServerTokens; tc != nil {
		switch tc.State {
		case CheckPassed:
			extra += ", tokens = server counter"
		case CheckFailed:
			extra += ", TOKEN MISMATCH: " + tc.Reason
		}
	}
	if p.PrefixReusable > 0 || p.CachedTokens > 0 {
		extra += fmt.Sprintf(", prefix reusable %.0f%%", 100*p.PrefixReusable)
		if p.PromptTokens > 0 {
			extra += fmt.Sprintf(", server cached %.0f%% of %d prompt tokens", 100*float64(p.CachedTokens)/float64(p.PromptTokens), p.PromptTokens)
		}
	}
	if p.Outlier != "" {
		extra += ", FLAGGED: " + p.Outlier
	}
	return fmt.Sprintf("c=%d r=%d/%d: %d/%d ok, %.1f tok/s, TTFT p50 %.3f s p99 %.3f s, latency p99 %.2f s%s%s",
		p.Concurrency, p.Repeat, repeats, p.Completed, p.Requested, p.OutputTokS, p.TTFT.P50, p.TTFT.P99, p.Latency.P99, extra,
		map[bool]string{true: "", false: " [" + p.State + "]"}[p.State == "passed"])
}

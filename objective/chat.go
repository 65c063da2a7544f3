package objective

import (
	"context"
	"fmt"
	"math/rand/v2"
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
		if file, err = readPrompts(spec.PromptsFile); err != nil {
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
	synth := func(level, repeat, n, maxTokens int) ([][]byte, error) {
		if file != nil {
			return bodiesFor(prompts(level, repeat, n), maxTokens)
		}
		k := bodyKey{model, level, repeat, n, maxTokens, spec.PromptTokens, spec.IgnoreEOS, spec.ReusePrompts}
		return memoBodies(k, func() ([][]byte, error) { return bodiesFor(prompts(level, repeat, n), maxTokens) })
	}
	for li, conc := range spec.Concurrency {
		n := spec.Requests[li]
		if *spec.Warmup {
			// One wave at the level's concurrency: captures the batch size's
			// CUDA graphs and JIT paths, so repeat 1 is not cold (seed: r1
			// TTFT 11-14 s). Short outputs keep it cheap.
			bodies, err := synth(conc, 0, min(conc, n), min(spec.MaxTokens, 32))
			if err != nil {
				return err
			}
			b, err := c.closedLoop(ctx, bodies, conc, hang, false)
			p, _ := b.point("warmup", conc, 0, 0)
			b.emitTrace(opt, "warmup", conc, 0)
			res.Warmup = append(res.Warmup, p)
			opt.progress("c=%d warm-up: %d/%d ok in %.2f s", conc, p.Completed, p.Requested, p.DurationS)
			if err != nil {
				return fmt.Errorf("warm-up at concurrency %d: %w", conc, err)
			}
			if p.Failed > 0 {
				return fmt.Errorf("warm-up at concurrency %d: %d of %d %w: %s", conc, p.Failed, p.Issued, ErrFailedRequests, b.firstError())
			}
		}
		for r := 1; r <= spec.Repeats; r++ {
			rep := r
			if spec.ReusePrompts {
				rep = 1
			}
			bodies, err := synth(conc, rep, n, spec.MaxTokens)
			if err != nil {
				return err
			}
			b, err := c.closedLoop(ctx, bodies, conc, hang, false)
			p, recs := b.point("", conc, r, 0)
			b.emitTrace(opt, "", conc, r)
			res.Points = append(res.Points, p)
			res.Requests = append(res.Requests, recs...)
			opt.progress("%s", progressLine(p, spec.Repeats))
			if err != nil {
				return fmt.Errorf("concurrency %d repeat %d: %w", conc, r, err)
			}
			if p.Failed > 0 {
				return fmt.Errorf("concurrency %d repeat %d: %d of %d %w: %s", conc, r, p.Failed, p.Issued, ErrFailedRequests, b.firstError())
			}
		}
	}
	if cs := spec.CapacitySearch; cs != nil {
		measure := func(conc, n int) (Point, error) {
			if *spec.Warmup {
				bodies, err := synth(conc, 0, min(conc, n), min(spec.MaxTokens, 32))
				if err != nil {
					return Point{}, err
				}
				b, err := c.closedLoop(ctx, bodies, conc, hang, false)
				wp, _ := b.point("warmup", conc, 0, 0)
				res.Warmup = append(res.Warmup, wp)
				if err != nil {
					return Point{}, err
				}
			}
			bodies, err := synth(conc, 1000, n, spec.MaxTokens)
			if err != nil {
				return Point{}, err
			}
			b, err := c.closedLoop(ctx, bodies, conc, hang, false)
			p, recs := b.point(PhaseCapacity, conc, 1, 0)
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
	return fmt.Sprintf("c=%d r=%d/%d: %d/%d ok, %.1f tok/s, TTFT p50 %.3f s p99 %.3f s, latency p99 %.2f s%s",
		p.Concurrency, p.Repeat, repeats, p.Completed, p.Requested, p.OutputTokS, p.TTFT.P50, p.TTFT.P99, p.Latency.P99,
		map[bool]string{true: "", false: " [" + p.State + "]"}[p.State == "passed"])
}

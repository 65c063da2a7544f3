package objective

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Matrix cell statuses, with seed 004's meanings.
const (
	// StatusValid: measured as asked.
	StatusValid = "Valid"
	// StatusQueued: the server could not run all requests at once, so some
	// waited in a queue.
	StatusQueued = "Requests queued"
	// StatusOverCapacity: not run because this many requests at this
	// context would exceed the server's KV cache.
	StatusOverCapacity = "Over capacity"
	// StatusNotRun: skipped during the run, or the run stopped early.
	StatusNotRun = "Not run"
)

// Matrix point phases.
const (
	PhasePrefill = "prefill"
	PhaseDecode  = "decode"
)

// errCellEnd ends a fixed-duration decode cell; requests it cuts are
// neither completed nor failed.
var errCellEnd = errors.New("cell duration reached")

// CellFits reports whether conc requests of context+maxOutput tokens fit
// in kvTokens (0 = unknown, assumed to fit).
func CellFits(kvTokens, context, maxOutput, conc int) bool {
	return kvTokens <= 0 || conc*(context+maxOutput) <= kvTokens
}

// overContext says why a request of context+maxOutput tokens exceeds the
// server's context length limit (0 = unknown: it fits), or "".
func overContext(limit, context, maxOutput int) string {
	if limit <= 0 || context+maxOutput <= limit {
		return ""
	}
	return fmt.Sprintf("%d + %d = %d tokens > the server's context length %d", context, maxOutput, context+maxOutput, limit)
}

// runMatrix is the seed-004 workload: per context a prefill measurement
// (one request, TTFT and prompt tok/s) and fixed-duration decode cells per
// concurrency, skipping cells that cannot fit the KV cache. listed is the
// /v1/models list Run read to name the model (nil when it read none).
func runMatrix(ctx context.Context, c *client, model string, listed []servedModel, w Workload, opt Options, res *Result) error {
	m := w.Matrix
	hang := time.Duration(w.HangTimeout * float64(time.Second))
	kv, maxRun := 0, 0
	if res.Server != nil {
		kv = res.Server.MaxTotalNumTokens
		maxRun = res.Server.EffectiveMaxRunning
		if maxRun == 0 {
			maxRun = res.Server.MaxRunningRequests
		}
	}
	if kv == 0 {
		opt.progress("matrix: the server's KV tokens are unknown (no /server_info): no cell is skipped as over capacity")
	}
	// A request longer than the server's context length is refused (HTTP
	// 400), which failed the whole trial: such a cell is skipped instead.
	limit := 0
	if res.Server != nil {
		limit = res.Server.ContextLength
	}
	if limit == 0 {
		limit = c.maxModelLen(ctx, model, listed)
	}
	if w.Quality.Enabled {
		if err := runGate(ctx, c, model, w, opt, res, "before"); err != nil {
			return err
		}
	}
	if *m.Warmup {
		// One short request first: the first request after a server starts
		// is cold (seed 000: 11-14 s), and would distort the first prefill.
		body, err := chatBody(model, userMsg("Say hello."), 8, true, nil, nil)
		if err != nil {
			return err
		}
		b, err := c.closedLoop(ctx, [][]byte{body}, 1, hang, false)
		wp, _ := b.point("warmup", 1, 0, 0)
		res.Warmup = append(res.Warmup, wp)
		if err != nil {
			return fmt.Errorf("matrix warm-up: %w", err)
		}
	}
	var runErr error
	notRun := func(phase string, ctxLen, conc int, note string) {
		res.Points = append(res.Points, Point{Phase: phase, Context: ctxLen, Concurrency: conc, Status: StatusNotRun, State: "skipped", Note: note})
	}
	for _, ctxLen := range m.Contexts {
		if runErr != nil {
			notRun(PhasePrefill, ctxLen, 1, "run stopped early")
			for _, conc := range m.Concurrency {
				notRun(PhaseDecode, ctxLen, conc, "run stopped early")
			}
			continue
		}
		// A long prompt's prefill streams nothing for a long time: allow at
		// least 1 s per 1,000 prompt tokens before calling it a hang.
		hang := max(hang, time.Duration(ctxLen/1000)*time.Second)
		rng := rand.New(rand.NewPCG(uint64(ctxLen), 7))
		base := syntheticPrompt(rng, fmt.Sprintf("[context %d]", ctxLen), ctxLen-32)
		if why := overContext(limit, ctxLen, 1); why != "" {
			res.Points = append(res.Points, Point{Phase: PhasePrefill, Context: ctxLen, Concurrency: 1, Status: StatusOverCapacity, State: "skipped", Note: why})
			for _, conc := range m.Concurrency {
				res.Points = append(res.Points, Point{Phase: PhaseDecode, Context: ctxLen, Concurrency: conc, Status: StatusOverCapacity, State: "skipped",
					Note: overContext(limit, ctxLen, m.MaxOutput)})
			}
			opt.progress("prefill ctx=%d: skipped: %s", ctxLen, why)
			continue
		}
		pre, err := prefill(ctx, c, model, base, ctxLen, kv, hang)
		res.Points = append(res.Points, pre)
		opt.progress("prefill ctx=%d: %s, %.0f prompt tok/s, TTFT %.3f s", ctxLen, pre.Status, pre.PromptTokS, pre.TTFT.P50)
		if err != nil {
			runErr = err
		}
		skip := ""
		if pre.Status != StatusValid {
			skip = "prefill did not succeed"
		}
		for _, conc := range m.Concurrency {
			switch {
			case runErr != nil:
				notRun(PhaseDecode, ctxLen, conc, "run stopped early")
				continue
			case overContext(limit, ctxLen, m.MaxOutput) != "":
				why := overContext(limit, ctxLen, m.MaxOutput)
				res.Points = append(res.Points, Point{Phase: PhaseDecode, Context: ctxLen, Concurrency: conc, Status: StatusOverCapacity, State: "skipped", Note: why})
				opt.progress("decode ctx=%d c=%d: skipped: %s", ctxLen, conc, why)
				continue
			case !CellFits(kv, ctxLen, m.MaxOutput, conc):
				res.Points = append(res.Points, Point{Phase: PhaseDecode, Context: ctxLen, Concurrency: conc, Status: StatusOverCapacity, State: "skipped",
					Note: fmt.Sprintf("%d x (%d + %d) = %d tokens > %d KV tokens", conc, ctxLen, m.MaxOutput, conc*(ctxLen+m.MaxOutput), kv)})
				continue
			case skip != "":
				notRun(PhaseDecode, ctxLen, conc, skip)
				continue
			}
			if *m.Warmup {
				body, err := chatBody(model, userMsg(base), min(8, m.MaxOutput), true, nil, nil)
				if err != nil {
					return err
				}
				bodies := make([][]byte, conc)
				for i := range bodies {
					bodies[i] = body
				}
				b, err := c.closedLoop(ctx, bodies, conc, hang, false)
				wp, _ := b.point("warmup", conc, 0, ctxLen)
				res.Warmup = append(res.Warmup, wp)
				if err != nil {
					runErr = fmt.Errorf("warm-up at context %d concurrency %d: %w", ctxLen, conc, err)
					notRun(PhaseDecode, ctxLen, conc, "warm-up failed: "+err.Error())
					continue
				}
				if wp.Failed > 0 {
					skip = fmt.Sprintf("warm-up at concurrency %d: %d requests failed: %s", conc, wp.Failed, b.firstError())
					notRun(PhaseDecode, ctxLen, conc, skip)
					continue
				}
			}
			opt.phase("decode ctx=%d C%d", ctxLen, conc)
			p, recs, err := c.decodeCell(ctx, model, base, ctxLen, conc, m, hang, maxRun)
			res.Points = append(res.Points, p)
			res.Requests = append(res.Requests, recs...)
			opt.progress("decode ctx=%d c=%d: %s, %.1f tok/s, %.1f tok/s per request, TTFT p50 %.3f s, ITL p50 %.1f ms, %d done, %d tokens in %.1f s",
				ctxLen, conc, p.Status, p.OutputTokS, p.PerRequestTokS, p.TTFT.P50, p.ITL.P50*1000, p.Completed, p.OutputTokens, p.DurationS)
			if opt.Point != nil {
				opt.Point(p)
			}
			if err != nil {
				runErr = err
				continue
			}
			if p.Failed > 0 {
				skip = fmt.Sprintf("%d requests failed at concurrency %d", p.Failed, conc)
			}
		}
	}
	if runErr == nil && w.Quality.Enabled {
		runErr = runGate(ctx, c, model, w, opt, res, "after")
	}
	if runErr == nil {
		for _, p := range res.Points {
			if p.Phase == PhaseDecode && p.Failed > 0 {
				return fmt.Errorf("decode at context %d concurrency %d: %d %w: %s", p.Context, p.Concurrency, p.Failed, ErrFailedRequests, p.Note)
			}
		}
	}
	return runErr
}

// prefill measures one request of about ctxLen prompt tokens and one
// output token.
func prefill(ctx context.Context, c *client, model, prompt string, ctxLen, kv int, hang time.Duration) (Point, error) {
	p := Point{Phase: PhasePrefill, Context: ctxLen, Concurrency: 1, Repeat: 1}
	if !CellFits(kv, ctxLen, 1, 1) {
		p.Status, p.State = StatusOverCapacity, "skipped"
		p.Note = fmt.Sprintf("%d tokens > %d KV tokens", ctxLen+1, kv)
		return p, nil
	}
	body, err := chatBody(model, userMsg(prompt), 1, true, nil, nil)
	if err != nil {
		return p, err
	}
	b, err := c.closedLoop(ctx, [][]byte{body}, 1, hang, false)
	p, _ = b.point(PhasePrefill, 1, 1, ctxLen)
	p.Status = StatusValid
	if err != nil || p.Failed > 0 {
		p.Status = StatusNotRun
		p.Note = b.firstError()
		if p.State == StateInterrupted {
			p.Note = "interrupted"
		}
		if err != nil {
			return p, fmt.Errorf("prefill at context %d: %w", ctxLen, err)
		}
		return p, nil
	}
	tokens := ctxLen
	if r := b.results[0].rec; r.PromptTokens > 0 {
		tokens = r.PromptTokens
	}
	if p.TTFT.P50 > 0 {
		p.PromptTokS = float64(tokens) / p.TTFT.P50
	}
	return p, nil
}

// decodeCell keeps conc streams of maxOutput tokens running for the
// cell's duration; requests still running at the end are cut and their
// tokens so far counted.
func (c *client) decodeCell(ctx context.Context, model, base string, ctxLen, conc int, m MatrixSpec, hang time.Duration, maxRun int) (Point, []RequestRecord, error) {
	p := Point{Phase: PhaseDecode, Context: ctxLen, Concurrency: conc, Repeat: 1, Requested: conc}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	dur := time.Duration(m.DurationS * float64(time.Second))
	start := time.Now()
	cellCtx, cancelCell := context.WithTimeoutCause(pctx, dur, errCellEnd)
	defer cancelCell()
	w := &watch{}
	w.tick(time.Now())
	wdDone := make(chan struct{})
	go func() { defer close(wdDone); w.run(pctx, cancel, hang) }()
	qp := &queuePoller{c: c, from: start.Add(dur / 2)}
	qpDone := make(chan struct{})
	go func() { defer close(qpDone); qp.run(cellCtx) }()

	var (
		mu                         sync.Mutex
		results                    []*streamResult
		cut                        []bool
		issued, done, failed, toks atomic.Int64
		nCut                       atomic.Int64
		wg                         sync.WaitGroup
	)
	// Continuous usage keeps token counts exact for streams cut at the end.
	extras := map[string]any{"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}}
	for range conc {
		wg.Go(func() {
			for cellCtx.Err() == nil {
				// The prefill's exact prompt: a prefix cache (SGLang's radix
				// tree, or a simulator's whole-prompt cache) serves it, so
				// TTFT mostly excludes prefill, as in seed 004.
				body, err := chatBody(model, userMsg(base), m.MaxOutput, true, nil, extras)
				if err != nil {
					return
				}
				issued.Add(1)
				r := c.stream(cellCtx, body, w, false)
				isCut := !r.rec.OK && (errors.Is(context.Cause(cellCtx), errCellEnd) || interrupted(cellCtx))
				switch {
				case r.rec.OK:
					done.Add(1)
				case isCut:
					nCut.Add(1)
					r.rec.Error = ""
					r.cut = true
				default:
					failed.Add(1)
				}
				toks.Add(int64(r.rec.OutputTokens))
				r.rec.StartS = r.start.Sub(start).Seconds()
				mu.Lock()
				results = append(results, r)
				cut = append(cut, isCut)
				mu.Unlock()
				if !r.rec.OK && !isCut {
					return // a failing server is not hammered for the rest of the cell
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	var err error
	if pctx.Err() != nil {
		err = fmt.Errorf("decode at context %d concurrency %d: %w", ctxLen, conc, context.Cause(pctx))
	}
	cancelCell()
	cancel(nil)
	<-wdDone
	<-qpDone

	p.Issued, p.Completed, p.Failed, p.Cut, p.OutputTokens = int(issued.Load()), int(done.Load()), int(failed.Load()), int(nCut.Load()), int(toks.Load())
	p.DurationS = wall.Seconds()
	var ttft, lat, itl, perReq []float64
	var active float64
	recs := make([]RequestRecord, 0, len(results))
	okN, failN, cutN, tok := 0, 0, 0, 0
	for i, r := range results {
		rec := r.rec
		rec.Phase, rec.Concurrency, rec.Repeat, rec.Context = PhaseDecode, conc, 1, ctxLen
		recs = append(recs, rec)
		tok += rec.OutputTokens
		active += rec.Latency
		switch {
		case rec.OK:
			okN++
		case cut[i]:
			cutN++
		default:
			failN++
			continue
		}
		if rec.TTFT > 0 {
			ttft = append(ttft, rec.TTFT)
		}
		if rec.OK {
			lat = append(lat, rec.Latency)
		}
		itl = append(itl, r.itls...)
		if rec.OutputTokens > 1 && rec.Latency > rec.TTFT && rec.TTFT > 0 {
			perReq = append(perReq, float64(rec.OutputTokens-1)/(rec.Latency-rec.TTFT))
		}
	}
	if p.DurationS > 0 {
		p.OutputTokS = float64(p.OutputTokens) / p.DurationS
		p.RequestsPerS = float64(p.Completed) / p.DurationS
		p.AvgActive = active / p.DurationS
	}
	if len(perReq) > 0 {
		var s float64
		for _, x := range perReq {
			s += x
		}
		p.PerRequestTokS = s / float64(len(perReq))
	}
	p.TTFT, p.Latency, p.ITL = Summarize(ttft), Summarize(lat), Summarize(itl)
	p.Retried = retried(recs)
	p.Audit = Audit{
		RawCount:     len(recs) == p.Issued,
		Completed:    okN == p.Completed && p.Completed+p.Failed+p.Cut == p.Issued,
		Failed:       failN == p.Failed && p.Completed+p.Failed+p.Cut == p.Issued,
		Tokens:       tok == p.OutputTokens,
		AllRequested: p.Issued >= p.Requested,
	}
	p.State = "passed"
	if p.Failed > 0 || !p.Audit.ok() || err != nil {
		p.State = "failed"
	}
	p.Status = StatusValid
	if errors.Is(err, ErrInterrupted) {
		// Cut short by the caller: not a measurement of the cell.
		p.State, p.Status, p.Note = StateInterrupted, StatusNotRun, "interrupted"
		return p, recs, err
	}
	var why []string
	if maxRun > 0 && conc > maxRun {
		why = append(why, fmt.Sprintf("%d requests > server max running %d", conc, maxRun))
	}
	if qp.persistent() {
		why = append(why, fmt.Sprintf("the server queue held requests (up to %d) in %d of %d samples in the second half of the cell", qp.max.Load(), qp.queued.Load(), qp.samples.Load()))
	}
	// Requests waiting in a queue stream no tokens: if all conc requests
	// never streamed at the same moment, the server could not run them all
	// at once. (An average would also count the brief prefill wait of each
	// re-issued request, which is not queueing.)
	if n := maxStreaming(results); n < conc {
		why = append(why, fmt.Sprintf("at most %d of %d requests streamed at once", n, conc))
	}
	if len(why) > 0 {
		p.Status = StatusQueued
		p.Note = strings.Join(why, "; ")
	}
	estimated := 0
	for i, r := range results {
		if cut[i] && !r.usage && r.rec.OutputTokens > 0 {
			estimated++
		}
	}
	if estimated > 0 {
		p.Note = strings.TrimPrefix(p.Note+"; "+fmt.Sprintf("%d cut requests counted by chunks (the server sent no continuous usage): tokens are a lower bound", estimated), "; ")
	}
	if err == nil && p.Failed > 0 {
		p.Note = strings.TrimPrefix(p.Note+"; "+firstErr(results), "; ")
	}
	return p, recs, err
}

func firstErr(rs []*streamResult) string {
	for _, r := range rs {
		if !r.rec.OK && r.rec.Error != "" {
			return r.rec.Error
		}
	}
	return ""
}

// queuePoller reads sglang:num_queue_reqs from /metrics (served with
// --enable-metrics) once a second and keeps the maximum seen.
type queuePoller struct {
	c    *client
	from time.Time // samples before this are ignored (the first-token wave)
	max  atomic.Int64
	// samples and queued count the samples after from, and those with a
	// non-empty queue.
	samples, queued atomic.Int64
}

// persistent reports a queue seen in at least half of the steady-state
// samples: a re-issued request waiting for its prefill is not queueing.
func (q *queuePoller) persistent() bool {
	n := q.samples.Load()
	return n > 0 && 2*q.queued.Load() >= n
}

func (q *queuePoller) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		n, err := q.poll(ctx)
		if err != nil {
			return // no metrics endpoint: rely on the other signals
		}
		if time.Now().After(q.from) {
			q.samples.Add(1)
			if n > 0 {
				q.queued.Add(1)
			}
			if n > q.max.Load() {
				q.max.Store(n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (q *queuePoller) poll(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.c.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := q.c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics: HTTP %d", resp.StatusCode)
	}
	return parseQueueMetric(bufio.NewScanner(resp.Body)), nil
}

// parseQueueMetric sums sglang:num_queue_reqs over its label sets.
func parseQueueMetric(sc *bufio.Scanner) int64 {
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "sglang:num_queue_reqs") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return int64(sum)
}

// maxStreaming is the largest number of requests that were between their
// first token and their end at the same moment.
func maxStreaming(rs []*streamResult) int {
	type edge struct {
		t     time.Time
		delta int
	}
	var es []edge
	for _, r := range rs {
		if r.rec.TTFT <= 0 {
			continue
		}
		a := r.start.Add(time.Duration(r.rec.TTFT * float64(time.Second)))
		b := r.start.Add(time.Duration(r.rec.Latency * float64(time.Second)))
		if !b.After(a) {
			b = a.Add(time.Nanosecond)
		}
		es = append(es, edge{a, 1}, edge{b, -1})
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].t.Equal(es[j].t) {
			return es[i].delta < es[j].delta // ends before starts at the same instant
		}
		return es[i].t.Before(es[j].t)
	})
	n, best := 0, 0
	for _, e := range es {
		n += e.delta
		best = max(best, n)
	}
	return best
}

package objective

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RequestRecord is one measured request. Results keep them so that scores
// that need per-request data (goodput) can be recomputed from storage.
type RequestRecord struct {
	Phase        string  `json:"phase,omitempty"`
	Concurrency  int     `json:"concurrency"`
	Repeat       int     `json:"repeat"`
	Context      int     `json:"context,omitempty"`
	OK           bool    `json:"ok"`
	Error        string  `json:"error,omitempty"`
	StartS       float64 `json:"start_s"`   // offset from the start of its point
	TTFT         float64 `json:"ttft_s"`    // 0 when no token arrived
	Latency      float64 `json:"latency_s"` // end to end
	ITLMean      float64 `json:"itl_mean_s"`
	ITLMax       float64 `json:"itl_max_s"`
	OutputTokens int     `json:"output_tokens"`
	PromptTokens int     `json:"prompt_tokens,omitempty"`
	CachedTokens int     `json:"cached_tokens,omitempty"` // of PromptTokens, served from the server's prefix cache
	Chunks       int     `json:"chunks"`                  // SSE data lines received, [DONE] excluded
	Finish       string  `json:"finish_reason,omitempty"`
	// Retried is set when the first attempt failed on a reused keep-alive
	// connection before any response byte and the request was sent again
	// on a new connection; RetryCause is that first attempt's error. The
	// record's StartS, TTFT and Latency still count from the first attempt.
	Retried    bool   `json:"retried,omitempty"`
	RetryCause string `json:"retry_cause,omitempty"`
	// ScheduledS is an open-loop request's scheduled send time (offset
	// from the start of its point) and SendLagS how late it was actually
	// sent (StartS - ScheduledS): its TTFT and Latency count from
	// ScheduledS, not StartS (see openloop.go). Both 0 in a closed loop.
	ScheduledS float64 `json:"scheduled_s,omitempty"`
	SendLagS   float64 `json:"send_lag_s,omitempty"`
}

// watch tracks token progress across the streams of one point, for the
// hang watchdog.
type watch struct {
	last     atomic.Int64 // unix nanos of the last progress
	inflight atomic.Int32
	// open is set for an open loop, where sends come on a schedule: a send
	// restarts the clock only when nothing was in flight, so that sends
	// to a server that answers nothing do not keep the watchdog quiet.
	open bool
}

func (w *watch) tick(t time.Time) { w.last.Store(t.UnixNano()) }

func (w *watch) begin() {
	if !w.open || w.inflight.Load() == 0 {
		w.tick(time.Now())
	}
	w.inflight.Add(1)
}

func (w *watch) end() { w.tick(time.Now()); w.inflight.Add(-1) }

// run cancels ctx with an ErrHang cause when requests are in flight and no
// token arrived for hang. It returns when ctx is done.
func (w *watch) run(ctx context.Context, cancel context.CancelCauseFunc, hang time.Duration) {
	period := min(hang/4, time.Second)
	if period <= 0 {
		period = time.Millisecond
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n := w.inflight.Load()
			idle := now.Sub(time.Unix(0, w.last.Load()))
			if n > 0 && idle > hang {
				cancel(fmt.Errorf("%w: no token for %s with %d requests in flight", ErrHang, idle.Round(time.Millisecond), n))
				return
			}
		}
	}
}

// streamResult is one request's measurement plus, when collected, its text.
type streamResult struct {
	rec     RequestRecord
	start   time.Time
	usage   bool // a usage object arrived (token count exact)
	itls    []float64
	content strings.Builder
	tools   []toolCall
	trace   *RequestTrace // set when the client traces requests
	// cut is set when an interrupt (ErrInterrupted) stopped the request:
	// it neither completed nor failed.
	cut bool
}

// toolCall is a streamed tool call, fragments joined.
type toolCall struct {
	Name      string
	Arguments string
}

// stream sends one chat request and measures it. Each chunk is timestamped
// before it is decoded. With collect, content and tool calls are kept.
func (c *client) stream(ctx context.Context, body []byte, w *watch, collect bool) *streamResult {
	return c.streamFrom(ctx, body, w, collect, time.Time{})
}

// streamFrom is stream with TTFT and latency counted from origin (an
// open-loop request's scheduled send time) instead of the moment the
// request is handed to the transport; a zero origin means that moment.
func (c *client) streamFrom(ctx context.Context, body []byte, w *watch, collect bool, origin time.Time) *streamResult {
	out := &streamResult{}
	rec := &out.rec
	w.begin()
	defer w.end()
	if c.trace {
		out.trace = &RequestTrace{}
		ctx = withTrace(ctx, out.trace)
	}
	req, err := c.newPost(ctx, "/v1/chat/completions", body)
	if err != nil {
		rec.Error = err.Error()
		out.start = time.Now()
		return out
	}
	// The TTFT origin, as bench_serving's (taken right before its aiohttp
	// post): just before the transport takes a connection and writes the
	// request, after the load generator's own bookkeeping. A retried
	// request keeps this origin: its TTFT and latency include the failed
	// first attempt, as the user of a client that retries would see them.
	start := time.Now()
	out.start = start
	if origin.IsZero() {
		origin = start
	}
	if out.trace != nil {
		out.trace.begin(start)
	}
	var att attempt
	resp, err := c.send(req.WithContext(att.watch(ctx)))
	if att.staleConn(ctx, err) {
		// The server closed an idle keep-alive connection that the
		// transport had just handed out (llama-server closes after every
		// streamed response while advertising Keep-Alive): nothing was
		// answered, so sending the request again cannot count it twice.
		rec.Retried, rec.RetryCause = true, err.Error()
		if req, err = c.newPost(ctx, "/v1/chat/completions", body); err == nil {
			resp, err = c.sendFresh(req)
		}
	}
	if err != nil {
		rec.Error = errText(ctx, err)
		rec.Latency = time.Since(origin).Seconds()
		return out
	}
	defer resp.Body.Close()
	rd := newSSEReader(resp.Body)
	defer rd.release()
	var (
		ch          chunk
		first, prev time.Time
		counted     int
		usage       = -1
	)
	for {
		payload, err := rd.Next()
		now := time.Now()
		if err == io.EOF {
			rec.OK = true
			rec.Latency = now.Sub(origin).Seconds()
			// Read the body to its end (the chunked-encoding terminator) so
			// the transport reuses the connection: a body closed early costs
			// a new TCP connection per request.
			io.CopyN(io.Discard, resp.Body, 64<<10)
			break
		}
		if err != nil {
			rec.Error = errText(ctx, err)
			if why := notEventStream(resp.Header); why != "" && rec.Chunks == 0 && ctx.Err() == nil {
				// An HTML page or a whole JSON answer: say so, not that
				// the stream lacked its [DONE].
				rec.Error = why
			}
			rec.Latency = now.Sub(origin).Seconds()
			break
		}
		w.tick(now)
		rec.Chunks++
		if err := parseChunk(payload, &ch); err != nil {
			rec.Error = err.Error()
			rec.Latency = now.Sub(origin).Seconds()
			break
		}
		if ch.Error != nil {
			rec.Error = "server error: " + string(ch.Error)
			rec.Latency = now.Sub(origin).Seconds()
			break
		}
		if len(ch.Content) > 0 || len(ch.Reasoning) > 0 || len(ch.ToolCalls) > 0 {
			if first.IsZero() {
				first = now
			} else {
				gap := now.Sub(prev).Seconds()
				out.itls = append(out.itls, gap)
				rec.ITLMax = max(rec.ITLMax, gap)
			}
			prev = now
			counted++
		}
		if ch.HasUsage {
			usage = ch.CompletionTokens
			rec.PromptTokens = ch.PromptTokens
			rec.CachedTokens = ch.CachedTokens
		}
		if ch.Finish != nil {
			rec.Finish = string(ch.Finish)
		}
		if collect {
			if len(ch.Content) > 0 {
				out.content.WriteString(unescape(ch.Content))
			}
			if ch.ToolCalls != nil {
				out.tools = mergeToolCalls(out.tools, ch.ToolCalls)
			}
		}
	}
	if !first.IsZero() {
		rec.TTFT = first.Sub(origin).Seconds()
	}
	if tr := out.trace; tr != nil {
		tr.OK, tr.Header = rec.OK, resp.Header
		if !first.IsZero() {
			tr.FirstToken = tr.at(first)
		}
	}
	if usage >= 0 {
		rec.OutputTokens = usage
		out.usage = true
	} else {
		rec.OutputTokens = counted
	}
	if len(out.itls) > 0 {
		var s float64
		for _, g := range out.itls {
			s += g
		}
		rec.ITLMean = s / float64(len(out.itls))
	}
	return out
}

// notEventStream says why an answer whose stream could not be read is not
// an event stream, from its Content-Type; "" when it claims to be one or
// names no type (a server may send a stream with the wrong type, so the
// type alone fails nothing).
func notEventStream(h http.Header) string {
	ct := h.Get("Content-Type")
	if ct == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "text/event-stream" {
		return ""
	}
	if err == nil {
		ct = mt
	}
	return fmt.Sprintf("the server answered with Content-Type %s, not an event stream (text/event-stream)", ct)
}

// errText prefers the context's cause (hang, server died) over the
// transport error it produced.
func errText(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		if c := context.Cause(ctx); c != nil {
			return c.Error()
		}
	}
	return err.Error()
}

// unescape decodes an escaped JSON string body.
func unescape(raw []byte) string {
	if !strings.ContainsRune(string(raw), '\\') {
		return string(raw)
	}
	var s string
	b := make([]byte, 0, len(raw)+2)
	b = append(append(append(b, '"'), raw...), '"')
	if json.Unmarshal(b, &s) != nil {
		return string(raw)
	}
	return s
}

// mergeToolCalls folds one chunk's tool_calls fragments into calls.
func mergeToolCalls(calls []toolCall, raw []byte) []toolCall {
	var frags []struct {
		Index    *int `json:"index"`
		Function struct {
			Name      *string `json:"name"`
			Arguments *string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &frags) != nil {
		return calls
	}
	for k, f := range frags {
		i := k
		if f.Index != nil {
			i = *f.Index
		}
		if i < 0 || i > 64 {
			continue
		}
		for len(calls) <= i {
			calls = append(calls, toolCall{})
		}
		if f.Function.Name != nil {
			calls[i].Name += *f.Function.Name
		}
		if f.Function.Arguments != nil {
			calls[i].Arguments += *f.Function.Arguments
		}
	}
	return calls
}

// attempt records what the transport did with one attempt of a request:
// whether the connection it used was a reused idle one, and whether any
// response byte arrived. The hooks may run on the transport's goroutines.
type attempt struct {
	reused, gotByte atomic.Bool
}

// watch returns ctx with hooks that fill a; hooks already in ctx (a
// RequestTrace) still run.
func (a *attempt) watch(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:              func(i httptrace.GotConnInfo) { a.reused.Store(i.Reused) },
		GotFirstResponseByte: func() { a.gotByte.Store(true) },
	})
}

// staleConn reports a failure that may be retried: a transport error (not
// an HTTP status) on a reused connection before any response byte, while
// ctx is live. A failure on a new connection or after the response began
// is the server's and is never retried.
func (a *attempt) staleConn(ctx context.Context, err error) bool {
	var he *HTTPError
	return err != nil && !errors.As(err, &he) && ctx.Err() == nil && a.reused.Load() && !a.gotByte.Load()
}

// retried counts the records that needed a second attempt.
func retried(recs []RequestRecord) int {
	n := 0
	for _, r := range recs {
		if r.Retried {
			n++
		}
	}
	return n
}

// batch is the outcome of one closed-loop run of requests.
type batch struct {
	results   []*streamResult // one per issued request, in issue order
	requested int
	wall      time.Duration
	// counters kept by the workers, independent of the records, for the audit
	issued, completed, failed, cut, tokens int64
	// stop is why issuing stopped early (nil when every request ran).
	stop error
	// schedule is an open-loop batch's send offsets, one per requested
	// request (nil for a closed loop); wall then runs from the first
	// scheduled send to the end of the last request.
	schedule []time.Duration
}

// closedLoop runs bodies with conc workers pulling from a shared queue and
// stops issuing when ctx is done or the hang watchdog fires. The error is
// the cause of an early stop.
func (c *client) closedLoop(ctx context.Context, bodies [][]byte, conc int, hang time.Duration, collect bool) (*batch, error) {
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &watch{}
	w.tick(time.Now())
	wdDone := make(chan struct{})
	go func() { defer close(wdDone); w.run(pctx, cancel, hang) }()

	b := &batch{requested: len(bodies)}
	slots := make([]*streamResult, len(bodies))
	var next atomic.Int64
	var n tally
	// A dead server fails every request at once; stop issuing after as many
	// consecutive failures as there are workers (at least 8), as the seed's
	// sweeps did (issued 65 of 256 when the engine crashed at C64).
	giveUp := int64(max(8, conc))
	var wg sync.WaitGroup
	start := time.Now()
	for range max(1, min(conc, len(bodies))) {
		wg.Go(func() {
			for pctx.Err() == nil && n.failRun.Load() < giveUp {
				k := next.Add(1) - 1
				if k >= int64(len(bodies)) {
					return
				}
				n.issued.Add(1)
				r := c.stream(pctx, bodies[k], w, collect)
				r.rec.StartS = r.start.Sub(start).Seconds()
				n.add(pctx, r)
				slots[k] = r
			}
		})
	}
	wg.Wait()
	b.wall = time.Since(start)
	return b, b.end(pctx, cancel, wdDone, slots, &n)
}

// end closes a level once its requests returned: the cause of an early
// stop (nil when every request ran), the watchdog stopped, the results
// in issue order and the counts. It returns the cause, also kept as
// b.stop.
func (b *batch) end(pctx context.Context, cancel context.CancelCauseFunc, wdDone <-chan struct{}, slots []*streamResult, n *tally) error {
	var err error
	if pctx.Err() != nil {
		err = context.Cause(pctx)
	}
	cancel(nil)
	<-wdDone
	for _, r := range slots {
		if r != nil {
			b.results = append(b.results, r)
		}
	}
	n.into(b)
	b.stop = err
	return err
}

// tally counts a level's requests as its workers finish them, for the
// audit (independent of the records) and the consecutive failures that
// stop a level early.
type tally struct {
	issued, completed, failed, cut, tokens, failRun atomic.Int64
}

// add counts a finished request: completed, cut short by ctx's end, or
// failed (one more in a row).
func (n *tally) add(ctx context.Context, r *streamResult) {
	switch {
	case r.rec.OK:
		n.completed.Add(1)
		n.failRun.Store(0)
	case interrupted(ctx):
		r.cut = true
		n.cut.Add(1)
	default:
		n.failed.Add(1)
		n.failRun.Add(1)
	}
	n.tokens.Add(int64(r.rec.OutputTokens))
}

// into copies the counts into b.
func (n *tally) into(b *batch) {
	b.issued, b.completed, b.failed, b.cut, b.tokens = n.issued.Load(), n.completed.Load(), n.failed.Load(), n.cut.Load(), n.tokens.Load()
}

// point summarises a batch as a Point and its request records.
func (b *batch) point(phase string, conc, repeat, context int) (Point, []RequestRecord) {
	p := Point{Phase: phase, Concurrency: conc, Repeat: repeat, Context: context, Requested: b.requested}
	p.Issued = int(b.issued)
	p.Completed = int(b.completed)
	p.Failed = int(b.failed)
	p.Cut = int(b.cut)
	p.OutputTokens = int(b.tokens)
	p.DurationS = b.wall.Seconds()
	var ttft, lat, itl []float64
	recs := make([]RequestRecord, 0, len(b.results))
	var okN, failN, cutN, tok int
	for _, r := range b.results {
		rec := r.rec
		rec.Phase, rec.Concurrency, rec.Repeat, rec.Context = phase, conc, repeat, context
		recs = append(recs, rec)
		tok += rec.OutputTokens
		p.PromptTokens += rec.PromptTokens
		p.CachedTokens += rec.CachedTokens
		if r.cut {
			cutN++
			continue
		}
		if !rec.OK {
			failN++
			continue
		}
		okN++
		ttft = append(ttft, rec.TTFT)
		lat = append(lat, rec.Latency)
		itl = append(itl, r.itls...)
	}
	if p.DurationS > 0 {
		p.OutputTokS = float64(p.OutputTokens) / p.DurationS
		p.RequestsPerS = float64(p.Completed) / p.DurationS
	}
	p.TTFT, p.Latency, p.ITL = Summarize(ttft), Summarize(lat), Summarize(itl)
	p.Retried = retried(recs)
	if b.schedule != nil {
		openFigures(&p, b.schedule, recs)
	}
	p.Audit = Audit{
		RawCount:     len(recs) == p.Issued,
		Completed:    okN == p.Completed && cutN == p.Cut && p.Completed+p.Failed+p.Cut == p.Issued,
		Failed:       failN == p.Failed && cutN == p.Cut && p.Completed+p.Failed+p.Cut == p.Issued,
		Tokens:       tok == p.OutputTokens,
		AllRequested: p.Issued == p.Requested,
	}
	p.State = "passed"
	switch {
	case errors.Is(b.stop, ErrInterrupted):
		p.State = StateInterrupted
	case p.Failed > 0 || !p.Audit.ok():
		p.State = "failed"
	}
	return p, recs
}

// ok reports whether every audit flag holds.
func (a Audit) ok() bool {
	return a.RawCount && a.Completed && a.Failed && a.Tokens && a.AllRequested &&
		(a.ServerTokens == nil || a.ServerTokens.State != CheckFailed)
}

// OK reports whether every audit flag holds.
func (a Audit) OK() bool { return a.ok() }

// ErrFailedRequests reports that requests of a point failed.
var ErrFailedRequests = errors.New("requests failed")

// firstError returns the first request error of b, for messages.
func (b *batch) firstError() string {
	for _, r := range b.results {
		if !r.rec.OK && !r.cut {
			return r.rec.Error
		}
	}
	return ""
}

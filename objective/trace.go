package objective

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"time"
)

// RequestTrace is the timeline of one streamed request, for finding where
// client-measured latency goes (bench-loadgen's TTFT breakdown). Times are
// wall-clock Unix nanoseconds so that they compare with timestamps taken
// by another process on the same machine; 0 means the event did not happen.
type RequestTrace struct {
	Phase       string // "" for measured points, "warmup" for warm-up waves
	Concurrency int
	Repeat      int
	OK          bool
	// Start is the TTFT origin: taken just before the request is handed to
	// the transport (which takes a connection and writes it), like
	// bench_serving's before its aiohttp post. bench_serving's origin also
	// covers serializing the payload; sgtune's bodies are built beforehand
	// and only the http.Request (~5 µs) is made before the origin.
	Start int64
	// GotConn is when the transport handed over a connection; Reused tells
	// whether it was an idle keep-alive one (false = a new dial).
	GotConn int64
	Reused  bool
	// WroteRequest is when the request (headers and body) was written.
	WroteRequest int64
	// FirstByte is when the first byte of the response arrived.
	FirstByte int64
	// FirstToken is the TTFT end: the first chunk with content, reasoning
	// or tool calls was read.
	FirstToken int64
	// Header is the response header (a test server may report its own
	// timestamps there).
	Header http.Header

	t0 time.Time // Start, with its monotonic reading
}

// begin sets the trace's origin, Start, to t.
func (tr *RequestTrace) begin(t time.Time) {
	tr.Start, tr.t0 = t.UnixNano(), t
}

// at is t on the trace's timeline: Start's wall-clock time plus the
// monotonic time since, so the difference of two fields is the duration
// the load generator measured (FirstToken - Start is the record's TTFT)
// even when the wall clock is adjusted during the request.
func (tr *RequestTrace) at(t time.Time) int64 {
	return tr.Start + t.Sub(tr.t0).Nanoseconds()
}

// withTrace returns ctx carrying an httptrace hook that fills tr.
func withTrace(ctx context.Context, tr *RequestTrace) context.Context {
	now := func() int64 { return tr.at(time.Now()) }
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			tr.GotConn, tr.Reused = now(), i.Reused
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { tr.WroteRequest = now() },
		GotFirstResponseByte: func() { tr.FirstByte = now() },
	})
}

// emitTrace hands the traces of b's requests to opt.Trace.
func (b *batch) emitTrace(opt Options, phase string, conc, repeat int) {
	if opt.Trace == nil || b == nil {
		return
	}
	for _, r := range b.results {
		if r.trace != nil {
			tr := *r.trace
			tr.Phase, tr.Concurrency, tr.Repeat = phase, conc, repeat
			opt.Trace(tr)
		}
	}
}

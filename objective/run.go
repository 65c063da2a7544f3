package objective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/stat"
)

// Options tune one run of a workload.
type Options struct {
	// Progress, when set, receives one human-readable line per finished point.
	Progress func(line string)
	// Trace, when set, receives the timeline of every streamed request of
	// the chat workload's warm-up waves and measured repeats (not capacity
	// probes, gates or the matrix workload), after each point, from the
	// goroutine that called Run. Tracing adds a few microseconds per
	// request; sweeps leave it unset.
	Trace func(RequestTrace)
	// Point, when set, receives every measured point as it is done.
	Point func(Point)
	// Phase, when set, is told each phase as it starts: "quality before",
	// "warm-up C16", "C16 r2", "quality after".
	Phase func(phase string)
	// AfterLevel, when set, is called with the measured points of a chat
	// concurrency level once its repeats are done (not after the last
	// level); an error stops the run there and is returned (wrapped), with
	// every point measured so far in the Result. Multi-fidelity pruning
	// stops a trial that cannot come near the best this way.
	AfterLevel func(conc int, points []Point) error
	// RateFloor, when > 0, prunes a rate search (RateSearch): a probe at
	// or below it that fails ends the search with ErrRatePruned. The
	// search sets it to half the best max_rate found so far.
	RateFloor float64
	// MaxRunning, when > 0, is how many requests the server runs at once
	// (per its startup facts): a warm-up wave has to reach
	// min(concurrency, MaxRunning) requests decoding together.
	MaxRunning int
}

func (o Options) phase(format string, args ...any) {
	if o.Phase != nil {
		o.Phase(fmt.Sprintf(format, args...))
	}
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// ErrHang reports that no token arrived for the hang timeout while requests were in flight.
var ErrHang = errors.New("no token progress")

// ErrInterrupted is the cause to cancel Run's context with
// (context.WithCancelCause) when the user stopped the run (Ctrl-C): the
// point it cuts short is marked StateInterrupted instead of failed, its
// requests cut short count neither as completed nor as failed, the overall
// audit leaves it out, and Run's error wraps ErrInterrupted. Any other
// cancellation (a server that died) fails the point as before.
var ErrInterrupted = errors.New("interrupted")

// interrupted reports whether ctx was cancelled with ErrInterrupted.
func interrupted(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrInterrupted)
}

// ErrQuality reports that a quality gate did not pass; Result.Quality says which.
var ErrQuality = errors.New("quality gate failed")

// DefaultHangTimeout is used when Workload.HangTimeout is 0.
const DefaultHangTimeout = 60 * time.Second

// DefaultPromptTokens is the chat prompt length used when
// ChatSpec.PromptTokens is 0; rules that size the KV cache assume it too.
const DefaultPromptTokens = 256

// Default quality gate sizes, used when both request counts are 0 (unset).
const (
	DefaultJSONRequests = 24
	DefaultToolRequests = 8
)

// Run measures w against t. The Result holds every point finished so far,
// also when an error ends the run early. Errors wrap ErrHang (no token
// progress), ErrQuality (a gate failed), ErrFailedRequests (requests of a
// point failed) or the context's error (the caller cancelled, e.g. because
// the server process died); an *UnreachableError means no connection to the
// server could be made and a *NoAnswerError that the server did not answer
// a lookup (it wraps ErrHang): nothing was measured.
func Run(ctx context.Context, t Target, w Workload, opt Options) (*Result, error) {
	w = w.WithDefaults()
	res := &Result{Kind: w.Kind, Medians: map[int]Median{}}
	if err := w.Validate(); err != nil {
		return res, err
	}
	maxConc := 1
	for _, c := range append(append([]int(nil), w.Chat.Concurrency...), w.Matrix.Concurrency...) {
		maxConc = max(maxConc, c)
	}
	c := newClient(t, maxConc)
	c.trace = opt.Trace != nil
	defer c.close()
	model, listed, err := c.resolveModel(ctx, t.Model)
	if err != nil {
		if u := unreachable(t.URL, err); u != nil {
			return res, u
		}
		if interrupted(ctx) {
			return res, ErrInterrupted
		}
		return res, err
	}
	res.Model = model
	info, err := c.serverInfo(ctx)
	// With the model given, this is the first request: a server that
	// cannot be reached at all, or does not answer, ends the run before
	// any point.
	if u := unreachable(t.URL, err); u != nil {
		return res, u
	}
	if na := (*NoAnswerError)(nil); errors.As(err, &na) {
		return res, na
	}
	if interrupted(ctx) {
		return res, ErrInterrupted
	}
	res.Server = info

	var runErr error
	switch w.Kind {
	case "chat":
		runErr = runChat(ctx, c, model, w, opt, res)
	case "matrix":
		runErr = runMatrix(ctx, c, model, listed, w, opt, res)
	}
	res.finish(errors.Is(runErr, ErrInterrupted))
	return res, runErr
}

// finish fills medians and the overall audit from the points; interrupted
// says the caller stopped the run (ErrInterrupted).
func (r *Result) finish(interrupted bool) {
	r.Medians = Medians(r.Points)
	n := 0
	for _, p := range r.Points {
		if p.State != StateInterrupted {
			n++
		}
	}
	r.Audit = OverallAudit{OK: true, Points: n, Errors: []string{}, Interrupted: interrupted}
	switch {
	case n == 0 && interrupted:
		r.Audit = OverallAudit{Errors: []string{"interrupted before any point was measured"}, Interrupted: true}
	case n == 0:
		// Nothing measured (a gate failed first, say) proves nothing.
		r.Audit = OverallAudit{Errors: []string{"no point was measured"}}
	}
	for _, p := range r.Points {
		// A point the interrupt cut short is neither good nor bad.
		if p.Status == StatusOverCapacity || p.Status == StatusNotRun || p.State == StateInterrupted {
			continue
		}
		if !p.Audit.ok() {
			r.Audit.OK = false
			r.Audit.Errors = append(r.Audit.Errors, fmt.Sprintf("%s c=%d r=%d: %s", p.label(), p.Concurrency, p.Repeat, p.Audit.failing()))
		}
	}
}

func (p Point) label() string {
	if p.Context > 0 {
		return fmt.Sprintf("%s ctx=%d", p.Phase, p.Context)
	}
	if p.Phase != "" {
		return p.Phase
	}
	return "point"
}

func (a Audit) failing() string {
	var s []string
	for _, f := range []struct {
		ok   bool
		name string
	}{{a.RawCount, "raw_count"}, {a.Completed, "completed"}, {a.Failed, "failed"}, {a.Tokens, "tokens"}, {a.AllRequested, "all_requested"}} {
		if !f.ok {
			s = append(s, f.name)
		}
	}
	if tc := a.ServerTokens; tc != nil && tc.State == CheckFailed {
		s = append(s, "server_tokens: "+tc.Reason)
	}
	return fmt.Sprint(s)
}

// Medians summarises the measured chat points (Phase "") per concurrency:
// medians over repeats of each statistic, failed points excluded.
func Medians(points []Point) map[int]Median {
	by := map[int][]Point{}
	for _, p := range points {
		if p.Phase != "" || p.State != "passed" {
			continue
		}
		by[p.Concurrency] = append(by[p.Concurrency], p)
	}
	out := map[int]Median{}
	for c, ps := range by {
		col := func(f func(Point) float64) float64 {
			xs := make([]float64, len(ps))
			for i, p := range ps {
				xs[i] = f(p)
			}
			return median(xs)
		}
		out[c] = Median{
			Repeats:          len(ps),
			LogVarOutputTokS: logVar(ps),
			OutputTokS:       col(func(p Point) float64 { return p.OutputTokS }),
			TTFTP50:          col(func(p Point) float64 { return p.TTFT.P50 }),
			TTFTP99:          col(func(p Point) float64 { return p.TTFT.P99 }),
			LatencyP50:       col(func(p Point) float64 { return p.Latency.P50 }),
			LatencyP99:       col(func(p Point) float64 { return p.Latency.P99 }),
			ITLP50:           col(func(p Point) float64 { return p.ITL.P50 }),
			ITLP99:           col(func(p Point) float64 { return p.ITL.P99 }),
		}
	}
	return out
}

// logVar is the sample variance of the logarithm of the points' output
// tok/s (0 with fewer than two points, or a point without tokens).
func logVar(ps []Point) float64 {
	if len(ps) < 2 {
		return 0
	}
	logs := make([]float64, len(ps))
	for i, p := range ps {
		if p.OutputTokS <= 0 {
			return 0
		}
		logs[i] = math.Log(p.OutputTokS)
	}
	return stat.Variance(logs, nil)
}

// WithDefaults fills unset fields with the seed's defaults.
func (w Workload) WithDefaults() Workload {
	if w.Kind == "" {
		w.Kind = "chat"
	}
	if w.HangTimeout == 0 {
		w.HangTimeout = DefaultHangTimeout.Seconds()
	}
	ch := &w.Chat
	if rs := ch.RateSearch; rs != nil {
		d := rs.WithDefaults()
		ch.RateSearch = &d
	}
	if len(ch.Concurrency) == 0 && ch.RateSearch == nil {
		ch.Concurrency = []int{1, 16, 64, 128}
		if len(ch.Requests) == 0 {
			ch.Requests = []int{8, 32, 256, 512}
		}
	}
	if len(ch.Requests) == 0 {
		for _, c := range ch.Concurrency {
			ch.Requests = append(ch.Requests, max(8, 4*c))
		}
	}
	if ch.MaxTokens == 0 {
		ch.MaxTokens = 256
	}
	if ch.Repeats == 0 {
		ch.Repeats = 3
	}
	if ch.Warmup == nil {
		on := true
		ch.Warmup = &on
	}
	if ch.PromptTokens == 0 {
		ch.PromptTokens = DefaultPromptTokens
	}
	m := &w.Matrix
	if len(m.Contexts) == 0 {
		m.Contexts = []int{8192, 16384, 32768, 65536, 131072}
	}
	if len(m.Concurrency) == 0 {
		m.Concurrency = []int{1, 2, 4, 8, 16, 32, 64, 128}
	}
	if m.DurationS == 0 {
		m.DurationS = 30
	}
	if m.MaxOutput == 0 {
		m.MaxOutput = 4096
	}
	if m.Warmup == nil {
		on := true
		m.Warmup = &on
	}
	q := &w.Quality
	// Both 0 means unset; one 0 is a choice (e.g. json_requests: 0 to run
	// only the tool gate) and must be kept.
	if q.JSONRequests == 0 && q.ToolRequests == 0 {
		q.JSONRequests = DefaultJSONRequests
		q.ToolRequests = DefaultToolRequests
	}
	// 0 means unset here; study files and --min-pass reject an explicit 0.
	if q.MinPass == 0 {
		q.MinPass = 1
	}
	return w
}

// Validate reports a workload that cannot run (call after WithDefaults).
func (w Workload) Validate() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("workload: "+format, a...) }
	switch w.Kind {
	case "chat", "matrix":
	default:
		return bad("kind %q: want chat or matrix", w.Kind)
	}
	if w.HangTimeout < 0 {
		return bad("hang_timeout_s %v < 0", w.HangTimeout)
	}
	ch := w.Chat
	if w.Kind == "chat" {
		if len(ch.Requests) != len(ch.Concurrency) {
			return bad("chat: %d concurrency levels but %d request counts", len(ch.Concurrency), len(ch.Requests))
		}
		for i, c := range ch.Concurrency {
			if c < 1 || ch.Requests[i] < 1 {
				return bad("chat: concurrency %d with %d requests: both must be >= 1", c, ch.Requests[i])
			}
			// Fewer requests than the level never have c in flight: the
			// point would be labelled c and measure fewer.
			if ch.Requests[i] < c {
				return bad("chat: concurrency %d with %d requests: a level needs at least as many requests as its concurrency", c, ch.Requests[i])
			}
		}
		if ch.MaxTokens < 1 || ch.Repeats < 1 || ch.PromptTokens < 1 {
			return bad("chat: max_tokens, repeats and prompt_tokens must be >= 1")
		}
		if rs := ch.RateSearch; rs != nil {
			if msg := rs.WithDefaults().Check(); msg != "" {
				return bad("chat: rate_search: %s", msg)
			}
		} else if len(ch.Concurrency) == 0 {
			return bad("chat: no concurrency levels and no rate_search: nothing to measure")
		}
		if cs := ch.CapacitySearch; cs != nil {
			if len(cs.SLO) == 0 || cs.MaxProbes < 0 {
				return bad("chat: capacity_search needs an slo and max_probes >= 0")
			}
			if err := (ScoreSpec{SLO: cs.SLO}).Validate(); err != nil {
				return bad("chat: capacity_search: %v", err)
			}
		}
	}
	if w.Kind == "matrix" {
		m := w.Matrix
		for _, c := range m.Contexts {
			if c < 16 {
				return bad("matrix: context %d < 16", c)
			}
		}
		for _, c := range m.Concurrency {
			if c < 1 {
				return bad("matrix: concurrency %d < 1", c)
			}
		}
		if m.DurationS <= 0 || m.MaxOutput < 1 {
			return bad("matrix: duration_s and max_output must be > 0")
		}
	}
	q := w.Quality
	if q.JSONRequests < 0 || q.ToolRequests < 0 || q.MinPass < 0 || q.MinPass > 1 {
		return bad("quality: request counts must be >= 0 and min_pass in [0,1]")
	}
	return nil
}

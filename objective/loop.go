package objective

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// looper runs one closed or open loop of requests: the HTTP client, or a
// Loop.
type looper interface {
	closedLoop(ctx context.Context, bodies [][]byte, conc int, hang time.Duration, collect bool) (*batch, error)
	// openLoop sends bodies at scheduled offsets (see openloop.go).
	openLoop(ctx context.Context, bodies [][]byte, offsets []time.Duration, hang time.Duration, collect bool) (*batch, error)
	// startTokenProbe scrapes the server's generated-token counter before
	// measured requests (a skipped check where there is none).
	startTokenProbe(ctx context.Context) *tokenProbe
	scrapeCounter(ctx context.Context, metric string) (counterScrape, error)
}

// Loop runs one closed loop of chat-completion requests for RunLoop, as
// the load generator does against a URL: conc clients, each sending the
// next body the moment its previous request ended, until every body was
// sent (or it stops early: hang, server gone, as many failures in a row as
// clients). A simulator running in virtual time implements it.
type Loop interface {
	// ClosedLoop sends bodies with conc clients. hang is the watchdog: no
	// token for that long while requests are in flight stops the loop
	// with an error wrapping ErrHang. collect keeps each answer's content
	// and tool calls (the quality gates check them). The error is the
	// cause of an early stop.
	ClosedLoop(ctx context.Context, bodies [][]byte, conc int, hang time.Duration, collect bool) (LoopResult, error)
}

// OpenLooper is a Loop that can also run open-loop levels, as the load
// generator does against a URL (openloop.go): bodies[k] is sent at
// offsets[k] from the start whatever the server is doing, each record's
// TTFT and Latency count from its scheduled send (Record.ScheduledS, with
// StartS the actual send and SendLagS the difference), and Duration runs
// from the first scheduled send to the end of the last request. It stops
// sending early on ctx, hang, or 8 failures in a row; requests not sent
// are not issued. RunLoop's open-loop levels need a Loop that implements
// it.
type OpenLooper interface {
	Loop
	OpenLoop(ctx context.Context, bodies [][]byte, offsets []time.Duration, hang time.Duration, collect bool) (LoopResult, error)
}

// ErrNoOpenLoop reports an open-loop level asked of a Loop that is not an
// OpenLooper.
var ErrNoOpenLoop = errors.New("this loop runs closed loops only (no open-loop arrivals)")

// LoopResult is what one closed or open loop measured.
type LoopResult struct {
	// Exchanges holds one entry per issued request, in issue order.
	Exchanges []Exchange
	// Duration is from the first request sent to the end of the last.
	Duration time.Duration
	// Counters kept as requests ended, independently of Exchanges: the
	// audit compares the two.
	Issued, Completed, Failed, Tokens int
}

// Exchange is one request as a streaming client saw it.
type Exchange struct {
	// Record is the request's measurement (Phase, Concurrency, Repeat and
	// Context are filled in by the sweep).
	Record RequestRecord
	// ITLs are the gaps between the chunks that carried tokens.
	ITLs []float64
	// Content and ToolCalls are the answer when the loop collected it.
	Content   string
	ToolCalls []ToolCall
}

// ToolCall is one streamed tool call, fragments joined.
type ToolCall struct {
	Name      string
	Arguments string
}

// RunLoop measures w through l instead of a URL: the same sweep, warm-ups,
// quality gates, audit, statistics and errors as Run. model is the model
// name the request bodies carry. Only the chat workload runs through a
// Loop.
func RunLoop(ctx context.Context, l Loop, model string, w Workload, opt Options) (*Result, error) {
	w = w.WithDefaults()
	res := &Result{Kind: w.Kind, Medians: map[int]Median{}, Model: model}
	if err := w.Validate(); err != nil {
		return res, err
	}
	if w.Kind != "chat" {
		return res, fmt.Errorf("workload: kind %s cannot run through a Loop (only chat)", w.Kind)
	}
	err := runChat(ctx, loopAdapter{l}, model, w, opt, res)
	res.finish(errors.Is(err, ErrInterrupted))
	return res, err
}

// loopAdapter turns a Loop's result into the load generator's batch.
type loopAdapter struct{ l Loop }

// errNoCounter is why a Loop's token counts are not checked: it serves no
// /metrics (the virtual-time simulator counts what it generates itself).
var errNoCounter = errors.New("measured through a loop without /metrics")

func (loopAdapter) startTokenProbe(context.Context) *tokenProbe {
	return &tokenProbe{err: errNoCounter}
}

func (loopAdapter) scrapeCounter(context.Context, string) (counterScrape, error) {
	return counterScrape{}, errNoCounter
}

func (a loopAdapter) closedLoop(ctx context.Context, bodies [][]byte, conc int, hang time.Duration, collect bool) (*batch, error) {
	lr, err := a.l.ClosedLoop(ctx, bodies, conc, hang, collect)
	return toBatch(lr, len(bodies), collect), err
}

func (a loopAdapter) openLoop(ctx context.Context, bodies [][]byte, offsets []time.Duration, hang time.Duration, collect bool) (*batch, error) {
	ol, ok := a.l.(OpenLooper)
	if !ok {
		err := fmt.Errorf("open loop through %T: %w", a.l, ErrNoOpenLoop)
		return &batch{requested: len(bodies), stop: err}, err
	}
	if err := checkSchedule(bodies, offsets); err != nil {
		return &batch{requested: len(bodies), stop: err}, err
	}
	lr, err := ol.OpenLoop(ctx, bodies, offsets, hang, collect)
	b := toBatch(lr, len(bodies), collect)
	b.schedule = offsets
	b.stop = err
	return b, err
}

// toBatch turns a Loop's result for n requested bodies into a batch.
func toBatch(lr LoopResult, n int, collect bool) *batch {
	b := &batch{requested: n, wall: lr.Duration,
		issued: int64(lr.Issued), completed: int64(lr.Completed), failed: int64(lr.Failed), tokens: int64(lr.Tokens)}
	for _, x := range lr.Exchanges {
		r := &streamResult{rec: x.Record, itls: x.ITLs}
		if collect {
			r.content.WriteString(x.Content)
			for _, t := range x.ToolCalls {
				r.tools = append(r.tools, toolCall(t))
			}
		}
		b.results = append(b.results, r)
	}
	return b
}

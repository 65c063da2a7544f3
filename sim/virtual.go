package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"
)

// VirtualOptions configure a Virtual server.
type VirtualOptions struct {
	// Profile, when set, is used instead of loading --sim-profile (a
	// landscape of thousands of configs parses its profile once).
	Profile *Profile
	// Seed varies the simulator's own random draws: each request's EOS
	// position and generated values, and speculative acceptance. Seed 0
	// gives the draws of a freshly started live server.
	Seed uint64
	// GatherS is the window (simulated seconds) within which arrivals
	// count as simultaneous at a step boundary. The live server's
	// (--sim-gather-ms times the speed-up) absorbs wall-clock jitter that
	// virtual time does not have; 0 by default.
	GatherS float64
}

// ErrNotStarted is returned by NewVirtual for a launch whose startup fails
// (a startup error or a startup fault rule): run the startup (Main) to see
// how it fails.
var ErrNotStarted = errors.New("sim: the server does not start")

// ErrHang reports that no token arrived for the hang timeout while requests
// were in flight (the load generator's watchdog, in virtual time).
var ErrHang = errors.New("no token progress")

// ErrExited reports that the engine crashed during a closed loop: the live
// process logs CrashLog and exits with ExitCrash.
var ErrExited = errors.New("sim: the server process exited")

// Virtual is a simulated server run in virtual time: the HTTP server's
// request handling (prompt tokens, limits, EOS draws, structured outputs,
// tool calls, corruption faults) and the same Engine (scheduler,
// performance model, prefix cache, fault rules), driven by a closed loop of
// clients on the engine's own clock, with no sleeping and no HTTP. It is
// not safe for concurrent use.
type Virtual struct {
	p      *Profile
	pl     *Plan
	eng    *Engine
	srv    *Server
	gather float64
	now    float64 // the virtual clock (sim seconds)
	// events collects the sequences that progressed during one step.
	events []*Seq
}

// NewVirtual resolves SGLang's argv (vLLM's with --sim-engine vllm; plus
// --sim-* flags) as sglang-sim does
// and returns the server as it is once ready. It returns an error wrapping
// ErrNotStarted when the startup would fail.
func NewVirtual(argv []string, opt VirtualOptions) (*Virtual, error) {
	parse := ParseArgs
	if SimEngine(argv) == EngineVLLM {
		parse = ParseVLLMArgs
	}
	a, err := parse(argv)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	p := opt.Profile
	if p == nil {
		if p, err = LoadProfile(a.String("sim_profile", DefaultProfile)); err != nil {
			return nil, err
		}
	}
	pl := Resolve(a, p)
	if pl.Err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotStarted, pl.Err)
	}
	rules, err := MatchFaults(p.Faults, pl.Facts(a))
	if err != nil {
		return nil, fmt.Errorf("sim profile %s: %w", p.Name, err)
	}
	for _, r := range rules {
		if r.Effect.Kind == "startup_crash" || r.Effect.Kind == "startup_oom" {
			return nil, fmt.Errorf("%w: fault %s", ErrNotStarted, r.Name)
		}
	}
	eng := NewEngine(p, pl, rules, 1, nil, nil)
	eng.Reseed(opt.Seed)
	srv := newServer(p, pl, a, eng, 1, io.Discard, rules)
	srv.ready.Store(true)
	if opt.Seed != 0 {
		srv.salt = opt.Seed * 0x94d049bb133111eb
	}
	v := &Virtual{p: p, pl: pl, eng: eng, srv: srv, gather: max(0, opt.GatherS)}
	eng.observe = func(s *Seq) { v.events = append(v.events, s) }
	return v, nil
}

// Plan is what the server resolved at startup.
func (v *Virtual) Plan() *Plan { return v.pl }

// Now is the virtual clock: simulated seconds since the server was ready.
func (v *Virtual) Now() float64 { return v.now }

// Span is how much of the plan's capacity the requests so far touched.
func (v *Virtual) Span() Span { return v.eng.Span() }

// Crashed reports whether a fault crashed the engine.
func (v *Virtual) Crashed() bool { return v.eng.Crashed() }

// CrashLog is what the live process logs when a fault crashes its engine,
// before it exits with ExitCrash.
func (v *Virtual) CrashLog() []string {
	var b bytes.Buffer
	st := &startup{log: &b, pl: v.pl}
	st.traceback([]string{illegalMemory}, true)
	st.logf("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
	return strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
}

// Key identifies everything a closed loop's outcome depends on besides the
// workload, the seed, the KV capacity and the chunked-prefill size (see
// Span for those two): servers of one profile with equal keys, equal seeds
// and capacities within each other's Span measure identically.
func (v *Virtual) Key() string {
	pl, e := v.pl, v.eng
	slots, ratio := pl.StateSlots, pl.Ratio
	if !pl.Radix {
		slots, ratio = 0, 0 // the state pool only matters to the radix cache
	}
	return fmt.Sprintf("%s|tp%d ep%d dp%d pp%d|mrr%d budget%d ctx%d|radix%v slots%d ratio%d|overlap%v graph%v/%d|spec%q/%d|parsers %q %q|faults %d %d %d %v/%v",
		v.p.Name, pl.TP, pl.EP, pl.DP, pl.PP, pl.EffectiveMRR, max(pl.MaxPrefillTokens, pl.ChunkedPrefill), pl.ContextLen,
		pl.Radix, slots, ratio, pl.Overlap, pl.CUDAGraph, pl.GraphMaxBS, pl.SpecAlgorithm, pl.SpecSteps,
		pl.ReasoningParser, pl.ToolCallParser, e.crashAfter, e.crashRunning, e.hangRunning, v.srv.corrupt.JSONFrac, v.srv.corrupt.ToolFrac)
}

// ToolCall is a tool call as a streaming client assembles it.
type ToolCall struct {
	Name, Arguments string
}

// Exchange is one request of a closed loop as a streaming client sees it
// (seconds are simulated).
type Exchange struct {
	OK     bool
	Error  string  // why it failed, in the load generator's words
	StartS float64 // sent, from the start of the loop
	TTFT   float64 // to the first chunk with content; 0 when none came
	// Latency is to the end of the stream (or the failure).
	Latency float64
	// ITLs are the gaps between content chunks (0 between chunks of one
	// step).
	ITLs         []float64
	OutputTokens int
	PromptTokens int
	Chunks       int // SSE data lines, [DONE] excluded
	Finish       string
	// Content and ToolCalls are the answer, when the loop collects it.
	Content   string
	ToolCalls []ToolCall
}

// LoopResult is one closed loop.
type LoopResult struct {
	Exchanges []Exchange // one per issued request, in issue order
	// DurationS is from the loop's start to the end of its last request.
	DurationS float64
	// Counters kept as requests ended, independent of Exchanges (for the
	// audit).
	Issued, Completed, Failed, Tokens int
}

// client is one request in flight.
type client struct {
	idx   int // into the loop's exchanges
	seq   *Seq
	plan  *outputPlan
	start float64
	sent  int     // tokens streamed so far
	last  float64 // time of the last content chunk
}

// ClosedLoop sends bodies (chat-completion request bodies, as the load
// generator builds them) with conc clients, each sending the next body the
// moment its previous request ended, as the load generator does, and runs
// the engine in virtual time until every request ended. hangS is the
// watchdog: no token for that long while requests are in flight ends the
// loop with ErrHang. After a crash (see Crashed) the requests in flight
// and those sent after it fail; the loop ends with ErrExited when the
// clients gave up before sending every body. collect keeps each answer's
// content and tool calls.
func (v *Virtual) ClosedLoop(bodies [][]byte, conc int, hangS float64, collect bool) (LoopResult, error) {
	return v.loop(bodies, conc, nil, hangS, collect)
}

// OpenLoop sends bodies[k] at offsetsS[k] simulated seconds from the start
// (non-decreasing, one per body) whatever is in flight, as the load
// generator's open loop does, and runs the engine in virtual time until
// every request ended. A request that arrives during a step joins at the
// next step boundary, as on the live server. Each Exchange's StartS is
// its scheduled send (virtual time has no send lag) and its TTFT and
// Latency count from it; DurationS runs from the first scheduled send to
// the end of the last request. It stops sending after 8 failures in a
// row; hangS, crashes and collect are as for ClosedLoop.
func (v *Virtual) OpenLoop(bodies [][]byte, offsetsS []float64, hangS float64, collect bool) (LoopResult, error) {
	if len(offsetsS) != len(bodies) {
		return LoopResult{}, fmt.Errorf("sim: open loop: %d send offsets for %d requests", len(offsetsS), len(bodies))
	}
	for k := 1; k < len(offsetsS); k++ {
		if !(offsetsS[k] >= offsetsS[k-1]) {
			return LoopResult{}, fmt.Errorf("sim: open loop: send offsets out of order")
		}
	}
	if len(offsetsS) > 0 && !(offsetsS[0] >= 0) {
		return LoopResult{}, fmt.Errorf("sim: open loop: negative send offset %g", offsetsS[0])
	}
	if offsetsS == nil {
		offsetsS = []float64{} // an open loop of nothing
	}
	return v.loop(bodies, 0, offsetsS, hangS, collect)
}

// loop is ClosedLoop (offsets nil: conc clients) or OpenLoop (bodies[k]
// sent at start+offsets[k]).
func (v *Virtual) loop(bodies [][]byte, conc int, offsets []float64, hangS float64, collect bool) (LoopResult, error) {
	res := LoopResult{Exchanges: make([]Exchange, 0, len(bodies))}
	open := offsets != nil
	e := v.eng
	e.mu.Lock()
	defer e.mu.Unlock()
	v.now = math.Max(v.now, e.simT)
	start, lastProgress := v.now, v.now
	inflight := map[*Seq]*client{}
	next, failRun := 0, 0
	// As the load generator: after as many consecutive failures as there
	// are clients (at least 8), stop issuing.
	giveUp := max(8, conc)
	fail := func(c *Exchange, msg string, at float64) {
		c.OK, c.Error = false, msg
		c.Latency = at - start - c.StartS
		res.Failed++
		res.Tokens += c.OutputTokens
		failRun++
	}
	// send sends the next body at time at (<= v.now): false when the
	// server refused it at once.
	send := func(at float64) bool {
		body := bodies[next]
		next++
		res.Issued++
		res.Exchanges = append(res.Exchanges, Exchange{StartS: at - start})
		ex := &res.Exchanges[len(res.Exchanges)-1]
		if e.crashed {
			fail(ex, "HTTP 500: "+errorJSON("engine unavailable", 500), at)
			return false
		}
		pb, err := parseBody(body)
		if err != nil {
			fail(ex, "HTTP 400: "+errorJSON("Invalid request body: "+err.Error(), 400), at)
			return false
		}
		seq, plan, code, msg := v.srv.prepareParsed(&pb.req, pb.prompt)
		if code != 0 {
			fail(ex, fmt.Sprintf("HTTP %d: %s", code, errorJSON(msg, code)), at)
			return false
		}
		ex.PromptTokens = seq.Prompt
		e.submitAt(seq, v.now, at, 0)
		if !open || len(inflight) == 0 {
			// As the load generator's watchdog: in an open loop a send
			// restarts the clock only when nothing was in flight.
			lastProgress = math.Max(lastProgress, at)
		}
		inflight[seq] = &client{idx: len(res.Exchanges) - 1, seq: seq, plan: plan, start: at}
		return true
	}
	// due is when the next open-loop body is to be sent (+Inf when none
	// will be).
	due := func() float64 {
		if !open || next >= len(bodies) || failRun >= giveUp {
			return math.Inf(1)
		}
		return start + offsets[next]
	}
	// issue, closed loop: sends the next body for a client that is free;
	// a request the server refuses at once frees the client again. Open
	// loop: sends every body due by now.
	issue := func() {
		if open {
			for due() <= v.now {
				send(due())
			}
			return
		}
		for next < len(bodies) && failRun < giveUp {
			if send(v.now) {
				return
			}
		}
	}
	if open {
		if d := due(); !math.IsInf(d, 1) {
			v.now = math.Max(v.now, d)
		}
		issue()
	} else {
		for range max(1, min(conc, len(bodies))) {
			issue()
		}
	}
	// hang ends the loop when the watchdog fires before time t.
	hang := func(t float64) bool {
		if len(inflight) == 0 || t-lastProgress <= hangS || hangS <= 0 {
			return false
		}
		v.now = lastProgress + hangS
		return true
	}
	var err error
loop:
	for len(inflight) > 0 || !math.IsInf(due(), 1) {
		st := e.decide(v.now, v.gather)
		switch st.kind {
		case stepIdle:
			if d := due(); !math.IsInf(d, 1) {
				// Nothing in the engine: on to the next arrival.
				v.now = math.Max(v.now, d)
				issue()
				continue
			}
			// Every request in flight was refused or aborted.
			break loop
		case stepWait:
			until := math.Min(st.until, due())
			if hang(until) {
				err = ErrHang
				break loop
			}
			v.now = math.Max(v.now, until)
			if open {
				issue()
			}
		case stepHung:
			// Open loop: the bodies due before the watchdog fires are
			// still sent (a send is no progress while others wait).
			for d := due(); hangS > 0 && d <= lastProgress+hangS; d = due() {
				v.now = math.Max(v.now, d)
				send(d)
			}
			hang(math.Inf(1))
			err = ErrHang
			break loop
		case stepCrashed:
			err = ErrExited
			break loop
		case stepRun:
			end := e.simT + st.dur
			if hang(end) {
				err = ErrHang
				break loop
			}
			e.simT, v.now = end, end
			v.events = v.events[:0]
			st.apply()
			for _, s := range v.events {
				c, ok := inflight[s]
				if !ok {
					continue
				}
				v.stream(c, &res.Exchanges[c.idx], collect)
				lastProgress = v.now
				if s.Done() {
					delete(inflight, s)
					ex := &res.Exchanges[c.idx]
					ex.OK = true
					ex.Latency = v.now - c.start
					res.Completed++
					res.Tokens += ex.OutputTokens
					failRun = 0
					if !open {
						issue()
					}
				}
			}
			clear(v.events)
			if open {
				// Arrivals during the step join at its end.
				issue()
			}
		}
	}
	// What is still in flight failed.
	msg := "unexpected EOF" // the crashed engine drops the connection
	if errors.Is(err, ErrHang) {
		err = fmt.Errorf("%w: no token for %s with %d requests in flight", ErrHang, time.Duration(hangS*float64(time.Second)).Round(time.Millisecond), len(inflight))
		msg = err.Error()
	}
	for _, c := range inflight {
		fail(&res.Exchanges[c.idx], msg, v.now)
	}
	if errors.Is(err, ErrExited) {
		// Until the process is gone the server answers "engine
		// unavailable": the clients go on until they give up. A loop that
		// sent everything ends as the load generator's does, without an
		// error (the failures say what happened).
		if open {
			for d := due(); !math.IsInf(d, 1); d = due() {
				v.now = math.Max(v.now, d)
				send(d)
			}
		} else {
			issue() // every client fails at once until they give up
		}
		if next == len(bodies) {
			err = nil
		}
	}
	res.DurationS = v.now - start
	if open && len(offsets) > 0 {
		res.DurationS -= offsets[0]
	}
	return res, err
}

// stream accounts the chunks the client reads for c's new tokens at v.now,
// as Server.stream writes them: one chunk per kind of token per step.
func (v *Virtual) stream(c *client, ex *Exchange, collect bool) {
	g := c.seq.Gen()
	if g > c.sent {
		n := c.plan.chunks(c.sent, g)
		ex.Chunks += n
		if c.sent == 0 {
			ex.TTFT = v.now - c.start
			ex.Chunks++ // the role chunk comes with the first tokens
		} else {
			ex.ITLs = append(ex.ITLs, v.now-c.last)
		}
		for ; n > 1; n-- {
			ex.ITLs = append(ex.ITLs, 0) // later chunks of the same write
		}
		c.sent, c.last = g, v.now
	}
	if !c.seq.Done() || c.seq.Err() != nil {
		return
	}
	ex.OutputTokens = g
	ex.Finish, _ = v.srv.finishFields(c.seq, c.plan)
	ex.Chunks += 2 // the finish chunk and the usage chunk
	if collect {
		content, _, args, _ := c.plan.assemble(g)
		ex.Content = content
		if c.plan.toolName != "" {
			ex.ToolCalls = []ToolCall{{Name: c.plan.toolName, Arguments: args}}
		}
	}
}

// chunks counts the SSE chunks Server.stream writes for tokens [from, to)
// when they come out in one step: one per run of tokens of one kind, one
// per tool-call header.
func (o *outputPlan) chunks(from, to int) int {
	if o.finite == nil {
		n := 0
		if from < o.reasonN {
			n++
		}
		if to > o.reasonN {
			n++
		}
		return n
	}
	n := 0
	var cur pieceKind
	for i := from; i < to; i++ {
		if k := o.finite[i].kind; k != cur || k == pToolHdr {
			n++
			cur = k
		}
	}
	return n
}

// assemble returns the first g tokens of the answer as a client joins them:
// content, reasoning and tool-call arguments, unescaped, and the number of
// reasoning tokens.
func (o *outputPlan) assemble(g int) (content, reasoning, args string, nReason int) {
	var c, r, a strings.Builder
	for i := 0; i < g; i++ {
		p := o.at(i)
		txt := unescapeJSON(p.text)
		switch p.kind {
		case pReason:
			r.WriteString(txt)
			nReason++
		case pContent:
			c.WriteString(txt)
		case pToolArg:
			a.WriteString(txt)
		}
	}
	return c.String(), r.String(), a.String(), nReason
}

// parsedBody is a request body decoded and its prompt read: the part of
// request handling that depends on the body alone.
type parsedBody struct {
	req    chatRequest
	prompt promptInfo
}

// bodies caches parsed bodies: a search sends the same workload's bodies
// to every config, and decoding them is most of a virtual request's cost.
var bodies = struct {
	sync.Mutex
	m map[string]*parsedBody
}{m: map[string]*parsedBody{}}

// maxCachedBodies bounds the cache (a few workloads' worth).
const maxCachedBodies = 1 << 15

// parseBody decodes body as the HTTP handler does (the result is shared:
// read only).
func parseBody(body []byte) (*parsedBody, error) {
	bodies.Lock()
	pb, ok := bodies.m[string(body)]
	bodies.Unlock()
	if ok {
		return pb, nil
	}
	pb = &parsedBody{}
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&pb.req); err != nil {
		return nil, err
	}
	pb.prompt = readPrompt(&pb.req)
	bodies.Lock()
	if len(bodies.m) >= maxCachedBodies {
		clear(bodies.m)
	}
	bodies.m[string(body)] = pb
	bodies.Unlock()
	return pb, nil
}

// errorJSON is the body of an error answer as the client reads it.
func errorJSON(msg string, code int) string {
	b, _ := json.Marshal(errorBody(msg, code))
	return string(b)
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCrashed fails the requests in flight when the engine crashes.
var ErrCrashed = errors.New("engine crashed")

// Seq is one request inside the engine. The engine writes gen/done; the
// HTTP handler waits on Notify and reads them.
type Seq struct {
	Prompt    int    // prompt tokens
	Limit     int    // most tokens to generate
	EOSAt     int    // stop with EOS after this many tokens (0: never)
	PromptKey uint64 // hash of the whole prompt (seeds the answer's draws)
	// Chain is the prompt's prefix-cache chain: the hash of each full
	// block of cacheBlockTokens tokens, chained so that Chain[i] names
	// the prompt up to the end of block i (read only: shared by the
	// requests of one body).
	Chain  []uint64
	Health bool // health probe / startup warmup: no faults, no cold shapes, no stats
	Notify chan struct{}
	// Received is the wall time the request reached the server (zero: at
	// Submit). The simulator's own parsing of a request (a 1M-token body
	// takes a noticeable fraction of a second) then overlaps the simulated
	// front-end latency instead of adding to it times the speed-up.
	Received time.Time

	Cached int // prompt tokens served from the prefix cache (set at admission)
	// blocks are the cached blocks its chain matched at admission, for
	// touching them without lookups (see prefixCache.touchKnown).
	blocks []*cacheBlock

	gen      atomic.Int64
	done     atomic.Bool
	finish   string // stop | length
	err      error
	arrive   float64 // sim time when the scheduler may see it
	start    float64 // sim time of submission
	firstAt  float64
	kvHeld   int
	prefLeft int
	replica  int  // the DP replica serving it (Plan.Replicas)
	late     bool // its simulated arrival had passed when it was submitted
}

// Gen is the number of tokens generated so far.
func (s *Seq) Gen() int { return int(s.gen.Load()) }

// Done reports completion; Finish and Err are valid once it is true.
func (s *Seq) Done() bool { return s.done.Load() }

// Finish is stop or length.
func (s *Seq) Finish() string { return s.finish }

// Err is non-nil when the request failed (crash, abort).
func (s *Seq) Err() error { return s.err }

func (s *Seq) signal() {
	select {
	case s.Notify <- struct{}{}:
	default:
	}
}

// Stats are live engine figures for /metrics and /server_info.
type Stats struct {
	Running, Queued      int
	UsedTokens           int
	GenTokens, PromptTok int64
	CachedTok            int64
	Requests, Aborted    int64
	GenThroughput        float64
	AcceptLen            float64
	TTFT, E2E            []float64 // recent samples (sim seconds)
}

// Engine is the simulated scheduler: one goroutine advances a batch in
// prefill and decode steps, sleeping sim-time/speedup between them.
type Engine struct {
	p     *Profile
	pl    *Plan
	speed float64
	log   io.Writer
	logPf string

	mu         sync.Mutex
	wake       chan struct{}
	t0         time.Time
	simT       float64
	pending    []*Seq
	waiting    []*Seq
	running    []*Seq
	prefilling *Seq
	// prefillingRep is each DP replica's chunked prefill in progress
	// (Plan.Replicas > 1; prefilling is then unused).
	prefillingRep []*Seq
	kvUsed        int
	// kvRep is kvUsed per DP replica (one entry without replicas).
	kvRep []int
	// nextReplica is where round-robin dispatch sends the next request.
	nextReplica int
	highWater   map[string]int
	// cachedStates counts state slots held by the radix cache for
	// finished requests (radix on), bounded by the slots running requests
	// leave free.
	cachedStates int
	// cache holds the prompt blocks of prefilled requests (radix on);
	// caches has one per DP replica, cache being the first.
	cache     *prefixCache
	caches    []*prefixCache
	rng       *rand.Rand
	admitted  int
	hung      bool
	crashed   bool
	lastToken time.Time
	steps     int

	crashAfter   int // 0: off
	crashRunning int
	hangRunning  int

	stats     Stats
	acceptSum float64
	acceptN   float64
	onCrash   func(reason string)

	// observe, when set, is called (with mu held) each time a request
	// gains tokens or ends: the virtual-time loop's view of the stream.
	observe func(*Seq)
	// span is how much of the plan's capacity the run touched.
	span Span
	// decodeBuf is decode's reused copy of the running list.
	decodeBuf []*Seq

	// OverheadMS is the wall-clock request overhead (ms) subtracted from
	// the simulated front-end latency (--sim-overhead-ms).
	OverheadMS float64
	// Debug logs simulator decisions (--log-level debug).
	Debug bool
	// GatherMS is the wall-clock window (ms) within which arrivals are
	// treated as simultaneous (--sim-gather-ms).
	GatherMS float64
}

// Span is how much of a plan's capacity a run touched: a run whose peaks
// stay within the KV tokens and under the chunked-prefill size behaves the
// same with any KV capacity at or above KVPeak and any chunk size at or
// above PromptPeak.
type Span struct {
	// KVPeak is the largest KV demand the scheduler checked against the
	// pool: tokens held plus a request's need at admission, or prompt
	// tokens held by the prefix cache.
	KVPeak int
	// PromptPeak is the most new prompt tokens one admitted request had.
	PromptPeak int
	// KVBound says the KV pool bound a decision: the run depends on the
	// exact KV capacity.
	KVBound bool
	// Chunked says a prompt was prefilled in chunks: the run depends on
	// the exact chunk size.
	Chunked bool
}

// Span returns how much of the plan's capacity the run touched so far.
func (e *Engine) Span() Span {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.span
}

// Reseed sets the engine's own random draws (speculative acceptance);
// seed 0 is the draws of a freshly started server.
func (e *Engine) Reseed(seed uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rng = rand.New(rand.NewPCG(1+seed, 2))
}

// NewEngine builds the scheduler for plan pl. onCrash is called once, from
// the scheduler goroutine, when a fault rule crashes the engine.
func NewEngine(p *Profile, pl *Plan, rules []FaultRule, speedup float64, log io.Writer, onCrash func(string)) *Engine {
	e := &Engine{p: p, pl: pl, speed: speedup, log: log, wake: make(chan struct{}, 1),
		highWater: map[string]int{}, cache: newPrefixCache(), t0: time.Now(), rng: rand.New(rand.NewPCG(1, 2)), onCrash: onCrash}
	e.logPf = schedPrefix(pl)
	e.kvRep = make([]int, pl.replicas())
	e.caches = []*prefixCache{e.cache}
	for range pl.replicas() - 1 {
		e.caches = append(e.caches, newPrefixCache())
	}
	for _, r := range rules {
		switch r.Effect.Kind {
		case "crash_after_requests":
			e.crashAfter = minPos(e.crashAfter, r.Effect.N)
		case "crash_when_running_over":
			e.crashRunning = minPos(e.crashRunning, r.Effect.N)
		case "hang_when_running_over":
			e.hangRunning = minPos(e.hangRunning, r.Effect.N)
		}
	}
	return e
}

// minPos is the smaller positive threshold (0 means unset).
func minPos(a, b int) int {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

func schedPrefix(pl *Plan) string {
	s := ""
	if pl.DP > 1 {
		s += " DP0"
	}
	if pl.PP > 1 {
		s += " PP0"
	}
	if pl.TP > 1 {
		s += " TP0"
	}
	if pl.EP > 1 {
		s += " EP0"
	}
	return s
}

// simNow is the sim time that corresponds to the wall clock.
func (e *Engine) simNow() float64 { return time.Since(e.t0).Seconds() * e.speed }

// Submit queues s; it becomes visible to the scheduler after the
// front-end latency.
func (e *Engine) Submit(s *Seq) error {
	e.mu.Lock()
	if e.crashed {
		e.mu.Unlock()
		return ErrCrashed
	}
	now := e.simNow()
	start := now
	if !s.Received.IsZero() {
		start = min(now, math.Max(0, s.Received.Sub(e.t0).Seconds()*e.speed))
	}
	if s.Notify == nil {
		s.Notify = make(chan struct{}, 1)
	}
	// The wall-clock overhead of HTTP on both sides (about OverheadMS)
	// is taken out of the simulated front-end latency, so that TTFT
	// does not grow with the speed-up.
	e.submitAt(s, now, start, e.OverheadMS/1000*e.speed)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// submitAt queues s, sent at sim time start and seen by the engine at sim
// time now; overhead (sim seconds) is the part of the front-end latency
// spent outside the simulation. Call with e.mu held.
func (e *Engine) submitAt(s *Seq, now, start, overhead float64) {
	s.start = start
	s.arrive = s.start + max(0, e.p.Perf.FrontendMS/1000-overhead)
	s.replica = e.nextReplica
	e.nextReplica = (e.nextReplica + 1) % len(e.kvRep)
	s.late = s.arrive < now
	e.pending = append(e.pending, s)
}

// Abort removes s (client went away).
func (e *Engine) Abort(s *Seq) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.done.Load() {
		return
	}
	e.stats.Aborted++
	remove := func(list []*Seq) []*Seq {
		for i, x := range list {
			if x == s {
				return append(list[:i], list[i+1:]...)
			}
		}
		return list
	}
	e.pending = remove(e.pending)
	e.waiting = remove(e.waiting)
	e.running = remove(e.running)
	if e.prefilling == s {
		e.prefilling = nil
	}
	for r, x := range e.prefillingRep {
		if x == s {
			e.prefillingRep[r] = nil
		}
	}
	e.kvUsed -= s.kvHeld
	e.kvRep[s.replica] -= s.kvHeld
	s.kvHeld = 0
	s.err = errors.New("aborted")
	s.done.Store(true)
	s.signal()
}

// chunking counts the chunked prefills in progress (one per DP replica at
// most). Call with e.mu held.
func (e *Engine) chunking() int {
	n := 0
	if e.prefilling != nil {
		n++
	}
	for _, s := range e.prefillingRep {
		if s != nil {
			n++
		}
	}
	return n
}

// Snapshot returns live statistics.
func (e *Engine) Snapshot() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats
	st.Running = len(e.running)
	st.Running += e.chunking()
	st.Queued = len(e.waiting) + len(e.pending)
	st.UsedTokens = e.kvUsed
	if e.acceptN > 0 {
		st.AcceptLen = e.acceptSum / e.acceptN
	}
	st.TTFT = append([]float64(nil), e.stats.TTFT...)
	st.E2E = append([]float64(nil), e.stats.E2E...)
	e.stats.TTFT = e.stats.TTFT[:0]
	e.stats.E2E = e.stats.E2E[:0]
	return st
}

// RecentlyActive reports whether a token was produced within d (wall).
func (e *Engine) RecentlyActive(d time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.hung && len(e.running) > 0 && time.Since(e.lastToken) < d
}

// FlushCache empties the prefix cache when idle.
func (e *Engine) FlushCache() (ok bool, queued, running int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	queued, running = len(e.waiting)+len(e.pending), len(e.running)
	if queued+running > 0 || e.chunking() > 0 {
		return false, queued, running
	}
	for i := range e.caches {
		e.caches[i] = newPrefixCache()
	}
	e.cache = e.caches[0]
	e.cachedStates = 0
	return true, 0, 0
}

// stepKind is what the scheduler does next.
type stepKind int

const (
	stepIdle    stepKind = iota // nothing submitted: wait for a submission
	stepWait                    // nothing runnable before step.until (sim time)
	stepRun                     // run a step of step.dur, then step.apply at its end
	stepHung                    // a hang fault fired: no more progress
	stepCrashed                 // a fault crashed the engine
)

// step is one scheduling decision.
type step struct {
	kind  stepKind
	until float64 // stepWait: sim time to wait for
	dur   float64 // stepRun: simulated duration
	apply func()  // stepRun: the step's outcome, applied at simT+dur
}

// decide takes the next scheduling decision at sim time now; gather is the
// window (sim seconds) within which arrivals count as simultaneous. It is
// the scheduler shared by the wall-clock loop (Run) and the virtual-time
// loop (Virtual); it moves e.simT only forward to now when the engine is
// idle. Call with e.mu held.
func (e *Engine) decide(now, gather float64) step {
	if e.crashed {
		return step{kind: stepCrashed}
	}
	if len(e.running) == 0 && len(e.waiting) == 0 && e.chunking() == 0 {
		if len(e.pending) == 0 {
			return step{kind: stepIdle}
		}
		earliest, late := math.Inf(1), math.Inf(1)
		for _, s := range e.pending {
			earliest = math.Min(earliest, s.arrive)
			if s.late {
				late = math.Min(late, s.arrive)
			}
		}
		// Idle until now: the engine would have started at the
		// simulated arrival of a request that was submitted late,
		// because the simulator's own handling of it (parsing a
		// 1M-token body) took longer in wall time than the simulated
		// front-end latency.
		if e.simT < now {
			e.simT = math.Max(e.simT, math.Min(now, late))
		}
		if earliest > e.simT {
			return step{kind: stepWait, until: earliest}
		}
	}
	// Requests whose front-end latency has passed join the queue.
	// Arrivals within the gather window (wall jitter of the client
	// and HTTP, scaled by the speed-up) count as simultaneous.
	keep := e.pending[:0]
	for _, s := range e.pending {
		if s.arrive <= e.simT+gather {
			e.waiting = append(e.waiting, s)
		} else {
			keep = append(keep, s)
		}
	}
	clear(e.pending[len(keep):])
	e.pending = keep
	if e.hung {
		return step{kind: stepHung}
	}
	dur, apply := e.plan()
	if e.crashed {
		return step{kind: stepCrashed}
	}
	if apply == nil {
		// Nothing runnable yet (all pending in the future): advance.
		e.simT = math.Max(e.simT, now)
		return step{kind: stepWait, until: e.simT + 0.001}
	}
	return step{kind: stepRun, dur: dur, apply: apply}
}

// Run is the scheduler loop in wall-clock time: it sleeps sim-time/speedup
// between steps and returns when ctx ends or the engine crashes.
func (e *Engine) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// sleepUntil sleeps until the wall time of simT, or until a
	// submission when wake is set; false when ctx ended.
	sleepUntil := func(simT float64, wake bool) bool {
		d := time.Until(e.t0.Add(time.Duration(simT / e.speed * float64(time.Second))))
		if d <= 0 {
			return ctx.Err() == nil
		}
		timer.Reset(d)
		var woken <-chan struct{}
		if wake {
			woken = e.wake
		}
		select {
		case <-timer.C:
			return true
		case <-woken:
			if !timer.Stop() {
				<-timer.C
			}
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		e.mu.Lock()
		st := e.decide(e.simNow(), e.GatherMS/1000*e.speed)
		switch st.kind {
		case stepCrashed:
			e.mu.Unlock()
			return
		case stepIdle:
			e.mu.Unlock()
			select {
			case <-e.wake:
			case <-ctx.Done():
			}
		case stepWait:
			e.mu.Unlock()
			if !sleepUntil(st.until, true) {
				return
			}
		case stepHung:
			e.mu.Unlock()
			<-ctx.Done()
			return
		case stepRun:
			end := e.simT + st.dur
			e.mu.Unlock()
			if !sleepUntil(end, false) {
				return
			}
			e.mu.Lock()
			e.simT = end
			st.apply()
			e.mu.Unlock()
		}
	}
}

func pow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// cold returns the penalty when a step runs a batch larger than any seen
// before (JIT kernels compile on first use): n (the running batch the
// prefill builds, or the decoding requests) rounded up to a power of two
// is compared with the high-water mark of its kind.
func (e *Engine) cold(kind string, n int, health bool) float64 {
	if health {
		return 0
	}
	b := pow2(n)
	if b <= e.highWater[kind] {
		return 0
	}
	e.highWater[kind] = b
	pen := e.p.Perf.ColdDecodeS
	if kind == "p" {
		pen = e.p.Perf.ColdPrefillS
	}
	if !e.pl.CUDAGraph && e.p.Perf.NoGraphColdScale > 0 {
		pen *= e.p.Perf.NoGraphColdScale
	}
	return pen
}

// coldPrefill is the first-time cost of a prefill step after which
// running requests run: SGLang pays for a batch shape (JIT kernels,
// autotuning; decode CUDA graphs are captured at startup) on the first
// batch of that size, so the shape is the running batch this step builds,
// rounded up to a power of two, not the load in flight. Counting requests
// in flight at submission missed those inside a prefill step: a warm-up
// whose second half arrived during the first half's prefill decoded 16
// together without paying, and the measured repeat paid instead (make
// demo: C16 3,715 tok/s against about 19,000).
func (e *Engine) coldPrefill(running int, health bool) float64 {
	if health {
		return 0
	}
	had := e.highWater["p"]
	pen := e.cold("p", running, false)
	if pen > 0 && e.Debug && e.log != nil {
		fmt.Fprintf(e.log, "[%s%s] [sim] cold batch shape: prefill to %d running (compiled for %d), +%.1f s\n", stamp(), e.logPf, running, had, pen)
	}
	return pen
}

// epFactor is the step multiplier for EP < TP at batch b.
func (e *Engine) epFactor(b int) float64 {
	if e.pl.EP < e.pl.TP && len(e.p.Perf.EPPartialFactor) > 0 {
		return e.p.Perf.EPPartialFactor.At(float64(b))
	}
	return 1
}

// StepMS is the simulated decode step time (ms) for a batch of b requests
// holding kvTok tokens, with queued requests waiting or not.
func (e *Engine) StepMS(b int, kvTok int, queued bool) float64 {
	pf := e.p.Perf
	ms := pf.DecodeStepMS.At(float64(b)) * e.epFactor(b)
	if pf.TPExponent != 0 && e.pl.TP != e.p.Memory.ReferenceTP {
		ms *= math.Pow(float64(e.p.Memory.ReferenceTP)/float64(e.pl.TP), pf.TPExponent)
	}
	ms += pf.KVMSPerMToken * float64(kvTok) / 1e6 / float64(max(1, min(b, pf.KVParallelBatch)))
	if e.pl.SpecAlgorithm != "" {
		ms *= 1 + e.p.Spec.DraftStepCost.At(float64(b))*float64(e.pl.SpecSteps)
	}
	if queued {
		// Scheduler (CPU) work on the waiting queue, once per step.
		ms += pf.QueueOverheadMS * e.epFactor(b)
	}
	if !e.pl.CUDAGraph || b > e.pl.GraphMaxBS {
		ms += pf.NoGraphStepMS
	}
	if !e.pl.Overlap {
		ms += pf.NoOverlapStepMS.At(float64(b))
	}
	return ms
}

// plan picks the next step (prefill has priority, as in SGLang) and returns
// its simulated duration and the function that applies its outcome.
func (e *Engine) plan() (float64, func()) {
	if len(e.kvRep) > 1 {
		return e.planReplicas()
	}
	pf := e.p.Perf
	// A chunked prefill in progress continues first.
	if s := e.prefilling; s != nil {
		n := min(s.prefLeft, max(e.pl.ChunkedPrefill, 1))
		dur := e.prefillS([]*Seq{s}, []int{n}) + e.coldPrefill(len(e.running)+1, s.Health)
		return dur, func() {
			s.prefLeft -= n
			if s.prefLeft <= 0 {
				e.prefilling = nil
				e.firstToken(s)
			}
		}
	}
	// Admit new requests: FCFS under the running cap, KV room and the
	// prefill token budget.
	var batch []*Seq
	var toks []int
	budget := max(e.pl.MaxPrefillTokens, e.pl.ChunkedPrefill)
	used := 0
	for len(e.waiting) > 0 && len(e.running)+len(batch) < e.pl.EffectiveMRR {
		s := e.waiting[0]
		need := s.Prompt + s.Limit
		e.span.KVPeak = max(e.span.KVPeak, e.kvUsed+need)
		if e.kvUsed+need > e.pl.KVTokens && (len(e.running)+len(batch) > 0) {
			e.span.KVBound = true
			break
		}
		// The longest cached prefix, in whole blocks; at least one
		// token is computed to produce the first output token, as in
		// SGLang.
		cached, hit := 0, 0
		if e.pl.Radix {
			hit, s.blocks = e.cache.matchBlocks(s.Chain, s.blocks[:0])
			cached = max(0, min(hit*cacheBlockTokens, s.Prompt-1))
		}
		newTok := s.Prompt - cached
		e.span.PromptPeak = max(e.span.PromptPeak, newTok)
		if len(batch) > 0 && used+newTok > budget {
			break
		}
		if !s.Health {
			e.admitted++
			if e.crashAfter > 0 && e.admitted > e.crashAfter {
				e.waiting = append(batch, e.waiting...) // fail them too
				e.crash(fmt.Sprintf("request %d", e.admitted))
				return 0, func() {}
			}
		}
		e.waiting = e.waiting[1:]
		s.Cached = cached
		if hit > 0 {
			// The matched prefix is in use: it becomes the most
			// recently used (SGLang locks and refreshes the matched
			// radix node).
			e.cache.touchKnown(s.Chain[:hit], s.blocks)
		}
		s.kvHeld = need
		e.kvUsed += need
		e.kvRep[0] += need
		used += newTok
		if e.pl.ChunkedPrefill > 0 && newTok > e.pl.ChunkedPrefill {
			e.span.Chunked = true
			// A long prompt is prefilled alone, one chunk per step.
			if len(batch) == 0 {
				// It runs from its first chunk on: the running-request
				// faults see it as a batch's admission does.
				if running := len(e.running) + 1; e.crashRunning > 0 && running > e.crashRunning {
					e.waiting = append([]*Seq{s}, e.waiting...) // fail it too
					e.crash(fmt.Sprintf("%d running requests", running))
					return 0, func() {}
				} else if e.hangRunning > 0 && running > e.hangRunning {
					e.hung = true
				}
				s.prefLeft = newTok
				e.prefilling = s
				return e.plan()
			}
			e.waiting = append([]*Seq{s}, e.waiting...)
			e.kvUsed -= need
			e.kvRep[0] -= need
			s.kvHeld = 0
			used -= newTok
			break
		}
		batch = append(batch, s)
		toks = append(toks, newTok)
	}
	if len(batch) > 0 {
		running := len(e.running) + len(batch)
		if e.crashRunning > 0 && running > e.crashRunning {
			e.waiting = append(batch, e.waiting...) // fail them too
			e.crash(fmt.Sprintf("%d running requests", running))
			return 0, func() {}
		}
		if e.hangRunning > 0 && running > e.hangRunning {
			e.hung = true
		}
		dur := e.prefillS(batch, toks) + e.admitS(batch)
		allHealth := true
		for _, s := range batch {
			allHealth = allHealth && s.Health
		}
		dur += e.coldPrefill(running, allHealth)
		e.logPrefill(batch, toks)
		return dur, func() {
			for _, s := range batch {
				e.firstToken(s)
			}
		}
	}
	if len(e.running) == 0 {
		return 0, nil
	}
	b := len(e.running)
	kvTok := 0
	allHealth := true
	for _, s := range e.running {
		kvTok += s.Prompt + s.Gen()
		allHealth = allHealth && s.Health
	}
	ms := e.StepMS(b, kvTok, len(e.waiting) > 0)
	dur := ms/1000 + e.cold("d", b, allHealth)
	_ = pf
	return dur, func() { e.decode(dur) }
}

// admitS is the exposed scheduler time to admit batch into the state
// planReplicas is plan for DP replicas (Plan.Replicas > 1): each request
// belongs to the replica dispatch sent it to, and each replica has its own
// running cap, KV pool, prefill budget, prefix cache and chunked prefill
// in progress, so a replica that cannot admit its next request does not
// hold back the others. The replicas step together: a prefill step runs
// every replica's next chunk and new prefill batch and lasts as long as
// the longest of them (decoding waits, as prefill has priority); a decode
// step lasts as long as the slowest replica's batch. That is exact for
// evenly dispatched load and costs the replicas a little when one has more
// to do.
func (e *Engine) planReplicas() (float64, func()) {
	nrep := len(e.kvRep)
	if e.prefillingRep == nil {
		e.prefillingRep = make([]*Seq, nrep)
	}
	run := make([]int, nrep) // running plus admitted by this step
	for _, s := range e.running {
		run[s.replica]++
	}
	var steps []float64 // each replica's prefill work this step (s)
	var after []func()
	// Chunked prefills in progress continue first, each on its replica.
	blocked := make([]bool, nrep)
	nBlocked := 0
	for r, s := range e.prefillingRep {
		if s == nil {
			continue
		}
		blocked[r] = true
		nBlocked++
		n := min(s.prefLeft, max(e.pl.ChunkedPrefill, 1))
		steps = append(steps, e.prefillS([]*Seq{s}, []int{n})+e.coldPrefill(run[r]+1, s.Health))
		after = append(after, func() {
			s.prefLeft -= n
			if s.prefLeft <= 0 {
				e.prefillingRep[r] = nil
				e.firstToken(s)
			}
		})
	}
	// Then new requests: FCFS per replica under its running cap, its KV
	// room and its prefill token budget.
	budget := max(e.pl.MaxPrefillTokens, e.pl.ChunkedPrefill)
	batches := make([][]*Seq, nrep)
	toks := make([][]int, nrep)
	used := make([]int, nrep)
	block := func(r int) {
		blocked[r] = true
		nBlocked++
	}
	for i := 0; i < len(e.waiting) && nBlocked < nrep; {
		s := e.waiting[i]
		r := s.replica
		if blocked[r] {
			i++
			continue
		}
		if run[r] >= e.pl.EffectiveMRR {
			block(r)
			continue
		}
		need := s.Prompt + s.Limit
		e.span.KVPeak = max(e.span.KVPeak, e.kvRep[r]+need)
		if e.kvRep[r]+need > e.pl.KVTokens && run[r] > 0 {
			e.span.KVBound = true
			block(r)
			continue
		}
		// The longest cached prefix in the replica's own cache, as plan.
		cached, hit := 0, 0
		cache := e.caches[r]
		if e.pl.Radix {
			hit, s.blocks = cache.matchBlocks(s.Chain, s.blocks[:0])
			cached = max(0, min(hit*cacheBlockTokens, s.Prompt-1))
		}
		newTok := s.Prompt - cached
		e.span.PromptPeak = max(e.span.PromptPeak, newTok)
		long := e.pl.ChunkedPrefill > 0 && newTok > e.pl.ChunkedPrefill
		if len(batches[r]) > 0 && (long || used[r]+newTok > budget) {
			// A long prompt is prefilled alone: it waits for the
			// replica's next step, as one over the budget does.
			if long {
				e.span.Chunked = true
			}
			block(r)
			continue
		}
		if !s.Health {
			e.admitted++
			if e.crashAfter > 0 && e.admitted > e.crashAfter {
				for _, b := range batches {
					e.waiting = append(b, e.waiting...) // fail them too
				}
				e.crash(fmt.Sprintf("request %d", e.admitted))
				return 0, func() {}
			}
		}
		e.waiting = append(e.waiting[:i], e.waiting[i+1:]...)
		s.Cached = cached
		if hit > 0 {
			cache.touchKnown(s.Chain[:hit], s.blocks)
		}
		s.kvHeld = need
		e.kvUsed += need
		e.kvRep[r] += need
		run[r]++
		if long {
			// Prefilled alone, one chunk per step, from this step on.
			e.span.Chunked = true
			s.prefLeft = newTok
			e.prefillingRep[r] = s
			n := min(s.prefLeft, e.pl.ChunkedPrefill)
			steps = append(steps, e.prefillS([]*Seq{s}, []int{n})+e.coldPrefill(run[r], s.Health))
			after = append(after, func() {
				s.prefLeft -= n
				if s.prefLeft <= 0 {
					e.prefillingRep[r] = nil
					e.firstToken(s)
				}
			})
			block(r)
			continue
		}
		used[r] += newTok
		batches[r] = append(batches[r], s)
		toks[r] = append(toks[r], newTok)
	}
	// The busiest replica's running batch is what fault thresholds see.
	if running := slices.Max(run); running > 0 {
		if e.crashRunning > 0 && running > e.crashRunning {
			for _, b := range batches {
				e.waiting = append(b, e.waiting...) // fail them too
			}
			e.crash(fmt.Sprintf("%d running requests", running))
			return 0, func() {}
		}
		if e.hangRunning > 0 && running > e.hangRunning {
			e.hung = true
		}
	}
	for r, batch := range batches {
		if len(batch) == 0 {
			continue
		}
		allHealth := true
		for _, s := range batch {
			allHealth = allHealth && s.Health
		}
		steps = append(steps, e.prefillS(batch, toks[r])+e.admitS(batch)+e.coldPrefill(run[r], allHealth))
		e.logPrefill(batch, toks[r])
		after = append(after, func() {
			for _, s := range batch {
				e.firstToken(s)
			}
		})
	}
	if len(steps) > 0 {
		return slices.Max(steps), func() {
			for _, f := range after {
				f()
			}
		}
	}
	if len(e.running) == 0 {
		return 0, nil
	}
	queued := len(e.waiting) > 0
	allHealth := true
	kvTok := make([]int, nrep)
	for _, s := range e.running {
		kvTok[s.replica] += s.Prompt + s.Gen()
		allHealth = allHealth && s.Health
	}
	var ms float64
	for r, n := range run {
		if n > 0 {
			ms = max(ms, e.StepMS(n, kvTok[r], queued))
		}
	}
	dur := ms/1000 + e.cold("d", slices.Max(run), allHealth)
	return dur, func() { e.decode(dur) }
}

// admitS is the exposed scheduler time to admit batch into the state
// pool with the radix cache on: state_pool.admit_batch_ms per batch and
// admit_ms per request, times the pool pressure, less the running batch's decode step that the overlap
// scheduler hides it behind. It also evicts cached states to make room.
func (e *Engine) admitS(batch []*Seq) float64 {
	slots := e.pl.StateSlots
	if !e.pl.Radix || slots <= 0 {
		return 0
	}
	n := 0
	for _, s := range batch {
		if !s.Health {
			n++
		}
	}
	pinned := (len(e.running) + len(batch)) * e.pl.Ratio
	if e.prefilling != nil {
		pinned += e.pl.Ratio
	}
	pressure := math.Min(1, float64(pinned+e.cachedStates)/float64(slots))
	if x := e.p.StatePool.AdmitPressureExp; x > 0 {
		pressure = math.Pow(pressure, x)
	}
	e.cachedStates = max(0, min(e.cachedStates, slots-pinned))
	if n == 0 {
		return 0
	}
	cost := (e.p.StatePool.AdmitBatchMS + e.p.StatePool.AdmitMS*float64(n)) / 1000 * pressure
	if len(e.running) > 0 && e.pl.Overlap {
		kv := 0
		for _, s := range e.running {
			kv += s.Prompt + s.Gen()
		}
		cost = math.Max(0, cost-e.StepMS(len(e.running), kv, false)/1000)
	}
	return cost
}

// prefillS is the simulated time of one prefill step.
func (e *Engine) prefillS(batch []*Seq, toks []int) float64 {
	pf := e.p.Perf
	perReq := pf.PrefillPerReqMS
	if e.pl.EP < e.pl.TP && pf.PrefillPerReqEPPartial > 0 {
		perReq *= pf.PrefillPerReqEPPartial
	}
	ms := pf.PrefillBaseMS + perReq*float64(len(batch))
	tpScale := float64(e.pl.TP) / float64(e.p.Memory.ReferenceTP)
	for i, s := range batch {
		n := float64(toks[i])
		if pf.PrefillTokPerS > 0 {
			ms += n / (pf.PrefillTokPerS * tpScale) * 1000
		}
		m := float64(s.Prompt) / 1e6
		q := pf.PrefillQuadS * m * m * 1000 / tpScale
		if s.Prompt > 0 {
			ms += q * n / float64(s.Prompt)
		}
		ms += pf.CachedTokenUS * float64(s.Cached) / 1000
	}
	if e.pl.SpecAlgorithm != "" && e.p.Spec.PrefillFactor > 0 {
		ms *= e.p.Spec.PrefillFactor
	}
	if !e.pl.CUDAGraph {
		ms += pf.NoGraphStepMS
	}
	if !e.pl.Overlap {
		ms += pf.NoOverlapStepMS.At(float64(len(batch)))
	}
	return ms / 1000
}

// firstToken ends a request's prefill: the first token is out.
func (e *Engine) firstToken(s *Seq) {
	if s.done.Load() {
		return // aborted while its prefill ran
	}
	if e.pl.Radix && len(s.Chain) > 0 {
		// Every block of the prompt is now in the tree (its replica's);
		// the least recently used leaves go while the cache holds more
		// tokens than the pool (the simulator bounds the cache by the
		// pool alone, not by the pool less the running requests' tokens).
		cache := e.caches[s.replica]
		cache.touchKnown(s.Chain, s.blocks)
		s.blocks = nil
		e.span.KVPeak = max(e.span.KVPeak, cache.tokens())
		if cache.tokens() > e.pl.KVTokens {
			e.span.KVBound = true
		}
		for cache.tokens() > e.pl.KVTokens {
			cache.evict() // an empty cache holds 0 tokens: the loop ends
		}
	}
	s.firstAt = e.simT
	if !s.Health {
		e.stats.PromptTok += int64(s.Prompt)
		e.stats.CachedTok += int64(s.Cached)
		e.stats.Requests++
		if len(e.stats.TTFT) < 4096 {
			e.stats.TTFT = append(e.stats.TTFT, s.firstAt-s.start)
		}
	}
	e.lastToken = time.Now()
	e.running = append(e.running, s)
	e.emit(s, 1)
}

// emit adds k tokens to s and finishes it at its limit or EOS.
func (e *Engine) emit(s *Seq, k int) {
	g := s.Gen()
	n := g + k
	if n >= s.Limit {
		n = s.Limit
		s.finish = "length"
	}
	if s.EOSAt > 0 && n >= s.EOSAt {
		n = s.EOSAt
		s.finish = "stop"
	}
	s.gen.Store(int64(n))
	if !s.Health {
		e.stats.GenTokens += int64(n - g)
	}
	if s.finish != "" {
		for i, x := range e.running {
			if x == s {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.kvUsed -= s.kvHeld
		e.kvRep[s.replica] -= s.kvHeld
		s.kvHeld = 0
		if e.pl.Radix && !s.Health {
			// The finished request's state stays in the radix tree.
			e.cachedStates = min(e.cachedStates+1, max(0, e.pl.StateSlots-len(e.running)*e.pl.Ratio))
		}
		if !s.Health && len(e.stats.E2E) < 4096 {
			e.stats.E2E = append(e.stats.E2E, e.simT-s.start)
		}
		s.done.Store(true)
	}
	if e.observe != nil {
		e.observe(s)
	}
	s.signal()
}

// decode advances every running request by one step.
func (e *Engine) decode(dur float64) {
	b := len(e.running)
	// emit removes finished requests from e.running: iterate a copy.
	list := append(e.decodeBuf[:0], e.running...)
	defer func() { clear(list); e.decodeBuf = list[:0] }()
	total := 0
	for _, s := range list {
		k := 1
		if e.pl.SpecAlgorithm != "" {
			for i := 0; i < e.pl.SpecSteps && e.rng.Float64() < e.p.Spec.AcceptAlpha; i++ {
				k++
			}
			e.acceptSum += float64(k)
			e.acceptN++
		}
		total += k
		e.emit(s, k)
	}
	e.lastToken = time.Now()
	if dur > 0 {
		e.stats.GenThroughput = float64(total) / dur
	}
	e.steps++
	if e.steps%40 == 0 && e.log != nil {
		acc := ""
		if e.acceptN > 0 {
			acc = fmt.Sprintf("accept len: %.2f, accept rate: %.2f, ", e.acceptSum/e.acceptN, (e.acceptSum/e.acceptN-1)/float64(max(1, e.pl.SpecSteps)))
		}
		// Only a hybrid model has a state pool to report (ref §3 Runtime);
		// a dense model's line has the plain token counts.
		usage := fmt.Sprintf("#token: %d, token usage: %.2f", e.kvUsed, float64(e.kvUsed)/float64(e.pl.KVTokens*len(e.kvRep)))
		if e.p.Model.Hybrid {
			usage = fmt.Sprintf("#full token: %d, full token usage: %.2f, mamba num: %d, mamba usage: %.2f", e.kvUsed, float64(e.kvUsed)/float64(e.pl.KVTokens),
				b*e.pl.Ratio, float64(b*e.pl.Ratio)/float64(max(1, e.pl.StateSlots)))
		}
		fmt.Fprintf(e.log, "[%s%s] Decode batch, #running-req: %d, %s, %scuda graph: %s, gen throughput (token/s): %.2f, #queue-req: %d\n",
			stamp(), e.logPf, b, usage, acc, pyBool(e.pl.CUDAGraph && b <= e.pl.GraphMaxBS), e.stats.GenThroughput, len(e.waiting))
	}
}

// logPrefill logs SGLang's Prefill batch line for a prefill step.
func (e *Engine) logPrefill(batch []*Seq, toks []int) {
	if e.log == nil {
		return
	}
	nt, ct := 0, 0
	for i, s := range batch {
		nt += toks[i]
		ct += s.Cached
	}
	usage := fmt.Sprintf("token usage: %.2f", float64(e.kvUsed)/float64(e.pl.KVTokens*len(e.kvRep)))
	if e.p.Model.Hybrid { // as in decode: only a hybrid model reports its state pool
		usage = fmt.Sprintf("full token usage: %.2f, mamba usage: %.2f", float64(e.kvUsed)/float64(e.pl.KVTokens),
			float64(len(e.running)*e.pl.Ratio)/float64(max(1, e.pl.StateSlots)))
	}
	fmt.Fprintf(e.log, "[%s%s] Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, %s, #running-req: %d, #queue-req: %d, #pending-token: 0, cuda graph: False\n",
		stamp(), e.logPf, len(batch), nt, ct, usage, len(e.running), len(e.waiting))
}

// crash fails everything in flight and reports it once.
func (e *Engine) crash(reason string) {
	if e.crashed {
		return
	}
	e.crashed = true
	fail := func(list []*Seq) {
		for _, s := range list {
			s.err = ErrCrashed
			s.done.Store(true)
			s.signal()
		}
	}
	fail(e.pending)
	fail(e.waiting)
	fail(e.running)
	if e.prefilling != nil {
		fail([]*Seq{e.prefilling})
	}
	for _, s := range e.prefillingRep {
		if s != nil {
			fail([]*Seq{s})
		}
	}
	clear(e.prefillingRep)
	e.pending, e.waiting, e.running, e.prefilling = nil, nil, nil, nil
	if e.onCrash != nil {
		go e.onCrash(reason)
	}
}

// Crashed reports whether a fault crashed the engine.
func (e *Engine) Crashed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.crashed
}

// Hung reports whether a hang fault fired.
func (e *Engine) Hung() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.hung
}

// AcceptLen is the running mean accept length (0 without spec).
func (e *Engine) AcceptLen() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.acceptN == 0 {
		return 0
	}
	return e.acceptSum / e.acceptN
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func stamp() string { return time.Now().Format("2006-01-02 15:04:05") }

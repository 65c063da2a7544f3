// Package virtual runs sgtune's trials against the simulator in virtual
// time: the live process's startup (its log lines, or its failure and exit
// code), then a workload measured by objective's own sweep, gates, audit
// and statistics through the simulator's request handling and engine
// driven on the engine's clock, with no sleeping and no HTTP. A search
// tested this way sees the same landscape as a real `sgtune run` against
// sglang-sim, in a fraction of a second per trial.
//
//	srv, err := virtual.Start(ctx, cfg.Flags, virtual.Options{Profile: "glm-5.3-flash-h200x4", Seed: 3})
//	// err: a *StartupError (log lines, exit code) when the launch fails
//	res, err := srv.Measure(ctx, study.Workload, objective.Options{})
//	// err wraps ErrExited when a fault crashed the engine: srv.Log() then
//	// ends with the crash lines and srv.ExitCode() is the exit status
//
// Tools (cmd/bench-search) use it; nothing of the tuner imports it.
package virtual

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/sim"
)

// Options configure one virtual server.
type Options struct {
	// Profile is a bundled profile name or a profile file; "" uses the
	// argv's --sim-profile or the default.
	Profile string
	// Seed varies the simulator's own random draws (per-request EOS
	// positions and generated values, speculative acceptance); 0 gives the
	// draws of a freshly started live simulator.
	Seed uint64
	// NoiseCV, when positive, multiplies each closed loop (each repeat of
	// a level) by measurement noise: one log-normal factor f of mean 1 and
	// this coefficient of variation per loop, throughput times f and
	// latencies divided by f, as repeats on real machines differ.
	NoiseCV float64
	// NoiseSeed seeds the noise draws.
	NoiseSeed uint64
	// GatherS is the window (simulated seconds) within which arrivals
	// count as simultaneous at a step boundary (sim.VirtualOptions); 0
	// means DefaultGatherS, negative means none.
	GatherS float64
}

// DefaultGatherS is the live simulator's gather window (--sim-gather-ms 2)
// at the speed-up its profiles were calibrated at (25): the profiles'
// figures hold with it.
const DefaultGatherS = 0.002 * 25

// StartupError is a launch that failed before the server was ready: what
// the live process logged and its exit status (launcher.ClassifyLog turns
// them into the launcher's failure class).
type StartupError struct {
	ExitCode int
	Log      []string
}

func (e *StartupError) Error() string {
	return fmt.Sprintf("virtual: the server exited with status %d during startup", e.ExitCode)
}

// ErrExited is wrapped by Measure's error when a fault crashed the engine
// during the workload; Server.Log then ends with the process's last lines.
var ErrExited = sim.ErrExited

// Server is a simulated server started in process and measured in virtual
// time. It is not safe for concurrent use.
type Server struct {
	v       *sim.Virtual
	argv    []string
	prof    *sim.Profile
	startup []string // the startup log
	log     []string
	exit    int
	exited  bool
	noiseCV float64
	noise   *rand.Rand
}

// profiles caches parsed profiles by name or file.
var profiles sync.Map // string -> *sim.Profile

func loadProfile(name string) (*sim.Profile, error) {
	if p, ok := profiles.Load(name); ok {
		return p.(*sim.Profile), nil
	}
	p, err := sim.LoadProfile(name)
	if err != nil {
		return nil, err
	}
	profiles.Store(name, p)
	return p, nil
}

// Start runs the simulator's startup for argv (SGLang flags as the
// launcher passes them, without --host and --port) in process, as the live
// process runs it (same code, same log lines) but without its startup
// delays, and returns the server once it would be ready. A failed startup
// returns a *StartupError.
func Start(ctx context.Context, argv []string, opt Options) (*Server, error) {
	if opt.NoiseCV < 0 || math.IsNaN(opt.NoiseCV) {
		return nil, fmt.Errorf("virtual: noise CV %v < 0", opt.NoiseCV)
	}
	argv = append([]string(nil), argv...)
	if opt.Profile != "" {
		argv = append(argv, "--sim-profile", opt.Profile)
	}
	var prof *sim.Profile
	if opt.Profile != "" {
		var err error
		if prof, err = loadProfile(opt.Profile); err != nil {
			return nil, fmt.Errorf("virtual: %w", err)
		}
	}
	log, code, ready, err := startup(ctx, argv)
	if err != nil {
		return nil, err
	}
	if !ready {
		return nil, &StartupError{ExitCode: code, Log: log}
	}
	s := &Server{argv: argv, prof: prof, startup: log}
	return s.launch(opt)
}

// Relaunch returns the same launch started afresh (the startup is the same
// and is not run again) with other options: another seed of the
// simulator's draws, other noise. opt.Profile is ignored.
func (s *Server) Relaunch(opt Options) (*Server, error) {
	return (&Server{argv: s.argv, prof: s.prof, startup: s.startup}).launch(opt)
}

func (s *Server) launch(opt Options) (*Server, error) {
	if opt.NoiseCV < 0 || math.IsNaN(opt.NoiseCV) {
		return nil, fmt.Errorf("virtual: noise CV %v < 0", opt.NoiseCV)
	}
	gather := opt.GatherS
	if gather == 0 {
		gather = DefaultGatherS
	}
	v, err := sim.NewVirtual(s.argv, sim.VirtualOptions{Profile: s.prof, Seed: opt.Seed, GatherS: max(0, gather)})
	if err != nil {
		// The live startup succeeded: the two resolutions disagree.
		return nil, fmt.Errorf("virtual: %w", err)
	}
	s.v, s.noiseCV = v, opt.NoiseCV
	s.log = append([]string(nil), s.startup...)
	if opt.NoiseCV > 0 {
		s.noise = rand.New(rand.NewPCG(opt.NoiseSeed, 0x6e6f697365))
	}
	return s, nil
}

// startup runs sim.Main until it is ready (then stops it) or exits, and
// returns its log.
func startup(ctx context.Context, argv []string) (log []string, code int, ready bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A free port of the loopback: Main listens as the live process does;
	// the speed-up makes its warm-up request instant.
	argv = append(argv, "--host", "127.0.0.1", "--port", "0", "--sim-speedup", "1e9")
	var out lockedBuffer
	readyc := make(chan struct{})
	done := make(chan int, 1)
	go func() {
		done <- sim.Main(ctx, argv, &out, &out, sim.Options{NoStartupDelay: true, Ready: func(string) { close(readyc) }})
	}()
	select {
	case <-readyc:
		ready = true
		cancel()
		code = <-done
	case code = <-done:
	}
	if !ready && ctx.Err() != nil {
		return nil, 0, false, fmt.Errorf("virtual: startup: %w", context.Cause(ctx))
	}
	return splitLines(out.String()), code, ready, nil
}

// lockedBuffer is an io.Writer safe for Main's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func splitLines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Log is the server's log: the startup lines, and the crash lines once a
// fault crashed it.
func (s *Server) Log() []string { return s.log }

// LogText is Log joined with newlines.
func (s *Server) LogText() string { return strings.Join(s.log, "\n") + "\n" }

// Exited reports whether the server process would have exited (a fault
// crashed it) and its exit status.
func (s *Server) Exited() (code int, exited bool) { return s.exit, s.exited }

// Elapsed is the virtual time the server has run since it was ready
// (simulated seconds).
func (s *Server) Elapsed() float64 { return s.v.Now() }

// Key identifies what a measurement depends on besides the workload, the
// seed and the capacities Span covers (see sim.Virtual.Key).
func (s *Server) Key() string { return s.v.Key() }

// Span is how much of the KV pool and the chunk size the measurements so
// far touched (see sim.Span).
func (s *Server) Span() sim.Span { return s.v.Span() }

// Plan is what the simulated engine resolved at startup.
func (s *Server) Plan() *sim.Plan { return s.v.Plan() }

// Measure runs w as objective.Run would against the live server: the same
// sweep, warm-ups, gates, audit and statistics, in virtual time. The error
// is objective's (ErrQuality, ErrHang, ErrFailedRequests) or wraps
// ErrExited when a fault crashed the engine.
func (s *Server) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	res, err := objective.RunLoop(ctx, s, s.v.Plan().ServedModelName, w, opt)
	switch {
	case !s.exited || errors.Is(err, ErrExited):
	case err == nil:
		err = ErrExited
	default:
		err = fmt.Errorf("%w: %w", ErrExited, err)
	}
	return res, err
}

// ClosedLoop implements objective.Loop on the virtual clock.
func (s *Server) ClosedLoop(ctx context.Context, bodies [][]byte, conc int, hang time.Duration, collect bool) (objective.LoopResult, error) {
	if err := ctx.Err(); err != nil {
		return objective.LoopResult{}, err
	}
	if s.exited {
		return objective.LoopResult{}, fmt.Errorf("%w (status %d)", ErrExited, s.exit)
	}
	lr, err := s.v.ClosedLoop(bodies, conc, hang.Seconds(), collect)
	return s.result(lr, err)
}

// OpenLoop implements objective.OpenLooper on the virtual clock: bodies[k]
// arrives offsets[k] after the start, whatever is in flight.
func (s *Server) OpenLoop(ctx context.Context, bodies [][]byte, offsets []time.Duration, hang time.Duration, collect bool) (objective.LoopResult, error) {
	if err := ctx.Err(); err != nil {
		return objective.LoopResult{}, err
	}
	if s.exited {
		return objective.LoopResult{}, fmt.Errorf("%w (status %d)", ErrExited, s.exit)
	}
	offs := make([]float64, len(offsets))
	for i, o := range offsets {
		offs[i] = o.Seconds()
	}
	lr, err := s.v.OpenLoop(bodies, offs, hang.Seconds(), collect)
	out, err := s.result(lr, err)
	// Virtual time sends on time: StartS is the scheduled send. The noise
	// factor scales what the server did (TTFT, latency, ITLs), not the
	// schedule, so the duration is taken again from the unscaled sends.
	var end time.Duration
	for i := range out.Exchanges {
		rec := &out.Exchanges[i].Record
		rec.StartS, rec.ScheduledS = offs[i], offs[i]
		end = max(end, offsets[i]+seconds(rec.Latency))
	}
	if len(out.Exchanges) > 0 {
		out.Duration = end - offsets[0]
	}
	return out, err
}

var _ objective.OpenLooper = (*Server)(nil)

// result converts a loop of the virtual server, scaled by the
// measurement noise, and maps its errors to objective's.
func (s *Server) result(lr sim.LoopResult, err error) (objective.LoopResult, error) {
	scale := 1.0 // time is divided by the noise factor
	if s.noise != nil {
		// Log-normal with mean 1 and coefficient of variation cv.
		sigma := math.Sqrt(math.Log1p(s.noiseCV * s.noiseCV))
		scale = 1 / math.Exp(sigma*s.noise.NormFloat64()-sigma*sigma/2)
	}
	out := objective.LoopResult{Duration: seconds(lr.DurationS * scale), Issued: lr.Issued, Completed: lr.Completed, Failed: lr.Failed, Tokens: lr.Tokens}
	out.Exchanges = make([]objective.Exchange, len(lr.Exchanges))
	for i, x := range lr.Exchanges {
		rec := objective.RequestRecord{OK: x.OK, Error: x.Error, StartS: x.StartS * scale, TTFT: x.TTFT * scale, Latency: x.Latency * scale,
			OutputTokens: x.OutputTokens, PromptTokens: x.PromptTokens, Chunks: x.Chunks, Finish: x.Finish}
		itls := x.ITLs
		if scale != 1 {
			for j := range itls {
				itls[j] *= scale
			}
		}
		if len(itls) > 0 {
			var sum float64
			for _, g := range itls {
				sum += g
				rec.ITLMax = max(rec.ITLMax, g)
			}
			rec.ITLMean = sum / float64(len(itls))
		}
		ex := objective.Exchange{Record: rec, ITLs: itls, Content: x.Content}
		for _, t := range x.ToolCalls {
			ex.ToolCalls = append(ex.ToolCalls, objective.ToolCall{Name: t.Name, Arguments: t.Arguments})
		}
		out.Exchanges[i] = ex
	}
	switch {
	case errors.Is(err, sim.ErrHang):
		err = fmt.Errorf("%w%s", objective.ErrHang, strings.TrimPrefix(err.Error(), sim.ErrHang.Error()))
	}
	if s.v.Crashed() && !s.exited {
		s.exited, s.exit = true, sim.ExitCrash
		s.log = append(s.log, s.v.CrashLog()...)
	}
	return out, err
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

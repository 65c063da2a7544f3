// Package launcher starts, watches and stops serving-engine processes. It
// parses facts from their startup logs and classifies how they ended. It does
// not measure.
//
// A server runs in its own process group with Pdeathsig, on a free port of
// 127.0.0.1, with its combined output copied through a redacting writer into
// one log file per trial. Start returns when the server is ready (process
// alive, the ready line logged, /health_generate 200), when it died (within
// milliseconds of the exit), or at the startup timeout. Stop ends the whole
// group and waits until the port, and with nvidia-smi the GPUs, are free.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/shell"
)

// Defaults for Spec's zero values.
const (
	DefaultStartupTimeout = 20 * time.Minute
	DefaultGrace          = 10 * time.Second
	// PortAttempts is how many ports Start tries when the server reports
	// its port taken before becoming ready.
	PortAttempts = 3
)

// Spec is one server to start.
type Spec struct {
	// Engine says how the server reports readiness, facts and failures;
	// nil means SGLang.
	Engine         *engine.Engine
	Argv           []string      // program and flags, without --host/--port and the engine's LaunchFlags (the launcher adds them)
	Env            []string      // extra KEY=VALUE entries (they win over the inherited ones)
	GPUs           []int         // exported as CUDA_VISIBLE_DEVICES when non-empty
	LogPath        string        // the server's combined stdout/stderr; "" keeps only the in-memory tail
	StartupTimeout time.Duration // 0 means DefaultStartupTimeout
	APIKey         string        // sent as a Bearer token on readiness probes; redacted from log, tail and excerpts
	Secrets        []string      // more strings redacted like APIKey
	Grace          time.Duration // SIGTERM to SIGKILL on Stop and after a startup timeout; 0 means DefaultGrace
	// ReleaseTimeout bounds the waits after the group is gone (port free,
	// GPUs released); 0 means 2 minutes.
	ReleaseTimeout time.Duration
	// Abort is closed to tear the server down at once: SIGKILL, no grace,
	// no release waits (the port and GPU waits are skipped; the short wait
	// for the killed group to be gone still runs). It ends a Start in
	// progress (its error then wraps ErrAborted unless ctx ended first) and
	// cuts short a Stop. Nil never aborts. (sgtune run: the second Ctrl-C.)
	Abort <-chan struct{}
	// Container runs Argv inside a container (engine.container); nil runs
	// it as a process of this host.
	Container *Container
}

// Container is how a server runs in a container: the study's image and
// run options, and this trial's container name and labels. The runtime's
// daemon owns the container: Stop and every teardown stop and remove it
// through the daemon, by name, and wait until it is gone.
type Container struct {
	container.Spec
	Name   string
	Labels map[string]string
}

// ErrAborted is the cause of a Start ended by closing Spec.Abort.
var ErrAborted = errors.New("launcher: aborted")

// Failure is how a server failed; it is an error.
type Failure struct {
	Class    string
	ExitCode int    // the exit status; 128+N when killed by signal N; -1 when it never ran or still runs
	Reason   string // one line: the decisive log line, else the last error-looking one, else what happened
	Excerpt  string // the log lines that decided the class (redacted, at most ~4 KB)
	Tail     string // the last lines of the log (redacted), for storage with the trial
	Err      error  // the underlying error, if any (exec error, timeout)
	// Detected is how long after the process exited the failure was
	// classified (the wait for its last output included); 0 when the
	// process did not exit on its own.
	Detected time.Duration
	// LogErr is the first error writing or closing the log file
	// (Spec.LogPath), which then lacks the lines after it; set on the
	// failures Start and StartSlurm return (a running server's is its
	// LogErr).
	LogErr error
}

// Error returns the class, followed by the underlying error when there is one.
func (f *Failure) Error() string {
	if f.Err != nil {
		return f.Class + ": " + f.Err.Error()
	}
	return f.Class
}

// Unwrap returns the underlying error.
func (f *Failure) Unwrap() error { return f.Err }

// Server is a started, ready server.
type Server struct {
	URL   string // http://127.0.0.1:PORT
	PID   int    // also the process group id
	Port  int
	Facts engine.Facts

	spec     Spec
	runtime  *container.Client // the container runtime's client; nil for a host process
	sink     *lineSink
	logFile  *os.File
	proc     *proc
	baseline map[int]int
	exited   chan struct{}

	ending
}

// ending is how a server (a local process or a Slurm job) ends: the
// failure its monitor recorded, the caller's hang mark, and the one Stop
// that does the work while later calls wait for it.
type ending struct {
	mu       sync.Mutex
	failure  *Failure // set when the server ended on its own
	stopping bool     // Stop is ending it: the exit is not a failure
	hang     bool
	stopDone chan struct{} // made by the first Stop, closed when it returns
	stopErr  error
}

// MarkHang records that the caller saw no progress from the server; Failure
// then reports engine.ClassHang unless the server also failed. Call Stop
// after.
func (e *ending) MarkHang() {
	e.mu.Lock()
	e.hang = true
	e.mu.Unlock()
}

// failureOr returns the recorded failure, else hang's after MarkHang, else
// nil.
func (e *ending) failureOr(hang func() *Failure) *Failure {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failure != nil {
		return e.failure
	}
	if e.hang {
		return hang()
	}
	return nil
}

// stopOnce runs stop on the first call and returns its error; later calls
// wait for the first (or ctx) and return the same error.
func (e *ending) stopOnce(ctx context.Context, stop func() error) error {
	e.mu.Lock()
	if e.stopDone != nil {
		e.mu.Unlock()
		select { // another call does the work
		case <-e.stopDone:
		case <-ctx.Done():
			return ctx.Err()
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.stopErr
	}
	e.stopDone = make(chan struct{})
	defer close(e.stopDone)
	e.mu.Unlock()
	err := stop()
	e.mu.Lock()
	e.stopErr = err
	e.mu.Unlock()
	return err
}

// markStopping records that Stop is ending a server that has not exited
// yet (exited: closed once it has).
func (e *ending) markStopping(exited <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-exited:
	default:
		e.stopping = true
	}
}

// eng is the engine the server runs.
func (s *Server) eng() *engine.Engine {
	if s.spec.Engine == nil {
		return engine.SGLang
	}
	return s.spec.Engine
}

// LogTail returns the last n log lines (redacted).
func (s *Server) LogTail(n int) string { return s.sink.Tail(n) }

// LogErr returns the first error writing or closing the log file
// (Spec.LogPath), nil when there was none: the file lacks the lines after
// it, while the server and LogTail go on. It is final once Stop returned.
func (s *Server) LogErr() error { return s.sink.logErr() }

// Exited is closed when the server process has exited and Failure is final.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Failure classifies how the server ended; nil while it runs (unless
// MarkHang was called) or after a clean stop.
func (s *Server) Failure() *Failure {
	return s.failureOr(func() *Failure {
		code := -1
		select {
		case <-s.exited:
			code = s.proc.exitCode
		default:
		}
		return hangFailure(s.sink, code)
	})
}

// hangFailure is the Failure of a server the caller marked as hung
// (MarkHang) that did not fail otherwise: local processes and Slurm jobs.
func hangFailure(sink *lineSink, code int) *Failure {
	f := sinkFailure(sink, engine.ClassHang, code, nil, errors.New("marked as hung by the caller"))
	f.Reason = "no progress (marked as hung by the caller)"
	return f
}

// newFailure builds a Failure from the log as it is now.
func (s *Server) newFailure(class string, code int, m *logMatch, err error) *Failure {
	return sinkFailure(s.sink, class, code, m, err)
}

// sinkFailure builds a Failure from a log sink as it is now (local
// processes and Slurm jobs alike).
func sinkFailure(sink *lineSink, class string, code int, m *logMatch, err error) *Failure {
	f := &Failure{Class: class, ExitCode: code, Err: err, Reason: sink.reason(m),
		Tail: sink.Tail(tailLines)}
	if err != nil && (m == nil || m.line == "") {
		// An exec error or a timeout says more than any log line.
		f.Reason = err.Error()
	}
	if f.Reason == "" {
		f.Reason = fmt.Sprintf("exited with status %d", code)
	}
	f.Excerpt = sink.excerpt(m)
	return f
}

// tailLines is how many lines Failure.Tail holds.
const tailLines = 60

// Start launches spec and waits until the server is ready, has died, or the
// startup timeout passed. On failure the error is a *Failure and no process
// of the server is left. When ctx ends first, the server is stopped and the
// error wraps ctx.Err(). The teardown after a failure or a cancel sends
// SIGTERM and waits up to Spec.Grace, then for the port and GPUs; closing
// Spec.Abort cuts all of that short (SIGKILL at once). GPUs that other
// processes use make it return an error wrapping ErrGPUsBusy without
// launching. The server's lifetime does not depend on ctx once Start
// returned: end it with Stop.
func Start(ctx context.Context, spec Spec) (*Server, error) {
	ctx, cancelStart := startContext(ctx, spec.Abort)
	defer cancelStart(nil)
	if len(spec.Argv) == 0 {
		return nil, &Failure{Class: engine.ClassBadCommand, ExitCode: -1, Err: errors.New("empty command")}
	}
	red := newRedactor(append([]string{spec.APIKey}, spec.Secrets...))
	if err := CheckGPUsFree(ctx, spec.GPUs); err != nil {
		return nil, err
	}
	logFile, err := openLog(spec.LogPath)
	if err != nil {
		return nil, err
	}
	var out io.Writer // a nil *os.File in it would not read as "no log"
	if logFile != nil {
		out = logFile
	}
	s := &Server{spec: spec, logFile: logFile}
	s.sink = newLineSink(out, red, s.eng())
	path, err := s.program(ctx)
	if err != nil {
		return nil, withLogErr(s.cannotRun(err), s.sink)
	}
	s.baseline = gpuBaseline(ctx, spec.GPUs)
	srv, err := s.attempts(ctx, path)
	return srv, withLogErr(err, s.sink)
}

// withLogErr sets the log's error on the Failure in err, once Start closed
// the log: a failed start's log is often what the user reads next.
func withLogErr(err error, sink *lineSink) error {
	var f *Failure
	if errors.As(err, &f) {
		f.LogErr = sink.logErr()
	}
	return err
}

// startContext returns ctx, also canceled with the cause ErrAborted when
// abort is closed, so that Abort ends the startup wait and not just the
// teardown after it. The watching goroutine ends when the returned context
// ends: Start's deferred cancel, or the abort itself.
func startContext(ctx context.Context, abort <-chan struct{}) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if abort != nil {
		go func() {
			select {
			case <-abort:
				cancel(ErrAborted)
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// openLog creates the log file at path, and its folder; nil without error
// when path is "" (the in-memory tail only).
func openLog(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("launcher: log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("launcher: log file: %w", err)
	}
	return f, nil
}

// cannotRun logs that the command could not be started (not found, not
// executable), closes the log and returns the engine.ClassBadCommand failure. The
// error text is redacted: it may quote the command line.
func (s *Server) cannotRun(err error) *Failure {
	err = errors.New(s.sink.red.String(err.Error()))
	s.sink.note("cannot run the command: " + err.Error())
	s.closeLog()
	return s.newFailure(engine.ClassBadCommand, -1, nil, err)
}

// program finds what Start executes: the server's program, or for a
// container the runtime's client, whose daemon must answer. A container of
// the same name left by an earlier start of this trial is removed first.
func (s *Server) program(ctx context.Context) (string, error) {
	c := s.spec.Container
	if c == nil {
		return exec.LookPath(s.spec.Argv[0])
	}
	client, err := container.NewClient(c.RuntimeName())
	if err != nil {
		return "", err
	}
	if err := client.Ping(ctx); err != nil {
		return "", err
	}
	s.runtime = client
	if err := client.Remove(ctx, c.Name); err != nil {
		return "", fmt.Errorf("remove an earlier container %s: %w", c.Name, err)
	}
	return client.Path, nil
}

// startupTimeout is Spec.StartupTimeout or its default.
func (s *Server) startupTimeout() time.Duration {
	if s.spec.StartupTimeout <= 0 {
		return DefaultStartupTimeout
	}
	return s.spec.StartupTimeout
}

// attempts launches the server until it is ready, retrying on a fresh port
// (at most PortAttempts launches) while it dies only because its port was
// taken. All attempts share one startup deadline.
func (s *Server) attempts(ctx context.Context, path string) (*Server, error) {
	timeout := s.startupTimeout()
	deadline := time.Now().Add(timeout)
	for attempt := 1; ; attempt++ {
		p, launched, err := s.launchAttempt(path, attempt)
		if err != nil {
			return nil, err
		}
		switch res := s.waitReady(ctx, p, deadline); res {
		case readyOK:
			s.ready(launched)
			return s, nil
		case readyDied:
			if !s.portTaken(ctx, attempt) {
				return nil, s.diedBeforeReady(ctx, p)
			}
			if err := s.retryPort(ctx); err != nil {
				return nil, err
			}
		default: // readyTimeout, readyCanceled
			return nil, s.notReady(ctx, p, res == readyCanceled, timeout)
		}
	}
}

// launchAttempt starts one attempt on a free port and returns its process
// and the time it was launched (from which StartupS counts).
func (s *Server) launchAttempt(path string, attempt int) (*proc, time.Time, error) {
	port, err := freePort()
	if err != nil {
		s.closeLog()
		return nil, time.Time{}, fmt.Errorf("launcher: %w", err)
	}
	// The engine's own launch flags (its metrics, a log level with the
	// startup facts), then the address.
	argv := slices.Concat(s.spec.Argv, s.eng().LaunchFlags,
		[]string{s.eng().HostFlag, "127.0.0.1", s.eng().PortFlag, strconv.Itoa(port)})
	if attempt > 1 {
		s.sink.reset()
	}
	env := s.env()
	if c := s.spec.Container; c != nil {
		run := container.Run{Name: c.Name, Labels: c.Labels, Env: s.spec.Env, GPUs: s.spec.GPUs, PassGPUs: smiPath() != ""}
		argv = append([]string{path}, c.RunArgs(run, argv)...)
		// The client's environment carries the values of the server's
		// (`-e KEY` on its command line); nothing else reaches the container.
		inside := container.InsideEnv(run)
		env = append(s.inherited(), inside...)
		s.sink.note(fmt.Sprintf("attempt %d: %s", attempt, shell.Join(argv)))
		for _, kv := range inside {
			if strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") {
				s.sink.note(fmt.Sprintf("in the container: %s (host GPUs %s)", kv, gpuList(s.spec.GPUs)))
			}
		}
	} else {
		s.sink.note(fmt.Sprintf("attempt %d: %s", attempt, shell.Join(argv)))
		if len(s.spec.GPUs) > 0 {
			s.sink.note("CUDA_VISIBLE_DEVICES=" + gpuList(s.spec.GPUs))
		}
	}
	launched := time.Now()
	p, err := launch(path, argv, env, s.sink)
	if err != nil {
		return nil, time.Time{}, s.cannotRun(err)
	}
	s.proc, s.Port, s.PID = p, port, p.pid
	s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	return p, launched, nil
}

// ready records the startup facts and starts watching the ready server.
func (s *Server) ready(launched time.Time) {
	facts, _, _ := s.sink.state()
	facts.StartupS = time.Since(launched).Seconds()
	s.Facts = facts
	s.exited = make(chan struct{})
	go s.monitor() // ends when the process exits
}

// portTaken reports whether an attempt that died before ready should be
// launched again on another port: its log says the port was taken,
// attempts are left and ctx is live.
func (s *Server) portTaken(ctx context.Context, attempt int) bool {
	_, _, m := s.sink.state()
	return m != nil && m.port && attempt < PortAttempts && ctx.Err() == nil
}

// retryPort tears down an attempt whose port was taken before the next
// one; it fails only when ctx ended meanwhile.
func (s *Server) retryPort(ctx context.Context) error {
	s.sink.note(fmt.Sprintf("port %d was taken; retrying on another port", s.Port))
	// A failed release is noted in the log; the next attempt uses another port.
	_ = s.teardown(ctx, false)
	if ctx.Err() == nil {
		return nil
	}
	s.sink.note("start canceled")
	s.closeLog()
	return fmt.Errorf("launcher: start canceled: %w", context.Cause(ctx))
}

// diedBeforeReady classifies an attempt whose process exited before ready,
// then waits for its release.
func (s *Server) diedBeforeReady(ctx context.Context, p *proc) *Failure {
	_, _, m := s.sink.state()
	code, oom := s.containerExit(ctx, p.exitCode)
	class := classifyExit(m, code, false, oom)
	f := s.newFailure(class, code, m, nil)
	f.Detected = time.Since(p.exitedAt)
	s.sink.note(fmt.Sprintf("exited with status %d before ready: %s (classified %d ms after the exit)", code, class, f.Detected.Milliseconds()))
	// The process is gone; a failed release is noted in the log.
	_ = s.teardown(ctx, false)
	s.closeLog()
	return f
}

// notReady stops an attempt that was not ready by the deadline (a
// engine.ClassStartupTimeout failure) or whose start was canceled (an error
// wrapping the cause of ctx's end).
func (s *Server) notReady(ctx context.Context, p *proc, canceled bool, timeout time.Duration) error {
	why := "not ready after " + timeout.String()
	if canceled {
		why = "start canceled"
	}
	s.sink.note(why + "; stopping the process group")
	// A failed release is noted in the log.
	_ = s.teardown(ctx, true)
	s.closeLog()
	if canceled {
		return fmt.Errorf("launcher: start canceled: %w", context.Cause(ctx))
	}
	return s.newFailure(engine.ClassStartupTimeout, p.exitCode, nil, fmt.Errorf("not ready within %s", timeout))
}

// teardown ends the attempt's process group (when term is set) and waits
// for its release, after Start's ctx ended or the attempt failed: the waits
// outlive ctx, but not Spec.Abort.
func (s *Server) teardown(ctx context.Context, term bool) error {
	tctx, cancel := s.abortable(context.WithoutCancel(ctx))
	defer cancel()
	if term {
		s.terminate(tctx)
	}
	return s.release(tctx)
}

// abortable returns a context that also ends when Spec.Abort is closed.
func (s *Server) abortable(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if s.spec.Abort != nil {
		go func() { // ends on abort or when the caller cancels
			select {
			case <-s.spec.Abort:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// aborted reports whether Spec.Abort is closed.
func (s *Server) aborted() bool {
	select {
	case <-s.spec.Abort: // a nil channel never fires
		return true
	default:
		return false
	}
}

// inherited is our environment less the variables the engine must not
// inherit (Engine.ClearEnv: they would change its settings behind the
// command line). It is the container client's whole environment, where
// `-e KEY` would otherwise carry one in when a study names it.
func (s *Server) inherited() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !s.eng().Cleared(name) {
			env = append(env, kv)
		}
	}
	return env
}

// containerExit returns how a container ended, once its client exited
// with status code: the container's own status and whether the kernel's
// OOM killer ended it (the daemon's record, read before the container is
// removed). A container still running after its client ended (the client
// was killed) is noted; the teardown removes it. For a host process it
// returns code, false.
func (s *Server) containerExit(ctx context.Context, code int) (int, bool) {
	if s.spec.Container == nil || s.runtime == nil {
		return code, false
	}
	st, err := s.runtime.Inspect(context.WithoutCancel(ctx), s.spec.Container.Name)
	switch {
	case err != nil:
		s.sink.note("inspect the container: " + err.Error())
		return code, false
	case !st.Exists:
		return code, false
	case st.Running:
		s.sink.note(fmt.Sprintf("the %s client exited with status %d while container %s still runs", s.runtime.Name, code, s.spec.Container.Name))
		return code, false
	}
	if st.OOMKilled {
		s.sink.note(fmt.Sprintf("container %s was killed by the kernel's OOM killer (status %d)", s.spec.Container.Name, st.ExitCode))
	}
	return st.ExitCode, st.OOMKilled
}

// env is the child's environment: what it inherits, then the GPU
// selection, then Spec.Env (exec keeps the last value of a duplicated
// key).
func (s *Server) env() []string {
	env := s.inherited()
	if len(s.spec.GPUs) > 0 {
		// nvidia-smi numbers GPUs in PCI order; make CUDA agree so the
		// indices we export and the ones we check are the same devices.
		env = append(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="+gpuList(s.spec.GPUs))
	}
	return append(env, s.spec.Env...)
}

func gpuList(gpus []int) string {
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

// freePort asks the kernel for a free port on 127.0.0.1. Another process
// may take it before the server binds it; Start retries on that.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type readyResult int

const (
	readyOK readyResult = iota
	readyDied
	readyTimeout
	readyCanceled
)

// pollInterval is the health polling period once the ready line is seen
// (from the start for engines without one).
var pollInterval = 200 * time.Millisecond

// waitReady waits for the engine's ready line (when it has one), then polls
// its health path until 200. It returns as soon as the process exits.
func (s *Server) waitReady(ctx context.Context, p *proc, deadline time.Time) readyResult {
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// pctx aborts an in-flight probe when the process dies.
	pctx, pcancel := context.WithCancel(actx)
	defer pcancel()
	go func() { // ends when the process exits or waitReady returns
		select {
		case <-p.done:
			pcancel()
		case <-pctx.Done():
		}
	}()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	var tick <-chan time.Time
	if s.eng().ReadyLine == "" {
		t := time.NewTicker(pollInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-p.done:
			return readyDied
		case <-actx.Done():
			// A death at the same moment wins: it is the more useful class.
			select {
			case <-p.done:
				return readyDied
			default:
			}
			if ctx.Err() != nil {
				return readyCanceled
			}
			return readyTimeout
		case <-p.ready:
			p.ready = nil // seen; from now on poll
			t := time.NewTicker(pollInterval)
			defer t.Stop()
			tick = t.C
			if s.healthy(pctx, client) {
				return readyOK
			}
		case <-tick:
			if s.healthy(pctx, client) {
				return readyOK
			}
		}
	}
}

// healthy reports whether GET on the engine's health path answered 200.
// SGLang's health endpoints bypass --api-key; the key is sent anyway when
// set, for engines that do not.
func (s *Server) healthy(ctx context.Context, client *http.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // health_generate may take up to 20 s
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+s.eng().HealthPath, nil)
	if err != nil {
		return false
	}
	if s.spec.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.spec.APIKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// monitor records how a ready server ended, then closes exited.
func (s *Server) monitor() {
	<-s.proc.done
	_, _, m := s.sink.state()
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	var code int
	var oom bool
	if !stopping {
		code, oom = s.containerExit(context.Background(), s.proc.exitCode)
	}
	s.mu.Lock()
	if !s.stopping {
		s.sink.note(fmt.Sprintf("exited with status %d after ready", code))
		s.failure = s.newFailure(classifyExit(m, code, true, oom), code, m, nil)
		s.failure.Detected = time.Since(s.proc.exitedAt)
	}
	s.mu.Unlock()
	close(s.exited)
}

// Stop ends the server's process group: SIGTERM, a grace period, SIGKILL,
// then waits until no process of the group is left, its port is free and,
// where nvidia-smi exists, its GPUs hold no compute process and their used
// memory dropped back. It is safe to call more than once and
// concurrently; later calls wait for the first and return its result. ctx
// bounds the waits; the group gets SIGKILL at once when ctx ends. Closing
// Spec.Abort (before or during Stop) also sends SIGKILL at once and skips
// the port and GPU waits.
func (s *Server) Stop(ctx context.Context) error {
	return s.stopOnce(ctx, func() error {
		s.markStopping(s.proc.done)
		s.sink.note("stopping")
		tctx, cancel := s.abortable(ctx)
		defer cancel()
		s.terminate(tctx)
		<-s.exited // monitor ends right after the process exit
		err := s.release(tctx)
		s.closeLog()
		return err
	})
}

// terminate sends SIGTERM to the group, waits for the leader up to the
// grace period (or ctx), then sends SIGKILL and waits for the exit. After
// Spec.Abort it sends SIGKILL at once.
func (s *Server) terminate(ctx context.Context) {
	p := s.proc
	select {
	case <-p.done:
		return
	default:
	}
	if s.aborted() {
		s.sink.note("aborted; sending SIGKILL")
		s.killContainer()
		p.signalGroup(syscall.SIGKILL)
		<-p.done
		return
	}
	grace := s.spec.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	if s.spec.Container != nil && s.runtime != nil {
		s.stopContainer(ctx, p, grace)
		return
	}
	p.signalGroup(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
		s.sink.note(fmt.Sprintf("still running %s after SIGTERM; sending SIGKILL", grace))
	case <-ctx.Done():
		if s.aborted() {
			s.sink.note("aborted; sending SIGKILL")
		} else {
			s.sink.note("stop canceled; sending SIGKILL")
		}
	}
	p.signalGroup(syscall.SIGKILL)
	<-p.done // SIGKILL cannot be ignored; the wait goroutine reaps promptly
}

// stopContainer stops the container through its daemon (SIGTERM, SIGKILL
// after grace), or kills it at once when ctx ends, then waits for its
// client to exit; a client that outlives its container is killed.
func (s *Server) stopContainer(ctx context.Context, p *proc, grace time.Duration) {
	name := s.spec.Container.Name
	stopped := make(chan error, 1)
	go func() { // ends when the runtime's stop returns (bounded by its own timeout)
		stopped <- s.runtime.Stop(context.WithoutCancel(ctx), name, grace)
	}()
	select {
	case err := <-stopped:
		if err != nil {
			s.sink.note(fmt.Sprintf("%s stop %s: %v; killing it", s.runtime.Name, name, err))
			s.killContainer()
		}
	case <-ctx.Done():
		if s.aborted() {
			s.sink.note("aborted; killing the container")
		} else {
			s.sink.note("stop canceled; killing the container")
		}
		s.killContainer()
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		s.sink.note("the container client did not exit after the container stopped; sending SIGKILL")
		p.signalGroup(syscall.SIGKILL)
		<-p.done
	}
}

// killContainer sends SIGKILL to the container through its daemon (a
// no-op for a host process).
func (s *Server) killContainer() {
	if s.spec.Container == nil || s.runtime == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.runtime.Kill(ctx, s.spec.Container.Name); err != nil {
		s.sink.note(fmt.Sprintf("%s kill %s: %v", s.runtime.Name, s.spec.Container.Name, err))
	}
}

// release waits, after the leader exited, until the group is gone, the
// port is free, the output copy ended, and the GPUs are released. After
// Spec.Abort only the (short) wait for the group runs.
func (s *Server) release(ctx context.Context) error {
	timeout := s.spec.ReleaseTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	p := s.proc
	// The group was SIGKILLed when its leader exited: this wait is short,
	// and it runs even when ctx has ended, so no process is left behind.
	gctx, gcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer gcancel()
	if err := waitGroupGone(gctx, p.pid); err != nil {
		errs = append(errs, err)
	}
	// The container goes with its client, even after an abort: its daemon
	// would keep it (and its GPUs) otherwise.
	if c := s.spec.Container; c != nil && s.runtime != nil {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if err := s.runtime.Remove(cctx, c.Name); err != nil {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.Name, err))
		}
		ccancel()
	}
	skipped := func() bool {
		if s.aborted() {
			s.sink.note("aborted; not waiting for the port and GPUs to be released")
			return true
		}
		return false
	}
	if !skipped() {
		if err := waitPortFree(rctx, s.Port); err != nil && !skipped() {
			errs = append(errs, err)
		}
	}
	if s.aborted() {
		p.endCopy(drainWait)
	} else {
		p.endCopy(2 * time.Second)
		if err := waitGPUsReleased(rctx, s.spec.GPUs, s.baseline, timeout); err != nil && !skipped() {
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		s.sink.note("release: " + err.Error())
	}
	return err
}

// closeLog closes the log file; its error is kept as LogErr's.
func (s *Server) closeLog() {
	if s.logFile != nil {
		s.sink.closeOut(s.logFile)
		s.logFile = nil // a second close would report os.ErrClosed
	}
}

// waitGroupGone polls until no live (non-zombie) process with process group
// pgid exists. The wait goroutine already sent SIGKILL to the group when the
// leader exited; this covers members still being torn down.
func waitGroupGone(ctx context.Context, pgid int) error {
	for i := 0; ; i++ {
		if !groupAlive(pgid) {
			return nil
		}
		if i%20 == 19 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL) // a member that escaped the first kill
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process group %d still has processes: %w", pgid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitPortFree polls until 127.0.0.1:port can be bound again.
func waitPortFree(ctx context.Context, port int) error {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			l.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("port %d still in use: %w", port, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// proc is one attempt's process.
type proc struct {
	pid      int
	done     chan struct{} // closed once the exit is recorded and the log drained
	ready    chan struct{} // closed when the ready line is logged
	copyDone chan struct{} // closed when the output copy ended
	pr       *os.File      // read end of the output pipe

	mu       sync.Mutex
	reaped   bool
	exitCode int
	exitedAt time.Time // when the exit was seen; read after done is closed
}

// signalGroup signals the process group, unless the leader was already
// reaped (then its id may be reused; the group was killed before the reap).
func (p *proc) signalGroup(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.pid, sig)
	}
}

// endCopy waits up to d for the output copy to reach EOF, then closes the
// pipe so the copy ends even if some process outside the group still holds
// its write end.
func (p *proc) endCopy(d time.Duration) {
	select {
	case <-p.copyDone:
	case <-time.After(d):
		_ = p.pr.Close()
		<-p.copyDone
	}
}

// drainWait bounds how long the exit recording waits for the last output
// before classifying.
const drainWait = 300 * time.Millisecond

// launch starts argv in its own process group with output to sink.
//
// The process is started from a goroutine locked to its OS thread, which
// then stays blocked in wait for the process's whole life: Pdeathsig fires
// when the thread that forked the child exits, and an unlocked goroutine's
// thread could be retired by the runtime while the server runs. The
// goroutine never unlocks, so its thread ends with it, after the reap.
func launch(path string, argv []string, env []string, sink *lineSink) (*proc, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Stdout: pw, Stderr: pw, SysProcAttr: sysProcAttr()}
	p := &proc{done: make(chan struct{}), ready: make(chan struct{}), copyDone: make(chan struct{}), pr: pr, exitCode: -1}
	var readyOnce sync.Once
	sink.mu.Lock()
	sink.onReady = func() { readyOnce.Do(func() { close(p.ready) }) }
	sink.mu.Unlock()

	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		_ = waitExitedNoReap(p.pid)
		p.exitedAt = time.Now()
		p.mu.Lock()
		// Kill what is left of the group before the reap frees the id.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		_ = cmd.Wait()
		p.exitCode = exitCode(cmd.ProcessState)
		p.reaped = true
		p.mu.Unlock()
		select { // let the last lines arrive before classifying
		case <-p.copyDone:
		case <-time.After(drainWait):
		}
		close(p.done)
	}()
	err = <-started
	pw.Close() // the child has its own copy
	if err != nil {
		pr.Close()
		return nil, err
	}
	go func() { // ends at EOF or when endCopy closes pr
		_, _ = io.Copy(sink, pr)
		sink.flush()
		close(p.copyDone)
	}()
	return p, nil
}

// exitCode returns the exit status, or 128+signal for a killed process.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

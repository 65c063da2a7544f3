package launcher

import (
	"github.com/sgtune/sgtune/engine"

	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// groupGone reports whether no live process of group pgid is left, waiting
// up to 5 s for the kernel to finish tearing it down. Zombies waiting for
// init to reap them do not count (see groupAlive).
func groupGone(t *testing.T, pgid int) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) || !groupAlive(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	state, _, ok := parseStat(string(b))
	return ok && state != 'Z' && state != 'X'
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// killGroup is a test cleanup: never leave a fake server behind, even when
// an assertion failed before Stop.
func killGroup(t *testing.T, pid int) {
	t.Cleanup(func() {
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	})
}

func TestStartOKFactsRedactionStop(t *testing.T) {
	const key = "sk-test-SECRET-0123456789"
	spec := helperSpec(t, "ok", "--model-path", "zai-org/GLM-5.3-Flash", "--api-key", key)
	spec.APIKey = key
	spec.Secrets = []string{"zai-org/GLM-5.3-Flash-not-present"}
	spec.GPUs = []int{2, 3}
	srv, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)

	want := engine.Facts{MaxTotalNumTokens: 1171862, MaxRunningRequests: 51, RequestedMaxRunningRequests: 64,
		ReducedMaxRunningRequests: 51, MambaCacheSize: 256, KVCacheTokens: 1171862, ChunkedPrefillSize: 8192,
		MaxPrefillTokens: 16384, ContextLen: 202752, AvailableGPUMemGB: 9.30, CUDAGraph: true}
	got := srv.Facts
	if got.StartupS <= 0 || got.StartupS > 30 {
		t.Errorf("StartupS = %v", got.StartupS)
	}
	got.StartupS = 0
	if got != want {
		t.Errorf("Facts\n got %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") || srv.Port == 0 {
		t.Errorf("URL %q port %d", srv.URL, srv.Port)
	}
	resp, err := http.Get(srv.URL + "/health_generate")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health after Start: %v %v", err, resp)
	}
	resp.Body.Close()
	if f := srv.Failure(); f != nil {
		t.Errorf("Failure while running = %v", f)
	}
	select {
	case <-srv.Exited():
		t.Fatal("Exited closed while running")
	default:
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if f := srv.Failure(); f != nil {
		t.Errorf("Failure after clean stop = %v", f)
	}
	if !groupGone(t, srv.PID) {
		t.Error("process group still exists after Stop")
	}
	if !portFree(srv.Port) {
		t.Errorf("port %d not free after Stop", srv.Port)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	log, err := os.ReadFile(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{key, "GLM-5.3-Flash-not-present"} {
		if strings.Contains(string(log), s) || strings.Contains(srv.LogTail(1000), s) {
			t.Errorf("log or tail contains secret %q", s)
		}
	}
	for _, s := range []string{"api_key='<redacted>'", "--api-key <redacted>", engine.SGLang.ReadyLine,
		"CUDA_VISIBLE_DEVICES=2,3", "Received sigterm"} {
		if !strings.Contains(string(log), s) {
			t.Errorf("log lacks %q:\n%s", s, log)
		}
	}
}

func TestStartFailures(t *testing.T) {
	notExec := t.TempDir() + "/not-executable"
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := t.TempDir() + "/garbage"
	if err := os.WriteFile(garbage, []byte{0, 1, 2, 3, 4, 5, 6, 7}, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		argv     []string // instead of the helper
		mode     string
		timeout  time.Duration
		class    string
		exit     int
		excerpt  string // a decisive line the excerpt must hold
		reason   string // what Reason must hold
		maxSecs  float64
		attempts int // attempt lines in the log
	}{
		{name: "illegal memory access", mode: "ima", class: engine.ClassIllegalMemoryAccess, exit: 1,
			excerpt: "RuntimeError: CUDA error: an illegal memory access was encountered", maxSecs: 10, attempts: 1,
			reason: "RuntimeError: CUDA error: an illegal memory access was encountered"},
		{name: "oom", mode: "oom", class: engine.ClassOOM, exit: 1,
			excerpt: "torch.OutOfMemoryError: CUDA out of memory", maxSecs: 10, attempts: 1,
			reason: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."},
		{name: "generic crash kills the group", mode: "group-die", class: engine.ClassStartupCrash, exit: 1,
			excerpt: "AssertionError: something broke", maxSecs: 10, attempts: 1, reason: "AssertionError: something broke"},
		{name: "argparse usage", mode: "usage", class: engine.ClassBadCommand, exit: 2,
			excerpt: "error: unrecognized arguments: --bogus-flag", maxSecs: 10, attempts: 1,
			reason: "launch_server.py: error: unrecognized arguments: --bogus-flag"},
		{name: "port taken on every attempt", mode: "port-always", class: engine.ClassStartupCrash, exit: 1,
			excerpt: "address already in use", maxSecs: 10, attempts: PortAttempts, reason: "address already in use"},
		{name: "startup timeout", mode: "hang", timeout: 700 * time.Millisecond, class: engine.ClassStartupTimeout,
			exit: 128 + int(syscall.SIGTERM), maxSecs: 10, attempts: 1, reason: "not ready within 700ms"},
		{name: "missing executable", argv: []string{"/nonexistent/sglang-sim-xyz"}, class: engine.ClassBadCommand, exit: -1,
			excerpt: "cannot run the command", maxSecs: 5, reason: "no such file or directory"},
		{name: "not executable", argv: []string{notExec}, class: engine.ClassBadCommand, exit: -1,
			excerpt: "permission denied", maxSecs: 5},
		{name: "exec format error", argv: []string{garbage}, class: engine.ClassBadCommand, exit: -1,
			excerpt: "exec format error", maxSecs: 5},
		{name: "empty command", argv: []string{}, class: engine.ClassBadCommand, exit: -1, maxSecs: 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := helperSpec(t, tc.mode)
			if tc.argv != nil {
				spec.Argv = tc.argv
			}
			if tc.timeout > 0 {
				spec.StartupTimeout = tc.timeout
			}
			t0 := time.Now()
			srv, err := Start(context.Background(), spec)
			took := time.Since(t0).Seconds()
			if srv != nil {
				killGroup(t, srv.PID)
				t.Fatalf("Start succeeded, want %s", tc.class)
			}
			var f *Failure
			if !errors.As(err, &f) {
				t.Fatalf("error %v (%T) is not a *Failure", err, err)
			}
			if f.Class != tc.class || f.ExitCode != tc.exit {
				t.Errorf("class %q exit %d, want %q %d (err %v)\nexcerpt:\n%s", f.Class, f.ExitCode, tc.class, tc.exit, f.Err, f.Excerpt)
			}
			if !strings.Contains(f.Excerpt, tc.excerpt) {
				t.Errorf("excerpt lacks %q:\n%s", tc.excerpt, f.Excerpt)
			}
			if !strings.Contains(f.Reason, tc.reason) || strings.Contains(f.Reason, "\n") {
				t.Errorf("Reason %q, want it to hold %q", f.Reason, tc.reason)
			}
			if len(f.Excerpt) > excerptMax {
				t.Errorf("excerpt is %d bytes", len(f.Excerpt))
			}
			if took > tc.maxSecs {
				t.Errorf("Start took %.1fs, want under %.0fs", took, tc.maxSecs)
			}
			if tc.attempts > 0 {
				log, _ := os.ReadFile(spec.LogPath)
				if n := strings.Count(string(log), "# sgtune launcher: attempt "); n != tc.attempts {
					t.Errorf("%d attempts in log, want %d", n, tc.attempts)
				}
				// No process of the trial is left: the helper prints its
				// sleeper's pid; every fake server was its own group leader.
				for _, m := range regexp.MustCompile(`SLEEPER_PID=(\d+)`).FindAllStringSubmatch(string(log), -1) {
					pid, _ := strconv.Atoi(m[1])
					if pidAlive(pid) {
						t.Errorf("group member %d still alive", pid)
					}
				}
			}
		})
	}
}

func TestPortConflictRetried(t *testing.T) {
	spec := helperSpec(t, "port-once")
	srv, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	defer srv.Stop(context.Background())
	log, _ := os.ReadFile(spec.LogPath)
	if !strings.Contains(string(log), "# sgtune launcher: attempt 2") || !strings.Contains(string(log), "was taken; retrying") {
		t.Errorf("no retry in log:\n%s", log)
	}
	if srv.Facts.MaxTotalNumTokens != 1171862 {
		t.Errorf("facts of the second attempt: %+v", srv.Facts)
	}
}

func TestCrashAfterReady(t *testing.T) {
	for _, tc := range []struct{ mode, class, excerpt string }{
		{"crash-after-ready", engine.ClassCrashed, "AssertionError: something broke"},
		{"ima-after-ready", engine.ClassIllegalMemoryAccess, "an illegal memory access was encountered"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			srv, err := Start(context.Background(), helperSpec(t, tc.mode))
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			killGroup(t, srv.PID)
			select {
			case <-srv.Exited():
			case <-time.After(20 * time.Second):
				t.Fatal("Exited not closed after the crash")
			}
			f := srv.Failure()
			if f == nil || f.Class != tc.class || f.ExitCode != 1 || !strings.Contains(f.Excerpt, tc.excerpt) ||
				!strings.Contains(f.Reason, tc.excerpt) {
				t.Fatalf("Failure = %+v", f)
			}
			if err := srv.Stop(context.Background()); err != nil {
				t.Errorf("Stop after crash: %v", err)
			}
			if g := srv.Failure(); g == nil || g.Class != tc.class {
				t.Errorf("Failure after Stop = %v", g)
			}
			if !groupGone(t, srv.PID) || !portFree(srv.Port) {
				t.Error("group or port left after crash + Stop")
			}
		})
	}
}

// TestLogWriteErrorKept: a server whose log cannot be written (a full
// disk: /dev/full) starts, serves and stops as usual, and the error is
// kept where the caller reads it: LogErr after Stop, Failure.LogErr for a
// failed start. Before, the log stopped with no word anywhere.
func TestLogWriteErrorKept(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	t.Run("ready server", func(t *testing.T) {
		spec := helperSpec(t, "ok")
		spec.LogPath = "/dev/full"
		srv, err := Start(context.Background(), spec)
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		killGroup(t, srv.PID)
		if err := srv.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if f := srv.Failure(); f != nil {
			t.Errorf("Failure after clean stop = %v", f)
		}
		if err := srv.LogErr(); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("LogErr = %v, want ENOSPC", err)
		}
		if !strings.Contains(srv.LogTail(1000), engine.SGLang.ReadyLine) {
			t.Error("the tail lost the log's lines")
		}
	})
	t.Run("failed start", func(t *testing.T) {
		spec := helperSpec(t, "ima")
		spec.LogPath = "/dev/full"
		srv, err := Start(context.Background(), spec)
		if srv != nil {
			killGroup(t, srv.PID)
			t.Fatal("Start succeeded")
		}
		var f *Failure
		if !errors.As(err, &f) || f.Class != engine.ClassIllegalMemoryAccess {
			t.Fatalf("error %v, want an %s failure", err, engine.ClassIllegalMemoryAccess)
		}
		if !errors.Is(f.LogErr, syscall.ENOSPC) {
			t.Errorf("Failure.LogErr = %v, want ENOSPC", f.LogErr)
		}
	})
}

func TestStopEscalatesToSIGKILL(t *testing.T) {
	spec := helperSpec(t, "ignore-term")
	spec.Grace = 300 * time.Millisecond
	srv, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	t0 := time.Now()
	second := make(chan time.Duration, 1)
	go func() { // a concurrent Stop waits for the first one
		time.Sleep(20 * time.Millisecond)
		_ = srv.Stop(context.Background())
		second <- time.Since(t0)
	}()
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if d := time.Since(t0); d < spec.Grace {
		t.Errorf("Stop took %v, less than the grace: SIGTERM was not ignored?", d)
	}
	if d := <-second; d < spec.Grace {
		t.Errorf("concurrent Stop returned after %v, before the group was gone", d)
	}
	if f := srv.Failure(); f != nil {
		t.Errorf("a stop is not a failure: %v", f)
	}
	if !groupGone(t, srv.PID) || !portFree(srv.Port) {
		t.Error("group or port left")
	}
	log, _ := os.ReadFile(spec.LogPath)
	if !strings.Contains(string(log), "sending SIGKILL") {
		t.Errorf("log lacks the escalation:\n%s", log)
	}
}

func TestStopKillsWholeGroup(t *testing.T) {
	spec := helperSpec(t, "group")
	srv, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	m := regexp.MustCompile(`SLEEPER_PID=(\d+)`).FindStringSubmatch(srv.LogTail(100))
	if m == nil {
		t.Fatalf("no sleeper pid in tail:\n%s", srv.LogTail(100))
	}
	sleeper, _ := strconv.Atoi(m[1])
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if pidAlive(sleeper) {
		t.Errorf("sleeper %d (ignores SIGTERM) survived Stop", sleeper)
	}
	if !groupGone(t, srv.PID) {
		t.Error("group left")
	}
}

func TestMarkHang(t *testing.T) {
	srv, err := Start(context.Background(), helperSpec(t, "ok"))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	srv.MarkHang()
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	f := srv.Failure()
	if f == nil || f.Class != engine.ClassHang || !strings.Contains(f.Tail, "Received sigterm") {
		t.Errorf("Failure = %+v", f)
	}
}

func TestStartCanceled(t *testing.T) {
	spec := helperSpec(t, "hang")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	srv, err := Start(ctx, spec)
	if srv != nil {
		killGroup(t, srv.PID)
	}
	var f *Failure
	if err == nil || !errors.Is(err, context.Canceled) || errors.As(err, &f) {
		t.Fatalf("err = %v, want a non-Failure wrapping context.Canceled", err)
	}
	log, _ := os.ReadFile(spec.LogPath)
	if !strings.Contains(string(log), "start canceled") {
		t.Errorf("log:\n%s", log)
	}
}

// TestPdeathsig kills -9 a process that started a server through Start and
// checks the server dies with it.
func TestPdeathsig(t *testing.T) {
	parent := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "--", "parent")
	parent.Env = append(os.Environ(), helperEnv+"=1")
	parent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	killGroup(t, parent.Process.Pid)
	line := make(chan string, 1)
	go func() { // ends when the parent's stdout closes
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "CHILD_PID=") || strings.HasPrefix(sc.Text(), "START_ERR=") {
				line <- sc.Text()
			}
		}
		close(line)
	}()
	var l string
	select {
	case l = <-line:
	case <-time.After(30 * time.Second):
		t.Fatal("parent printed nothing")
	}
	child, err := strconv.Atoi(strings.TrimPrefix(l, "CHILD_PID="))
	if err != nil {
		t.Fatalf("parent: %s", l)
	}
	killGroup(t, child)
	if !pidAlive(child) {
		t.Fatalf("server %d not running before the kill", child)
	}
	_ = parent.Process.Signal(syscall.SIGKILL)
	_ = parent.Wait()
	if !groupGone(t, child) {
		t.Errorf("server group %d survived kill -9 of its launcher", child)
	}
}

// BenchmarkCrashDetection reports the time from a fake server's last act
// before exiting (it prints a timestamp and exits 1) to Start returning its
// Failure. Process start-up is outside the measured span.
func BenchmarkCrashDetection(b *testing.B) {
	re := regexp.MustCompile(`EXIT_AT=(\d+)`)
	var total time.Duration
	for b.Loop() {
		spec := helperSpec(b, "exit-stamp")
		_, err := Start(context.Background(), spec)
		done := time.Now()
		var f *Failure
		if !errors.As(err, &f) {
			b.Fatalf("err = %v", err)
		}
		m := re.FindStringSubmatch(f.Tail)
		if m == nil {
			b.Fatalf("no stamp in tail:\n%s", f.Tail)
		}
		at, _ := strconv.ParseInt(m[1], 10, 64)
		total += done.Sub(time.Unix(0, at))
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns-exit-to-failure/op")
}

// waitLog polls the log until re matches, for up to 30 s.
func waitLog(t *testing.T, path string, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if m := re.FindStringSubmatch(string(b)); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("log lacks %s:\n%s", re, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAbortDuringStart: a server that ignores SIGTERM and never gets ready;
// Start's teardown would wait the whole grace, Abort cuts it short.
func TestAbortDuringStart(t *testing.T) {
	tests := []struct {
		name    string
		cancel  bool  // cancel Start's ctx before closing Abort
		wantErr error // what the error wraps
	}{
		{"cancel then abort", true, context.Canceled},
		{"abort alone", false, ErrAborted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := helperSpec(t, "hang-ignore-term")
			spec.Grace = 20 * time.Second
			spec.ReleaseTimeout = 0 // the 2 min default: Abort must skip it
			abort := make(chan struct{})
			spec.Abort = abort
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				srv *Server
				err error
			}
			done := make(chan result, 1)
			go func() {
				srv, err := Start(ctx, spec)
				done <- result{srv, err}
			}()
			m := waitLog(t, spec.LogPath, regexp.MustCompile(`HELPER_PID=(\d+)`))
			pid, _ := strconv.Atoi(m[1])
			killGroup(t, pid)
			sm := waitLog(t, spec.LogPath, regexp.MustCompile(`SLEEPER_PID=(\d+)`))
			sleeper, _ := strconv.Atoi(sm[1])
			t.Cleanup(func() { _ = syscall.Kill(sleeper, syscall.SIGKILL) })

			t0 := time.Now()
			if tt.cancel {
				cancel()
				time.Sleep(200 * time.Millisecond)
				select {
				case r := <-done:
					t.Fatalf("Start returned %v before the abort: SIGTERM was not ignored?", r.err)
				default:
				}
			}
			close(abort)
			var r result
			select {
			case r = <-done:
			case <-time.After(2 * spec.Grace):
				t.Fatal("Start did not return")
			}
			if d := time.Since(t0); d >= spec.Grace/2 {
				t.Errorf("Start returned %v after the cancel, want well before the %v grace", d, spec.Grace)
			}
			if r.srv != nil || !errors.Is(r.err, tt.wantErr) {
				t.Errorf("Start = %v, %v; want nil and an error wrapping %v", r.srv, r.err, tt.wantErr)
			}
			if !groupGone(t, pid) || pidAlive(sleeper) {
				t.Errorf("process group %d (sleeper %d alive: %v) left after the abort", pid, sleeper, pidAlive(sleeper))
			}
			log, _ := os.ReadFile(spec.LogPath)
			if !strings.Contains(string(log), "aborted; sending SIGKILL") {
				t.Errorf("log lacks the abort:\n%s", log)
			}
		})
	}
}

// TestAbortDuringStop: Stop waits the grace for a server that ignores
// SIGTERM; closing Abort meanwhile kills it at once.
func TestAbortDuringStop(t *testing.T) {
	spec := helperSpec(t, "ignore-term")
	spec.Grace = 20 * time.Second
	abort := make(chan struct{})
	spec.Abort = abort
	srv, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	t0 := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop(context.Background()) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned %v before the abort: SIGTERM was not ignored?", err)
	default:
	}
	close(abort)
	select {
	case err = <-stopped:
	case <-time.After(2 * spec.Grace):
		t.Fatal("Stop did not return")
	}
	if d := time.Since(t0); d >= spec.Grace/2 {
		t.Errorf("Stop returned after %v, want well before the %v grace", d, spec.Grace)
	}
	if err != nil {
		t.Errorf("Stop: %v", err)
	}
	if f := srv.Failure(); f != nil {
		t.Errorf("an aborted stop is not a failure: %v", f)
	}
	if !groupGone(t, srv.PID) {
		t.Error("group left")
	}
	if log, _ := os.ReadFile(spec.LogPath); !strings.Contains(string(log), "aborted; sending SIGKILL") {
		t.Errorf("log lacks the abort:\n%s", log)
	}
}

// TestEnvClearsEngineVariables: the child's environment drops what the
// engine reads behind its command line (llama.cpp's LLAMA_ARG_*,
// LLAMA_API_KEY and LLAMA_LOG_*), keeps the rest, and Spec.Env still
// reaches the child.
func TestEnvClearsEngineVariables(t *testing.T) {
	for _, kv := range []string{"LLAMA_ARG_N_PARALLEL=7", "LLAMA_API_KEY=k", "LLAMA_LOG_VERBOSITY=1", "LLAMA_LOG_FILE=/tmp/x.log",
		"LLAMA_LOG_COLORS=1", "LLAMA_LOG_PREFIX=1", "LLAMA_LOG_TIMESTAMPS=1", "SGTUNE_KEPT=1"} {
		name, val, _ := strings.Cut(kv, "=")
		t.Setenv(name, val)
	}
	s := &Server{spec: Spec{Engine: engine.LlamaCpp, Env: []string{"LLAMA_LOG_VERBOSITY=4"}}}
	env := s.env()
	got := map[string][]string{}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		got[name] = append(got[name], val)
	}
	for _, name := range []string{"LLAMA_ARG_N_PARALLEL", "LLAMA_API_KEY", "LLAMA_LOG_FILE", "LLAMA_LOG_COLORS", "LLAMA_LOG_PREFIX", "LLAMA_LOG_TIMESTAMPS"} {
		if v, ok := got[name]; ok {
			t.Errorf("%s=%v inherited", name, v)
		}
	}
	// Only the spec's own value, not the inherited one.
	if v := got["LLAMA_LOG_VERBOSITY"]; len(v) != 1 || v[0] != "4" {
		t.Errorf("LLAMA_LOG_VERBOSITY = %v, want only the spec's 4", v)
	}
	if v := got["SGTUNE_KEPT"]; len(v) != 1 {
		t.Errorf("SGTUNE_KEPT = %v, want it inherited", v)
	}
	// SGLang clears none of llama.cpp's variables.
	s = &Server{spec: Spec{Engine: engine.SGLang}}
	if !slices.Contains(s.env(), "LLAMA_LOG_VERBOSITY=1") {
		t.Error("an SGLang child lost LLAMA_LOG_VERBOSITY")
	}
}

// Command bench-loadgen measures sgtune's load generator: client CPU time
// per streamed chunk and chunks/s at C128 against a local maximum-speed
// SGLang-shaped SSE server (a child process, so getrusage counts only the
// client), for sgtune's reader and go-openai's plain Recv() in the same
// run, and the TTFT error against a deterministic injected first-token
// delay, with a breakdown of where the error goes. Its last line is
// `speedup_vs_recv=X ttft_err_p99_ms=Y`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/objective/fakesse"
)

type config struct {
	conc, requests, tokens, rounds int
	ttftDelay, ttftInterval        time.Duration
	skipSpeed, breakdown           bool
	dump                           string
}

func main() {
	serve := flag.String("serve", "", "internal: serve the fake SSE server on this address")
	delay := flag.Duration("delay", 0, "internal: first-token delay of the served fake")
	interval := flag.Duration("interval", 0, "internal: time between tokens of the served fake")
	var cfg config
	flag.IntVar(&cfg.conc, "c", 128, "concurrent streams")
	flag.IntVar(&cfg.requests, "requests", 512, "requests per measured run")
	flag.IntVar(&cfg.tokens, "tokens", 256, "chunks (tokens) per request")
	flag.IntVar(&cfg.rounds, "rounds", 3, "alternating rounds per reader (the median is reported), and repeats of the TTFT check")
	flag.DurationVar(&cfg.ttftDelay, "ttft-delay", 20*time.Millisecond, "injected first-token delay for the TTFT check")
	flag.DurationVar(&cfg.ttftInterval, "ttft-interval", 10*time.Millisecond, "time between tokens in the TTFT check (a decode step; 0 = as fast as possible)")
	flag.BoolVar(&cfg.skipSpeed, "ttft-only", false, "skip the reader comparison (the last line then says speedup_vs_recv=skipped)")
	flag.BoolVar(&cfg.breakdown, "breakdown", true, "after the TTFT check, repeat it with request tracing and print where the error goes")
	flag.StringVar(&cfg.dump, "dump", "", "write the traced run's client traces and server timings to this JSON file")
	flag.Parse()
	if *serve != "" {
		if err := serveFake(*serve, *delay, *interval); err != nil {
			fmt.Fprintln(os.Stderr, "bench-loadgen server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-loadgen:", err)
		os.Exit(1)
	}
}

// serveFake runs the fake server and prints its address on stdout.
func serveFake(addr string, delay, interval time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	// A long model name makes chunks ~330 bytes, like SGLang's.
	srv := &fakesse.Server{Model: "zai-org/GLM-5.3-Flash-FP8-benchmark-model-name-padding", FirstTokenDelay: delay, TokenInterval: interval}
	return http.Serve(ln, srv)
}

// server is the fake running as a child process.
type server struct {
	url  string
	cmd  *exec.Cmd
	done bool
}

// child starts the fake server as a child process.
func child(delay, interval time.Duration) (*server, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-serve", "127.0.0.1:0", "-delay", delay.String(), "-interval", interval.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("fake server did not report its address: %w", err)
	}
	s.url = "http://" + strings.TrimSpace(line)
	return s, nil
}

func (s *server) stop() {
	if !s.done {
		s.done = true
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// cpu returns the child's user+system CPU time from /proc/PID/stat, in
// clock ticks of 10 ms (0 when unreadable).
func (s *server) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// getJSON fetches one of the fake's introspection endpoints.
func (s *server) getJSON(path string, v any) error {
	resp, err := http.Get(s.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// cpu returns this process's user+system CPU time.
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type measure struct {
	usPerChunk, chunksPerS float64
	chunks                 int
}

func once(ctx context.Context, t objective.Target, r objective.Reader, conc, n, tokens int) (measure, error) {
	c0, w0 := cpu(), time.Now()
	p, recs, err := objective.LoadTest(ctx, t, r, conc, n, tokens)
	c1, wall := cpu(), time.Since(w0)
	if err != nil {
		return measure{}, err
	}
	if p.Completed != n {
		return measure{}, fmt.Errorf("%s: %d of %d requests completed", r, p.Completed, n)
	}
	chunks := 0
	for _, rec := range recs {
		chunks += rec.Chunks
	}
	return measure{
		usPerChunk: float64((c1 - c0).Microseconds()) / float64(chunks),
		chunksPerS: float64(chunks) / wall.Seconds(),
		chunks:     chunks,
	}, nil
}

func run(cfg config) error {
	ctx := context.Background()
	timerJitter()
	speedup := "skipped"
	if !cfg.skipSpeed {
		x, err := speed(ctx, cfg)
		if err != nil {
			return err
		}
		speedup = fmt.Sprintf("%.2f", x)
	}
	p99, err := ttft(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("speedup_vs_recv=%s ttft_err_p99_ms=%.3f\n", speedup, p99)
	return nil
}

// timerJitter prints how late a lone timer fires in this process: the
// machine's floor for any injected delay (scheduler and vCPU wake-up).
func timerJitter() {
	var late []float64
	for range 100 {
		t0 := time.Now()
		time.Sleep(2 * time.Millisecond)
		late = append(late, float64(time.Since(t0)-2*time.Millisecond)/1e6)
	}
	st := objective.Summarize(late)
	fmt.Printf("machine: %d CPUs; a lone 2 ms sleep here fires late by p50 %.3f ms, p99 %.3f ms\n", runtime.NumCPU(), st.P50, st.P99)
}

// speed compares the readers and returns Recv's µs per chunk ÷ sgtune's.
func speed(ctx context.Context, cfg config) (float64, error) {
	srv, err := child(0, 0)
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	t := objective.Target{URL: srv.url}
	readers := []objective.Reader{objective.ReaderSgtune, objective.ReaderOpenAIRecv, objective.ReaderOpenAIRecvRaw}
	// Warm the connections and the runtime once per reader.
	for _, r := range readers {
		if _, err := once(ctx, t, r, cfg.conc, cfg.conc, 8); err != nil {
			return 0, err
		}
	}
	res := map[objective.Reader][]measure{}
	for range cfg.rounds {
		for _, r := range readers {
			m, err := once(ctx, t, r, cfg.conc, cfg.requests, cfg.tokens)
			if err != nil {
				return 0, err
			}
			res[r] = append(res[r], m)
		}
	}
	med := func(r objective.Reader) measure {
		ms := append([]measure(nil), res[r]...)
		sort.Slice(ms, func(i, j int) bool { return ms[i].usPerChunk < ms[j].usPerChunk })
		return ms[len(ms)/2]
	}
	fmt.Printf("C%d, %d requests x %d tokens per run, %d rounds, server in a child process on the same machine\n", cfg.conc, cfg.requests, cfg.tokens, cfg.rounds)
	fmt.Printf("%-16s %14s %14s\n", "reader", "client µs/chunk", "chunks/s")
	for _, r := range readers {
		m := med(r)
		fmt.Printf("%-16s %14.2f %14.0f\n", r, m.usPerChunk, m.chunksPerS)
	}
	// What one request costs both sides, apart from its tokens: a burst of
	// C requests sent at once (the first wave of every point) needs about
	// C times this much CPU before the last one's handler starts.
	const n1 = 1024
	c0, s0 := cpu(), srv.cpu()
	if _, err := once(ctx, t, objective.ReaderSgtune, cfg.conc, n1, 1); err != nil {
		return 0, err
	}
	cu, su := float64((cpu()-c0).Microseconds())/n1, float64((srv.cpu()-s0).Microseconds())/n1
	fmt.Printf("CPU per 1-token request: client %.0f µs (incl. building its body), server %.0f µs; a burst of %d requests at once needs ~%.1f ms of CPU on %d CPUs\n",
		cu, su, cfg.conc, float64(cfg.conc)*(cu+su)/1000/float64(runtime.NumCPU()), runtime.NumCPU())
	return med(objective.ReaderOpenAIRecv).usPerChunk / med(objective.ReaderSgtune).usPerChunk, nil
}

// ttft runs the TTFT accuracy check against a server injecting a
// deterministic first-token delay, prints it, and returns the p99 error
// (ms). The headline comes from an untraced run; the breakdown from a
// second, traced run of the same workload.
func ttft(ctx context.Context, cfg config) (float64, error) {
	srv, err := child(cfg.ttftDelay, cfg.ttftInterval)
	if err != nil {
		return 0, err
	}
	defer srv.stop()
	t := objective.Target{URL: srv.url}
	// The sweep's own code path: warm-up wave, then measured repeats.
	w := objective.Workload{Chat: objective.ChatSpec{Concurrency: []int{cfg.conc}, Requests: []int{4 * cfg.conc}, MaxTokens: 16, Repeats: cfg.rounds, PromptTokens: 64}}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	r, err := objective.Run(ctx, t, w, objective.Options{})
	runtime.ReadMemStats(&ms1)
	if err != nil {
		return 0, err
	}
	var errs []float64
	for _, rec := range r.Requests {
		errs = append(errs, abs(rec.TTFT-cfg.ttftDelay.Seconds())*1000)
	}
	st := objective.Summarize(errs)
	// The fake's own share: how late it wrote first tokens after its handler
	// started (timer and scheduling on the shared cores), not the client's.
	var over []float64
	srv.getJSON("/fake/overshoot", &over)
	for i := range over {
		over[i] *= 1000
	}
	so := objective.Summarize(over)
	nreq := len(r.Requests) + cfg.conc
	fmt.Printf("client GC during the TTFT check: %d cycles, %.3f ms stop-the-world in all, %.1f KiB allocated per request\n",
		ms1.NumGC-ms0.NumGC, float64(ms1.PauseTotalNs-ms0.PauseTotalNs)/1e6, float64(ms1.TotalAlloc-ms0.TotalAlloc)/1024/float64(nreq))
	if cfg.breakdown {
		if err := breakdown(ctx, cfg, srv, w); err != nil {
			return 0, err
		}
	}
	fmt.Printf("of which the server wrote first tokens late (after its handler started) by: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms (%d requests incl. warm-up)\n", so.P50, so.P90, so.P99, len(over))
	fmt.Printf("TTFT error vs injected %v (then a token every %v) at C%d over %d requests: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms\n", cfg.ttftDelay, cfg.ttftInterval, cfg.conc, len(errs), st.P50, st.P90, st.P99)
	return st.P99, nil
}

// breakdown repeats the TTFT check with request tracing and prints where
// the client-measured TTFT goes, joining the client's traces with the
// fake's own timings on the shared wall clock (both processes read the
// same CLOCK_REALTIME).
func breakdown(ctx context.Context, cfg config, srv *server, w objective.Workload) error {
	var traces []objective.RequestTrace
	if _, err := objective.Run(ctx, objective.Target{URL: srv.url}, w, objective.Options{Trace: func(tr objective.RequestTrace) {
		traces = append(traces, tr)
	}}); err != nil {
		return fmt.Errorf("traced run: %w", err)
	}
	var tims []fakesse.Timing
	if err := srv.getJSON("/fake/timings", &tims); err != nil {
		return fmt.Errorf("fake timings: %w", err)
	}
	if cfg.dump != "" {
		b, err := json.Marshal(map[string]any{"delay_ns": cfg.ttftDelay.Nanoseconds(), "traces": traces, "timings": tims})
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.dump, b, 0o644); err != nil {
			return err
		}
	}
	firstTok := map[int64]int64{}
	for _, tm := range tims {
		firstTok[tm.Start] = tm.FirstToken
	}
	// The first wave of each repeat: the conc requests sent at once when
	// the closed loop starts.
	byRepeat := map[int][]int64{}
	for _, tr := range traces {
		if tr.Phase == "" {
			byRepeat[tr.Repeat] = append(byRepeat[tr.Repeat], tr.Start)
		}
	}
	waveEnd := map[int]int64{}
	for rep, starts := range byRepeat {
		slices.Sort(starts)
		waveEnd[rep] = starts[min(cfg.conc, len(starts))-1]
	}
	delay := float64(cfg.ttftDelay.Nanoseconds()) / 1e6
	ms := func(a, b int64) float64 { return float64(b-a) / 1e6 }
	var pre, queue, late, deliver, total, firstWave, laterWaves, exQueue, own []float64
	dials := map[string]int{}
	for _, tr := range traces {
		if !tr.Reused {
			dials[tr.Phase]++
		}
		if tr.Phase != "" || !tr.OK || tr.FirstToken == 0 || tr.WroteRequest == 0 {
			continue
		}
		hs, _ := strconv.ParseInt(tr.Header.Get(fakesse.StartHeader), 10, 64)
		sf, ok := firstTok[hs]
		if !ok {
			continue
		}
		e := ms(tr.Start, tr.FirstToken) - delay
		pre = append(pre, ms(tr.Start, tr.WroteRequest))
		queue = append(queue, ms(tr.WroteRequest, hs))
		late = append(late, ms(hs, sf)-delay)
		deliver = append(deliver, ms(sf, tr.FirstToken))
		total = append(total, e)
		if tr.Start <= waveEnd[tr.Repeat] {
			firstWave = append(firstWave, abs(e))
		} else {
			laterWaves = append(laterWaves, abs(e))
		}
		exQueue = append(exQueue, abs(e-ms(tr.WroteRequest, hs)))
		own = append(own, ms(tr.Start, tr.WroteRequest)+ms(sf, tr.FirstToken))
	}
	if len(total) == 0 {
		return fmt.Errorf("traced run: no request could be matched with the server's timings")
	}
	fmt.Printf("where the TTFT error goes (a second, traced run; client and server timestamps on the shared wall clock; new connections: warm-up %d, measured %d):\n", dials["warmup"], dials[""])
	fmt.Printf("  %-58s %8s %8s %8s %8s\n", "ms, over "+strconv.Itoa(len(total))+" measured requests", "p50", "p90", "p99", "max")
	row := func(name string, xs []float64) {
		if len(xs) == 0 {
			return
		}
		st := objective.Summarize(xs)
		fmt.Printf("  %-58s %8.3f %8.3f %8.3f %8.3f\n", name, st.P50, st.P90, st.P99, slices.Max(xs))
	}
	row("client: start -> request written", pre)
	row("server queueing: request written -> handler started", queue)
	row("server: handler -> first token written, beyond the delay", late)
	row("delivery: first token written -> client read it", deliver)
	row("total (signed)", total)
	row(fmt.Sprintf("  |error|, first wave of each repeat (%d sent at once)", cfg.conc), firstWave)
	row("  |error|, later requests", laterWaves)
	row("  |error| excluding server queueing (not the headline)", exQueue)
	row("  client's own share: start -> written + delivery", own)
	return nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

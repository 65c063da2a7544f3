// Command bench-loadgen measures sgtune's load generator: client CPU time
// per streamed chunk and chunks/s at C128 against a local maximum-speed
// SGLang-shaped SSE server (a child process, so getrusage counts only the
// client), for sgtune's reader and go-openai's plain Recv() in the same
// run, and the TTFT error against a deterministic injected first-token
// delay. Its last line is `speedup_vs_recv=X ttft_err_p99_ms=Y`.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/objective/fakesse"
)

func main() {
	serve := flag.String("serve", "", "internal: serve the fake SSE server on this address")
	delay := flag.Duration("delay", 0, "internal: first-token delay of the served fake")
	interval := flag.Duration("interval", 0, "internal: time between tokens of the served fake")
	conc := flag.Int("c", 128, "concurrent streams")
	requests := flag.Int("requests", 512, "requests per measured run")
	tokens := flag.Int("tokens", 256, "chunks (tokens) per request")
	rounds := flag.Int("rounds", 3, "alternating rounds per reader (the median is reported)")
	ttftDelay := flag.Duration("ttft-delay", 20*time.Millisecond, "injected first-token delay for the TTFT check")
	ttftInterval := flag.Duration("ttft-interval", 10*time.Millisecond, "time between tokens in the TTFT check (a decode step; 0 = as fast as possible)")
	flag.Parse()
	if *serve != "" {
		if err := serveFake(*serve, *delay, *interval); err != nil {
			fmt.Fprintln(os.Stderr, "bench-loadgen server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*conc, *requests, *tokens, *rounds, *ttftDelay, *ttftInterval); err != nil {
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

// child starts the fake server as a child process and returns its URL and
// a stop function.
func child(delay, interval time.Duration) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe, "-serve", "127.0.0.1:0", "-delay", delay.String(), "-interval", interval.String())
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("fake server did not report its address: %w", err)
	}
	return "http://" + strings.TrimSpace(line), stop, nil
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

func run(conc, n, tokens, rounds int, ttftDelay, ttftInterval time.Duration) error {
	ctx := context.Background()
	url, stop, err := child(0, 0)
	if err != nil {
		return err
	}
	defer stop()
	t := objective.Target{URL: url}
	readers := []objective.Reader{objective.ReaderSgtune, objective.ReaderOpenAIRecv, objective.ReaderOpenAIRecvRaw}
	// Warm the connections and the runtime once per reader.
	for _, r := range readers {
		if _, err := once(ctx, t, r, conc, conc, 8); err != nil {
			return err
		}
	}
	res := map[objective.Reader][]measure{}
	for range rounds {
		for _, r := range readers {
			m, err := once(ctx, t, r, conc, n, tokens)
			if err != nil {
				return err
			}
			res[r] = append(res[r], m)
		}
	}
	med := func(r objective.Reader) measure {
		ms := append([]measure(nil), res[r]...)
		sort.Slice(ms, func(i, j int) bool { return ms[i].usPerChunk < ms[j].usPerChunk })
		return ms[len(ms)/2]
	}
	fmt.Printf("C%d, %d requests x %d tokens per run, %d rounds, server in a child process on the same machine\n", conc, n, tokens, rounds)
	fmt.Printf("%-16s %14s %14s\n", "reader", "client µs/chunk", "chunks/s")
	for _, r := range readers {
		m := med(r)
		fmt.Printf("%-16s %14.2f %14.0f\n", r, m.usPerChunk, m.chunksPerS)
	}
	speedup := med(objective.ReaderOpenAIRecv).usPerChunk / med(objective.ReaderSgtune).usPerChunk
	stop()

	// TTFT accuracy: a deterministic first-token delay injected by the server.
	url, stop2, err := child(ttftDelay, ttftInterval)
	if err != nil {
		return err
	}
	defer stop2()
	t = objective.Target{URL: url}
	// The sweep's own code path: warm-up wave, then measured repeats.
	w := objective.Workload{Chat: objective.ChatSpec{Concurrency: []int{conc}, Requests: []int{4 * conc}, MaxTokens: 16, Repeats: rounds, PromptTokens: 64}}
	r, err := objective.Run(ctx, t, w, objective.Options{})
	if err != nil {
		return err
	}
	var errs []float64
	for _, rec := range r.Requests {
		errs = append(errs, abs(rec.TTFT-ttftDelay.Seconds())*1000)
	}
	st := objective.Summarize(errs)
	// The fake's own share: how late it wrote first tokens after its handler
	// started (timer and scheduling on the shared cores), not the client's.
	var over []float64
	if resp, err := http.Get(url + "/fake/overshoot"); err == nil {
		json.NewDecoder(resp.Body).Decode(&over)
		resp.Body.Close()
	}
	for i := range over {
		over[i] *= 1000
	}
	so := objective.Summarize(over)
	fmt.Printf("of which the server wrote first tokens late (after its handler started) by: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms (%d requests incl. warm-up)\n", so.P50, so.P90, so.P99, len(over))
	fmt.Printf("TTFT error vs injected %v (then a token every %v) at C%d over %d requests: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms\n", ttftDelay, ttftInterval, conc, len(errs), st.P50, st.P90, st.P99)
	fmt.Printf("speedup_vs_recv=%.2f ttft_err_p99_ms=%.3f\n", speedup, st.P99)
	return nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

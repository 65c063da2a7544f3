package virtual

import (
	"github.com/sgtune/sgtune/engine"

	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
)

// base is seed 000's quad-ep4 launch with the seed's parsers.
const base = "--model-path zai-org/GLM-5.3-Flash --tp-size 4 --ep-size 4 --mem-fraction-static 0.85 --chunked-prefill-size 8192 --context-length 32768 --max-running-requests 64 --disable-radix-cache --reasoning-parser glm45 --tool-call-parser glm47"

func argv(extra string) []string {
	a := strings.Fields(base)
	for _, f := range strings.Fields(extra) {
		if f == "-tool-parser" { // drop the tool-call parser
			i := slices.Index(a, "--tool-call-parser")
			a = slices.Delete(a, i, i+2)
			continue
		}
		a = append(a, f)
	}
	return a
}

// small is a short chat workload: C1 and C16, one repeat, gates on.
func small(gates bool) objective.Workload {
	on := true
	return objective.Workload{Kind: "chat", Chat: objective.ChatSpec{Concurrency: []int{1, 16}, Requests: []int{4, 32}, MaxTokens: 64, Repeats: 2, Warmup: &on},
		Quality: objective.QualitySpec{Enabled: gates}}
}

func classify(t *testing.T, log string, code int, ready bool) string {
	t.Helper()
	return launcher.ClassifyLog(engine.SGLang, strings.NewReader(log), code, ready).Class
}

// TestStartupAsLive: the startup log is the live process's, so the
// launcher parses the same facts from it; failed startups return the
// log and exit code the launcher classifies.
func TestStartupAsLive(t *testing.T) {
	srv, err := Start(t.Context(), argv(""), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fp := engine.SGLang.NewLogParser()
	for _, l := range srv.Log() {
		fp.Line(l)
	}
	f := fp.Facts()
	if !fp.Ready() || f.MaxRunningRequests != 64 || f.MaxTotalNumTokens != srv.Plan().KVTokens || f.MaxTotalNumTokens == 0 || !f.CUDAGraph {
		t.Errorf("facts %+v ready %v, plan KV %d", f, fp.Ready(), srv.Plan().KVTokens)
	}
	for _, tc := range []struct {
		name, extra, class string
	}{
		{"oom", "--mem-fraction-static 0.95", engine.ClassOOM},
		{"more ranks than GPUs", "--tp-size 8", engine.ClassStartupCrash},
		{"bad flag", "--no-such-flag", engine.ClassBadCommand},
	} {
		_, err := Start(t.Context(), argv(tc.extra), Options{})
		var se *StartupError
		if !errors.As(err, &se) {
			t.Errorf("%s: err %v, want a StartupError", tc.name, err)
			continue
		}
		if got := classify(t, strings.Join(se.Log, "\n"), se.ExitCode, false); got != tc.class {
			t.Errorf("%s: exit %d class %s, want %s; log tail %q", tc.name, se.ExitCode, got, tc.class, se.Log[max(0, len(se.Log)-3):])
		}
	}
}

// TestMeasure: a healthy launch passes both gates, every point passes its
// audit, and the figures are the simulator's (C1 decode at ~8.7 ms a step
// with EAGLE off: 256 tokens in about 2.4 s).
func TestMeasure(t *testing.T) {
	srv, err := Start(t.Context(), argv(""), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Measure(t.Context(), small(true), objective.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Audit.OK || len(res.Points) != 4 || len(res.Requests) != 2*4+2*32 {
		t.Fatalf("audit %+v, %d points, %d records", res.Audit, len(res.Points), len(res.Requests))
	}
	for _, q := range []*objective.QualityCheck{res.Quality.Before, res.Quality.After} {
		if !q.Pass || q.Summary.JSON != "24/24" || q.Summary.Tool != "8/8" {
			t.Errorf("gate %+v", q.Summary)
		}
	}
	for _, p := range res.Points {
		if p.State != "passed" || p.OutputTokens != p.Requested*64 && p.Concurrency == 1 {
			t.Errorf("point %+v", p)
		}
	}
	c1 := res.Medians[1]
	// 64 tokens: TTFT + 63 steps of ~8.8 ms.
	if c1.TTFTP50 < 0.1 || c1.TTFTP50 > 0.3 || c1.OutputTokS < 60 || c1.OutputTokS > 110 {
		t.Errorf("C1 median %+v", c1)
	}
	if res.Medians[16].OutputTokS < 5*c1.OutputTokS {
		t.Errorf("C16 %.1f tok/s vs C1 %.1f: batching gains nothing", res.Medians[16].OutputTokS, c1.OutputTokS)
	}
	if srv.Elapsed() <= 0 {
		t.Error("no virtual time passed")
	}
}

// TestQualityFaults: the gates fail as the live simulator makes them fail.
func TestQualityFaults(t *testing.T) {
	srv, err := Start(t.Context(), argv("-tool-parser"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Measure(t.Context(), small(true), objective.Options{})
	if !errors.Is(err, objective.ErrQuality) {
		t.Fatalf("err %v, want ErrQuality", err)
	}
	if q := res.Quality.Before; q.Summary.JSON != "24/24" || q.Summary.Tool != "0/8" {
		t.Errorf("no tool-call parser: gate %+v", q.Summary)
	}
	if v, ok, _ := objective.Score(objective.ScoreSpec{}, res); ok || v != 0 {
		t.Errorf("score %v %v", v, ok)
	}
}

// TestCrashes: fault rules crash the engine during the workload; the log
// then ends with the lines the launcher classifies as the live crash.
func TestCrashes(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		class       string
		atPoint     bool   // the crash fails a point (else the gate)
		gate        string // the gate before the sweep, as the live simulator gives it
	}{
		// Seed "reproduce": EP1, radix off, 64 slots: crash after 34 requests.
		{"reproduce", "--ep-size 1", engine.ClassIllegalMemoryAccess, true, "24/24 8/8"},
		// Seed "no-overlap": broken outputs, and a crash at the 32nd
		// request, the last of the gate.
		{"no-overlap", "--disable-overlap-schedule", engine.ClassIllegalMemoryAccess, false, "12/24 0/8"},
	} {
		srv, err := Start(t.Context(), argv(tc.extra), Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		res, err := srv.Measure(t.Context(), small(true), objective.Options{})
		if !errors.Is(err, ErrExited) {
			t.Fatalf("%s: err %v, want ErrExited", tc.name, err)
		}
		code, exited := srv.Exited()
		if !exited || code == 0 {
			t.Errorf("%s: exited %v code %d", tc.name, exited, code)
		}
		if got := classify(t, srv.LogText(), code, true); got != tc.class {
			t.Errorf("%s: class %s, want %s", tc.name, got, tc.class)
		}
		if q := res.Quality.Before; q == nil || q.Summary.JSON+" "+q.Summary.Tool != tc.gate {
			t.Errorf("%s: gate before %+v, want %s", tc.name, q, tc.gate)
		}
		failed := 0
		for _, p := range res.Points {
			failed += p.Failed
		}
		if tc.atPoint != (failed > 0) {
			t.Errorf("%s: %d failed requests in points %+v", tc.name, failed, res.Points)
		}
		if _, err := srv.Measure(t.Context(), small(false), objective.Options{}); !errors.Is(err, ErrExited) {
			t.Errorf("%s: measuring an exited server: %v", tc.name, err)
		}
	}
}

// TestHang: DP attention deadlocks above 32 running requests: the
// watchdog ends the point in virtual time with objective.ErrHang.
func TestHang(t *testing.T) {
	srv, err := Start(t.Context(), argv("--enable-dp-attention"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	on := true
	w := objective.Workload{Kind: "chat", Chat: objective.ChatSpec{Concurrency: []int{16, 64}, Requests: []int{16, 64}, MaxTokens: 32, Repeats: 1, Warmup: &on}, HangTimeout: 30}
	res, err := srv.Measure(t.Context(), w, objective.Options{})
	if !errors.Is(err, objective.ErrHang) {
		t.Fatalf("err %v, want ErrHang", err)
	}
	if len(res.Points) != 1 || res.Points[0].Concurrency != 16 || res.Points[0].State != "passed" {
		t.Errorf("points %+v", res.Points)
	}
	if _, exited := srv.Exited(); exited {
		t.Error("a hung server did not exit")
	}
}

// TestDraws: the same seed measures the same; another seed draws other
// EOS positions and acceptances; noise moves each repeat by about its CV.
func TestDraws(t *testing.T) {
	measure := func(opt Options) *objective.Result {
		t.Helper()
		srv, err := Start(context.Background(), argv("--speculative-algorithm EAGLE --speculative-num-steps 3 --max-running-requests 48"), opt)
		if err != nil {
			t.Fatal(err)
		}
		res, err := srv.Measure(context.Background(), small(false), objective.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b, c := measure(Options{Seed: 1}), measure(Options{Seed: 1}), measure(Options{Seed: 2})
	for i := range a.Points {
		if a.Points[i].OutputTokS != b.Points[i].OutputTokS || a.Points[i].TTFT != b.Points[i].TTFT {
			t.Fatalf("seed 1 twice: %+v vs %+v", a.Points[i], b.Points[i])
		}
	}
	differ := 0
	for i := range a.Points {
		if a.Points[i].OutputTokS != c.Points[i].OutputTokS {
			differ++
		}
	}
	if differ == 0 {
		t.Error("seed 2 measured exactly as seed 1")
	}
	// Noise: the log of the throughput ratio to the noiseless run has a
	// standard deviation near the CV (12%) over many repeats.
	var logs []float64
	for s := uint64(1); s <= 15; s++ {
		n := measure(Options{Seed: 1, NoiseCV: 0.12, NoiseSeed: s})
		for i := range n.Points {
			logs = append(logs, math.Log(n.Points[i].OutputTokS/a.Points[i].OutputTokS))
			// Latencies scale the other way.
			if r := n.Points[i].OutputTokS / a.Points[i].OutputTokS * n.Points[i].TTFT.P50 / a.Points[i].TTFT.P50; math.Abs(r-1) > 1e-9 {
				t.Fatalf("tok/s and TTFT not scaled by one factor: %v", r)
			}
		}
	}
	var m, ss float64
	for _, x := range logs {
		m += x
	}
	m /= float64(len(logs))
	for _, x := range logs {
		ss += (x - m) * (x - m)
	}
	if sd := math.Sqrt(ss / float64(len(logs)-1)); sd < 0.08 || sd > 0.17 || math.Abs(m) > 0.06 {
		t.Errorf("noise over %d repeats: mean log %.3f sd %.3f, want about 0 and 0.12", len(logs), m, sd)
	}
}

// TestOpenLoop: arrivals on a schedule in virtual time. At 2 req/s the
// server keeps up (TTFT stays small); at 200 req/s it falls behind and the
// TTFT of the last arrivals, counted from their schedule, grows.
func TestOpenLoop(t *testing.T) {
	body := []byte(`{"model":"zai-org/GLM-5.3-Flash","messages":[{"role":"user","content":"hello there"}],"max_tokens":64,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`)
	run := func(rate float64, n int) objective.LoopResult {
		t.Helper()
		srv, err := Start(t.Context(), argv(""), Options{})
		if err != nil {
			t.Fatal(err)
		}
		offs, err := objective.Arrivals(n, rate, 1, 9)
		if err != nil {
			t.Fatal(err)
		}
		bodies := make([][]byte, n)
		for i := range bodies {
			bodies[i] = body
		}
		// Warm every batch size first: the first batches after a launch
		// are cold (seed 000: r1 TTFT 11-14 s).
		for conc := 1; conc <= 64; conc *= 2 {
			if _, err := srv.ClosedLoop(t.Context(), bodies[:min(conc, n)], conc, 30*time.Second, false); err != nil {
				t.Fatal(err)
			}
		}
		lr, err := srv.OpenLoop(t.Context(), bodies, offs, 30*time.Second, false)
		if err != nil {
			t.Fatal(err)
		}
		if lr.Issued != n || lr.Completed != n || len(lr.Exchanges) != n {
			t.Fatalf("rate %g: issued %d, completed %d, %d exchanges of %d", rate, lr.Issued, lr.Completed, len(lr.Exchanges), n)
		}
		var end float64
		for i, x := range lr.Exchanges {
			r := x.Record
			if r.ScheduledS != offs[i].Seconds() || r.StartS != r.ScheduledS || r.SendLagS != 0 || !r.OK || r.TTFT <= 0 || r.Latency < r.TTFT {
				t.Fatalf("rate %g: exchange %d %+v, scheduled %v", rate, i, r, offs[i])
			}
			end = max(end, r.ScheduledS+r.Latency)
		}
		if d := lr.Duration.Seconds(); math.Abs(d-end) > 1e-6 {
			t.Errorf("rate %g: duration %.3f s, last end %.3f s", rate, d, end)
		}
		return lr
	}
	ttft := func(xs []objective.Exchange) float64 {
		var s float64
		for _, x := range xs {
			s += x.Record.TTFT
		}
		return s / float64(len(xs))
	}
	slow := run(2, 20)
	if m := ttft(slow.Exchanges); m > 0.5 {
		t.Errorf("2 req/s: mean TTFT %.3f s, want small", m)
	}
	fast := run(200, 400)
	first, last := ttft(fast.Exchanges[:100]), ttft(fast.Exchanges[300:])
	t.Logf("2 req/s: mean TTFT %.3f s, duration %v; 200 req/s: mean TTFT %.3f s first quarter, %.3f s last, duration %v",
		ttft(slow.Exchanges), slow.Duration, first, last, fast.Duration)
	if last < 2*first || fast.Duration < 4*time.Second {
		t.Errorf("200 req/s: TTFT %.3f -> %.3f s, duration %v: want a growing backlog", first, last, fast.Duration)
	}
	again := run(200, 400)
	for i := range fast.Exchanges {
		if fast.Exchanges[i].Record != again.Exchanges[i].Record {
			t.Fatalf("exchange %d differs between two runs", i)
		}
	}
}

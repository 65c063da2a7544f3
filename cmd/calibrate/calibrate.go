package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/seed"
	"github.com/sgtune/sgtune/sim"
)

// Tolerances of issue 3.
const (
	TolTokS   = 0.10
	TolTTFT   = 0.25
	TolMatrix = 0.15
)

// passingRuns are seed 000's five passing runs.
var passingRuns = []string{"prefix-cache-on", "quad-ep4", "quad-ep4-cache-state128", "quad-ep4-cache-state384", "quad-ep4-mtp5-state384"}

// seedArgv is the SGLang command line of a seed run's configuration.
func seedArgv(r *seed.Run) []string {
	c := r.Config
	a := []string{"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", fmt.Sprint(c.TP), "--ep-size", fmt.Sprint(c.EP),
		"--mem-fraction-static", fmt.Sprint(c.MemoryFraction), "--chunked-prefill-size", fmt.Sprint(c.MaxBatchedTokens),
		"--context-length", fmt.Sprint(c.MaxModelLen), "--max-running-requests", fmt.Sprint(c.RequestedMaxRunning),
		// The seed counts reasoning tokens and checks tool calls: parsers on.
		"--reasoning-parser", "glm45", "--tool-call-parser", "glm47"}
	if !c.PrefixCaching {
		a = append(a, "--disable-radix-cache")
	}
	// A pool equal to the running cap with radix off is SGLang's default.
	if c.PrefixCaching || c.StatePoolSlots != c.RequestedMaxRunning {
		a = append(a, "--max-mamba-cache-size", fmt.Sprint(c.StatePoolSlots))
	}
	if c.DisableCUDAGraph {
		a = append(a, "--disable-cuda-graph")
	}
	if c.DisableOverlapSchedule {
		a = append(a, "--disable-overlap-schedule")
	}
	if c.SpecMethod != nil {
		a = append(a, "--speculative-algorithm", *c.SpecMethod, "--speculative-num-steps", fmt.Sprint(*c.SpecSteps),
			"--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", fmt.Sprint(*c.SpecTokens))
	}
	return a
}

// Row compares one concurrency level.
type Row struct {
	Conc                  int
	SimTokS, SeedTokS     float64
	SimTTFT50, SeedTTFT50 float64
	SimTTFT99             float64
	R1TTFT50, R1TTFT99    float64
}

// TokDev is the relative deviation of output tok/s.
func (r Row) TokDev() float64 { return rel(r.SimTokS, r.SeedTokS) }

// TTFTDev is the relative deviation of TTFT p50.
func (r Row) TTFTDev() float64 { return rel(r.SimTTFT50, r.SeedTTFT50) }

// OK reports whether both figures are within tolerance.
func (r Row) OK() bool {
	return math.Abs(r.TokDev()) <= TolTokS && math.Abs(r.TTFTDev()) <= TolTTFT
}

func rel(simulated, published float64) float64 {
	if published == 0 {
		return math.Inf(1)
	}
	return simulated/published - 1
}

// nearer returns the candidate nearer to v.
func nearer(v float64, cands ...float64) float64 {
	best := math.NaN()
	for _, c := range cands {
		if c == 0 || math.IsNaN(c) {
			continue
		}
		if math.IsNaN(best) || math.Abs(c-v) < math.Abs(best-v) {
			best = c
		}
	}
	return best
}

// Calibrator runs the simulator and measures it.
type Calibrator struct {
	Speed  float64
	Out    io.Writer
	Levels []int
	// Requests per level; default 8/32/256/512 for 1/16/64/128, else 4*c.
	Requests map[int]int
	// Repeats measured per level (default 1; the seed is compared on r2/r3).
	Repeats int
	// SimLog receives the simulator's output (default: discarded).
	SimLog io.Writer
	// Contexts limits the matrix to these contexts (nil: all).
	Contexts map[int]bool
	// Verbose prints per-cell details.
	Verbose bool
	// LongSpeed, when positive, is the speed-up for matrix contexts above
	// LongContext tokens. The load generator spends real CPU time on each
	// multi-megabyte request (encoding it, between a stream's requests),
	// which the speed-up turns into simulated seconds lost per request.
	LongSpeed   float64
	LongContext int
}

// simServer is an in-process sglang-sim.
type simServer struct {
	url    string
	cancel context.CancelFunc
	done   chan int
}

// startSim runs sim.Main in process and waits until it is ready or exits.
func (c *Calibrator) startSim(ctx context.Context, argv []string) (*simServer, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan int, 1)
	log := c.SimLog
	if log == nil {
		log = io.Discard
	}
	argv = append(append([]string(nil), argv...), "--port", "0", "--sim-speedup", fmt.Sprint(c.Speed))
	if c.SimLog != nil {
		argv = append(argv, "--log-level", "debug")
	}
	go func() {
		// Startup durations are not calibrated here: skip them.
		done <- sim.Main(ctx, argv, log, log, sim.Options{Ready: func(addr string) { ready <- addr }, NoStartupDelay: true})
	}()
	select {
	case addr := <-ready:
		return &simServer{url: "http://" + addr, cancel: cancel, done: done}, 0, nil
	case code := <-done:
		cancel()
		return nil, code, fmt.Errorf("simulator exited with code %d during startup", code)
	case <-ctx.Done():
		cancel()
		return nil, 0, ctx.Err()
	}
}

func (s *simServer) stop() int {
	s.cancel()
	return <-s.done
}

func (c *Calibrator) requests(conc int) int {
	if n, ok := c.Requests[conc]; ok {
		return n
	}
	switch conc {
	case 1:
		return 8
	case 16:
		return 32
	case 64:
		return 256
	case 128:
		return 512
	}
	return 4 * conc
}

// scaled converts a point measured under speed-up S to simulated units.
func (c *Calibrator) scaled(p objective.Point) (tokS, ttft50, ttft99 float64) {
	return p.OutputTokS / c.Speed, p.TTFT.P50 * c.Speed, p.TTFT.P99 * c.Speed
}

// Chat runs the seed-000 sweep on run r's configuration.
func (c *Calibrator) Chat(ctx context.Context, r *seed.Run, warm bool) ([]Row, error) {
	srv, _, err := c.startSim(ctx, seedArgv(r))
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	w := c.workload(warm)
	// Hang timeout in wall seconds: generous for a sim at speed-up S.
	w.HangTimeout = math.Max(5, 120/c.Speed)
	res, err := objective.Run(ctx, objective.Target{URL: srv.url}, w, objective.Options{})
	if err != nil && res == nil {
		return nil, err
	}
	var rows []Row
	for _, p := range res.Points {
		tok, t50, t99 := c.scaled(p)
		row := seedRow(r, p.Concurrency, tok, t50, t99)
		rows = append(rows, row)
	}
	return rows, err
}

// Faults runs the seed's failing configurations with the quality gate and
// the sweep, and reports how each failed. It returns the number of
// behaviours that differ from the seed.
func (c *Calibrator) Faults(ctx context.Context, s *seed.File) int {
	bad := 0
	fmt.Fprintf(c.Out, "\nfailing configurations (seed behaviour vs simulated)\n")
	for _, name := range []string{"reproduce", "no-overlap", "state-pool-128", "no-cuda-graphs"} {
		r := s.Run(name)
		srv, code, err := c.startSim(ctx, seedArgv(r))
		if err != nil {
			fmt.Fprintf(c.Out, "  %-16s startup failed (exit %d): %v\n", name, code, err)
			bad++
			continue
		}
		warm := false
		w := objective.Workload{Kind: "chat", Chat: objective.ChatSpec{Concurrency: c.Levels, Requests: mapReqs(c, c.Levels), MaxTokens: 256, Repeats: 1, Warmup: &warm},
			// MinPass 0: keep measuring after a failed gate, as the seed did.
			Quality: objective.QualitySpec{Enabled: true, MinPass: 1e-9}}
		w.HangTimeout = math.Max(5, 120/c.Speed)
		rctx, cancel := context.WithCancel(ctx)
		// Stop measuring when the simulated server dies, as the launcher would.
		go func() {
			select {
			case code = <-srv.done:
				srv.done <- code
				cancel()
			case <-rctx.Done():
			}
		}()
		res, err := objective.Run(rctx, objective.Target{URL: srv.url}, w, objective.Options{})
		cancel()
		exit := srv.stop()
		q := "-"
		if res != nil && res.Quality != nil && res.Quality.Before != nil {
			q = res.Quality.Before.Summary.JSON + " json, " + res.Quality.Before.Summary.Tool + " tools"
		}
		completed, failed, passed := 0, 0, []string{}
		if res != nil {
			for _, p := range res.Points {
				completed += p.Completed
				failed += p.Failed
				if p.State == "passed" {
					passed = append(passed, fmt.Sprintf("C%d %.1f tok/s", p.Concurrency, p.OutputTokS/c.Speed))
				}
			}
		}
		crashed := exit != 0
		fmt.Fprintf(c.Out, "  %-16s sim: exit %d, quality before %s, sweep completed %d failed %d, passed [%s], err=%v\n",
			name, exit, q, completed, failed, strings.Join(passed, "; "), errors.Unwrap(err) != nil || err != nil)
		sq := string(r.Quality)
		fmt.Fprintf(c.Out, "  %-16s seed: state %s, illegal memory %v, raw completed %d failed %d, quality %s\n", "", r.State, r.CUDAIllegalMemory, r.RawCompleted, r.RawFailed, shortQuality(sq))
		if crashed != r.CUDAIllegalMemory {
			bad++
			fmt.Fprintf(c.Out, "  %-16s <-- crash behaviour differs\n", "")
		}
	}
	return bad
}

func mapReqs(c *Calibrator, levels []int) []int {
	out := make([]int, len(levels))
	for i, l := range levels {
		out[i] = c.requests(l)
	}
	return out
}

var qualityRe = regexp.MustCompile(`"json": "(\d+/\d+)", "tool": "(\d+/\d+)"`)

func shortQuality(s string) string {
	if m := qualityRe.FindStringSubmatch(strings.ReplaceAll(s, `":"`, `": "`)); m != nil {
		return m[1] + " json, " + m[2] + " tools"
	}
	return "-"
}

// matrixCell is one sustained-decode cell of seed 004.
type matrixCell struct {
	Context, Conc int
	Status        string
	TotalTokS     float64
}

var contextRe = regexp.MustCompile(`^(\d+)K$`)

func loadSeed004(path string) ([]matrixCell, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cells []matrixCell
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| Sustained decode |") {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) < 7 {
			continue
		}
		m := contextRe.FindStringSubmatch(strings.TrimSpace(f[2]))
		if m == nil {
			continue
		}
		k, _ := strconv.Atoi(m[1])
		conc, _ := strconv.Atoi(strings.TrimSpace(f[3]))
		c := matrixCell{Context: k * 1024, Conc: conc, Status: strings.TrimSpace(f[4])}
		if v, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(f[5]), ",", ""), 64); err == nil {
			c.TotalTokS = v
		}
		cells = append(cells, c)
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("%s: no sustained-decode rows", path)
	}
	return cells, nil
}

// Seed004Argv is seed 004's launch command without host, port and key.
var Seed004Argv = strings.Fields("--model-path zai-org/GLM-5.3-Flash --served-model-name zai-org/GLM-5.3-Flash --trust-remote-code --tp 8 --reasoning-parser glm45 --tool-call-parser glm47 --context-length 1048576 --mem-fraction-static 0.76 --enable-metrics --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend flashinfer_sparse_mla --dsa-decode-backend flashinfer_sparse_mla --linear-attn-backend triton --attention-backend dsa --fp8-gemm-backend cutlass --moe-runner-backend triton --speculative-algorithm DFLASH --speculative-draft-model-path incoai/GLM-5.3-Flash-DFlash2 --speculative-draft-attention-backend fa4 --sim-profile glm-5.3-flash-rtxpro6000x8")

// Matrix runs seed 004's matrix and compares sustained-decode total tok/s
// per cell and the over-capacity cells.
func (c *Calibrator) Matrix(ctx context.Context, cells []matrixCell) (int, error) {
	var short, long []int
	seen := map[int]bool{}
	for _, cl := range cells {
		if (c.Contexts != nil && !c.Contexts[cl.Context]) || seen[cl.Context] {
			continue
		}
		seen[cl.Context] = true
		if c.LongSpeed > 0 && cl.Context > c.LongContext {
			long = append(long, cl.Context)
		} else {
			short = append(short, cl.Context)
		}
	}
	start := time.Now()
	// got holds decode points with OutputTokS and TTFT already in
	// simulated units.
	got := map[[2]int]objective.Point{}
	var err error
	speeds := map[int]float64{}
	for _, g := range []struct {
		ctxs  []int
		speed float64
	}{{short, c.Speed}, {long, c.LongSpeed}} {
		if len(g.ctxs) == 0 || err != nil {
			continue
		}
		gc := *c
		gc.Speed = g.speed
		var pts []objective.Point
		pts, err = gc.matrixRun(ctx, g.ctxs)
		for _, p := range pts {
			if p.Phase == objective.PhaseDecode {
				p.OutputTokS /= g.speed
				p.TTFT.P50 *= g.speed
				got[[2]int{p.Context, p.Concurrency}] = p
				speeds[p.Context] = g.speed
			}
		}
	}
	if len(got) == 0 {
		return 0, err
	}
	sp := fmt.Sprintf("speed-up %g", c.Speed)
	if len(long) > 0 {
		sp += fmt.Sprintf(", %g above %dK", c.LongSpeed, c.LongContext/1024)
	}
	fmt.Fprintf(c.Out, "\nseed 004 matrix (sustained decode total tok/s, sim vs seed; %s; %.0f s wall)\n", sp, time.Since(start).Seconds())
	bad := 0
	for _, cl := range cells {
		if c.Contexts != nil && !c.Contexts[cl.Context] {
			continue
		}
		p, ok := got[[2]int{cl.Context, cl.Conc}]
		simStatus, simTok := "missing", 0.0
		if ok {
			simStatus, simTok = p.Status, p.OutputTokS
		}
		mark := ""
		seedOver := cl.Status == objective.StatusOverCapacity
		simOver := simStatus == objective.StatusOverCapacity
		switch {
		case seedOver != simOver && cl.Status != objective.StatusNotRun:
			mark = "  <-- capacity differs"
			bad++
		case cl.TotalTokS > 0 && math.Abs(rel(simTok, cl.TotalTokS)) > TolMatrix:
			mark = "  <-- out of tolerance"
			bad++
		}
		dev := ""
		if cl.TotalTokS > 0 {
			dev = fmt.Sprintf("%+6.1f%%", rel(simTok, cl.TotalTokS)*100)
		}
		fmt.Fprintf(c.Out, "  %5dK x %-3d sim %-15s %8.1f | seed %-15s %8.1f %s%s\n", cl.Context/1024, cl.Conc, simStatus, simTok, cl.Status, cl.TotalTokS, dev, mark)
		if c.Verbose && ok {
			fmt.Fprintf(c.Out, "      issued %d completed %d cut %d tokens %d in %.2f s wall at speed-up %g, TTFT p50 %.3f s (sim)\n", p.Issued, p.Completed, p.Cut, p.OutputTokens, p.DurationS, speeds[cl.Context], p.TTFT.P50)
		}
	}
	return bad, err
}

// matrixRun runs seed 004's matrix for ctxs on a fresh simulator at c.Speed
// and returns the measured points (wall-clock units).
func (c *Calibrator) matrixRun(ctx context.Context, ctxs []int) ([]objective.Point, error) {
	srv, _, err := c.startSim(ctx, Seed004Argv)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	concs := []int{1, 2, 4, 8, 16, 32, 64, 128}
	w := objective.Workload{Kind: "matrix", Matrix: objective.MatrixSpec{Contexts: ctxs, Concurrency: concs, DurationS: 30 / c.Speed, MaxOutput: 4096}}
	w.HangTimeout = math.Max(10, 300/c.Speed)
	res, err := objective.Run(ctx, objective.Target{URL: srv.url}, w, objective.Options{})
	if res == nil {
		return nil, err
	}
	return res.Points, err
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sgtune/sgtune/syncio"
)

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitCrash = 1
	ExitUsage = 2
)

// Options are hooks for tests and the command.
type Options struct {
	// Ready, when set, is called with the listen address once the server is
	// fired up and ready.
	Ready func(addr string)
	// NoStartupDelay skips the simulated startup durations (weight
	// loading, graph capture): for tools that measure serving only.
	NoStartupDelay bool
}

// Main runs the simulated server with SGLang's argv (vLLM's with
// --sim-engine vllm) until ctx ends (SIGTERM or SIGINT in the command) or a
// fault crashes it, and returns the exit code.
func Main(ctx context.Context, argv []string, stdout, stderr io.Writer, opt Options) int {
	d := dialect{prog: Prog, usage: Usage, parse: ParseArgs, run: (*startup).run}
	if SimEngine(argv) == EngineVLLM {
		d = dialect{prog: VLLMProg, usage: VLLMUsage, parse: ParseVLLMArgs, run: (*startup).runVLLM}
	}
	a, err := d.parse(argv)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) && pe == ErrHelp {
			fmt.Fprint(stdout, d.usage())
			fmt.Fprint(stdout, SimHelp())
			return ExitOK
		}
		fmt.Fprint(stderr, d.usage())
		fmt.Fprintf(stderr, "%s: error: %s\n", d.prog, err.Error())
		return ExitUsage
	}
	prof, err := LoadProfile(a.String("sim_profile", DefaultProfile))
	if err != nil {
		fmt.Fprint(stderr, d.usage())
		fmt.Fprintf(stderr, "%s: error: argument --sim-profile: %v\n", d.prog, err)
		return ExitUsage
	}
	speed := a.Float("sim_speedup", 1)
	if speed <= 0 || math.IsNaN(speed) || math.IsInf(speed, 0) {
		fmt.Fprint(stderr, d.usage())
		fmt.Fprintf(stderr, "%s: error: argument --sim-speedup: must be a positive number\n", d.prog)
		return ExitUsage
	}
	log := syncio.NewWriter(stdout)
	pl := Resolve(a, prof)
	rules, err := MatchFaults(prof.Faults, pl.Facts(a))
	if err != nil {
		fmt.Fprintf(stderr, "sim profile %s: %v\n", prof.Name, err)
		return ExitUsage
	}
	mb := a.Int("sim_host_memory_mb", 0)
	if mb < 0 {
		fmt.Fprint(stderr, d.usage())
		fmt.Fprintf(stderr, "%s: error: argument --sim-host-memory-mb: must be >= 0\n", d.prog)
		return ExitUsage
	}
	held := holdHostMemory(mb)
	defer runtime.KeepAlive(held)
	st := &startup{ctx: ctx, log: log, speed: speed, p: prof, pl: pl, a: a, rules: rules, fast: opt.NoStartupDelay}
	return d.run(st, opt)
}

// holdHostMemory allocates mb MiB and writes every page, so that the
// memory is resident (counted against a container's limit), not merely
// reserved.
func holdHostMemory(mb int) []byte {
	if mb == 0 {
		return nil
	}
	b := make([]byte, mb<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	return b
}

// dialect is the engine the simulator speaks (--sim-engine): its program
// name, usage, argv parser and startup; the profile, speed and fault rules
// are read the same way for both.
type dialect struct {
	prog  string
	usage func() string
	parse func([]string) (*Args, error)
	run   func(*startup, Options) int
}

type startup struct {
	ctx   context.Context
	log   io.Writer
	speed float64
	p     *Profile
	pl    *Plan
	a     *Args
	rules []FaultRule
	fast  bool // Options.NoStartupDelay
}

// sleep waits d simulated seconds; false when interrupted.
func (st *startup) sleep(d float64) bool {
	if st.fast {
		return st.ctx.Err() == nil
	}
	t := time.NewTimer(time.Duration(d / st.speed * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-st.ctx.Done():
		return false
	}
}

func (st *startup) logf(format string, args ...any) {
	fmt.Fprintf(st.log, "[%s] "+format+"\n", append([]any{stamp()}, args...)...)
}

func (st *startup) slogf(format string, args ...any) {
	fmt.Fprintf(st.log, "[%s%s] "+format+"\n", append([]any{stamp(), schedPrefix(st.pl)}, args...)...)
}

// serverArgsRepr renders server_args=ServerArgs(...) like Python's repr.
func (st *startup) serverArgsRepr() string {
	vals := map[string]string{}
	for _, d := range flagTable {
		if strings.HasPrefix(d.dest, "sim_") {
			continue
		}
		vals[d.dest] = "None"
		if d.kind == kBool {
			vals[d.dest] = "False"
		}
	}
	for k, v := range st.a.Values {
		if strings.HasPrefix(k, "sim_") {
			continue
		}
		switch x := v.(type) {
		case string:
			vals[k] = "'" + x + "'"
		case bool:
			vals[k] = pyBool(x)
		case []int:
			s := make([]string, len(x))
			for i, n := range x {
				s[i] = fmt.Sprint(n)
			}
			vals[k] = "[" + strings.Join(s, ", ") + "]"
		default:
			vals[k] = fmt.Sprint(x)
		}
	}
	pl := st.pl
	vals["tp_size"], vals["ep_size"], vals["dp_size"] = fmt.Sprint(pl.TP), fmt.Sprint(pl.EP), fmt.Sprint(pl.DP)
	vals["mem_fraction_static"] = fmt.Sprint(pl.MemFraction)
	vals["chunked_prefill_size"] = fmt.Sprint(pl.ChunkedPrefill)
	vals["max_prefill_tokens"] = fmt.Sprint(pl.MaxPrefillTokens)
	vals["host"], vals["port"] = "'"+pl.Host+"'", fmt.Sprint(pl.Port)
	vals["served_model_name"] = "'" + pl.ServedModelName + "'"
	vals["mamba_radix_cache_strategy"] = "'" + pl.Strategy + "'"
	vals["kv_cache_dtype"] = "'" + pl.KVDtype + "'"
	if pl.RequestedMRR > 0 {
		vals["max_running_requests"] = fmt.Sprint(pl.RequestedMRR)
	}
	if pl.APIKey != "" {
		vals["api_key"] = "'" + pl.APIKey + "'"
	}
	keys := []string{"model_path", "tokenizer_path"}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		if k != "model_path" && k != "tokenizer_path" {
			keys = append(keys, k)
		}
	}
	if vals["tokenizer_path"] == "None" {
		vals["tokenizer_path"] = vals["model_path"]
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+vals[k])
	}
	return "server_args=ServerArgs(" + strings.Join(parts, ", ") + ")"
}

// traceback prints a scheduler exception the way SGLang logs it.
func (st *startup) traceback(excLines []string, cuda bool) {
	st.slogf("Scheduler hit an exception: Traceback (most recent call last):")
	fmt.Fprint(st.log, `  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3120, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1187, in event_loop_overlap
    self.process_batch_result(tmp_batch, tmp_result)
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler_output_processor_mixin.py", line 412, in process_batch_result_decode
    next_token_ids = next_token_ids.tolist()
                     ^^^^^^^^^^^^^^^^^^^^^^^
`)
	for _, l := range excLines {
		fmt.Fprintln(st.log, l)
	}
	if cuda {
		fmt.Fprint(st.log, "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n\n")
	}
}

const illegalMemory = "RuntimeError: CUDA error: an illegal memory access was encountered"

// fatalStartup prints a startup failure and returns the exit code.
func (st *startup) fatalStartup(lines []string, cuda bool) int {
	st.traceback(lines, cuda)
	st.logf("Received sigquit from a child process. It usually means the child failed.")
	return ExitCrash
}

// run logs SGLang's startup sequence step by step, each step taking its
// simulated time, then serves until ctx ends or a fault crashes the engine.
// It returns the exit code: a step can end the startup with a crash (the
// plan's error or a startup fault) or, when ctx ends, with ExitOK.
func (st *startup) run(opt Options) int {
	for _, step := range []func() (code int, stop bool){
		st.logArgs, st.loadWeights, st.allocatePools, st.captureGraphs, st.finishStartup,
	} {
		if code, stop := step(); stop {
			return code
		}
	}
	return st.serve(opt)
}

// logArgs logs the deprecation notes, a plan SGLang rejects while parsing
// its arguments (a crash), the plan's warnings and server_args.
func (st *startup) logArgs() (int, bool) {
	pl := st.pl
	for _, d := range st.a.Deprecated {
		st.logf("%s", d)
	}
	if pl.Err != nil && pl.Err.Kind == "invalid" {
		fmt.Fprintln(st.log, "Traceback (most recent call last):")
		for _, l := range pl.Err.Lines {
			fmt.Fprintln(st.log, l)
		}
		return ExitCrash, true
	}
	for _, w := range pl.Warnings {
		st.logf("%s", w)
	}
	st.logf("%s", st.serverArgsRepr())
	// Not an SGLang line: the devices this server was given, so that a
	// launcher's GPU isolation (a container's, say) can be checked here.
	st.logf("sim: CUDA_VISIBLE_DEVICES=%s", os.Getenv("CUDA_VISIBLE_DEVICES"))
	return 0, false
}

// loadWeights logs the distributed init and the weight loading.
func (st *startup) loadWeights() (int, bool) {
	pl, p := st.pl, st.p
	gpuMem := p.Hardware.GPUMemGB
	st.slogf("Init torch distributed begin.")
	if !st.sleep(p.Memory.StartupOtherS * 0.5) {
		return ExitOK, true
	}
	st.slogf("Init torch distributed ends. elapsed=%.2f s, mem usage=%.2f GB", p.Memory.StartupOtherS*0.5, 0.98)
	st.slogf("Load weight begin. avail mem=%.2f GB", gpuMem-1.0)
	if !st.sleep(p.Memory.WeightLoadS) {
		return ExitOK, true
	}
	wgb := p.Memory.WeightsGB / float64(pl.TP*pl.PP)
	quant := ""
	if p.Model.Quantization != "" {
		quant = "quant=" + p.Model.Quantization + ", "
	}
	st.slogf("Load weight end. elapsed=%.2f s, type=%s, %savail mem=%.2f GB, mem usage=%.2f GB.", p.Memory.WeightLoadS, p.Model.Architecture, quant, gpuMem-1.0-wgb, wgb)
	return 0, false
}

// allocatePools fails on a startup_oom fault or a plan whose memory or
// state pool does not fit, else logs the running-requests reduction, the
// state (Mamba) pool and the KV cache.
func (st *startup) allocatePools() (int, bool) {
	pl, p := st.pl, st.p
	if st.hasFault("startup_oom") {
		return st.fatalStartup(st.faultOOM().Lines, false), true
	}
	if pl.Err != nil && (pl.Err.Kind == "memory" || pl.Err.Kind == "state_pool") {
		if h := st.profileHint(); h != "" {
			st.logf("%s", h)
		}
		return st.fatalStartup(pl.Err.Lines, false), true
	}
	if pl.ReductionWarning != "" {
		st.slogf("%s", pl.ReductionWarning)
	}
	if p.Model.Hybrid {
		st.slogf("%s", st.mambaCacheLine())
	}
	kvGB := st.kvCacheGB()
	st.slogf("KV Cache is allocated. dtype: %s, #tokens: %d, K size: %.2f GB, V size: %.2f GB", torchDtype(pl.KVDtype), pl.KVTokens, kvGB/2, kvGB/2)
	st.slogf("Memory pool end. avail mem=%.2f GB", pl.AvailGPUMemGB+2)
	return 0, false
}

// profileHint is a simulator line for a launch whose weights do not fit
// the profile's GPUs at all, whatever the memory fraction (a study of
// another model or GPU count run on the default profile: every trial fails
// the same way): which model and GPUs the profile simulates, and that
// --sim-profile FILE simulates others. "" when the weights fit some
// fraction; a fraction too low for them is the study's to raise.
func (st *startup) profileHint() string {
	pl, p := st.pl, st.p
	per := p.Memory.WeightsGB / float64(pl.TP*pl.PP)
	if pl.restGB > 0 || per+p.Memory.OverheadGB < p.Hardware.GPUMemGB {
		return ""
	}
	return fmt.Sprintf("[sim] profile %s simulates %s: %g GB of weights, %.1f GB per GPU with %d GPUs (and %.1f GB of overhead), more than a whole %.1f GB GPU; "+
		"for another model or GPU count, write a profile and pass --sim-profile FILE (docs/simulator.md)",
		p.Name, p.Description, p.Memory.WeightsGB, per, pl.TP*pl.PP, p.Memory.OverheadGB, p.Hardware.GPUMemGB)
}

// faultOOM is the out-of-memory error of a matched startup_oom rule. What
// its allocation lacks is what the fraction takes above the rule's edge
// on mem_fraction_static (gt or ge), so the same config one step under
// the edge starts, as the rule says; a rule with no such edge fails at
// every fraction, and its message claims next to nothing.
func (st *startup) faultOOM() *StartupError {
	gpuMem, short := st.p.Hardware.GPUMemGB, 0.05
	for _, r := range st.rules {
		if r.Effect.Kind != "startup_oom" {
			continue
		}
		if m, ok := r.When["mem_fraction_static"].(map[string]any); ok {
			for _, op := range []string{"gt", "ge"} {
				if edge, ok := num(m[op]); ok {
					short = max(short, (st.pl.MemFraction-edge)*gpuMem+0.05)
				}
			}
		}
	}
	return allocFailed(gpuMem, st.pl.MemFraction, short, 1.12)
}

// hasFault reports whether a matched fault rule has the effect kind.
func (st *startup) hasFault(kind string) bool {
	for _, r := range st.rules {
		if r.Effect.Kind == kind {
			return true
		}
	}
	return false
}

// mambaCacheLine is the state pool's allocation line of a hybrid model,
// with the speculative intermediate caches when drafting is on.
func (st *startup) mambaCacheLine() string {
	pl := st.pl
	slotGB := st.p.StatePool.SlotStateGB
	line := fmt.Sprintf("Mamba Cache is allocated. max_mamba_cache_size: %d, conv_state size: %.2fGB, ssm_state size: %.2fGB ",
		pl.StateSlots, float64(pl.StateSlots)*slotGB*0.06, float64(pl.StateSlots)*slotGB*0.94)
	if pl.SpecAlgorithm != "" {
		inter := float64(min(pl.RequestedMRR/pl.attnDP(), pl.StateSlots/max(1, pl.Ratio))*pl.SpecDraftTokens) * slotGB
		line += fmt.Sprintf("intermediate_ssm_state_cache size: %.2fGB intermediate_conv_window_cache size: %.2fGB ", inter*0.94, inter*0.06)
	}
	return line
}

// kvCacheGB is the KV cache's size per GPU, K and V together.
func (st *startup) kvCacheGB() float64 {
	pl, m := st.pl, st.p.Memory
	kvGB := float64(pl.KVTokens) / m.KVTokensPerGB / float64(pl.TP) * float64(m.ReferenceTP)
	if f, ok := m.DtypeFactor[pl.KVDtype]; ok && f > 0 {
		kvGB /= f
	}
	return kvGB
}

// torchDtype is the torch name SGLang logs for a --kv-cache-dtype.
func torchDtype(kvDtype string) string {
	switch kvDtype {
	case "fp8_e4m3":
		return "torch.float8_e4m3fn"
	case "fp8_e5m2":
		return "torch.float8_e5m2"
	}
	return "torch.bfloat16"
}

// captureGraphs fails a plan that runs out of memory while capturing, else
// logs the CUDA graph captures (target, and draft with speculation) when
// graphs are on.
func (st *startup) captureGraphs() (int, bool) {
	pl, p := st.pl, st.p
	if pl.Err != nil && pl.Err.Kind == "oom" {
		st.slogf("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=%s, avail mem=%.2f GB", intList(pl.GraphBS), pl.AvailGPUMemGB+2)
		st.sleep(p.Memory.GraphCaptureS * 0.3)
		return st.fatalStartup(pl.Err.Lines, false), true
	}
	if !pl.CUDAGraph {
		return 0, false
	}
	phase, tpr := "decode", 1
	if pl.SpecAlgorithm != "" {
		phase, tpr = "verify", pl.SpecDraftTokens
	}
	st.slogf("Capture target %s CUDA graph begin. backend=full, num_tokens_per_req=%d, bs=%s, avail mem=%.2f GB", phase, tpr, intList(pl.GraphBS), pl.AvailGPUMemGB+2)
	fmt.Fprintf(st.log, "Capturing batches (bs=%d avail_mem=%.2f GB): 100%%|██████████| %d/%d\n", pl.GraphBS[len(pl.GraphBS)-1], pl.AvailGPUMemGB+0.4, len(pl.GraphBS), len(pl.GraphBS))
	gs := p.Memory.GraphCaptureS
	if pl.SpecAlgorithm != "" {
		gs *= 1.8
	}
	if !st.sleep(gs) {
		return ExitOK, true
	}
	st.slogf("Capture target %s CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB.", phase, gs, 1.6, pl.AvailGPUMemGB)
	if pl.SpecAlgorithm != "" {
		st.slogf("Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=%d, bs=%s, avail mem=%.2f GB", pl.SpecTopK, intList(pl.GraphBS), pl.AvailGPUMemGB)
		st.slogf("Capture draft decode CUDA graph end. elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB.", gs*0.4, 0.5, pl.AvailGPUMemGB-0.5)
	}
	return 0, false
}

// finishStartup crashes on a startup_crash fault, else logs the limits
// line sgtune parses its facts from and waits out the rest of the startup.
func (st *startup) finishStartup() (int, bool) {
	pl := st.pl
	for _, r := range st.rules {
		if r.Effect.Kind == "startup_crash" {
			msg := r.Effect.Message
			if msg == "" {
				msg = illegalMemory
			}
			return st.fatalStartup([]string{msg}, strings.Contains(msg, "CUDA error")), true
		}
	}
	st.slogf("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
		pl.KVTokens, pl.ChunkedPrefill, pl.MaxPrefillTokens, pl.EffectiveMRR, pl.ContextLen, pl.AvailGPUMemGB)
	if !st.sleep(st.p.Memory.StartupOtherS * 0.5) {
		return ExitOK, true
	}
	return 0, false
}

// serve binds the port, runs the engine and the HTTP server, warms up and
// logs the ready line, then waits until ctx ends or the engine crashed.
func (st *startup) serve(opt Options) int {
	pl := st.pl
	ln, err := listen(pl.Host, pl.Port)
	if err != nil {
		st.logf("ERROR:    [Errno 98] error while attempting to bind on address ('%s', %d): address already in use", pl.Host, pl.Port)
		return ExitCrash
	}
	ctx, cancel := context.WithCancel(st.ctx)
	defer cancel()
	var crashOnce sync.Once
	crashed := false // written by the engine goroutine, read after wg.Wait
	eng := NewEngine(st.p, pl, st.rules, st.speed, st.log, func(reason string) {
		crashOnce.Do(func() {
			st.traceback([]string{illegalMemory}, true)
			st.logf("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
			crashed = true
			cancel()
		})
	})
	eng.OverheadMS = st.a.Float("sim_overhead_ms", 1.5)
	eng.GatherMS = st.a.Float("sim_gather_ms", 2)
	eng.Debug = st.a.String("log_level", "info") == "debug"
	srv := newServer(st.p, pl, st.a, eng, st.speed, st.log, st.rules)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); eng.Run(ctx) }()
	go func() { defer wg.Done(); serve(ctx, ln, srv.Handler()) }()
	st.logf("INFO:     Started server process [%d]", os.Getpid())
	st.logf("INFO:     Waiting for application startup.")
	st.logf("INFO:     Application startup complete.")
	st.logf("INFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)", pl.Host, ln.Addr().(*net.TCPAddr).Port)
	if st.warmup(ctx, eng) {
		srv.ready.Store(true)
		st.logf("The server is fired up and ready to roll!")
		if opt.Ready != nil {
			opt.Ready(ln.Addr().String())
		}
	}
	<-ctx.Done()
	wg.Wait()
	if crashed {
		return ExitCrash
	}
	return ExitOK
}

// warmup does what SGLang does before its ready line: GET /model_info,
// then a short generate through the engine. It reports whether the server
// is ready (false when ctx ended first).
func (st *startup) warmup(ctx context.Context, eng *Engine) bool {
	if !st.sleep(2) {
		return false
	}
	st.logf(`INFO:     127.0.0.1:40512 - "GET /model_info HTTP/1.1" 200 OK`)
	w := &Seq{Prompt: 7, Limit: 8, Health: true, Notify: make(chan struct{}, 1)}
	if eng.Submit(w) == nil {
		for !w.Done() {
			select {
			case <-w.Notify:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				break
			}
		}
	}
	if ctx.Err() != nil {
		return false
	}
	st.logf(`INFO:     127.0.0.1:40526 - "POST /generate HTTP/1.1" 200 OK`)
	return true
}

func intList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

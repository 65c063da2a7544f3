package sim

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// vllmPIDs are the process ids vLLM's log prefixes name: the API server
// (this process) and the engine core.
var vllmPIDs = struct{ api, core int }{os.Getpid(), os.Getpid() + 1}

// vlogf logs a vLLM INFO line from the API server process:
// "(APIServer pid=N) INFO MM-DD HH:MM:SS [file] message".
func (st *startup) vlogf(file, format string, args ...any) {
	fmt.Fprintf(st.log, "(APIServer pid=%d) INFO %s [%s] %s\n", vllmPIDs.api, time.Now().Format("01-02 15:04:05"), file, fmt.Sprintf(format, args...))
}

// clogf logs a vLLM INFO line from the engine core process.
func (st *startup) clogf(file, format string, args ...any) {
	fmt.Fprintf(st.log, "(EngineCore_DP0 pid=%d) INFO %s [%s] %s\n", vllmPIDs.core, time.Now().Format("01-02 15:04:05"), file, fmt.Sprintf(format, args...))
}

// raw writes lines as a process prints them (tracebacks, uvicorn).
func (st *startup) raw(proc string, lines ...string) {
	pid := vllmPIDs.api
	if proc == "EngineCore_DP0" {
		pid = vllmPIDs.core
	}
	for _, l := range lines {
		fmt.Fprintf(st.log, "(%s pid=%d) %s\n", proc, pid, l)
	}
}

// coreFailed prints an engine core startup failure the way vLLM does: the
// core's traceback, then the API server's wrapper (src: v1/engine/utils.py
// wait_for_engine_startup); the server exits 1.
func (st *startup) coreFailed(lines []string) int {
	st.raw("EngineCore_DP0", "ERROR "+time.Now().Format("01-02 15:04:05")+" [core.py] EngineCore failed to start.",
		"Traceback (most recent call last):",
		`  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", in run_engine_core`)
	st.raw("EngineCore_DP0", lines...)
	st.raw("APIServer", "Traceback (most recent call last):",
		`  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", in wait_for_engine_startup`,
		"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
	return ExitCrash
}

// nonDefaultArgs renders the options given like vLLM's "non-default args"
// line (a Python dict).
func (st *startup) nonDefaultArgs() string {
	var parts []string
	for _, k := range st.a.VLLMOrder {
		if strings.HasPrefix(k, "sim_") {
			continue
		}
		key := k
		v := st.a.VLLM[k]
		if k == "model_tag" {
			v = st.a.VLLM["model"]
		}
		if k == "api_key" {
			v = []string{"<redacted>"}
		}
		parts = append(parts, fmt.Sprintf("'%s': %s", key, pyRepr(v)))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func pyRepr(v any) string {
	switch x := v.(type) {
	case string:
		return "'" + x + "'"
	case bool:
		return pyBool(x)
	case []string:
		q := make([]string, len(x))
		for i, s := range x {
			q[i] = "'" + s + "'"
		}
		return "[" + strings.Join(q, ", ") + "]"
	case []int:
		return intList(x)
	}
	return fmt.Sprint(v)
}

// runVLLM logs vLLM's startup step by step (config, weights, KV cache,
// CUDA graphs), each step taking its simulated time, then serves.
func (st *startup) runVLLM(opt Options) int {
	pl, p := st.pl, st.p
	st.vlogf("api_server.py", "vLLM API server version %s", VLLMVersion)
	st.vlogf("utils.py", "non-default args: %s", st.nonDefaultArgs())
	if pl.Err != nil && pl.Err.Kind == "invalid" {
		// Raised by the API server while it builds the engine config.
		st.raw("APIServer", "Traceback (most recent call last):",
			`  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", in create_engine_config`)
		st.raw("APIServer", pl.Err.Lines...)
		return ExitCrash
	}
	if pl.MaxNumBatchedTokens > 0 {
		// src: config/scheduler.py __post_init__.
		st.vlogf("scheduler.py", "Chunked prefill is enabled with max_num_batched_tokens=%d.", pl.MaxNumBatchedTokens)
	}
	st.clogf("core.py", "Initializing a V1 LLM engine (v%s) with config: model='%s', served_model_name=%s, tensor_parallel_size=%d, pipeline_parallel_size=%d, data_parallel_size=%d, enable_prefix_caching=%s, enforce_eager=%s, kv_cache_dtype=%s",
		VLLMVersion, pl.ModelPath, pl.ServedModelName, pl.TP, pl.PP, pl.DP, pyBool(pl.Radix), pyBool(!pl.CUDAGraph), pl.KVDtype)
	if !st.sleep(p.Memory.StartupOtherS * 0.5) {
		return ExitOK
	}
	if !st.sleep(p.Memory.WeightLoadS) {
		return ExitOK
	}
	wgb := p.Memory.WeightsGB / float64(pl.TP*pl.PP)
	st.clogf("gpu_model_runner.py", "Model loading took %.4f GiB and %.6f seconds", wgb*1e9/(1<<30), p.Memory.WeightLoadS)
	if st.hasFault("startup_oom") {
		return st.coreFailed(st.faultOOM().Lines)
	}
	if pl.Err != nil && pl.Err.Kind == "oom" {
		return st.coreFailed(pl.Err.Lines)
	}
	if pl.Err != nil {
		if h := st.profileHint(); h != "" && pl.Err.Kind == "memory" {
			st.raw("EngineCore_DP0", h)
		}
		return st.coreFailed(pl.Err.Lines)
	}
	st.clogf("gpu_worker.py", "Available KV cache memory: %.2f GiB", pl.kvGiB(p))
	// src: v1/core/kv_cache_utils.py _report_kv_cache_config.
	st.clogf("kv_cache_utils.py", "GPU KV cache size: %s tokens", commas(pl.KVTokens))
	conc := float64(pl.NumBlocks) / float64(ceilDiv(pl.ContextLen, pl.BlockSize))
	st.clogf("kv_cache_utils.py", "Maximum concurrency for %s tokens per request: %.2fx", commas(pl.ContextLen), conc)
	if pl.CUDAGraph {
		n := len(pl.GraphBS)
		fmt.Fprintf(st.log, "(EngineCore_DP0 pid=%d) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%%|██████████| %d/%d\n", vllmPIDs.core, n, n)
		if !st.sleep(p.Memory.GraphCaptureS) {
			return ExitOK
		}
		// src: v1/worker/gpu_model_runner.py capture_model.
		st.clogf("gpu_model_runner.py", "Graph capturing finished in %.0f secs, took %.2f GiB", p.Memory.GraphCaptureS, 0.6)
	}
	for _, r := range st.rules {
		if r.Effect.Kind == "startup_crash" {
			msg := r.Effect.Message
			if msg == "" {
				msg = illegalMemory
			}
			return st.coreFailed([]string{msg})
		}
	}
	st.clogf("core.py", "init engine (profile, create kv cache, warmup model) took %.2f seconds", p.Memory.StartupOtherS*0.5+p.Memory.GraphCaptureS)
	return st.serveVLLM(opt)
}

// serveVLLM binds the port, runs the engine and the HTTP server, logs
// vLLM's and uvicorn's startup lines and waits until ctx ends or the engine
// died (then it exits 1, as vLLM's server does after EngineDeadError).
func (st *startup) serveVLLM(opt Options) int {
	pl := st.pl
	ln, err := listen(pl.Host, pl.Port)
	if err != nil {
		st.raw("APIServer", fmt.Sprintf("ERROR:    [Errno 98] error while attempting to bind on address ('%s', %d): address already in use", pl.Host, pl.Port))
		return ExitCrash
	}
	ctx, cancel := context.WithCancel(st.ctx)
	defer cancel()
	var crashOnce sync.Once
	crashed := false // written by the engine goroutine, read after wg.Wait
	// No per-batch lines: those are SGLang's scheduler log, not vLLM's.
	eng := NewEngine(st.p, pl, st.rules, st.speed, nil, func(reason string) {
		crashOnce.Do(func() {
			st.raw("EngineCore_DP0", "ERROR "+time.Now().Format("01-02 15:04:05")+" [core.py] EngineCore encountered a fatal error.",
				"Traceback (most recent call last):", illegalMemory)
			// src: v1/engine/exceptions.py EngineDeadError.
			st.raw("APIServer", "ERROR "+time.Now().Format("01-02 15:04:05")+" [async_llm.py] AsyncLLM output_handler failed.",
				"vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.")
			crashed = true
			cancel()
		})
	})
	eng.OverheadMS = st.a.Float("sim_overhead_ms", 1.5)
	eng.GatherMS = st.a.Float("sim_gather_ms", 2)
	srv := newServer(st.p, pl, st.a, eng, st.speed, st.log, st.rules)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); eng.Run(ctx) }()
	go func() { defer wg.Done(); serve(ctx, ln, srv.Handler()) }()
	addr := ln.Addr().(*net.TCPAddr)
	st.vlogf("api_server.py", "Starting vLLM API server 0 on http://%s:%d", pl.Host, addr.Port)
	srv.ready.Store(true)
	st.raw("APIServer", fmt.Sprintf("INFO:     Started server process [%d]", vllmPIDs.api),
		"INFO:     Waiting for application startup.", "INFO:     Application startup complete.")
	if opt.Ready != nil {
		opt.Ready(ln.Addr().String())
	}
	<-ctx.Done()
	wg.Wait()
	if crashed {
		return ExitCrash
	}
	return ExitOK
}

// commas formats n with thousands separators, as Python's f"{n:,}".
func commas(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var parts []string
	for len(s) > 3 {
		parts = append([]string{s[len(s)-3:]}, parts...)
		s = s[:len(s)-3]
	}
	parts = append([]string{s}, parts...)
	out := strings.Join(parts, ",")
	if neg {
		out = "-" + out
	}
	return out
}

// vllmMetrics writes /metrics with vLLM's names and labels (src:
// v1/metrics/loggers.py PrometheusStatLogger; prometheus_client adds _total
// to a Counter's name).
func (s *Server) vllmMetrics(w http.ResponseWriter, st Stats) {
	lbl := fmt.Sprintf(`engine="0",model_name=%q`, s.pl.ServedModelName)
	var b strings.Builder
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP vllm:%s %s\n# TYPE vllm:%s gauge\nvllm:%s{%s} %g\n", name, help, name, name, lbl, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP vllm:%s_total %s\n# TYPE vllm:%s_total counter\nvllm:%s_total{%s} %g\n", name, help, name, name, lbl, v)
	}
	gauge("num_requests_running", "Number of requests in model execution batches.", float64(st.Running))
	gauge("num_requests_waiting", "Number of requests waiting to be processed.", float64(st.Queued))
	gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", float64(st.UsedTokens)/float64(max(1, s.pl.KVTokens)))
	counter("prompt_tokens", "Number of prefill tokens processed.", float64(st.PromptTok))
	counter("generation_tokens", "Number of generation tokens processed.", float64(st.GenTokens))
	counter("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", float64(st.PromptTok))
	counter("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", float64(st.CachedTok))
	s.writeHistograms(&b, "vllm:", lbl)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	io.WriteString(w, b.String())
}

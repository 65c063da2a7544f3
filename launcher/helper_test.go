package launcher

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The fake server: the test binary re-run as a child (the os/exec test
// pattern). It prints SGLang-like startup lines and serves /health_generate.

const helperEnv = "GO_WANT_HELPER_PROCESS"

// helperArgv is the command line of a fake server in the given mode.
func helperArgv(mode string, extra ...string) []string {
	return append([]string{os.Args[0], "-test.run=^TestHelperProcess$", "--", mode}, extra...)
}

// helperSpec is a Spec for a fake server with short waits.
func helperSpec(t testing.TB, mode string, extra ...string) Spec {
	dir := t.TempDir()
	return Spec{
		Argv:           helperArgv(mode, extra...),
		Env:            []string{helperEnv + "=1", "HELPER_MARKER=" + dir + "/marker"},
		LogPath:        dir + "/server.log",
		StartupTimeout: 30 * time.Second,
		Grace:          2 * time.Second,
		ReleaseTimeout: 10 * time.Second,
	}
}

func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	i := slices.Index(os.Args, "--")
	if i < 0 || i+1 >= len(os.Args) {
		fmt.Fprintln(os.Stderr, "helper: no mode")
		os.Exit(3)
	}
	os.Exit(runHelper(os.Args[i+1], os.Args[i+2:]))
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

const (
	ts   = "[2026-02-12 11:38:29] "
	tsTP = "[2026-02-12 11:38:29 TP0 EP0] "
)

func startupLines(apiKey string) {
	fmt.Printf("%sserver_args=ServerArgs(model_path='zai-org/GLM-5.3-Flash', tp_size=4, api_key='%s', max_running_requests=64, mem_fraction_static=0.88)\n", ts, apiKey)
	fmt.Printf("%sInit torch distributed begin.\n", tsTP)
	fmt.Printf("%sLoad weight end. elapsed=12.34 s, type=Qwen3NextForCausalLM, avail mem=60.12 GB, mem usage=71.00 GB.\n", tsTP)
	fmt.Printf("%sMamba Cache is allocated. max_mamba_cache_size: 256, conv_state size: 1.23GB, ssm_state size: 20.50GB \n", tsTP)
	fmt.Printf("%sKV Cache is allocated. dtype: torch.bfloat16, #tokens: 1171862, K size: 10.06 GB, V size: 10.06 GB\n", tsTP)
	fmt.Printf("%sMemory pool end. avail mem=9.87 GB\n", tsTP)
}

func readyLines() {
	fmt.Printf("%sCapture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=9.80 GB\n", tsTP)
	fmt.Printf("Capturing batches (bs=8 avail_mem=9.70 GB): 100%%|##########| 4/4\r\n")
	fmt.Printf("%sCapture target decode CUDA graph end. elapsed=3.21 s, mem usage=0.50 GB, avail mem=9.30 GB.\n", tsTP)
	fmt.Printf("%smax_running_requests was reduced from the requested 64 to 51 (per dp worker) due to the available KV cache capacity.\n", tsTP)
	fmt.Printf("%smax_total_num_tokens=1171862, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=51, context_len=202752, available_gpu_mem=9.30 GB\n", tsTP)
}

const imaTraceback = `[2026-02-12 11:38:40 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2890, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1003, in event_loop_overlap
    batch_result = self.run_batch(batch)
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
[2026-02-12 11:38:40] Received sigquit from a child process. It usually means the child failed.
`

const oomTraceback = `[2026-02-12 11:38:40 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 400, in init_memory_pool
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which 1.06 GiB is free.
[2026-02-12 11:38:40] Received sigquit from a child process. It usually means the child failed.
`

const genericTraceback = `[2026-02-12 11:40:00 TP0 EP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1003, in event_loop_overlap
AssertionError: something broke
[2026-02-12 11:40:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.
`

// serve listens on the port the launcher gave and answers /health_generate
// 503 until ready is set. A taken port gives uvicorn's error and exit 1.
func serve(args []string, ready *atomic.Bool) {
	port := flagValue(args, "--port")
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintf(os.Stderr, "[Errno 98] error while attempting to bind on address ('127.0.0.1', %s): address already in use\n", port)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health_generate", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	go func() { _ = http.Serve(l, mux) }()
	fmt.Printf("%sINFO:     Uvicorn running on http://127.0.0.1:%s (Press CTRL+C to quit)\n", ts, port)
}

// spawnSleeper starts a group member that ignores SIGTERM and prints its pid.
func spawnSleeper() {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "--", "sleep")
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "spawn:", err)
		os.Exit(4)
	}
	fmt.Printf("SLEEPER_PID=%d\n", cmd.Process.Pid)
}

func runHelper(mode string, args []string) int {
	key := flagValue(args, "--api-key")
	var ready atomic.Bool
	term := make(chan os.Signal, 1)
	becomeReady := func() {
		signal.Notify(term, syscall.SIGTERM)
		startupLines(key)
		serve(args, &ready)
		readyLines()
		ready.Store(true)
		fmt.Printf("%sThe server is fired up and ready to roll!\n", ts)
	}
	waitTerm := func() int {
		<-term
		fmt.Printf("%sReceived sigterm. Shutting down.\n", ts)
		return 0
	}
	switch mode {
	case "ok":
		becomeReady()
		return waitTerm()
	case "ignore-term":
		becomeReady()
		signal.Ignore(syscall.SIGTERM)
		select {}
	case "group":
		spawnSleeper()
		becomeReady()
		return waitTerm()
	case "group-die":
		spawnSleeper()
		startupLines(key)
		time.Sleep(100 * time.Millisecond) // let the sleeper start
		fmt.Print(genericTraceback)
		return 1
	case "ima":
		startupLines(key)
		fmt.Print(imaTraceback)
		return 1
	case "oom":
		startupLines(key)
		fmt.Print(oomTraceback)
		return 1
	case "crash-after-ready", "ima-after-ready":
		becomeReady()
		time.Sleep(300 * time.Millisecond)
		if mode == "ima-after-ready" {
			fmt.Print(imaTraceback)
		} else {
			fmt.Print(genericTraceback)
		}
		return 1
	case "exit-stamp": // for the crash detection benchmark
		startupLines(key)
		fmt.Printf("EXIT_AT=%d\n", time.Now().UnixNano())
		return 1
	case "hang":
		startupLines(key)
		select {}
	case "hang-ignore-term": // never ready, ignores SIGTERM, with a group member that does too
		signal.Ignore(syscall.SIGTERM)
		spawnSleeper()
		startupLines(key)
		fmt.Printf("HELPER_PID=%d\n", os.Getpid()) // SIGTERM is ignored from here on
		select {}
	case "port-once", "port-always":
		marker := os.Getenv("HELPER_MARKER")
		if _, err := os.Stat(marker); mode == "port-always" || err != nil {
			_ = os.WriteFile(marker, nil, 0o600)
			fmt.Fprintf(os.Stderr, "%sERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', %s): address already in use\n",
				ts, flagValue(args, "--port"))
			return 1
		}
		becomeReady()
		return waitTerm()
	case "usage":
		fmt.Fprintln(os.Stderr, "usage: launch_server.py [-h] --model-path MODEL_PATH [--tp-size TP_SIZE]")
		fmt.Fprintln(os.Stderr, "launch_server.py: error: unrecognized arguments: --bogus-flag")
		return 2
	case "sleep":
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(5 * time.Minute) // bounded even if every kill failed
		return 0
	case "parent": // a tuner that starts a server, then is killed -9 by the test
		spec := Spec{Argv: helperArgv("ok"), Env: []string{helperEnv + "=1"}, StartupTimeout: 30 * time.Second}
		srv, err := Start(context.Background(), spec)
		if err != nil {
			fmt.Println("START_ERR=" + err.Error())
			return 1
		}
		fmt.Println("CHILD_PID=" + strconv.Itoa(srv.PID))
		select {}
	}
	fmt.Fprintln(os.Stderr, "helper: unknown mode", mode)
	return 3
}

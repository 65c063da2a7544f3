// Command sglang-sim is a simulated SGLang server: same flags, startup log
// lines, endpoints and SSE chunks as SGLang, with the memory arithmetic,
// performance and faults of a profile calibrated on the seed studies.
//
//	sglang-sim --model-path zai-org/GLM-5.3-Flash --tp 4 --ep 4 [SGLang flags...] \
//	    [--sim-profile NAME|FILE] [--sim-speedup X]
//
// The profile is the model and GPUs simulated, whatever --model-path says:
// a bundled name, or a YAML file for another model or GPU count (see
// docs/simulator.md).
//
// With --sim-engine vllm it speaks vLLM's interface instead:
//
//	sglang-sim --sim-engine vllm zai-org/GLM-5.3-Flash -tp 4 [vllm serve flags...]
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sgtune/sgtune/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := sim.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, sim.Options{})
	stop()
	os.Exit(code)
}

package sim

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestParseVLLMArgs(t *testing.T) {
	a, err := ParseVLLMArgs([]string{"--sim-engine", "vllm", "org/m", "-tp", "4", "--max_num_seqs", "64", "--no-enable-prefix-caching",
		"--gpu-memory-utilization=0.85", "--max-model-len", "32k", "--api-key", "k1", "k2", "--enable-expert-parallel", "-dp", "1",
		"--kv-cache-dtype", "fp8", "--enforce-eager"})
	if err != nil {
		t.Fatal(err)
	}
	v := a.VLLM
	if v["model"] != "org/m" || v["tensor_parallel_size"] != 4 || v["max_num_seqs"] != 64 || v["enable_prefix_caching"] != false ||
		v["max_model_len"] != 32000 {
		t.Errorf("vLLM values %v", v)
	}
	if a.String("model_path", "") != "org/m" || a.Int("tp_size", 0) != 4 || a.Float("mem_fraction_static", 0) != 0.85 ||
		a.String("api_key", "") != "k1" || a.Int("ep_size", 0) != 4 || a.String("kv_cache_dtype", "") != "fp8_e4m3" ||
		!a.Bool("disable_cuda_graph") || a.Int("port", 0) != 8000 || a.Int("context_length", 0) != 32000 {
		t.Errorf("simulator values %v", a.Values)
	}
	for argv, want := range map[string]string{
		"m --max-num-seq 64":                  "unrecognized arguments: --max-num-seq 64",
		"m --enable-prefix-caching=true":      "argument --enable-prefix-caching/--no-enable-prefix-caching: ignored explicit argument 'true'",
		"m --block-size 24":                   "argument --block-size: invalid choice: 24 (choose from 1, 8, 16, 32, 64, 128, 256)",
		"m --max-num-seqs":                    "argument --max-num-seqs: expected one argument",
		"m extra":                             "unrecognized arguments: extra",
		"m --max-model-len 1.5K":              "invalid human_readable_int value: '1.5K'",
		"m --kv-cache-dtype fp4":              "invalid choice: 'fp4'",
		"m --gpu-memory-utilization lots":     "invalid float value: 'lots'",
		"m --tensor-parallel-size four --foo": "invalid int value: 'four'",
	} {
		_, err := ParseVLLMArgs(strings.Fields(argv))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", argv, err, want)
		}
	}
}

func TestVLLMHumanInt(t *testing.T) {
	for s, want := range map[string]int{"16384": 16384, "1k": 1000, "1K": 1024, "25.6k": 25600, "2M": 2 << 20, "1g": 1e9} {
		if got, err := vllmHumanInt(s); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", s, got, err, want)
		}
	}
	if _, err := vllmHumanInt("1.5K"); err == nil {
		t.Error("decimals with a binary suffix accepted")
	}
}

func vllmPlan(t *testing.T, argv ...string) *Plan {
	t.Helper()
	a, err := ParseVLLMArgs(append([]string{"zai-org/GLM-5.3-Flash"}, argv...))
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfile(DefaultProfile)
	if err != nil {
		t.Fatal(err)
	}
	return Resolve(a, p)
}

func TestResolveVLLM(t *testing.T) {
	pl := vllmPlan(t, "-tp", "4", "--max-model-len", "32768", "--block-size", "64", "--max-num-seqs", "64")
	if pl.Err != nil {
		t.Fatal(pl.Err)
	}
	// H200: 8192 batched tokens by default; the cache is whole blocks;
	// a hybrid model's prefix caching is off by default.
	if pl.KVTokens%64 != 0 || pl.NumBlocks*64 != pl.KVTokens || pl.MaxNumBatchedTokens != 8192 || pl.Radix || pl.EffectiveMRR != 64 {
		t.Errorf("plan %+v", pl)
	}
	low := vllmPlan(t, "-tp", "4", "--max-model-len", "32768", "--max-num-seqs", "64", "--gpu-memory-utilization", "0.85")
	if low.Err != nil || low.KVTokens >= pl.KVTokens {
		t.Errorf("0.85 gives %d KV tokens, 0.9 gives %d", low.KVTokens, pl.KVTokens)
	}
	// The default max_num_seqs is min(1024, max_num_batched_tokens).
	if d := vllmPlan(t, "-tp", "4", "--max-model-len", "32768", "--max-num-batched-tokens", "512"); d.MaxNumSeqs != 512 {
		t.Errorf("default max_num_seqs %d", d.MaxNumSeqs)
	}
	for _, tc := range []struct {
		argv []string
		kind string
		line string
	}{
		{[]string{"-tp", "4", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"}, "invalid", "ValueError: max_num_batched_tokens (32) must be greater than or equal to max_num_seqs (64)."},
		{[]string{"-tp", "4", "-pp", "2", "--async-scheduling"}, "invalid", "ValueError: Async scheduling is not supported with pipeline-parallel-size > 1."},
		{[]string{"-tp", "4", "--async-scheduling", "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 1}`}, "invalid", "speculative decoding is not supported with async scheduling"},
		{[]string{"-tp", "4", "--enable-auto-tool-choice"}, "invalid", "--enable-auto-tool-choice requires --tool-call-parser"},
		{[]string{"-tp", "4", "--gpu-memory-utilization", "1.5"}, "invalid", "Input should be less than or equal to 1"},
		{[]string{"-tp", "2", "--max-model-len", "32768"}, "memory", "ValueError: No available memory for the cache blocks."},
		{[]string{"-tp", "4", "--gpu-memory-utilization", "0.86"}, "memory", "To serve at least one request with the models's max seq len (1048576)"},
	} {
		pl := vllmPlan(t, tc.argv...)
		if pl.Err == nil || pl.Err.Kind != tc.kind || !strings.Contains(strings.Join(pl.Err.Lines, "\n"), tc.line) {
			t.Errorf("%v: %v, want %s %q", tc.argv, pl.Err, tc.kind, tc.line)
		}
	}
}

// TestMainVLLM runs the simulated vLLM server: its startup lines, /health,
// /metrics with vLLM's names, a chat request, and a config error's exit.
func TestMainVLLM(t *testing.T) {
	addr, out, stop := startMain(t, []string{"--sim-engine", "vllm", "zai-org/GLM-5.3-Flash", "-tp", "4", "--max-model-len", "32768",
		"--max-num-seqs", "64", "--port", "0", "--served-model-name", "glm"})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/health"); code != 200 {
		t.Errorf("/health %d", code)
	}
	body := `{"model": "glm", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}`
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat: %v %v", resp, err)
	}
	resp.Body.Close()
	_, metrics := get("/metrics")
	for _, want := range []string{`vllm:num_requests_running{engine="0",model_name="glm"} 0`, "vllm:num_requests_waiting{", "# TYPE vllm:generation_tokens_total counter",
		`vllm:generation_tokens_total{engine="0",model_name="glm"} 5`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if code := stop(); code != ExitOK {
		t.Errorf("exit %d", code)
	}
	log := out.String()
	for _, want := range []string{"vLLM API server version 0.11.1", "non-default args: {'model_tag': 'zai-org/GLM-5.3-Flash'",
		"GPU KV cache size: ", " tokens\n", "Maximum concurrency for 32,768 tokens per request: ", "Graph capturing finished in",
		"Starting vLLM API server 0 on http://127.0.0.1:", "Application startup complete."} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "fired up") || strings.Contains(log, "Prefill batch") {
		t.Errorf("SGLang lines in a vLLM log:\n%s", log)
	}

	var bad bytes.Buffer
	code := Main(t.Context(), []string{"--sim-engine", "vllm", "m", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"}, &bad, io.Discard, Options{NoStartupDelay: true})
	if code != ExitCrash || !strings.Contains(bad.String(), "ValueError: max_num_batched_tokens (32) must be greater than or equal to max_num_seqs (64).") {
		t.Errorf("config error: exit %d\n%s", code, bad.String())
	}
	var errb bytes.Buffer
	if code := Main(t.Context(), []string{"--sim-engine", "vllm", "m", "--max-num-seq", "64"}, io.Discard, &errb, Options{}); code != ExitUsage ||
		!strings.HasPrefix(errb.String(), "usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: --max-num-seq 64") {
		t.Errorf("usage error: exit %d\n%s", code, errb.String())
	}
}

// TestVirtualVLLM: virtual time resolves vLLM's argv too.
func TestVirtualVLLM(t *testing.T) {
	v, err := NewVirtual([]string{"--sim-engine", "vllm", "m", "-tp", "4", "--max-model-len", "32768", "--max-num-seqs", "32"}, VirtualOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pl := v.Plan(); pl.Dialect != EngineVLLM || pl.KVTokens%16 != 0 || pl.EffectiveMRR != 32 {
		t.Errorf("plan %+v", pl)
	}
	if _, err := NewVirtual([]string{"--sim-engine", "vllm", "m", "--max-num-seqs", "64", "--max-num-batched-tokens", "8"}, VirtualOptions{}); err == nil {
		t.Error("a config vLLM refuses started")
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.b.String())
}

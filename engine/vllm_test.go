package engine

import (
	"slices"
	"strings"
	"testing"
)

func vllmSchema(t *testing.T) *FlagSchema {
	t.Helper()
	s, ok, err := VLLM.Schema("vllm/vllm-openai:v0.11.1@sha256:0123abcd")
	if err != nil || !ok || s.Version != "v0.11.1" || s.Engine != "vllm" {
		t.Fatalf("bundled vLLM schema: %v %v %v", s, ok, err)
	}
	return s
}

func TestVLLMSchemaCoversTunerFlags(t *testing.T) {
	s := vllmSchema(t)
	for _, f := range []string{"--model", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
		"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--max-model-len",
		"--enable-chunked-prefill", "--no-enable-chunked-prefill", "--enable-prefix-caching", "--no-enable-prefix-caching",
		"--block-size", "--kv-cache-dtype", "--enable-expert-parallel", "--speculative-config", "--compilation-config", "-O",
		"--enforce-eager", "--async-scheduling", "--served-model-name", "--api-key", "--host", "--port", "--tool-call-parser",
		"--enable-auto-tool-choice", "--reasoning-parser", "--mamba-block-size", "--decode-context-parallel-size"} {
		if _, ok := s.Lookup(f); !ok {
			t.Errorf("schema lacks %s", f)
		}
	}
	// Aliases resolve to the canonical name, as argparse's option strings do.
	if spec, _ := s.Lookup("-tp"); spec.Name != "--tensor-parallel-size" {
		t.Errorf("-tp is %s", spec.Name)
	}
	// BooleanOptionalAction: both spellings are switches that take no value.
	for _, f := range []string{"--enable-prefix-caching", "--no-enable-prefix-caching"} {
		if _, err := s.ParseArgv([]string{f + "=true"}); err == nil {
			t.Errorf("%s=true accepted; it is a switch", f)
		}
	}
	args, err := s.ParseArgv([]string{"--model", "m", "-tp", "4", "--no-enable-prefix-caching", "--block-size", "32",
		"--speculative-config", `{"method": "eagle", "num_speculative_tokens": 3}`, "--api-key", "k1", "k2", "--max-num-seqs=128"})
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 7 || len(args[5].Values) != 2 {
		t.Errorf("parsed %+v", args)
	}
	for _, bad := range [][]string{{"--block-size", "24"}, {"--kv-cache-dtype", "fp4"}, {"--max-num-seqs", "0"}, {"--max-num-seqs", "many"}} {
		if _, err := s.ParseArgv(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestVLLMSwitchDefaults: each BooleanOptionalAction pair states what vLLM
// uses when neither spelling is given, so a switch at its default writes
// nothing (enforce_eager is False: false wrote --no-enforce-eager, a flag
// "changed from the engine's defaults" that changed nothing) and one whose
// default vLLM decides by model (prefix caching, chunked prefill) writes
// both values. --no-NAME sets the same setting as --NAME.
func TestVLLMSwitchDefaults(t *testing.T) {
	s := vllmSchema(t)
	pairs := 0
	for i := range s.Flags {
		f := &s.Flags[i]
		on, ok := strings.CutPrefix(f.Name, "--no-")
		if !ok || f.Type != "bool" {
			continue
		}
		pos, ok := s.Lookup("--" + on)
		if !ok {
			continue
		}
		pairs++
		if pos.Default == "" {
			t.Errorf("%s states no default", pos.Name)
		}
		if f.Setting() != pos.Name || pos.Setting() != pos.Name || pos.Negation() != f.Name {
			t.Errorf("%s: setting %s, %s's setting %s, negation %s", f.Name, f.Setting(), pos.Name, pos.Setting(), pos.Negation())
		}
	}
	if pairs < 47 {
		t.Errorf("%d BooleanOptionalAction pairs; want at least v0.11.1's 47", pairs)
	}
	for _, tc := range []struct {
		flag      string
		on, off   []string
		defaultIs string
	}{
		{"--enforce-eager", []string{"--enforce-eager"}, nil, "off"},
		{"--enable-expert-parallel", []string{"--enable-expert-parallel"}, nil, "off"},
		{"--async-scheduling", []string{"--async-scheduling"}, nil, "off"},
		{"--trust-remote-code", []string{"--trust-remote-code"}, nil, "off"},
		{"--use-tqdm-on-load", nil, []string{"--no-use-tqdm-on-load"}, "on"},
		{"--disable-log-requests", nil, []string{"--no-disable-log-requests"}, "on"},
		{"--enable-prefix-caching", []string{"--enable-prefix-caching"}, []string{"--no-enable-prefix-caching"}, "auto"},
		{"--enable-chunked-prefill", []string{"--enable-chunked-prefill"}, []string{"--no-enable-chunked-prefill"}, "auto"},
		{"--eplb-log-balancedness", []string{"--eplb-log-balancedness"}, []string{"--no-eplb-log-balancedness"}, "from"},
		{"--log-error-stack", []string{"--log-error-stack"}, []string{"--no-log-error-stack"}, "VLLM_SERVER_DEV_MODE"},
	} {
		f, _ := s.Lookup(tc.flag)
		if got := f.SwitchWords(true); !slices.Equal(got, tc.on) {
			t.Errorf("%s true writes %q; want %q", tc.flag, got, tc.on)
		}
		if got := f.SwitchWords(false); !slices.Equal(got, tc.off) {
			t.Errorf("%s false writes %q; want %q", tc.flag, got, tc.off)
		}
		if !strings.HasPrefix(f.Default, tc.defaultIs) {
			t.Errorf("%s default %q; want %s", tc.flag, f.Default, tc.defaultIs)
		}
	}
}

// TestVLLMTypoClosest: a mistyped vLLM flag is reported with the closest
// valid name.
func TestVLLMTypoClosest(t *testing.T) {
	s := vllmSchema(t)
	for typo, want := range map[string]string{
		"--max-num-seq":               "--max-num-seqs",
		"--gpu-memory-utilisation":    "--gpu-memory-utilization",
		"--enable-prefix-cachng":      "--enable-prefix-caching",
		"--tensor-paralel-size":       "--tensor-parallel-size",
		"--max-num-batched-token":     "--max-num-batched-tokens",
		"--no-enable-prefix-caching2": "--no-enable-prefix-caching",
	} {
		_, err := s.ParseArgv([]string{typo, "1"})
		if err == nil || !strings.Contains(err.Error(), "did you mean "+want+"?") {
			t.Errorf("%s: %v; want the closest name %s", typo, err, want)
		}
	}
}

func TestCommandLinePositionalModel(t *testing.T) {
	cmd := []string{"vllm", "serve"}
	for _, tc := range []struct {
		flags, want []string
	}{
		{[]string{"--model", "org/m", "-tp", "4"}, []string{"vllm", "serve", "org/m", "-tp", "4"}},
		{[]string{"-tp", "4", "--model=org/m"}, []string{"vllm", "serve", "org/m", "-tp", "4"}},
		{[]string{"-tp", "4"}, []string{"vllm", "serve", "-tp", "4"}},
	} {
		if got := VLLM.CommandLine(cmd, tc.flags); !slices.Equal(got, tc.want) {
			t.Errorf("CommandLine(%v) = %v, want %v", tc.flags, got, tc.want)
		}
	}
	// SGLang's model stays a flag.
	if got := SGLang.CommandLine([]string{"sglang", "serve"}, []string{"--model-path", "m"}); !slices.Equal(got, []string{"sglang", "serve", "--model-path", "m"}) {
		t.Errorf("SGLang argv %v", got)
	}
}

func TestVLLMParseLog(t *testing.T) {
	tests := []struct {
		name  string
		log   string
		want  Facts
		ready bool
	}{
		{
			name: "v1 two lines with process prefix and thousands separators",
			log: "(EngineCore_DP0 pid=412) INFO 11-18 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 1,690,608 tokens\n" +
				"(EngineCore_DP0 pid=412) INFO 11-18 10:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 51.59x\n",
			want: Facts{MaxTotalNumTokens: 1690608, KVCacheTokens: 1690608, ContextLen: 32768, MaxConcurrency: 51.59},
		},
		{
			name: "merged line of later versions",
			log:  "INFO 01-02 03:04:05 [kv_cache_utils.py:1300] GPU KV cache size: 34,952 tokens, Maximum concurrency for 8,192 tokens per request: 4.27x\n",
			want: Facts{MaxTotalNumTokens: 34952, KVCacheTokens: 34952, ContextLen: 8192, MaxConcurrency: 4.27},
		},
		{
			name: "first data-parallel engine wins",
			log: "(EngineCore_DP0 pid=1) INFO [kv_cache_utils.py] GPU KV cache size: 100,000 tokens\n" +
				"(EngineCore_DP1 pid=2) INFO [kv_cache_utils.py] GPU KV cache size: 90,000 tokens\n",
			want: Facts{MaxTotalNumTokens: 100000, KVCacheTokens: 100000},
		},
		{
			name: "V0 engine: blocks and concurrency give the tokens",
			log: "INFO 05-01 10:00:00 [executor_base.py:112] # cuda blocks: 2048, # CPU blocks: 512\n" +
				"INFO 05-01 10:00:00 [executor_base.py:117] Maximum concurrency for 4096 tokens per request: 8.00x\n",
			want: Facts{MaxTotalNumTokens: 32768, ContextLen: 4096, MaxConcurrency: 8},
		},
		{
			name: "chunked prefill budget and CUDA graphs",
			log: "(APIServer pid=9) INFO [scheduler.py:222] Chunked prefill is enabled with max_num_batched_tokens=8192.\n" +
				"(EngineCore_DP0 pid=10) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67\n" +
				"(EngineCore_DP0 pid=10) INFO [gpu_model_runner.py:3480] Graph capturing finished in 9 secs, took 0.67 GiB\n",
			want: Facts{ChunkedPrefillSize: 8192, CUDAGraph: true},
		},
		{
			name:  "ready on vLLM's own line",
			log:   "(APIServer pid=9) INFO 11-18 10:00:09 [api_server.py:1912] Starting vLLM API server 0 on http://127.0.0.1:8000\n",
			ready: true,
		},
		{
			name:  "ready on uvicorn's line",
			log:   "(APIServer pid=9) INFO:     Application startup complete.\r\n",
			ready: true,
		},
		{
			name: "an enforce-eager startup has no graph line",
			log:  "(EngineCore_DP0 pid=10) INFO [core.py] init engine (profile, create kv cache, warmup model) took 12.00 seconds\n",
			want: Facts{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VLLM.ParseLog(strings.NewReader(tc.log)); got != tc.want {
				t.Errorf("facts\n got %+v\nwant %+v", got, tc.want)
			}
			p := VLLM.NewLogParser()
			for l := range strings.SplitSeq(tc.log, "\n") {
				p.Line(l)
			}
			if p.Ready() != tc.ready {
				t.Errorf("Ready = %v", p.Ready())
			}
		})
	}
}

func TestVLLMSignatures(t *testing.T) {
	for line, want := range map[string]string{
		"(EngineCore_DP0 pid=1) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.":                                                                                ClassOOM,
		"(EngineCore_DP0 pid=1) ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`":                                                          ClassOOM,
		"ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory (1.00 GiB).": ClassOOM,
		"(APIServer pid=3) ValueError: max_num_batched_tokens (32) must be greater than or equal to max_num_seqs (64).":                                                                 ClassStartupCrash,
		"(APIServer pid=3) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}":                                                              ClassStartupCrash,
		"vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.":                                                       ClassCrashed,
		"(EngineCore_DP0 pid=1) RuntimeError: CUDA error: an illegal memory access was encountered":                                                                                     ClassIllegalMemoryAccess,
		"vllm serve: error: unrecognized arguments: --max-num-seq 64":                                                                                                                   ClassBadCommand,
	} {
		sig, _ := VLLM.Classify(line)
		if sig == nil || sig.Class != want {
			t.Errorf("%q: %+v, want %s", line, sig, want)
		}
	}
	if sig, _ := VLLM.Classify("(APIServer pid=3) INFO 11-18 [logger.py] Received request chatcmpl-1"); sig != nil {
		t.Errorf("a request line classified as %s", sig.Class)
	}
	if _, port := VLLM.Classify("(APIServer pid=3) ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use"); !port {
		t.Error("port taken not recognised")
	}
}

// fakeLearned is an engine.Learned with one fitted answer.
type fakeLearned struct {
	kv, se float64
	exact  map[string]Observation
}

func (f fakeLearned) Exact(k string) (Observation, bool) { o, ok := f.exact[k]; return o, ok }
func (f fakeLearned) KV(x []float64, prior float64) (float64, float64, bool) {
	return f.kv, f.se, f.kv != 0
}
func (f fakeLearned) Ratio(string) (int, bool) { return 0, false }
func (f fakeLearned) PromptTokens() int        { return 0 }

func vllmView(t *testing.T, flags ...string) View {
	t.Helper()
	s := vllmSchema(t)
	if _, err := s.ParseArgv(flags); err != nil {
		t.Fatal(err)
	}
	return NewView(s, flags)
}

func TestVLLMRulesCheck(t *testing.T) {
	base := Setup{GPUsPerTrial: 4, MoE: true, Demand: Demand{Concurrency: 16, PromptTokens: 1000, MaxTokens: 200}}
	dense := base
	dense.MoE = false
	tests := []struct {
		name  string
		flags []string
		setup Setup
		rules []string // rule names expected, in order
	}{
		{"feasible", []string{"--model", "m", "-tp", "4", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192", "--enable-expert-parallel"}, base, nil},
		{"tp x pp x dp over the GPUs", []string{"-tp", "4", "-dp", "2"}, base, []string{"parallel_gpus"}},
		{"pipeline counts", []string{"-tp", "2", "-pp", "4"}, base, []string{"parallel_gpus"}},
		{"dcp must divide tp", []string{"-tp", "4", "-dcp", "3"}, base, []string{"dcp_divides_tp"}},
		{"expert parallel on a dense model", []string{"--enable-expert-parallel"}, dense, []string{"expert_parallel_moe"}},
		{"memory utilization above 1", []string{"--gpu-memory-utilization", "1.2"}, base, []string{"gpu_memory_utilization"}},
		{"memory utilization 0", []string{"--gpu-memory-utilization", "0"}, base, []string{"gpu_memory_utilization"}},
		{"batched tokens below seqs", []string{"--max-num-seqs", "256", "--max-num-batched-tokens", "128"}, base, []string{"batched_tokens_vs_seqs"}},
		{"seqs above any default batch", []string{"--max-num-seqs", "10000"}, base, []string{"batched_tokens_vs_seqs"}},
		{"pooling without chunked prefill", []string{"--runner", "pooling", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048", "--max-model-len", "8192"}, base, []string{"batched_tokens_vs_model_len"}},
		{"generation ignores --no-enable-chunked-prefill", []string{"--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048", "--max-model-len", "8192"}, base, nil},
		{"async with pipeline", []string{"-pp", "2", "--async-scheduling"}, base, []string{"async_scheduling"}},
		{"async with speculation", []string{"--async-scheduling", "--speculative-config", `{"method": "ngram", "num_speculative_tokens": 3}`}, base, []string{"async_scheduling"}},
		{"speculative config not JSON", []string{"--speculative-config", "{method: eagle}"}, base, []string{"speculative_config"}},
		{"speculative method unknown", []string{"--speculative-config", `{"method": "eagel", "num_speculative_tokens": 2}`}, base, []string{"speculative_config"}},
		{"speculative without method or model", []string{"--speculative-config", `{"num_speculative_tokens": 2}`}, base, []string{"speculative_config"}},
		{"draft model not in V1", []string{"--speculative-config", `{"method": "draft_model", "model": "small", "num_speculative_tokens": 2}`}, base, []string{"speculative_config"}},
		{"speculative tokens 0", []string{"--speculative-config", `{"method": "eagle3", "model": "head", "num_speculative_tokens": 0}`}, base, []string{"speculative_config"}},
		{"ngram needs a token count", []string{"--speculative-config", `{"method": "ngram"}`}, base, []string{"speculative_config"}},
		{"mtp ok", []string{"--speculative-config", `{"method": "mtp", "num_speculative_tokens": 1}`}, base, nil},
		{"auto tool choice needs a parser", []string{"--enable-auto-tool-choice"}, base, []string{"auto_tool_choice"}},
		{"both switch spellings", []string{"--enable-prefix-caching", "--no-enable-prefix-caching"}, base, []string{"conflicting_switches"}},
		{"mamba block size without prefix caching", []string{"--mamba-block-size", "256"}, Setup{GPUsPerTrial: 4, Hybrid: true}, []string{"mamba_block_size"}},
		{"mamba block size with prefix caching", []string{"--mamba-block-size", "256", "--enable-prefix-caching"}, Setup{GPUsPerTrial: 4, Hybrid: true}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := vllmView(t, tc.flags...)
			p := VLLM.Rules.Predict(v, tc.setup, nil)
			var got []string
			for _, r := range VLLM.Rules.Check(v, tc.setup, p) {
				got = append(got, r.Rule)
				if r.Message == "" {
					t.Errorf("%s: empty message", r.Rule)
				}
			}
			if !slices.Equal(got, tc.rules) {
				t.Errorf("rules %v, want %v", got, tc.rules)
			}
		})
	}
}

// TestVLLMKVCapacity: the hint predicts KV tokens in whole blocks; a cache
// that cannot hold one request of the workload, or one of max_model_len,
// is rejected; one that holds fewer than the running requests is not
// (the rest queue).
func TestVLLMKVCapacity(t *testing.T) {
	s := Setup{GPUsPerTrial: 1, Memory: Memory{RefKVTokens: 100_005, RefMemFraction: 0.9, PerMemFractionPoint: 10_000},
		Demand: Demand{Concurrency: 64, PromptTokens: 1000, MaxTokens: 500}}
	v := vllmView(t, "--gpu-memory-utilization", "0.8", "--block-size", "32")
	p := VLLM.Rules.Predict(v, s, nil)
	// 100,005 - 10 points x 10,000 = 5 tokens: no whole block of 32.
	if p.KVTokens != 0 || p.KVSource != "hint" {
		t.Errorf("prediction %+v", p)
	}
	v = vllmView(t, "--block-size", "32")
	p = VLLM.Rules.Predict(v, s, nil)
	if p.KVTokens != 100_000-100_000%32 || p.KVTokensNeeded != 1500 {
		t.Errorf("prediction %+v; want 99,968 KV tokens and 1,500 needed", p)
	}
	if rej := VLLM.Rules.Check(v, s, p); len(rej) != 0 {
		t.Errorf("rejected: %v", rej)
	}
	v = vllmView(t, "--block-size", "32", "--max-num-seqs", "128")
	s.Demand.Concurrency = 128
	p = VLLM.Rules.Predict(v, s, nil)
	if rej := VLLM.Rules.Check(v, s, p); len(rej) != 0 {
		t.Errorf("128 running x 1,500 tokens > 99,968 KV tokens queue, rejected: %v", rej)
	}
	long := s
	long.Demand.PromptTokens = 120_000
	p = VLLM.Rules.Predict(v, long, nil)
	rej := VLLM.Rules.Check(v, long, p)
	if len(rej) != 1 || rej[0].Rule != "kv_capacity" || !strings.Contains(rej[0].Message, "120500 needed by one request (120000 prompt + 500 max_tokens)") {
		t.Errorf("rejections %v", rej)
	}
	v = vllmView(t, "--max-model-len", "131072", "--max-num-seqs", "1")
	p = VLLM.Rules.Predict(v, s, nil)
	rej = VLLM.Rules.Check(v, s, p)
	if len(rej) != 1 || !strings.Contains(rej[0].Message, "--max-model-len 131072") {
		t.Errorf("max model len: %v", rej)
	}
	// Data-parallel engines each hold a whole request too.
	s.GPUsPerTrial = 2
	v = vllmView(t, "-dp", "2", "--max-num-seqs", "64")
	if p = VLLM.Rules.Predict(v, s, nil); p.KVTokensNeeded != 1500 {
		t.Errorf("per-engine need %d", p.KVTokensNeeded)
	}
	// What earlier trials taught wins over the hint, with its error.
	p = VLLM.Rules.Predict(v, s, fakeLearned{kv: 50_000, se: 1_000})
	if p.KVSource != "fitted" || p.KVTokens != 50_000-50_000%16 || p.KVTokensErr != 1000 {
		t.Errorf("fitted %+v", p)
	}
	obs, ok := VLLM.Rules.Observe(v, s, p, Facts{MaxTotalNumTokens: 61_440})
	if !ok || obs.KVTokens != 61_440 || len(obs.X) != 6 || obs.Prior == 0 {
		t.Errorf("observation %+v", obs)
	}
	p = VLLM.Rules.Predict(v, s, fakeLearned{exact: map[string]Observation{obs.MemKey: obs}})
	if p.KVSource != "observed" || p.KVTokens != 61_440 {
		t.Errorf("exact %+v", p)
	}
}

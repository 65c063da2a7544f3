package sim

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// flagKind is how argparse converts a flag's value.
type flagKind int

const (
	kString flagKind = iota
	kInt
	kFloat
	kBool    // store_true
	kHRInt   // human_readable_int: 16k, 1Ki, 2M
	kIntsN   // nargs="+" of int
	kString2 // nargs="+" of str
)

// flagDef is one SGLang launch flag as argparse declares it.
type flagDef struct {
	dest       string   // attribute name, e.g. tp_size
	names      []string // option strings, first is canonical
	kind       flagKind
	choices    []string
	deprecated string // deprecation message printed to the log when used
	upper      bool   // value is upper-cased (speculative algorithm)
}

// Choice lists from the reference (MAIN).
var (
	kvDtypes     = []string{"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1"}
	attnBackends = []string{"triton", "torch_native", "flex_attention", "fa3", "fa4", "flashinfer", "flashmla", "trtllm_mla",
		"trtllm_mha", "cutlass_mla", "aiter", "wave", "intel_amx", "ascend", "nsa", "dsa", "dsv4", "cutedsl_mla", "tokenspeed_mla", "intel_xpu"}
	moeRunners = []string{"auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass",
		"flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass", "aiter", "marlin"}
	moeA2A         = []string{"none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe", "ascend_tp"}
	reasoningParse = []string{"auto", "deepseek-r1", "deepseek-v3", "qwen3", "qwen3-thinking", "kimi", "kimi_k2", "glm45",
		"gpt-oss", "minimax", "minimax-append-think", "step3", "nano_v3", "interns1", "mimo"}
	toolParsers = []string{"auto", "qwen", "qwen25", "qwen3_coder", "hermes", "kimi_k2", "deepseekv3", "deepseekv31",
		"deepseekv32", "glm", "glm45", "glm47", "gpt-oss", "llama3", "mistral", "pythonic", "step3", "minimax-m2", "interns1"}
	mambaStrategies = []string{"auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"}
	logLevels       = []string{"debug", "info", "warning", "error", "critical"}
)

// flagTable lists the flags the simulator accepts: every flag of the
// reference table plus other common SGLang flags (so real launch commands,
// such as seed 004's, parse). Abbreviation matching runs over all of them,
// as argparse's allow_abbrev does, so `--tp` only resolves while no other
// option starts with it.
var flagTable = []flagDef{
	{dest: "model_path", names: []string{"--model-path", "--model"}},
	{dest: "tokenizer_path", names: []string{"--tokenizer-path"}},
	{dest: "revision", names: []string{"--revision"}},
	{dest: "tp_size", names: []string{"--tp-size", "--tensor-parallel-size"}, kind: kInt},
	{dest: "ep_size", names: []string{"--ep-size", "--expert-parallel-size", "--ep"}, kind: kInt},
	{dest: "dp_size", names: []string{"--dp-size", "--data-parallel-size"}, kind: kInt},
	{dest: "pp_size", names: []string{"--pp-size", "--pipeline-parallel-size"}, kind: kInt},
	{dest: "enable_dp_attention", names: []string{"--enable-dp-attention"}, kind: kBool},
	{dest: "mem_fraction_static", names: []string{"--mem-fraction-static"}, kind: kFloat},
	{dest: "chunked_prefill_size", names: []string{"--chunked-prefill-size"}, kind: kInt},
	{dest: "max_prefill_tokens", names: []string{"--max-prefill-tokens"}, kind: kHRInt},
	{dest: "max_running_requests", names: []string{"--max-running-requests"}, kind: kInt},
	{dest: "max_queued_requests", names: []string{"--max-queued-requests"}, kind: kInt},
	{dest: "max_total_tokens", names: []string{"--max-total-tokens"}, kind: kHRInt},
	{dest: "disable_radix_cache", names: []string{"--disable-radix-cache"}, kind: kBool},
	{dest: "max_mamba_cache_size", names: []string{"--max-mamba-cache-size"}, kind: kInt},
	{dest: "mamba_ssm_dtype", names: []string{"--mamba-ssm-dtype"}, choices: []string{"float32", "bfloat16", "float16"}},
	{dest: "mamba_full_memory_ratio", names: []string{"--mamba-full-memory-ratio"}, kind: kFloat},
	{dest: "mamba_radix_cache_strategy", names: []string{"--mamba-radix-cache-strategy", "--mamba-scheduler-strategy"}, choices: mambaStrategies},
	{dest: "mamba_track_interval", names: []string{"--mamba-track-interval"}, kind: kInt},
	{dest: "mamba_backend", names: []string{"--mamba-backend"}, choices: []string{"triton", "flashinfer"}},
	{dest: "linear_attn_backend", names: []string{"--linear-attn-backend"}},
	{dest: "disable_cuda_graph", names: []string{"--disable-cuda-graph"}, kind: kBool,
		deprecated: "'--disable-cuda-graph' is deprecated and will be removed in a future release. Use '--cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled' instead."},
	{dest: "cuda_graph_backend_decode", names: []string{"--cuda-graph-backend-decode"}, choices: []string{"full", "piecewise", "disabled"}},
	{dest: "cuda_graph_backend_prefill", names: []string{"--cuda-graph-backend-prefill"}, choices: []string{"full", "piecewise", "disabled"}},
	{dest: "cuda_graph_max_bs_decode", names: []string{"--cuda-graph-max-bs-decode"}, kind: kInt},
	{dest: "cuda_graph_max_bs_decode", names: []string{"--cuda-graph-max-bs"}, kind: kInt,
		deprecated: "'--cuda-graph-max-bs' is deprecated and will be removed in a future release. Use '--cuda-graph-max-bs-decode' instead."},
	{dest: "cuda_graph_bs_decode", names: []string{"--cuda-graph-bs-decode"}, kind: kIntsN},
	{dest: "cuda_graph_bs_decode", names: []string{"--cuda-graph-bs"}, kind: kIntsN,
		deprecated: "'--cuda-graph-bs' is deprecated and will be removed in a future release. Use '--cuda-graph-bs-decode' instead."},
	{dest: "disable_overlap_schedule", names: []string{"--disable-overlap-schedule"}, kind: kBool},
	{dest: "enable_mixed_chunk", names: []string{"--enable-mixed-chunk"}, kind: kBool},
	{dest: "enable_two_batch_overlap", names: []string{"--enable-two-batch-overlap"}, kind: kBool},
	{dest: "enable_torch_compile", names: []string{"--enable-torch-compile"}, kind: kBool},
	{dest: "speculative_algorithm", names: []string{"--speculative-algorithm"}, upper: true},
	{dest: "speculative_num_steps", names: []string{"--speculative-num-steps"}, kind: kInt},
	{dest: "speculative_eagle_topk", names: []string{"--speculative-eagle-topk"}, kind: kInt},
	{dest: "speculative_num_draft_tokens", names: []string{"--speculative-num-draft-tokens"}, kind: kInt},
	{dest: "speculative_draft_model_path", names: []string{"--speculative-draft-model-path", "--speculative-draft-model"}},
	{dest: "speculative_draft_attention_backend", names: []string{"--speculative-draft-attention-backend"}},
	{dest: "speculative_attention_mode", names: []string{"--speculative-attention-mode"}, choices: []string{"prefill", "decode"}},
	{dest: "kv_cache_dtype", names: []string{"--kv-cache-dtype"}, choices: kvDtypes},
	{dest: "attention_backend", names: []string{"--attention-backend"}, choices: attnBackends},
	{dest: "prefill_attention_backend", names: []string{"--prefill-attention-backend"}, choices: attnBackends},
	{dest: "decode_attention_backend", names: []string{"--decode-attention-backend"}, choices: attnBackends},
	{dest: "dsa_prefill_backend", names: []string{"--dsa-prefill-backend"}},
	{dest: "dsa_decode_backend", names: []string{"--dsa-decode-backend"}},
	{dest: "fp8_gemm_backend", names: []string{"--fp8-gemm-backend"}},
	{dest: "moe_runner_backend", names: []string{"--moe-runner-backend"}, choices: moeRunners},
	{dest: "moe_a2a_backend", names: []string{"--moe-a2a-backend"}, choices: moeA2A},
	{dest: "deepep_mode", names: []string{"--deepep-mode"}, choices: []string{"normal", "low_latency", "auto"}},
	{dest: "ep_num_redundant_experts", names: []string{"--ep-num-redundant-experts"}, kind: kInt},
	{dest: "enable_eplb", names: []string{"--enable-eplb"}, kind: kBool},
	{dest: "reasoning_parser", names: []string{"--reasoning-parser"}, choices: reasoningParse},
	{dest: "tool_call_parser", names: []string{"--tool-call-parser"}, choices: toolParsers},
	{dest: "chat_template", names: []string{"--chat-template"}},
	{dest: "host", names: []string{"--host"}},
	{dest: "port", names: []string{"--port"}, kind: kInt},
	{dest: "api_key", names: []string{"--api-key"}},
	{dest: "enable_metrics", names: []string{"--enable-metrics"}, kind: kBool},
	{dest: "enable_cache_report", names: []string{"--enable-cache-report"}, kind: kBool},
	{dest: "stream_response_default_include_usage", names: []string{"--stream-response-default-include-usage"}, kind: kBool},
	{dest: "trust_remote_code", names: []string{"--trust-remote-code"}, kind: kBool},
	{dest: "context_length", names: []string{"--context-length"}, kind: kHRInt},
	{dest: "served_model_name", names: []string{"--served-model-name"}},
	{dest: "random_seed", names: []string{"--random-seed"}, kind: kInt},
	{dest: "log_level", names: []string{"--log-level"}, choices: logLevels},
	{dest: "log_level_http", names: []string{"--log-level-http"}, choices: logLevels},
	{dest: "log_requests", names: []string{"--log-requests"}, kind: kBool},
	{dest: "dtype", names: []string{"--dtype"}, choices: []string{"auto", "half", "float16", "bfloat16", "float", "float32"}},
	{dest: "quantization", names: []string{"--quantization"}},
	{dest: "load_format", names: []string{"--load-format"}},
	{dest: "download_dir", names: []string{"--download-dir"}},
	{dest: "page_size", names: []string{"--page-size"}, kind: kInt},
	// SGLang's argparse choices, as the bundled flag schema lists them
	// (sgl-project/sglang server_args.py @001067ff, plus hrrn).
	{dest: "schedule_policy", names: []string{"--schedule-policy"}, choices: []string{"lpm", "random", "fcfs", "dfs-weight", "lof", "priority", "routing-key", "hrrn"}},
	{dest: "schedule_conservativeness", names: []string{"--schedule-conservativeness"}, kind: kFloat},
	{dest: "stream_interval", names: []string{"--stream-interval"}, kind: kInt},
	{dest: "watchdog_timeout", names: []string{"--watchdog-timeout"}, kind: kFloat},
	{dest: "base_gpu_id", names: []string{"--base-gpu-id"}, kind: kInt},
	{dest: "nnodes", names: []string{"--nnodes"}, kind: kInt},
	{dest: "node_rank", names: []string{"--node-rank"}, kind: kInt},
	{dest: "dist_init_addr", names: []string{"--dist-init-addr"}},
	{dest: "grammar_backend", names: []string{"--grammar-backend"}, choices: []string{"xgrammar", "outlines", "llguidance", "none"}},
	{dest: "decode_log_interval", names: []string{"--decode-log-interval"}, kind: kInt},
	{dest: "disable_custom_all_reduce", names: []string{"--disable-custom-all-reduce"}, kind: kBool},
	{dest: "enable_hierarchical_cache", names: []string{"--enable-hierarchical-cache"}, kind: kBool},
	{dest: "skip_server_warmup", names: []string{"--skip-server-warmup"}, kind: kBool},
	{dest: "json_model_override_args", names: []string{"--json-model-override-args"}},
	// Simulator-only flags.
	{dest: "sim_engine", names: []string{"--sim-engine"}, choices: []string{"sglang", "vllm"}},
	{dest: "sim_profile", names: []string{"--sim-profile"}},
	{dest: "sim_speedup", names: []string{"--sim-speedup"}, kind: kFloat},
	{dest: "sim_overhead_ms", names: []string{"--sim-overhead-ms"}, kind: kFloat},
	{dest: "sim_gather_ms", names: []string{"--sim-gather-ms"}, kind: kFloat},
}

// ParseError is an argparse-style usage error; the process should print
// Usage() and the message to stderr and exit 2.
type ParseError struct{ Msg string }

func (e *ParseError) Error() string { return e.Msg }

// Prog is the program name argparse prints.
const Prog = "sglang serve"

// Usage returns argparse's short usage line.
func Usage() string {
	return "usage: " + Prog + " [-h] --model-path MODEL_PATH [--tp-size TP_SIZE] [--ep-size EP_SIZE]\n" +
		"                    [--mem-fraction-static MEM_FRACTION_STATIC] [--max-running-requests MAX_RUNNING_REQUESTS]\n" +
		"                    [--disable-radix-cache] [--max-mamba-cache-size MAX_MAMBA_CACHE_SIZE] [...]\n" +
		"                    [--sim-profile SIM_PROFILE] [--sim-speedup SIM_SPEEDUP]\n"
}

// SimHelp describes the simulator's own options, after the engine's usage
// on --help.
func SimHelp() string {
	return "\nsimulator options (not SGLang's or vLLM's):\n" +
		"  --sim-profile NAME|FILE  the model and GPUs simulated: their memory, speed and faults (default " + DefaultProfile + ";\n" +
		"                           bundled: " + strings.Join(ProfileNames(), ", ") + ").\n" +
		"                           A study of another model or GPU count needs a profile FILE of its own\n" +
		"                           (weights_gb, gpu_mem_gb, kv_tokens_per_gb, decode_step_ms, ...): see docs/simulator.md.\n" +
		"  --sim-speedup X          simulated time runs X times faster than the modelled GPUs (default 1)\n" +
		"  --sim-engine sglang|vllm the interface spoken (default sglang)\n"
}

// Args is a parsed command line: dest -> value (string, int, float64, bool,
// []int or []string), only for flags given.
type Args struct {
	Values     map[string]any
	Deprecated []string // deprecation warnings, in order
	// VLLM holds the vLLM options given (dest -> value) when the simulator
	// speaks vLLM (--sim-engine vllm), in VLLMOrder; nil otherwise.
	VLLM      map[string]any
	VLLMOrder []string
}

// ErrHelp is returned for -h/--help.
var ErrHelp = &ParseError{Msg: "help requested"}

func optionStrings() map[string]*flagDef {
	m := make(map[string]*flagDef)
	for i := range flagTable {
		for _, n := range flagTable[i].names {
			m[n] = &flagTable[i]
		}
	}
	return m
}

// lookupOption resolves an option string as argparse does: exact match
// first, then a unique prefix.
func lookupOption(opts map[string]*flagDef, name string) (*flagDef, string, error) {
	if d, ok := opts[name]; ok {
		return d, name, nil
	}
	var matches []string
	for n := range opts {
		if strings.HasPrefix(n, name) {
			matches = append(matches, n)
		}
	}
	sort.Strings(matches)
	switch len(matches) {
	case 0:
		return nil, "", nil
	case 1:
		return opts[matches[0]], matches[0], nil
	}
	return nil, "", &ParseError{Msg: fmt.Sprintf("ambiguous option: %s could match %s", name, strings.Join(matches, ", "))}
}

// ParseArgs parses SGLang's command line the way argparse does.
func ParseArgs(argv []string) (*Args, error) {
	opts := optionStrings()
	a := &Args{Values: map[string]any{}}
	var unknown []string
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		if arg == "-h" || arg == "--help" {
			return nil, ErrHelp
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" {
			unknown = append(unknown, arg)
			continue
		}
		name, val, hasVal := strings.Cut(arg, "=")
		def, _, err := lookupOption(opts, name)
		if err != nil {
			return nil, err
		}
		if def == nil {
			unknown = append(unknown, arg)
			continue
		}
		label := strings.Join(def.names, "/")
		if def.deprecated != "" {
			a.Deprecated = append(a.Deprecated, def.deprecated)
		}
		if def.kind == kBool {
			if hasVal {
				return nil, &ParseError{Msg: fmt.Sprintf("argument %s: ignored explicit argument '%s'", label, val)}
			}
			a.Values[def.dest] = true
			continue
		}
		v, err := optionValue(def.kind, label, argv, &i, val, hasVal, func(val string) (any, error) { return convert(def, val) })
		if err != nil {
			return nil, err
		}
		a.Values[def.dest] = v
	}
	if len(unknown) > 0 {
		return nil, &ParseError{Msg: "unrecognized arguments: " + strings.Join(unknown, " ")}
	}
	if _, ok := a.Values["model_path"]; !ok {
		return nil, &ParseError{Msg: "the following arguments are required: --model-path/--model"}
	}
	return a, nil
}

// optionValue reads an option's value as argparse does: a nargs='+' kind
// (kIntsN, kString2) takes every following token up to the next option,
// the others one token, from "=value" or the next argument, which convert
// types. *i moves past what was read. Errors name the option by label.
func optionValue(kind flagKind, label string, argv []string, i *int, val string, hasVal bool, convert func(string) (any, error)) (any, error) {
	switch kind {
	case kIntsN, kString2:
		var vals []string
		if hasVal {
			vals = append(vals, val)
		}
		for *i+1 < len(argv) && !looksLikeOption(argv[*i+1]) {
			*i++
			vals = append(vals, argv[*i])
		}
		if len(vals) == 0 {
			return nil, &ParseError{Msg: fmt.Sprintf("argument %s: expected at least one argument", label)}
		}
		if kind == kString2 {
			return vals, nil
		}
		ints := make([]int, 0, len(vals))
		for _, v := range vals {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, &ParseError{Msg: fmt.Sprintf("argument %s: invalid int value: '%s'", label, v)}
			}
			ints = append(ints, n)
		}
		return ints, nil
	}
	if !hasVal {
		if *i+1 >= len(argv) || looksLikeOption(argv[*i+1]) {
			return nil, &ParseError{Msg: fmt.Sprintf("argument %s: expected one argument", label)}
		}
		*i++
		val = argv[*i]
	}
	v, err := convert(val)
	if err != nil {
		return nil, &ParseError{Msg: fmt.Sprintf("argument %s: %s", label, err.Error())}
	}
	return v, nil
}

// looksLikeOption mirrors argparse: a token starting with '-' is an option
// unless it is a negative number.
func looksLikeOption(s string) bool {
	if !strings.HasPrefix(s, "-") || s == "-" {
		return false
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return false
	}
	return true
}

func convert(def *flagDef, val string) (any, error) {
	switch def.kind {
	case kInt:
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("invalid int value: '%s'", val)
		}
		return n, nil
	case kHRInt:
		n, err := parseHumanInt(val)
		if err != nil {
			return nil, fmt.Errorf("invalid human_readable_int value: '%s'", val)
		}
		return n, nil
	case kFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("invalid float value: '%s'", val)
		}
		return f, nil
	}
	if def.upper {
		val = strings.ToUpper(val)
	}
	if len(def.choices) > 0 {
		ok := false
		for _, c := range def.choices {
			if c == val {
				ok = true
				break
			}
		}
		if !ok {
			q := make([]string, len(def.choices))
			for i, c := range def.choices {
				q[i] = "'" + c + "'"
			}
			return nil, fmt.Errorf("invalid choice: '%s' (choose from %s)", val, strings.Join(q, ", "))
		}
	}
	return val, nil
}

// parseHumanInt accepts 16384, 16k, 16K (x1000), 1Ki (x1024), 2M, 1Mi, 1G.
func parseHumanInt(s string) (int, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	suffixes := []struct {
		s string
		m float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1e3}, {"K", 1e3}, {"m", 1e6}, {"M", 1e6}, {"g", 1e9}, {"G", 1e9}}
	for _, x := range suffixes {
		if strings.HasSuffix(s, x.s) {
			mult = x.m
			s = strings.TrimSuffix(s, x.s)
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	v := f * mult
	if v != float64(int64(v)) {
		return 0, fmt.Errorf("not an integer")
	}
	return int(v), nil
}

// Int returns an int flag or def when unset.
func (a *Args) Int(dest string, def int) int {
	if v, ok := a.Values[dest].(int); ok {
		return v
	}
	return def
}

// IntPtr returns an int flag or nil when unset.
func (a *Args) IntPtr(dest string) *int {
	if v, ok := a.Values[dest].(int); ok {
		return &v
	}
	return nil
}

// Float returns a float flag or def when unset.
func (a *Args) Float(dest string, def float64) float64 {
	if v, ok := a.Values[dest].(float64); ok {
		return v
	}
	return def
}

// Bool reports whether a store_true flag was given.
func (a *Args) Bool(dest string) bool {
	v, _ := a.Values[dest].(bool)
	return v
}

// String returns a string flag or def when unset.
func (a *Args) String(dest string, def string) string {
	if v, ok := a.Values[dest].(string); ok {
		return v
	}
	return def
}

// Has reports whether dest was given.
func (a *Args) Has(dest string) bool { _, ok := a.Values[dest]; return ok }

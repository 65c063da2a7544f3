package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// EngineVLLM is the --sim-engine value that makes the simulator speak
// vLLM's interface: `vllm serve`'s command line, its startup log lines,
// GET /health and vllm:* metric names, with vLLM's KV arithmetic (blocks x
// block size) on top of the profile's memory and performance model.
const EngineVLLM = "vllm"

// VLLMProg is the program name vLLM's argparse prints.
const VLLMProg = "vllm serve"

// VLLMVersion is the vLLM version the simulator's log lines name.
const VLLMVersion = "0.11.1"

// SimEngine returns the --sim-engine value in argv ("" when absent): the
// interface the simulator speaks.
func SimEngine(argv []string) string {
	for i, a := range argv {
		if a == "--sim-engine" && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--sim-engine="); ok {
			return v
		}
	}
	return ""
}

// vllmFlag is one `vllm serve` option as vLLM's argparse declares it.
type vllmFlag struct {
	dest    string
	names   []string
	kind    flagKind
	boolOpt bool // argparse.BooleanOptionalAction: --NAME and --no-NAME
	choices []string
}

// vllmFlags are the `vllm serve` options the simulator understands (from
// vllm/engine/arg_utils.py and vllm/entrypoints/openai/cli_args.py, v0.11.1;
// see docs/engines/vllm.md). An option outside this list is an argparse
// usage error, as an unknown option is for vLLM.
var vllmFlags = []vllmFlag{
	{dest: "model", names: []string{"--model"}},
	{dest: "served_model_name", names: []string{"--served-model-name"}, kind: kString2},
	{dest: "tokenizer", names: []string{"--tokenizer"}},
	{dest: "revision", names: []string{"--revision"}},
	{dest: "trust_remote_code", names: []string{"--trust-remote-code"}, kind: kBool, boolOpt: true},
	{dest: "dtype", names: []string{"--dtype"}, choices: []string{"auto", "half", "float16", "bfloat16", "float", "float32"}},
	{dest: "seed", names: []string{"--seed"}, kind: kInt},
	{dest: "max_model_len", names: []string{"--max-model-len"}, kind: kHRInt},
	{dest: "quantization", names: []string{"--quantization", "-q"}},
	{dest: "enforce_eager", names: []string{"--enforce-eager"}, kind: kBool, boolOpt: true},
	{dest: "max_logprobs", names: []string{"--max-logprobs"}, kind: kInt},
	{dest: "runner", names: []string{"--runner"}, choices: []string{"auto", "draft", "generate", "pooling"}},
	{dest: "generation_config", names: []string{"--generation-config"}},
	{dest: "load_format", names: []string{"--load-format"}},
	{dest: "download_dir", names: []string{"--download-dir"}},
	{dest: "reasoning_parser", names: []string{"--reasoning-parser"}},
	{dest: "distributed_executor_backend", names: []string{"--distributed-executor-backend"}, choices: []string{"external_launcher", "mp", "ray", "uni"}},
	{dest: "pipeline_parallel_size", names: []string{"--pipeline-parallel-size", "-pp"}, kind: kInt},
	{dest: "tensor_parallel_size", names: []string{"--tensor-parallel-size", "-tp"}, kind: kInt},
	{dest: "decode_context_parallel_size", names: []string{"--decode-context-parallel-size", "-dcp"}, kind: kInt},
	{dest: "data_parallel_size", names: []string{"--data-parallel-size", "-dp"}, kind: kInt},
	{dest: "enable_expert_parallel", names: []string{"--enable-expert-parallel"}, kind: kBool, boolOpt: true},
	{dest: "enable_eplb", names: []string{"--enable-eplb"}, kind: kBool, boolOpt: true},
	{dest: "disable_custom_all_reduce", names: []string{"--disable-custom-all-reduce"}, kind: kBool, boolOpt: true},
	{dest: "block_size", names: []string{"--block-size"}, kind: kInt, choices: []string{"1", "8", "16", "32", "64", "128", "256"}},
	{dest: "gpu_memory_utilization", names: []string{"--gpu-memory-utilization"}, kind: kFloat},
	{dest: "kv_cache_memory_bytes", names: []string{"--kv-cache-memory-bytes"}, kind: kHRInt},
	{dest: "swap_space", names: []string{"--swap-space"}, kind: kFloat},
	{dest: "kv_cache_dtype", names: []string{"--kv-cache-dtype"}, choices: []string{"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}},
	{dest: "num_gpu_blocks_override", names: []string{"--num-gpu-blocks-override"}, kind: kInt},
	{dest: "enable_prefix_caching", names: []string{"--enable-prefix-caching"}, kind: kBool, boolOpt: true},
	{dest: "cpu_offload_gb", names: []string{"--cpu-offload-gb"}, kind: kFloat},
	{dest: "mamba_block_size", names: []string{"--mamba-block-size"}, kind: kInt},
	{dest: "max_num_batched_tokens", names: []string{"--max-num-batched-tokens"}, kind: kHRInt},
	{dest: "max_num_seqs", names: []string{"--max-num-seqs"}, kind: kInt},
	{dest: "scheduling_policy", names: []string{"--scheduling-policy"}, choices: []string{"fcfs", "priority"}},
	{dest: "enable_chunked_prefill", names: []string{"--enable-chunked-prefill"}, kind: kBool, boolOpt: true},
	{dest: "async_scheduling", names: []string{"--async-scheduling"}, kind: kBool, boolOpt: true},
	{dest: "cudagraph_capture_sizes", names: []string{"--cudagraph-capture-sizes"}, kind: kIntsN},
	{dest: "max_cudagraph_capture_size", names: []string{"--max-cudagraph-capture-size"}, kind: kInt},
	{dest: "speculative_config", names: []string{"--speculative-config"}},
	{dest: "compilation_config", names: []string{"--compilation-config", "-O"}},
	{dest: "disable_log_stats", names: []string{"--disable-log-stats"}, kind: kBool},
	{dest: "enable_log_requests", names: []string{"--enable-log-requests"}, kind: kBool, boolOpt: true},
	{dest: "host", names: []string{"--host"}},
	{dest: "port", names: []string{"--port"}, kind: kInt},
	{dest: "uvicorn_log_level", names: []string{"--uvicorn-log-level"}, choices: []string{"critical", "debug", "error", "info", "trace", "warning"}},
	{dest: "disable_uvicorn_access_log", names: []string{"--disable-uvicorn-access-log"}, kind: kBool, boolOpt: true},
	{dest: "api_key", names: []string{"--api-key"}, kind: kString2},
	{dest: "chat_template", names: []string{"--chat-template"}},
	{dest: "enable_auto_tool_choice", names: []string{"--enable-auto-tool-choice"}, kind: kBool, boolOpt: true},
	{dest: "tool_call_parser", names: []string{"--tool-call-parser"}},
	{dest: "enable_prompt_tokens_details", names: []string{"--enable-prompt-tokens-details"}, kind: kBool, boolOpt: true},
	{dest: "enable_force_include_usage", names: []string{"--enable-force-include-usage"}, kind: kBool, boolOpt: true},
	// Simulator-only flags.
	{dest: "sim_engine", names: []string{"--sim-engine"}, choices: []string{"sglang", EngineVLLM}},
	{dest: "sim_profile", names: []string{"--sim-profile"}},
	{dest: "sim_speedup", names: []string{"--sim-speedup"}, kind: kFloat},
	{dest: "sim_overhead_ms", names: []string{"--sim-overhead-ms"}, kind: kFloat},
	{dest: "sim_gather_ms", names: []string{"--sim-gather-ms"}, kind: kFloat},
	{dest: "sim_host_memory_mb", names: []string{"--sim-host-memory-mb"}, kind: kInt},
}

// VLLMUsage is vLLM's short usage line (entrypoints/cli/serve.py).
func VLLMUsage() string {
	return "usage: " + VLLMProg + " [model_tag] [options]\n"
}

// ParseVLLMArgs parses `vllm serve`'s command line as vLLM's
// FlexibleArgumentParser does (a positional model_tag, --flag=value, long
// option names with underscores read as dashes, switches as
// BooleanOptionalAction: --NAME and --no-NAME; no abbreviations) and
// returns it as the simulator's Args: the SGLang-named settings the
// simulator's model runs on, plus the vLLM values under Args.VLLM.
func ParseVLLMArgs(argv []string) (*Args, error) {
	opts := map[string]*vllmFlag{}
	for i := range vllmFlags {
		f := &vllmFlags[i]
		for _, n := range f.names {
			opts[n] = f
			if f.boolOpt && strings.HasPrefix(n, "--") {
				opts["--no-"+n[2:]] = f
			}
		}
	}
	given := map[string]any{}
	var order []string
	var unknown []string
	model := ""
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		if arg == "-h" || arg == "--help" {
			return nil, ErrHelp
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			if model == "" {
				model = arg
			} else {
				unknown = append(unknown, arg)
			}
			continue
		}
		name, val, hasVal := strings.Cut(arg, "=")
		if strings.HasPrefix(name, "--") {
			name = "--" + strings.ReplaceAll(name[2:], "_", "-")
		}
		def, ok := opts[name]
		if !ok {
			unknown = append(unknown, arg)
			continue
		}
		label := strings.Join(def.names, "/")
		if def.boolOpt {
			label = def.names[0] + "/--no-" + def.names[0][2:]
		}
		if _, seen := given[def.dest]; !seen {
			order = append(order, def.dest)
		}
		if def.kind == kBool {
			if hasVal {
				return nil, &ParseError{Msg: fmt.Sprintf("argument %s: ignored explicit argument '%s'", label, val)}
			}
			given[def.dest] = !strings.HasPrefix(name, "--no-")
			continue
		}
		v, err := optionValue(def.kind, label, argv, &i, val, hasVal, func(val string) (any, error) { return convertVLLM(def, val) })
		if err != nil {
			return nil, err
		}
		given[def.dest] = v
	}
	if len(unknown) > 0 {
		return nil, &ParseError{Msg: "unrecognized arguments: " + strings.Join(unknown, " ")}
	}
	if model != "" {
		// src: entrypoints/cli/serve.py: a positional model_tag takes precedence.
		given["model"] = model
		order = append([]string{"model_tag"}, order...)
	}
	return translateVLLM(given, order), nil
}

// convertVLLM converts one option value as vLLM's argparse types do.
func convertVLLM(def *vllmFlag, val string) (any, error) {
	var v any
	switch def.kind {
	case kInt:
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("invalid int value: '%s'", val)
		}
		v = n
	case kHRInt:
		n, err := vllmHumanInt(val)
		if err != nil {
			return nil, fmt.Errorf("invalid human_readable_int value: '%s'", val)
		}
		v = n
	case kFloat:
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return nil, fmt.Errorf("invalid float value: '%s'", val)
		}
		v = f
	default:
		v = val
	}
	if len(def.choices) > 0 && !slices.Contains(def.choices, fmt.Sprint(v)) {
		q := make([]string, len(def.choices))
		for i, c := range def.choices {
			q[i] = "'" + c + "'"
			if def.kind == kInt {
				q[i] = c
			}
		}
		shown := "'" + val + "'"
		if def.kind == kInt {
			shown = fmt.Sprint(v)
		}
		return nil, fmt.Errorf("invalid choice: %s (choose from %s)", shown, strings.Join(q, ", "))
	}
	return v, nil
}

var reVLLMHuman = regexp.MustCompile(`^(\d+(?:\.\d+)?)([kKmMgGtT])$`)

// vllmHumanInt is vLLM's human_readable_int (src: arg_utils.py): k, m, g
// decimal (decimals allowed), K, M, G binary (integers only).
func vllmHumanInt(s string) (int, error) {
	s = strings.TrimSpace(s)
	m := reVLLMHuman.FindStringSubmatch(s)
	if m == nil {
		return strconv.Atoi(s)
	}
	switch m[2] {
	case "k", "m", "g":
		f, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, err
		}
		return int(f * map[string]float64{"k": 1e3, "m": 1e6, "g": 1e9}[m[2]]), nil
	case "K", "M", "G":
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return 0, fmt.Errorf("decimals are not allowed with binary suffixes")
		}
		return n * map[string]int{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m[2]], nil
	}
	return 0, fmt.Errorf("unsupported suffix %s", m[2])
}

// translateVLLM maps vLLM's settings onto the simulator's (SGLang-named)
// ones. Defaults that depend on the GPU are resolved in resolveVLLM, which
// has the profile.
func translateVLLM(given map[string]any, order []string) *Args {
	a := &Args{Values: map[string]any{"sim_engine": EngineVLLM, "enable_metrics": true}, VLLM: given, VLLMOrder: order}
	set := func(dest string, v any) { a.Values[dest] = v }
	if v, ok := given["model"].(string); ok {
		set("model_path", v)
	} else {
		set("model_path", "Qwen/Qwen3-0.6B") // src: entrypoints/cli/serve.py DESCRIPTION
	}
	if v, ok := given["served_model_name"].([]string); ok && len(v) > 0 {
		set("served_model_name", v[0])
	}
	for vdest, sdest := range map[string]string{"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
		"data_parallel_size": "dp_size", "max_model_len": "context_length", "port": "port", "seed": "random_seed"} {
		if v, ok := given[vdest].(int); ok {
			set(sdest, v)
		}
	}
	for _, k := range []string{"host", "reasoning_parser", "revision", "quantization", "dtype", "load_format", "download_dir", "chat_template",
		"sim_profile"} {
		if v, ok := given[k].(string); ok {
			set(k, v)
		}
	}
	for _, k := range []string{"sim_speedup", "sim_overhead_ms", "sim_gather_ms"} {
		if v, ok := given[k].(float64); ok {
			set(k, v)
		}
	}
	if _, ok := given["port"]; !ok {
		set("port", 8000) // src: cli_args.py FrontendArgs.port
	}
	if v, ok := given["api_key"].([]string); ok && len(v) > 0 {
		set("api_key", v[0])
	}
	if v, ok := given["gpu_memory_utilization"].(float64); ok {
		set("mem_fraction_static", v)
	} else {
		set("mem_fraction_static", 0.9) // src: config/cache.py default
	}
	if on, _ := given["enable_expert_parallel"].(bool); on {
		tp, dp := intOr(given, "tensor_parallel_size", 1), intOr(given, "data_parallel_size", 1)
		set("ep_size", tp*dp) // experts spread over TP x DP ranks
	}
	if on, _ := given["enforce_eager"].(bool); on {
		set("disable_cuda_graph", true)
	}
	switch dt, _ := given["kv_cache_dtype"].(string); dt {
	case "fp8", "fp8_e4m3", "fp8_inc", "fp8_ds_mla":
		set("kv_cache_dtype", "fp8_e4m3")
	case "fp8_e5m2":
		set("kv_cache_dtype", "fp8_e5m2")
	}
	// vLLM's tool calls need both switches for tool_choice "auto".
	if p, ok := given["tool_call_parser"].(string); ok {
		if on, _ := given["enable_auto_tool_choice"].(bool); on {
			set("tool_call_parser", p)
		}
	}
	if on, _ := given["enable_force_include_usage"].(bool); on {
		set("stream_response_default_include_usage", true)
	}
	if on, _ := given["enable_prompt_tokens_details"].(bool); on {
		set("enable_cache_report", true)
	}
	return a
}

func intOr(m map[string]any, k string, def int) int {
	if v, ok := m[k].(int); ok {
		return v
	}
	return def
}

// vllmSpec is a --speculative-config the simulator runs.
type vllmSpec struct {
	Method string `json:"method"`
	Model  string `json:"model"`
	Tokens int    `json:"num_speculative_tokens"`
}

// resolveVLLM computes the plan vLLM would reach at startup: its defaults
// and config errors first (the API server refuses these before starting the
// engine), then the profile's memory model, with the KV cache in whole
// blocks and one request of max_model_len required to fit.
func resolveVLLM(a *Args, p *Profile) *Plan {
	v := a.VLLM
	pl := newPlan(a, p)
	pl.Dialect = EngineVLLM
	pl.BlockSize = intOr(v, "block_size", 16) // src: config/cache.py DEFAULT_BLOCK_SIZE
	// src: arg_utils.py _set_default_args: GPUs of 70 GiB or more (not A100)
	// get 8192 batched tokens and 1024 sequences for the API server, others
	// 2048 and 256; max_num_seqs never exceeds max_num_batched_tokens.
	big := p.Hardware.GPUMemGB*1e9 >= 70*(1<<30) && !strings.Contains(p.Hardware.GPUName, "A100")
	batched, seqs := 2048, 256
	if big {
		batched, seqs = 8192, 1024
	}
	batched = intOr(v, "max_num_batched_tokens", batched)
	if _, ok := v["max_num_seqs"]; ok {
		seqs = intOr(v, "max_num_seqs", seqs)
	} else {
		seqs = min(seqs, batched)
	}
	pl.MaxNumBatchedTokens, pl.MaxNumSeqs = batched, seqs
	pl.ChunkedPrefill, pl.MaxPrefillTokens = batched, batched
	pl.RequestedMRR = seqs
	a.Values["max_running_requests"] = seqs
	// src: arg_utils.py _set_default_args: prefix caching defaults on, off
	// for hybrid models.
	pl.Radix = !p.Model.Hybrid
	if on, ok := v["enable_prefix_caching"].(bool); ok {
		pl.Radix = on
	}
	a.Values["disable_radix_cache"] = !pl.Radix
	// src: CompilationConfig.max_cudagraph_capture_size: min(max_num_seqs*2, 512) unless set.
	pl.GraphMaxBS = intOr(v, "max_cudagraph_capture_size", min(2*seqs, 512))
	if sizes, ok := v["cudagraph_capture_sizes"].([]int); ok && len(sizes) > 0 {
		pl.GraphMaxBS = slices.Max(sizes)
	}
	if err := vllmConfigError(a, pl); err != nil {
		pl.Err = err
		return pl
	}
	for _, step := range []func(*Args, *Profile) *StartupError{pl.speculative, pl.mambaStrategy, pl.restMemory, pl.pools} {
		if err := step(a, p); err != nil {
			pl.Err = vllmMemoryError(err)
			return pl
		}
	}
	pl.Warnings = nil // SGLang's startup notes; vLLM logs its own
	// src: kv_cache_utils.py: the cache holds num_blocks whole blocks.
	blocks := pl.KVTokens / max(1, pl.BlockSize)
	if nb := intOr(v, "num_gpu_blocks_override", 0); nb > 0 {
		blocks = nb
	}
	pl.NumBlocks = blocks
	pl.KVTokens = blocks * pl.BlockSize
	if pl.KVTokens <= 0 {
		pl.Err = vllmNoMemory()
		return pl
	}
	need := ceilDiv(pl.ContextLen, pl.BlockSize) * pl.BlockSize
	if need > pl.KVTokens {
		// src: kv_cache_utils.py _check_enough_kv_cache_memory.
		gib := func(tok int) float64 { return float64(tok) / float64(pl.KVTokens) * pl.kvGiB(p) }
		pl.Err = &StartupError{Kind: "memory", Lines: []string{fmt.Sprintf(
			"ValueError: To serve at least one request with the models's max seq len (%d), (%.2f GiB KV cache is needed, which is larger than the available KV cache memory (%.2f GiB). Based on the available memory, the estimated maximum model length is %d. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
			pl.ContextLen, gib(need), pl.kvGiB(p), pl.KVTokens)}}
		return pl
	}
	// vLLM runs up to max_num_seqs per engine; the simulator's hybrid model
	// also needs a state slot per running request.
	pl.EffectiveMRR = seqs
	if p.Model.Hybrid && pl.Ratio > 0 {
		pl.EffectiveMRR = max(1, min(seqs, pl.StateSlots/pl.Ratio))
	}
	pl.GraphBS = vllmCaptureSizes(pl.GraphMaxBS)
	return pl
}

// vllmConfigError is what vLLM's API server raises while building its
// config, before any engine starts.
func vllmConfigError(a *Args, pl *Plan) *StartupError {
	v := a.VLLM
	bad := func(line string) *StartupError { return &StartupError{Kind: "invalid", Lines: []string{line}} }
	if g, ok := v["gpu_memory_utilization"].(float64); ok && (g <= 0 || g > 1 || math.IsNaN(g)) {
		// src: config/cache.py gpu_memory_utilization: Field(gt=0, le=1).
		cmp := "less than or equal to 1"
		if g <= 0 {
			cmp = "greater than 0"
		}
		return bad(fmt.Sprintf("pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig gpu_memory_utilization: Input should be %s [type=less_than_equal, input_value=%v, input_type=float]", cmp, g))
	}
	// src: config/scheduler.py verify_max_model_len.
	if pl.MaxNumBatchedTokens < pl.MaxNumSeqs {
		return bad(fmt.Sprintf("ValueError: max_num_batched_tokens (%d) must be greater than or equal to max_num_seqs (%d).", pl.MaxNumBatchedTokens, pl.MaxNumSeqs))
	}
	async, _ := v["async_scheduling"].(bool)
	// src: arg_utils.py create_engine_config.
	if async && pl.PP > 1 {
		return bad("ValueError: Async scheduling is not supported with pipeline-parallel-size > 1.")
	}
	if raw, ok := v["speculative_config"].(string); ok {
		var sc vllmSpec
		if err := json.Unmarshal([]byte(raw), &sc); err != nil {
			return bad(fmt.Sprintf("json.decoder.JSONDecodeError: %v", err))
		}
		if async {
			return bad("ValueError: Currently, speculative decoding is not supported with async scheduling.")
		}
		switch sc.Method {
		case "draft_model":
			return bad("NotImplementedError: Draft model speculative decoding is not supported yet. Please consider using other speculative decoding methods such as ngram, medusa, eagle, or mtp.")
		case "ngram", "suffix":
			a.Values["speculative_algorithm"] = "NGRAM"
		case "eagle3":
			a.Values["speculative_algorithm"] = "EAGLE3"
		default:
			a.Values["speculative_algorithm"] = "EAGLE"
		}
		if sc.Tokens > 0 {
			a.Values["speculative_num_steps"] = sc.Tokens
			a.Values["speculative_eagle_topk"] = 1
			a.Values["speculative_num_draft_tokens"] = sc.Tokens + 1
		}
	}
	if on, _ := v["enable_auto_tool_choice"].(bool); on {
		if _, ok := v["tool_call_parser"]; !ok {
			// src: cli_args.py validate_parsed_serve_args.
			return bad("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser")
		}
	}
	return nil
}

// vllmNoMemory is vLLM's error when nothing is left for the KV cache (src:
// kv_cache_utils.py _check_enough_kv_cache_memory).
func vllmNoMemory() *StartupError {
	return &StartupError{Kind: "memory", Lines: []string{"ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."}}
}

// vllmMemoryError words the memory model's startup failures as vLLM does.
func vllmMemoryError(err *StartupError) *StartupError {
	switch err.Kind {
	case "memory", "state_pool":
		return vllmNoMemory()
	}
	return err
}

// kvGiB is the KV cache's size per GPU in GiB.
func (pl *Plan) kvGiB(p *Profile) float64 {
	m := p.Memory
	gb := float64(pl.KVTokens) / m.KVTokensPerGB / float64(pl.TP) * float64(m.ReferenceTP)
	if f, ok := m.DtypeFactor[pl.KVDtype]; ok && f > 0 {
		gb /= f
	}
	return gb * 1e9 / (1 << 30)
}

// vllmCaptureSizes are the default CUDA graph capture sizes, [1, 2, 4] +
// range(8, 256, 8) + range(256, max+1, 16), clamped to max (src:
// CompilationConfig.max_cudagraph_capture_size's help).
func vllmCaptureSizes(maxBS int) []int {
	var out []int
	for _, b := range []int{1, 2, 4} {
		if b <= maxBS {
			out = append(out, b)
		}
	}
	for b := 8; b < 256 && b <= maxBS; b += 8 {
		out = append(out, b)
	}
	for b := 256; b <= maxBS; b += 16 {
		out = append(out, b)
	}
	return out
}

func ceilDiv(a, b int) int {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}

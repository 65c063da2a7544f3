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

// Choice lists: sgl-project/sglang python/sglang/srt/server_args.py
// @001067ff, as the bundled flag schema (engine/flags) lists them; the
// parsers' lists are ReasoningParser.DetectorMap and
// FunctionCallParser.ToolCallParserEnum at their nearest stored versions
// (@002e9bfc, @00828e56), plus nano_v3 from the reference's MAIN.
var (
	kvDtypes     = []string{"auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16", "fp4_e2m1"}
	attnBackends = []string{"triton", "torch_native", "flex_attention", "dsa", "nsa", "dsv4", "compressed", "cutlass_mla", "fa3", "fa4",
		"flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla", "trtllm_mha", "dual_chunk_flash_attn", "hpc_ops",
		"minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx", "ascend", "intel_xpu"}
	moeRunners = []string{"auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "experimental_sgl_trtllm",
		"flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass", "aiter", "marlin",
		"humming", "experimental_sgl_marlin", "hpc_ops", "megamoe"}
	moeA2A         = []string{"none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "flashinfer", "megamoe", "deepep_v2", "pplx", "ascend_tp"}
	reasoningParse = []string{"auto", "apertus2509", "deepseek-r1", "deepseek-v3", "deepseek-v4", "glm45", "hunyuan", "gpt-oss", "kimi",
		"kimi_k2", "kimi_k3", "mimo", "poolside_v1", "qwen3", "qwen3-thinking", "minimax", "minimax-append-think", "minimax-m3", "step3",
		"step3p5", "mistral", "nemotron_3", "interns1", "gemma4", "inkling", "cohere_command4", "telechat4", "nano_v3"}
	toolParsers = []string{"auto", "apertus2509", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4", "dots",
		"glm", "glm45", "glm47", "gpt-oss", "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3", "mimo", "minicpm5", "mistral",
		"muse", "poolside_v1", "pythonic", "qwen", "qwen25", "qwen3_coder", "spark25", "step3", "step3p5", "minimax-m2", "minimax-m3",
		"trinity", "interns1", "hermes", "hunyuan", "gigachat3", "gigachat35", "gemma4", "inkling"}
	mambaStrategies = []string{"auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"}
	logLevels       = []string{"debug", "info", "warning", "error", "critical"}
	graphBackends   = []string{"full", "breakable", "tc_piecewise", "disabled"}
	dsaBackends     = []string{"flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto", "flashinfer_sparse_mla", "fa3", "tilelang", "aiter", "trtllm"}
	linearBackends  = []string{"triton", "cutedsl", "flashinfer", "flashkda", "nvidia_kda", "ptx_kda", "helion", "intel_xpu"}
	quantMethods    = []string{"awq", "fp8", "mxfp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf", "modelopt",
		"modelopt_fp8", "modelopt_fp4", "nvfp4_online", "modelopt_mixed", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16", "w4afp8",
		"mxfp4", "auto-round", "auto-round-int8", "compressed-tensors", "modelslim", "mxfp_w4a8", "quark", "quark_int4fp8_moe",
		"quark_mxfp4", "mlx_q4", "mlx_q8", "unquant", "humming"}
	loadFormats = []string{"auto", "pt", "safetensors", "npcache", "dummy", "sharded_state", "presharded", "gguf", "expert_pack",
		"bitsandbytes", "mistral", "layered", "flash_rl", "remote", "remote_instance", "fastsafetensors", "private", "runai_streamer"}
)

// deprecatedAlias is the warning SGLang's DeprecatedAliasStoreAction and
// DeprecatedStoreTrueAction log for a deprecated spelling.
func deprecatedAlias(old, instead string) string {
	return "'" + old + "' is deprecated and will be removed in a future release. Use '" + instead + "' instead."
}

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
	{dest: "linear_attn_backend", names: []string{"--linear-attn-backend"}, choices: linearBackends},
	{dest: "disable_cuda_graph", names: []string{"--disable-cuda-graph"}, kind: kBool,
		deprecated: "'--disable-cuda-graph' is deprecated and will be removed in a future release. Use '--cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled' instead."},
	{dest: "cuda_graph_backend_decode", names: []string{"--cuda-graph-backend-decode"}, choices: graphBackends},
	{dest: "cuda_graph_backend_prefill", names: []string{"--cuda-graph-backend-prefill"}, choices: graphBackends},
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
	{dest: "dsa_prefill_backend", names: []string{"--dsa-prefill-backend"}, choices: dsaBackends},
	{dest: "dsa_prefill_backend", names: []string{"--nsa-prefill-backend"}, choices: dsaBackends, deprecated: deprecatedAlias("--nsa-prefill-backend", "--dsa-prefill-backend")},
	{dest: "dsa_decode_backend", names: []string{"--dsa-decode-backend"}, choices: dsaBackends},
	{dest: "dsa_decode_backend", names: []string{"--nsa-decode-backend"}, choices: dsaBackends, deprecated: deprecatedAlias("--nsa-decode-backend", "--dsa-decode-backend")},
	{dest: "fp8_gemm_backend", names: []string{"--fp8-gemm-backend"}, choices: []string{"auto", "deep_gemm", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_deepgemm", "flashinfer_cutedsl", "cutlass", "triton", "aiter"}},
	{dest: "moe_runner_backend", names: []string{"--moe-runner-backend"}, choices: moeRunners},
	{dest: "moe_a2a_backend", names: []string{"--moe-a2a-backend"}, choices: moeA2A},
	{dest: "deepep_mode", names: []string{"--deepep-mode"}, choices: []string{"auto", "normal", "low_latency"}},
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
	{dest: "quantization", names: []string{"--quantization"}, choices: quantMethods},
	{dest: "load_format", names: []string{"--load-format"}, choices: loadFormats},
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
	{dest: "dist_init_addr", names: []string{"--dist-init-addr", "--nccl-init-addr"}},
	{dest: "grammar_backend", names: []string{"--grammar-backend"}, choices: []string{"xgrammar", "outlines", "llguidance", "none"}},
	{dest: "decode_log_interval", names: []string{"--decode-log-interval"}, kind: kInt},
	{dest: "disable_custom_all_reduce", names: []string{"--disable-custom-all-reduce"}, kind: kBool},
	{dest: "enable_hierarchical_cache", names: []string{"--enable-hierarchical-cache"}, kind: kBool},
	{dest: "skip_server_warmup", names: []string{"--skip-server-warmup"}, kind: kBool},
	{dest: "json_model_override_args", names: []string{"--json-model-override-args"}},
	// Tuning flags the bundled schema adds from server_args.py @001067ff.
	{dest: "prefill_max_requests", names: []string{"--prefill-max-requests"}, kind: kInt},
	{dest: "prefill_decode_interval", names: []string{"--prefill-decode-interval"}, kind: kInt},
	{dest: "enable_dynamic_chunking", names: []string{"--enable-dynamic-chunking"}, kind: kBool},
	{dest: "num_continuous_decode_steps", names: []string{"--num-continuous-decode-steps"}, kind: kInt},
	{dest: "scheduler_recv_interval", names: []string{"--scheduler-recv-interval"}, kind: kInt},
	{dest: "enable_priority_scheduling", names: []string{"--enable-priority-scheduling"}, kind: kBool},
	{dest: "disable_priority_preemption", names: []string{"--disable-priority-preemption"}, kind: kBool},
	{dest: "schedule_low_priority_values_first", names: []string{"--schedule-low-priority-values-first"}, kind: kBool},
	{dest: "priority_scheduling_preemption_threshold", names: []string{"--priority-scheduling-preemption-threshold"}, kind: kInt},
	{dest: "retraction_policy", names: []string{"--retraction-policy"}, choices: []string{"length", "priority"}},
	{dest: "enable_prefill_delayer", names: []string{"--enable-prefill-delayer"}, kind: kBool},
	{dest: "prefill_delayer_max_delay_passes", names: []string{"--prefill-delayer-max-delay-passes"}, kind: kInt},
	{dest: "min_free_slots_delay", names: []string{"--min-free-slots-delay"}, kind: kInt},
	{dest: "tokenizer_worker_num", names: []string{"--tokenizer-worker-num"}, kind: kInt},
	{dest: "radix_eviction_policy", names: []string{"--radix-eviction-policy"}, choices: []string{"lru", "lfu", "slru", "priority"}},
	{dest: "swa_full_tokens_ratio", names: []string{"--swa-full-tokens-ratio"}, kind: kFloat},
	{dest: "disable_hybrid_swa_memory", names: []string{"--disable-hybrid-swa-memory"}, kind: kBool},
	{dest: "disable_chunked_prefix_cache", names: []string{"--disable-chunked-prefix-cache"}, kind: kBool},
	{dest: "enable_page_major_kv_layout", names: []string{"--enable-page-major-kv-layout"}, kind: kBool},
	{dest: "enable_unified_memory", names: []string{"--enable-unified-memory"}, kind: kBool},
	{dest: "cpu_offload_gb", names: []string{"--cpu-offload-gb"}, kind: kInt},
	{dest: "hicache_ratio", names: []string{"--hicache-ratio"}, kind: kFloat},
	{dest: "hicache_size", names: []string{"--hicache-size"}, kind: kInt},
	{dest: "hicache_host_memory_mode", names: []string{"--hicache-host-memory-mode"}, choices: []string{"cache", "buffer_only"}},
	{dest: "hicache_write_policy", names: []string{"--hicache-write-policy"}, choices: []string{"write_back", "write_through", "write_through_selective"}},
	{dest: "hicache_io_backend", names: []string{"--hicache-io-backend"}, choices: []string{"direct", "kernel", "kernel_ascend"}},
	{dest: "hicache_mem_layout", names: []string{"--hicache-mem-layout"}, choices: []string{"layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"}},
	{dest: "hicache_storage_backend", names: []string{"--hicache-storage-backend"}, choices: []string{"file", "sim", "mooncake", "hf3fs", "nixl", "aibrix", "dynamic", "eic", "simm", "mori", "shm", "kvcc"}},
	{dest: "hicache_storage_prefetch_policy", names: []string{"--hicache-storage-prefetch-policy"}, choices: []string{"best_effort", "wait_complete", "timeout"}},
	{dest: "hicache_storage_backend_extra_config", names: []string{"--hicache-storage-backend-extra-config"}},
	{dest: "dcp_size", names: []string{"--dcp-size", "--decode-context-parallel-size"}, kind: kInt},
	{dest: "dcp_comm_backend", names: []string{"--dcp-comm-backend"}, choices: []string{"ag_rs", "a2a", "fi_a2a"}},
	{dest: "attn_cp_size", names: []string{"--attn-cp-size", "--attention-context-parallel-size"}, kind: kInt},
	{dest: "moe_dp_size", names: []string{"--moe-dp-size", "--moe-data-parallel-size"}, kind: kInt},
	{dest: "moe_dense_tp_size", names: []string{"--moe-dense-tp-size"}, kind: kInt},
	{dest: "enable_prefill_cp", names: []string{"--enable-prefill-cp"}, kind: kBool},
	{dest: "cp_strategy", names: []string{"--cp-strategy"}, choices: []string{"zigzag", "interleave"}},
	{dest: "pp_max_micro_batch_size", names: []string{"--pp-max-micro-batch-size"}, kind: kInt},
	{dest: "pp_async_batch_depth", names: []string{"--pp-async-batch-depth"}, kind: kInt},
	{dest: "load_balance_method", names: []string{"--load-balance-method"}, choices: []string{"auto", "round_robin", "follow_bootstrap_room", "total_requests", "total_tokens"}},
	{dest: "enable_dp_lm_head", names: []string{"--enable-dp-lm-head"}, kind: kBool},
	{dest: "cuda_graph_config", names: []string{"--cuda-graph-config"}},
	{dest: "cuda_graph_max_bs_prefill", names: []string{"--cuda-graph-max-bs-prefill"}, kind: kInt},
	{dest: "cuda_graph_max_bs_prefill", names: []string{"--piecewise-cuda-graph-max-tokens"}, kind: kInt,
		deprecated: deprecatedAlias("--piecewise-cuda-graph-max-tokens", "--cuda-graph-max-bs-prefill")},
	{dest: "cuda_graph_bs_prefill", names: []string{"--cuda-graph-bs-prefill"}, kind: kIntsN},
	{dest: "cuda_graph_bs_prefill", names: []string{"--piecewise-cuda-graph-tokens"}, kind: kIntsN,
		deprecated: deprecatedAlias("--piecewise-cuda-graph-tokens", "--cuda-graph-bs-prefill")},
	{dest: "cuda_graph_tc_compiler", names: []string{"--cuda-graph-tc-compiler"}, choices: []string{"eager", "inductor"}},
	{dest: "cuda_graph_tc_compiler", names: []string{"--piecewise-cuda-graph-compiler"}, choices: []string{"eager", "inductor"},
		deprecated: deprecatedAlias("--piecewise-cuda-graph-compiler", "--cuda-graph-tc-compiler")},
	{dest: "disable_prefill_cuda_graph", names: []string{"--disable-prefill-cuda-graph"}, kind: kBool},
	{dest: "disable_decode_cuda_graph", names: []string{"--disable-decode-cuda-graph"}, kind: kBool},
	{dest: "disable_cuda_graph_padding", names: []string{"--disable-cuda-graph-padding"}, kind: kBool},
	// SGLang stores these three into cuda_graph_backend_prefill; the
	// simulator does not model prefill graphs, so they keep their own dest.
	{dest: "enable_breakable_cuda_graph", names: []string{"--enable-breakable-cuda-graph"}, kind: kBool,
		deprecated: deprecatedAlias("--enable-breakable-cuda-graph", "--cuda-graph-backend-prefill=breakable")},
	{dest: "disable_piecewise_cuda_graph", names: []string{"--disable-piecewise-cuda-graph"}, kind: kBool,
		deprecated: deprecatedAlias("--disable-piecewise-cuda-graph", "--cuda-graph-backend-prefill=disabled")},
	{dest: "enforce_piecewise_cuda_graph", names: []string{"--enforce-piecewise-cuda-graph"}, kind: kBool,
		deprecated: deprecatedAlias("--enforce-piecewise-cuda-graph", "--cuda-graph-backend-prefill=tc_piecewise")},
	{dest: "torch_compile_max_bs", names: []string{"--torch-compile-max-bs"}, kind: kInt},
	{dest: "sampling_backend", names: []string{"--sampling-backend"}, choices: []string{"flashinfer", "pytorch", "ascend", "token_oracle"}},
	{dest: "fp4_gemm_backend", names: []string{"--fp4-gemm-backend"}, choices: []string{"auto", "flashinfer_cudnn", "flashinfer_cutedsl", "flashinfer_cutlass", "flashinfer_trtllm", "marlin"}},
	{dest: "bf16_gemm_backend", names: []string{"--bf16-gemm-backend"}, choices: []string{"auto", "cutedsl", "gemv", "torch"}},
	{dest: "linear_attn_decode_backend", names: []string{"--linear-attn-decode-backend"}, choices: linearBackends},
	{dest: "linear_attn_prefill_backend", names: []string{"--linear-attn-prefill-backend"}, choices: linearBackends},
	{dest: "triton_attention_num_kv_splits", names: []string{"--triton-attention-num-kv-splits"}, kind: kInt},
	{dest: "disable_flashinfer_autotune", names: []string{"--disable-flashinfer-autotune"}, kind: kBool},
	{dest: "enable_tf32_matmul", names: []string{"--enable-tf32-matmul"}, kind: kBool},
	{dest: "enable_nccl_nvls", names: []string{"--enable-nccl-nvls"}, kind: kBool},
	{dest: "enable_symm_mem", names: []string{"--enable-symm-mem"}, kind: kBool},
	{dest: "enable_torch_symm_mem", names: []string{"--enable-torch-symm-mem"}, kind: kBool},
	{dest: "enable_mscclpp", names: []string{"--enable-mscclpp"}, kind: kBool},
	{dest: "flashinfer_allreduce_fusion_backend", names: []string{"--flashinfer-allreduce-fusion-backend"}, choices: []string{"auto", "trtllm", "mnnvl"}},
	{dest: "enable_flashinfer_allreduce_fusion", names: []string{"--enable-flashinfer-allreduce-fusion"}, kind: kBool},
	{dest: "enable_deterministic_inference", names: []string{"--enable-deterministic-inference"}, kind: kBool},
	{dest: "deepep_v2_mode", names: []string{"--deepep-v2-mode"}, choices: []string{"direct", "hybrid"}},
	{dest: "ep_dispatch_algorithm", names: []string{"--ep-dispatch-algorithm"}, choices: []string{"static", "dynamic", "fake", "lp"}},
	{dest: "eplb_rebalance_num_iterations", names: []string{"--eplb-rebalance-num-iterations"}, kind: kInt},
	{dest: "disable_shared_experts_fusion", names: []string{"--disable-shared-experts-fusion"}, kind: kBool},
	{dest: "enable_single_batch_overlap", names: []string{"--enable-single-batch-overlap"}, kind: kBool},
	{dest: "tbo_token_distribution_threshold", names: []string{"--tbo-token-distribution-threshold"}, kind: kFloat},
	{dest: "speculative_moe_runner_backend", names: []string{"--speculative-moe-runner-backend"}, choices: moeRunners},
	{dest: "speculative_moe_a2a_backend", names: []string{"--speculative-moe-a2a-backend"}, choices: moeA2A},
	{dest: "speculative_draft_model_quantization", names: []string{"--speculative-draft-model-quantization"}, choices: quantMethods},
	{dest: "speculative_draft_kv_cache_dtype", names: []string{"--speculative-draft-kv-cache-dtype"}, choices: []string{"auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"}},
	{dest: "speculative_accept_threshold_single", names: []string{"--speculative-accept-threshold-single"}, kind: kFloat},
	{dest: "speculative_accept_threshold_acc", names: []string{"--speculative-accept-threshold-acc"}, kind: kFloat},
	{dest: "enable_multi_layer_eagle", names: []string{"--enable-multi-layer-eagle"}, kind: kBool},
	{dest: "speculative_adaptive", names: []string{"--speculative-adaptive"}, kind: kBool},
	{dest: "enable_lora", names: []string{"--enable-lora"}, kind: kBool},
	{dest: "max_lora_rank", names: []string{"--max-lora-rank"}, kind: kInt},
	{dest: "max_loras_per_batch", names: []string{"--max-loras-per-batch"}, kind: kInt},
	{dest: "max_loaded_loras", names: []string{"--max-loaded-loras"}, kind: kInt},
	{dest: "lora_backend", names: []string{"--lora-backend"}, choices: []string{"triton", "csgmv", "ascend", "torch_native"}},
	{dest: "disaggregation_mode", names: []string{"--disaggregation-mode"}, choices: []string{"null", "prefill", "decode"}},
	{dest: "disaggregation_transfer_backend", names: []string{"--disaggregation-transfer-backend"}, choices: []string{"mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"}},
	{dest: "num_reserved_decode_tokens", names: []string{"--num-reserved-decode-tokens"}, kind: kInt},
	{dest: "disaggregation_decode_enable_radix_cache", names: []string{"--disaggregation-decode-enable-radix-cache"}, kind: kBool},
	// Simulator-only flags.
	{dest: "sim_engine", names: []string{"--sim-engine"}, choices: []string{"sglang", "vllm"}},
	{dest: "sim_profile", names: []string{"--sim-profile"}},
	{dest: "sim_speedup", names: []string{"--sim-speedup"}, kind: kFloat},
	{dest: "sim_overhead_ms", names: []string{"--sim-overhead-ms"}, kind: kFloat},
	{dest: "sim_gather_ms", names: []string{"--sim-gather-ms"}, kind: kFloat},
	{dest: "sim_host_memory_mb", names: []string{"--sim-host-memory-mb"}, kind: kInt},
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
		"  --sim-engine sglang|vllm the interface spoken (default sglang)\n" +
		"  --sim-host-memory-mb N   host memory the server holds from startup on, in MiB (default 0): the host-side\n" +
		"                           buffers a real server keeps (a weight copy while loading, a host KV cache);\n" +
		"                           under a memory limit below it the kernel's OOM killer ends the server\n"
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

// Package sim is the simulator's model: profiles, memory model, performance
// model and fault rules. Only the simulator and its tools import it:
// cmd/sglang-sim, cmd/calibrate, and cmd/bench-search through sim/virtual.
//
// Main runs a simulated SGLang server from SGLang's own argv (parsed as
// argparse does, abbreviations included) plus --sim-profile NAME|FILE,
// --sim-speedup X (every simulated duration is divided by X),
// --sim-overhead-ms (wall-clock HTTP overhead taken out of the simulated
// front-end latency, default 1.5) and --sim-gather-ms (wall-clock window in
// which arrivals count as simultaneous, default 2). With --sim-engine vllm it
// speaks vLLM instead (sim/vllm.go, docs/engines/vllm.md): `vllm serve`'s
// argv, vLLM's startup lines, /health, vllm:* metrics and KV blocks.
//
// A profile is YAML data (testdata/profiles, embedded from sim/profiles):
//
//	name, description
//	model:       architecture, context_len, hybrid, quantization, eos_token_id, reasoning_pct
//	hardware:    gpu_name, gpus, gpu_mem_gb
//	memory:      KV tokens = (mem_fraction*gpu_mem_gb - weights_gb/tp - overhead_gb)
//	             * kv_tokens_per_gb * tp/reference_tp - slots*slot_kv_tokens
//	             - speculative costs + ep_kv_tokens_delta, times kv_dtype_factor;
//	             default_mem_fraction, oom_mem_fraction, oom_headroom {base_gb,
//	             chunk_mb_per_token, graph_mb_per_bs} (startup OOM when 1 - mem_fraction
//	             leaves less), default_chunked_prefill_size,
//	             startup durations (weight_load_s, startup_other_s, graph_capture_s)
//	state_pool:  slot_kv_tokens, full_memory_ratio, auto_reserve_tokens,
//	             ratios {radix_off, no_buffer, extra_buffer_overlap,
//	             extra_buffer_no_overlap, extra_buffer_lazy_overlap}, slot_state_gb,
//	             admit_batch_ms, admit_ms, admit_pressure_exp (radix on:
//	             scheduler time per prefill batch and per admitted request,
//	             times ((running*ratio + cached states) /
//	             slots)^exp, less the running step the overlap scheduler
//	             hides it behind)
//	speculative: fixed_kv_tokens, intermediate_kv_tokens (per request per draft
//	             token), defaults (steps, topk, draft tokens, max running),
//	             accept_alpha (per-draft-token acceptance), draft_step_cost
//	             (table by batch), prefill_factor
//	performance: decode_step_ms (table by batch, EP == TP), ep_partial_factor,
//	             tp_exponent, kv_ms_per_mtoken, kv_parallel_batch (KV term =
//	             kv_ms_per_mtoken * tokens / min(batch, kv_parallel_batch)),
//	             no_cuda_graph_step_ms, no_overlap_step_ms (table by batch: CPU
//	             time per step without the overlap scheduler),
//	             queue_overhead_ms, frontend_ms, prefill_base_ms,
//	             prefill_per_req_ms, prefill_per_req_ep_partial_factor,
//	             prefill_tok_per_s, prefill_quad_s_per_mtok2, cached_token_us,
//	             cold_prefill_s, cold_decode_s, no_cuda_graph_cold_scale,
//	             eos_per_token
//	faults:      - name; when: {fact: value | {eq|ne|lt|le|gt|ge|in: v}};
//	               effect: {kind: startup_crash|startup_oom|crash_after_requests|
//	               crash_when_running_over|hang_when_running_over|corrupt,
//	               n, json_frac, tool_frac, message}
//
// --dp-size N without DP attention runs N replicas, each with its own KV
// pool, running cap and prefix cache; requests go to them round robin and
// they step side by side (Engine.planReplicas). Running-request fault
// thresholds count one replica's requests.
//
// A request's simulated start is when it reached the server: the
// simulator's own parsing of a large body overlaps the simulated front-end
// latency (and an idle engine's prefill) instead of adding to it times the
// speed-up.
//
// Tables are piecewise-linear [[x, y], ...]. Facts for fault predicates are
// listed in Plan.Facts.
//
// Virtual runs the same server in virtual time: request handling
// (Server.prepare) and the scheduler (Engine.decide, the step shared with
// the wall-clock loop Engine.Run) driven by a closed loop of clients on the
// engine's own clock, with no sleeping and no HTTP. Package sim/virtual
// wraps it for sgtune's trials.
package sim

package sim

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// DefaultProfile is used when --sim-profile is not given.
const DefaultProfile = "glm-5.3-flash-h200x4"

// profilesFS holds the bundled profiles. It is a copy of testdata/profiles
// (go:embed cannot reach outside the package); a test keeps the two equal.
//
//go:embed profiles/*.yaml
var profilesFS embed.FS

// Table is a piecewise-linear function given as [[x, y], ...] sorted by x;
// outside the range it extends the first/last segment's value flat.
type Table [][2]float64

// At interpolates the table at x.
func (t Table) At(x float64) float64 {
	if len(t) == 0 {
		return 0
	}
	if x <= t[0][0] {
		return t[0][1]
	}
	for i := 1; i < len(t); i++ {
		if x <= t[i][0] {
			x0, y0, x1, y1 := t[i-1][0], t[i-1][1], t[i][0], t[i][1]
			return y0 + (y1-y0)*(x-x0)/(x1-x0)
		}
	}
	return t[len(t)-1][1]
}

// Profile is one simulated model on one machine: data, never code.
type Profile struct {
	Name        string       `yaml:"name"`
	Description string       `yaml:"description"`
	Model       ModelSpec    `yaml:"model"`
	Hardware    HardwareSpec `yaml:"hardware"`
	Memory      MemorySpec   `yaml:"memory"`
	StatePool   StatePool    `yaml:"state_pool"`
	Spec        SpecDecode   `yaml:"speculative"`
	Perf        PerfSpec     `yaml:"performance"`
	Faults      []FaultRule  `yaml:"faults"`
}

// ModelSpec describes the served model.
type ModelSpec struct {
	Architecture string `yaml:"architecture"`  // printed in the load-weight line
	ContextLen   int    `yaml:"context_len"`   // native context length
	Hybrid       bool   `yaml:"hybrid"`        // has a linear-attention state pool
	Quantization string `yaml:"quantization"`  // printed in the load-weight line
	EOSTokenID   int    `yaml:"eos_token_id"`  // matched_stop on EOS
	ReasoningPct int    `yaml:"reasoning_pct"` // % of tokens emitted as reasoning with --reasoning-parser
}

// HardwareSpec describes the GPUs.
type HardwareSpec struct {
	GPUName  string  `yaml:"gpu_name"`
	GPUs     int     `yaml:"gpus"`
	GPUMemGB float64 `yaml:"gpu_mem_gb"` // per GPU, as torch reports it
}

// MemorySpec is the KV-cache arithmetic. KV tokens are
//
//	(mem_fraction*gpu_mem_gb - weights_gb/tp - overhead_gb) * kv_tokens_per_gb * (tp/reference_tp) * dtype_factor
//	- state_slots*slot_kv_tokens - speculative costs + ep delta
type MemorySpec struct {
	WeightsGB          float64            `yaml:"weights_gb"`  // all weights, split over TP ranks
	OverheadGB         float64            `yaml:"overhead_gb"` // per GPU, outside the pools
	KVTokensPerGB      float64            `yaml:"kv_tokens_per_gb"`
	ReferenceTP        int                `yaml:"reference_tp"`
	DtypeFactor        map[string]float64 `yaml:"kv_dtype_factor"` // relative to bf16
	EPKVTokensDelta    float64            `yaml:"ep_kv_tokens_delta"`
	DefaultMemFraction float64            `yaml:"default_mem_fraction"`
	OOMMemFraction     float64            `yaml:"oom_mem_fraction"` // at or above: OOM during graph capture
	DefaultChunked     int                `yaml:"default_chunked_prefill_size"`
	DefaultGraphMaxBS  int                `yaml:"default_cuda_graph_max_bs"`
	// OOMHeadroom, when its base is set, is the GPU memory a launch needs
	// outside the static pools: a memory fraction leaving less fails
	// with an out-of-memory error at startup, so the fraction's safe edge
	// moves with the chunk size and the CUDA graphs.
	OOMHeadroom   OOMHeadroom `yaml:"oom_headroom"`
	WeightLoadS   float64     `yaml:"weight_load_s"` // simulated seconds
	StartupOtherS float64     `yaml:"startup_other_s"`
	GraphCaptureS float64     `yaml:"graph_capture_s"`
}

// OOMHeadroom is the memory outside the static pools (weights, KV cache,
// state pool) that a launch needs per GPU: activations of a prefill chunk
// and the CUDA graphs' buffers. SGLang's own default for
// --mem-fraction-static reserves the same terms: 512 MB + max(chunked,
// 2048) x 1.5 MB + TP x PP / 8 x 1 GB + the graphs' reserve
// (sglang.md §1 Auto-adjustments). A launch OOMs when
//
//	(1 - mem_fraction) * gpu_mem_gb < base_gb
//	    + max(chunked_prefill_size, 2048) * chunk_mb_per_token / 1024
//	    + cuda_graph_max_bs * graph_mb_per_bs / 1024   (CUDA graphs on)
type OOMHeadroom struct {
	BaseGB          float64 `yaml:"base_gb"`
	ChunkMBPerToken float64 `yaml:"chunk_mb_per_token"`
	GraphMBPerBS    float64 `yaml:"graph_mb_per_bs"`
}

// StatePool is the hybrid linear-attention state pool rules.
type StatePool struct {
	SlotKVTokens      float64        `yaml:"slot_kv_tokens"` // KV tokens one state slot displaces
	FullMemoryRatio   float64        `yaml:"full_memory_ratio"`
	AutoReserveTokens float64        `yaml:"auto_reserve_tokens"` // held back before the auto split
	Ratios            map[string]int `yaml:"ratios"`              // radix_off, no_buffer, extra_buffer_overlap, extra_buffer_no_overlap, extra_buffer_lazy_overlap
	SlotStateGB       float64        `yaml:"slot_state_gb"`       // for the Mamba log line (conv+ssm per slot)
	// AdmitMS is the scheduler's work per admitted request with the radix
	// cache on (evicting cached states from the tree, copying states for
	// the extra buffer) when the pool is full: it is scaled by the pool
	// pressure (slots held by running requests and cached states) /
	// slots. It is CPU work: with the overlap scheduler it hides behind a
	// running batch's decode step and only the excess delays the prefill.
	AdmitMS float64 `yaml:"admit_ms"`
	// AdmitBatchMS is the same work per prefill batch (one eviction pass
	// over the tree for the whole batch), scaled the same way.
	AdmitBatchMS float64 `yaml:"admit_batch_ms"`
	// AdmitPressureExp shapes the pressure: admit_ms * pressure^exp (0:
	// 1, linear). Eviction work rises steeply as the pool fills: the walk
	// over the tree skips states pinned by running requests.
	AdmitPressureExp float64 `yaml:"admit_pressure_exp"`
}

// SpecDecode is speculative decoding: memory cost and speed.
type SpecDecode struct {
	FixedKVTokens      float64 `yaml:"fixed_kv_tokens"`        // draft model and buffers
	IntermediatePerReq float64 `yaml:"intermediate_kv_tokens"` // per request per draft token
	DefaultSteps       int     `yaml:"default_steps"`
	DefaultTopK        int     `yaml:"default_topk"`
	DefaultDraftTokens int     `yaml:"default_draft_tokens"`
	DefaultMaxRunning  int     `yaml:"default_max_running_requests"`
	AcceptAlpha        float64 `yaml:"accept_alpha"`    // per-draft-token acceptance probability
	DraftStepCost      Table   `yaml:"draft_step_cost"` // extra step time per draft step, fraction of the base step, by batch
	PrefillFactor      float64 `yaml:"prefill_factor"`  // prefill time multiplier (draft model prefill)
}

// PerfSpec is the performance model (simulated milliseconds unless named _s).
type PerfSpec struct {
	DecodeStepMS    Table   `yaml:"decode_step_ms"`    // by running batch, EP == TP
	EPPartialFactor Table   `yaml:"ep_partial_factor"` // step multiplier when EP < TP, by batch
	TPExponent      float64 `yaml:"tp_exponent"`       // step *= (reference_tp/tp)^exp
	KVMSPerMToken   float64 `yaml:"kv_ms_per_mtoken"`  // step grows with KV tokens in the batch
	// KVParallelBatch is how many requests' KV reads overlap in one decode
	// step: the KV term is kv_ms_per_mtoken * tokens / min(batch, this).
	// Small batches are latency-bound (each request's attention and
	// sparse-attention indexer run on their own SMs), so the step follows
	// the per-request context rather than the sum. 0 or 1: linear in the
	// batch's tokens.
	KVParallelBatch int     `yaml:"kv_parallel_batch"`
	NoGraphStepMS   float64 `yaml:"no_cuda_graph_step_ms"`
	// NoOverlapStepMS is the scheduler's CPU work per step (batch
	// scheduling, radix-cache operations, processing the last step's
	// outputs), by running batch, that the overlap scheduler runs while
	// the GPU computes the next step: with --disable-overlap-schedule
	// every decode and prefill step pays it. SGLang v0.4's overlap
	// ("zero-overhead batch scheduler") is worth 1.1x throughput and an
	// unoptimised engine "can spend as much as half of its time on CPU
	// overhead" (https://lmsys.org/blog/2024-12-04-sglang-v0-4/). Empty:
	// the overlap scheduler changes no step time.
	NoOverlapStepMS Table   `yaml:"no_overlap_step_ms"`
	QueueOverheadMS float64 `yaml:"queue_overhead_ms"` // per step while requests wait (x EP factor)
	FrontendMS      float64 `yaml:"frontend_ms"`       // tokenizer/HTTP latency, does not block the GPU
	PrefillBaseMS   float64 `yaml:"prefill_base_ms"`
	PrefillPerReqMS float64 `yaml:"prefill_per_req_ms"`
	// PrefillPerReqEPPartial multiplies prefill_per_req_ms when EP < TP
	// (no all-to-all in prefill).
	PrefillPerReqEPPartial float64 `yaml:"prefill_per_req_ep_partial_factor"`
	PrefillTokPerS         float64 `yaml:"prefill_tok_per_s"`
	PrefillQuadS           float64 `yaml:"prefill_quad_s_per_mtok2"` // attention term per request: s per (Mtokens)^2
	CachedTokenUS          float64 `yaml:"cached_token_us"`
	ColdPrefillS           float64 `yaml:"cold_prefill_s"` // first prefill of a new batch shape
	ColdDecodeS            float64 `yaml:"cold_decode_s"`  // first decode of a new batch shape
	NoGraphColdScale       float64 `yaml:"no_cuda_graph_cold_scale"`
	EOSPerToken            float64 `yaml:"eos_per_token"` // chance a request stops at each token without ignore_eos
}

// FaultRule is a predicate over flags and load with an effect.
type FaultRule struct {
	Name string `yaml:"name"`
	// When maps a fact name (tp_size, ep_size, disable_radix_cache,
	// disable_cuda_graph, disable_overlap_schedule, state_slots,
	// mem_fraction_static, speculative_algorithm, speculative_num_steps,
	// enable_dp_attention, chunked_prefill_size, cuda_graph_max_bs,
	// max_running_requests; see Plan.Facts) to a condition: a scalar for
	// equality, or a map of eq/ne/lt/le/gt/ge/in. The running-request
	// effects count the requests of one DP replica.
	When   map[string]any `yaml:"when"`
	Effect FaultEffect    `yaml:"effect"`
}

// FaultEffect is what a matching rule does.
type FaultEffect struct {
	// Kind: startup_crash | startup_oom | crash_after_requests |
	// crash_when_running_over | hang_when_running_over | corrupt.
	Kind     string  `yaml:"kind"`
	N        int     `yaml:"n"`         // requests / running threshold
	JSONFrac float64 `yaml:"json_frac"` // corrupt: fraction of structured outputs broken
	ToolFrac float64 `yaml:"tool_frac"` // corrupt: fraction of tool calls broken
	DelayS   float64 `yaml:"delay_s"`   // simulated delay before the effect
	Message  string  `yaml:"message"`   // exception line; default: CUDA illegal memory access
}

// ProfileNames lists the bundled profiles.
func ProfileNames() []string {
	ents, _ := profilesFS.ReadDir("profiles")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// LoadProfile loads a bundled profile by name, or a YAML file by path.
func LoadProfile(nameOrFile string) (*Profile, error) {
	if nameOrFile == "" {
		nameOrFile = DefaultProfile
	}
	var data []byte
	var err error
	if strings.ContainsAny(nameOrFile, "/\\") || strings.HasSuffix(nameOrFile, ".yaml") || strings.HasSuffix(nameOrFile, ".yml") {
		data, err = os.ReadFile(nameOrFile)
	} else {
		data, err = profilesFS.ReadFile("profiles/" + nameOrFile + ".yaml")
		if err != nil {
			err = fmt.Errorf("unknown profile %q (bundled: %s)", nameOrFile, strings.Join(ProfileNames(), ", "))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sim profile: %w", err)
	}
	return ParseProfile(data)
}

// ParseProfile decodes a profile strictly (unknown fields are errors).
func ParseProfile(data []byte) (*Profile, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var p Profile
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("sim profile: %w", err)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("sim profile %s: %w", p.Name, err)
	}
	return &p, nil
}

func (p *Profile) validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("name is required")
	case p.Hardware.GPUs <= 0 || p.Hardware.GPUMemGB <= 0:
		return fmt.Errorf("hardware.gpus and gpu_mem_gb must be positive")
	case p.Memory.KVTokensPerGB <= 0 || p.Memory.ReferenceTP <= 0:
		return fmt.Errorf("memory.kv_tokens_per_gb and reference_tp must be positive")
	case len(p.Perf.DecodeStepMS) == 0:
		return fmt.Errorf("performance.decode_step_ms is required")
	case p.Model.ContextLen <= 0:
		return fmt.Errorf("model.context_len must be positive")
	}
	for _, t := range []Table{p.Perf.DecodeStepMS, p.Perf.EPPartialFactor, p.Spec.DraftStepCost, p.Perf.NoOverlapStepMS} {
		for i := 1; i < len(t); i++ {
			if t[i][0] <= t[i-1][0] {
				return fmt.Errorf("table x values must increase: %v", t)
			}
		}
	}
	for _, f := range p.Faults {
		switch f.Effect.Kind {
		case "startup_crash", "startup_oom", "crash_after_requests", "crash_when_running_over", "hang_when_running_over", "corrupt":
		default:
			return fmt.Errorf("fault %s: unknown effect kind %q", f.Name, f.Effect.Kind)
		}
	}
	return nil
}

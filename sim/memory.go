package sim

import (
	"fmt"
	"math"
	"strings"
)

// StartupError is a fatal error the simulated engine hits while starting.
type StartupError struct {
	Kind  string // oom | memory | state_pool | fault | invalid
	Lines []string
}

func (e *StartupError) Error() string { return e.Kind + ": " + strings.Join(e.Lines, " | ") }

// Plan is a launch resolved against a profile: what SGLang would compute at
// startup (pools, caps, defaults) before serving.
type Plan struct {
	TP, EP, DP, PP int
	// DPAttention is --enable-dp-attention with DP > 1: the DP workers
	// shard attention inside one TP group. Without it, DP > 1 launches
	// Replicas data-parallel copies of the TP group.
	DPAttention bool
	// Replicas is how many data-parallel copies of the model serve
	// (--dp-size without DP attention; 1 otherwise). Each has its own KV
	// cache of KVTokens, running cap EffectiveMRR and prefix cache; the
	// engine dispatches requests to them round robin.
	Replicas            int
	MemFraction         float64
	ContextLen          int
	ChunkedPrefill      int
	MaxPrefillTokens    int
	RequestedMRR        int // 0 when unset
	EffectiveMRR        int // per DP worker, after caps
	StateSlots          int // max_mamba_cache_size per DP worker
	Ratio               int
	Strategy            string
	Radix               bool
	Overlap             bool
	CUDAGraph           bool
	GraphMaxBS          int
	GraphBS             []int
	SpecAlgorithm       string // "" when off
	SpecSteps           int
	SpecTopK            int
	SpecDraftTokens     int
	KVTokens            int
	KVDtype             string
	RestTokens          float64 // KV tokens before pools, bf16 units
	restGB              float64 // GB per GPU before pools (for the state-pool error)
	AvailGPUMemGB       float64
	Warnings            []string // log lines printed during startup
	ReductionWarning    string   // the max_running_requests reduction line, if any
	ServedModelName     string
	ModelPath           string
	Host                string
	Port                int
	APIKey              string
	ReasoningParser     string
	ToolCallParser      string
	EnableMetrics       bool
	EnableCacheReport   bool
	DefaultIncludeUsage bool
	Err                 *StartupError // fatal, raised during startup
	// Dialect is the interface the server speaks: "" (SGLang) or
	// EngineVLLM. The vLLM fields below are set for EngineVLLM only.
	Dialect             string
	BlockSize           int // tokens per KV cache block
	NumBlocks           int // KV cache blocks per engine
	MaxNumBatchedTokens int
	MaxNumSeqs          int
}

var specAlgorithms = map[string]bool{"EAGLE": true, "EAGLE3": true, "NEXTN": true, "STANDALONE": true, "NGRAM": true, "DFLASH": true, "DSPARK": true}

// Resolve computes the plan SGLang would reach at startup. A fatal startup
// error ends the plan early with Err set; an out-of-memory fraction sets Err
// but the plan goes on (SGLang runs out of memory later, at graph capture),
// unless a fatal error of a later step replaces it.
func Resolve(a *Args, p *Profile) *Plan {
	if a.VLLM != nil {
		return resolveVLLM(a, p)
	}
	pl := newPlan(a, p)
	for _, step := range []func(*Args, *Profile) *StartupError{
		pl.parallel, pl.speculative, pl.mambaStrategy, pl.restMemory, pl.pools, pl.maxRunning,
	} {
		if err := step(a, p); err != nil {
			pl.Err = err
			return pl
		}
	}
	pl.GraphBS = graphBatchSizes(pl.SpecAlgorithm != "", pl.GraphMaxBS, pl.EffectiveMRR, a)
	return pl
}

// newPlan reads the flags and the profile's defaults.
func newPlan(a *Args, p *Profile) *Plan {
	pl := &Plan{
		TP:                  max(1, a.Int("tp_size", 1)),
		EP:                  max(1, a.Int("ep_size", 1)),
		DP:                  max(1, a.Int("dp_size", 1)),
		PP:                  max(1, a.Int("pp_size", 1)),
		MemFraction:         a.Float("mem_fraction_static", p.Memory.DefaultMemFraction),
		ContextLen:          a.Int("context_length", p.Model.ContextLen),
		MaxPrefillTokens:    a.Int("max_prefill_tokens", 16384),
		RequestedMRR:        a.Int("max_running_requests", 0),
		Radix:               !a.Bool("disable_radix_cache"),
		Overlap:             !a.Bool("disable_overlap_schedule"),
		CUDAGraph:           !a.Bool("disable_cuda_graph") && a.String("cuda_graph_backend_decode", "full") != "disabled",
		KVDtype:             a.String("kv_cache_dtype", "auto"),
		ModelPath:           a.String("model_path", ""),
		Host:                a.String("host", "127.0.0.1"),
		Port:                a.Int("port", 30000),
		APIKey:              a.String("api_key", ""),
		ReasoningParser:     a.String("reasoning_parser", ""),
		ToolCallParser:      a.String("tool_call_parser", ""),
		EnableMetrics:       a.Bool("enable_metrics"),
		EnableCacheReport:   a.Bool("enable_cache_report"),
		DefaultIncludeUsage: a.Bool("stream_response_default_include_usage"),
	}
	pl.ServedModelName = a.String("served_model_name", pl.ModelPath)
	pl.ChunkedPrefill = a.Int("chunked_prefill_size", p.Memory.DefaultChunked)
	if pl.ChunkedPrefill == 0 {
		pl.ChunkedPrefill = 8192
	}
	pl.GraphMaxBS = a.Int("cuda_graph_max_bs_decode", p.Memory.DefaultGraphMaxBS)
	if pl.GraphMaxBS == 0 {
		pl.GraphMaxBS = 256
		if pl.TP >= 4 {
			pl.GraphMaxBS = 512
		}
	}
	return pl
}

// parallel applies DP attention (chunked prefill split across DP workers)
// and an all-to-all MoE backend (expert parallelism equal to TP).
//
// Without DP attention, --dp-size N runs N replicas of the TP group, each
// with its own scheduler, memory pools and radix cache, and requests
// scattered over them (docs.sglang.io, advanced_features/dp_dpa_smg_guide:
// "Each replica has a full copy of the model ... No inter-replica
// communication"; the load balancer's default dispatch is round robin).
func (pl *Plan) parallel(a *Args, _ *Profile) *StartupError {
	pl.DPAttention = a.Bool("enable_dp_attention") && pl.DP > 1
	pl.Replicas = 1
	if !pl.DPAttention {
		pl.Replicas = pl.DP
	}
	if pl.DPAttention {
		if pl.TP%pl.DP != 0 {
			return &StartupError{Kind: "invalid", Lines: []string{"AssertionError: tp_size must be divisible by dp_size when dp attention is enabled"}}
		}
		if pl.ChunkedPrefill > 0 {
			old := pl.ChunkedPrefill
			pl.ChunkedPrefill /= pl.DP
			pl.Warnings = append(pl.Warnings, fmt.Sprintf("DP attention is enabled. chunked prefill size is adjusted from %d to %d.", old, pl.ChunkedPrefill))
		}
	}
	if b := a.String("moe_a2a_backend", "none"); b != "none" && pl.EP != pl.TP {
		pl.EP = pl.TP
		pl.Warnings = append(pl.Warnings, fmt.Sprintf("%s MoE is enabled. The expert parallel size is adjusted to be the same as the tensor parallel size[%d].", a2aName(b), pl.TP))
	}
	return nil
}

// speculative applies the speculative decoding defaults
// (speculative_hook.py): algorithm, running-requests reset, steps, top-k
// and draft tokens.
func (pl *Plan) speculative(a *Args, p *Profile) *StartupError {
	alg := a.String("speculative_algorithm", "")
	if alg == "" {
		return nil
	}
	if alg == "NEXTN" {
		alg = "EAGLE"
	}
	pl.SpecAlgorithm = alg
	if !specAlgorithms[alg] {
		return &StartupError{Kind: "invalid", Lines: []string{fmt.Sprintf("ValueError: Unknown speculative algorithm: %s", alg)}}
	}
	if pl.RequestedMRR == 0 {
		pl.RequestedMRR = p.Spec.DefaultMaxRunning
		if pl.RequestedMRR == 0 {
			pl.RequestedMRR = 48
		}
		pl.Warnings = append(pl.Warnings, fmt.Sprintf("Max running requests is reset to %d for speculative decoding. You can override this by explicitly setting --max-running-requests.", pl.RequestedMRR))
	}
	pl.SpecSteps = a.Int("speculative_num_steps", 0)
	pl.SpecTopK = a.Int("speculative_eagle_topk", 0)
	pl.SpecDraftTokens = a.Int("speculative_num_draft_tokens", 0)
	if pl.SpecSteps == 0 {
		pl.SpecSteps, pl.SpecTopK, pl.SpecDraftTokens = orInt(p.Spec.DefaultSteps, 3), orInt(p.Spec.DefaultTopK, 1), orInt(p.Spec.DefaultDraftTokens, 4)
	}
	if pl.SpecTopK == 0 {
		pl.SpecTopK = 1
	}
	if pl.SpecTopK == 1 && pl.SpecDraftTokens != pl.SpecSteps+1 {
		if a.Has("speculative_num_draft_tokens") {
			pl.Warnings = append(pl.Warnings, "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1")
		}
		pl.SpecDraftTokens = pl.SpecSteps + 1
	}
	pl.Warnings = append(pl.Warnings, "Mixed chunked prefill is disabled because of using eagle speculative decoding.")
	if !pl.Overlap {
		pl.Warnings = append(pl.Warnings, "Non-overlap (synchronous) spec v2 is used. This may be slower than the overlap scheduler.")
	}
	return nil
}

// mambaStrategy resolves the Mamba radix-cache strategy and the ratio of
// state slots to running requests.
func (pl *Plan) mambaStrategy(a *Args, p *Profile) *StartupError {
	pl.Strategy = a.String("mamba_radix_cache_strategy", "auto")
	if pl.Strategy == "auto" {
		if pl.Overlap || a.Int("page_size", 1) > 1 {
			pl.Strategy = "extra_buffer"
		} else {
			pl.Strategy = "no_buffer"
		}
	}
	if pl.Strategy == "extra_buffer_lazy" && pl.SpecAlgorithm != "" {
		return &StartupError{Kind: "invalid", Lines: []string{"AssertionError: extra_buffer_lazy unsupported with spec."}}
	}
	if strings.HasPrefix(pl.Strategy, "extra_buffer") && pl.SpecAlgorithm != "" && a.Int("mamba_track_interval", 256) < pl.SpecDraftTokens {
		return &StartupError{Kind: "invalid", Lines: []string{"AssertionError: mamba_track_interval must be >= speculative_num_draft_tokens"}}
	}
	pl.Ratio = ratioFor(p, pl.Radix, pl.Strategy, pl.Overlap)
	return nil
}

// restMemory computes the memory left for the KV cache and state pools
// after the weights. A memory fraction at or above the profile's OOM
// threshold records an oom error without ending the plan.
func (pl *Plan) restMemory(_ *Args, p *Profile) *StartupError {
	m := p.Memory
	gpuMem := p.Hardware.GPUMemGB
	if pl.MemFraction >= m.OOMMemFraction && m.OOMMemFraction > 0 {
		// What the static pools take beyond the edge is missing, and a
		// little more: the edge itself fails.
		pl.Err = allocFailed(gpuMem, pl.MemFraction, (pl.MemFraction-m.OOMMemFraction)*gpuMem+0.05, gpuMem*(1-pl.MemFraction)*0.3)
	}
	if h := m.OOMHeadroom; h.BaseGB > 0 && pl.Err == nil {
		need := h.BaseGB + float64(max(pl.ChunkedPrefill, 2048))*h.ChunkMBPerToken/1024
		if pl.CUDAGraph {
			need += float64(pl.GraphMaxBS) * h.GraphMBPerBS / 1024
		}
		if left := (1 - pl.MemFraction) * gpuMem; left < need {
			pl.Err = allocFailed(gpuMem, pl.MemFraction, need-left, min(left, 0.5)*0.2)
		}
	}
	tpScale := float64(pl.TP) / float64(m.ReferenceTP)
	pl.restGB = pl.MemFraction*gpuMem - m.WeightsGB/float64(pl.TP*pl.PP) - m.OverheadGB
	pl.RestTokens = pl.restGB * m.KVTokensPerGB * tpScale
	pl.AvailGPUMemGB = gpuMem * (1 - pl.MemFraction) * 0.93
	if pl.RestTokens <= 0 {
		return notEnoughMemory(pl.MemFraction)
	}
	return nil
}

// allocFailed is PyTorch's out-of-memory error for an allocation short
// GiB larger than the free GiB left beside pools holding fraction of a
// gpuMem GiB GPU: tried - free is what was missing, as on a real GPU.
func allocFailed(gpuMem, fraction, short, free float64) *StartupError {
	return &StartupError{Kind: "oom", Lines: []string{
		fmt.Sprintf("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of %.2f GiB of which %.2f GiB is free. Including non-PyTorch memory, this process has %.2f GiB memory in use. Of the allocated memory %.2f GiB is allocated by PyTorch, and %.2f GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
			short+free, gpuMem, free, gpuMem-free, gpuMem*fraction-0.4, 0.37)}}
}

// notEnoughMemory is SGLang's error when the KV cache gets no memory.
func notEnoughMemory(memFraction float64) *StartupError {
	return &StartupError{Kind: "memory", Lines: []string{fmt.Sprintf("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=%v", memFraction)}}
}

// pools splits the rest memory into the state pool (hybrid models) and
// the KV cache.
func (pl *Plan) pools(a *Args, p *Profile) *StartupError {
	inter, err := pl.statePool(a, p)
	if err != nil {
		return err
	}
	return pl.kvCache(a, p, inter)
}

// statePool sizes the state (Mamba) pool of a hybrid model: the flag, the
// running cap with radix off, else SGLang's automatic split of the rest
// memory. It returns the KV tokens the speculative intermediate caches take.
func (pl *Plan) statePool(a *Args, p *Profile) (inter float64, err *StartupError) {
	if !p.Model.Hybrid {
		return 0, nil
	}
	sp := p.StatePool
	D := float64(pl.SpecDraftTokens)
	switch {
	case a.Has("max_mamba_cache_size"):
		pl.StateSlots = a.Int("max_mamba_cache_size", 0) / pl.attnDP()
	case !pl.Radix && pl.RequestedMRR > 0:
		pl.StateSlots = pl.RequestedMRR / pl.attnDP()
	default:
		r := a.Float("mamba_full_memory_ratio", orF(sp.FullMemoryRatio, 0.9))
		budget := (pl.RestTokens - sp.AutoReserveTokens) * r / (1 + r)
		per := sp.SlotKVTokens
		if pl.SpecAlgorithm != "" {
			per += D * p.Spec.IntermediatePerReq / float64(pl.Ratio)
		}
		pl.StateSlots = int(math.Floor(budget / per))
		if pl.StateSlots <= 0 {
			return 0, &StartupError{Kind: "state_pool", Lines: []string{fmt.Sprintf("RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed max_mamba_cache_size=%d (total_rest_memory=%.2f GB, mamba_cache_per_req=%.2f MB). Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or (4) use GPUs with more memory.", pl.StateSlots, pl.restGB, sp.SlotStateGB*1024)}}
		}
		if pl.SpecAlgorithm != "" {
			inter = float64(pl.StateSlots) * D / float64(pl.Ratio) * p.Spec.IntermediatePerReq
		}
	}
	if pl.SpecAlgorithm != "" && inter == 0 {
		mrr := pl.RequestedMRR / pl.attnDP()
		inter = p.Spec.IntermediatePerReq * float64(min(mrr, pl.StateSlots/max(1, pl.Ratio))) * D
	}
	return inter, nil
}

// kvCache sizes the KV cache from what the state pool and the speculative
// caches (inter tokens) left, in the cache's dtype, capped by
// --max-total-tokens.
func (pl *Plan) kvCache(a *Args, p *Profile, inter float64) *StartupError {
	m := p.Memory
	kv := pl.RestTokens - float64(pl.StateSlots)*p.StatePool.SlotKVTokens - inter
	if pl.SpecAlgorithm != "" {
		kv -= p.Spec.FixedKVTokens
	}
	if pl.EP > 1 {
		kv += m.EPKVTokensDelta
	}
	f := 1.0
	if v, ok := m.DtypeFactor[pl.KVDtype]; ok {
		f = v
	}
	kv *= f
	if kv <= 0 {
		return notEnoughMemory(pl.MemFraction)
	}
	pl.KVTokens = int(kv)
	if mt := a.Int("max_total_tokens", 0); mt > 0 {
		if mt > pl.KVTokens {
			pl.Warnings = append(pl.Warnings, fmt.Sprintf("max_total_tokens=%d is larger than the profiled value %d. Use the profiled value instead.", mt, pl.KVTokens))
		} else {
			pl.KVTokens = mt
		}
	}
	return nil
}

// maxRunning is SGLang's resolve_max_num_reqs: the effective running cap
// per DP worker from the request, the KV cache and the state pool, with the
// reduction warning when it is below the request.
func (pl *Plan) maxRunning(_ *Args, p *Profile) *StartupError {
	estimated := max(min(int(float64(pl.KVTokens)/float64(pl.ContextLen)*512), 4096), 2048)
	var mnr, requested int
	if pl.RequestedMRR > 0 {
		requested = pl.RequestedMRR / pl.attnDP()
		mnr = min(requested, pl.KVTokens/2)
	} else {
		mnr = min(estimated, pl.KVTokens/2)
	}
	if p.Model.Hybrid {
		mnr = min(mnr, pl.StateSlots/max(1, pl.Ratio))
		if mnr <= 0 {
			return &StartupError{Kind: "state_pool", Lines: []string{fmt.Sprintf("RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. max_mamba_cache_size=%d, mamba_ratio=%d, resulting max_num_reqs=%d. Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with more memory.", pl.StateSlots, pl.Ratio, mnr)}}
		}
	}
	if requested > 0 && mnr < requested {
		pl.ReductionWarning = fmt.Sprintf("max_running_requests was reduced from the requested %d to %d (per dp worker) due to the available KV cache capacity.", requested, mnr)
	}
	pl.EffectiveMRR = mnr
	return nil
}

// attnDP is SGLang's attn_dp_size: the DP workers that split a replica's
// requests and pools (DP with DP attention, else 1; sglang.md §2 Capping:
// requested_per_worker = max_running_requests // attn_dp_size).
func (pl *Plan) attnDP() int {
	if pl.DPAttention {
		return pl.DP
	}
	return 1
}

// replicas is Replicas, at least 1 (a vLLM plan leaves it unset).
func (pl *Plan) replicas() int { return max(1, pl.Replicas) }

func a2aName(b string) string {
	switch b {
	case "deepep":
		return "DeepEP"
	case "mooncake":
		return "Mooncake"
	}
	return b
}

func ratioFor(p *Profile, radix bool, strategy string, overlap bool) int {
	key := "radix_off"
	switch {
	case !radix:
	case strategy == "no_buffer":
		key = "no_buffer"
	case strategy == "extra_buffer" && overlap:
		key = "extra_buffer_overlap"
	case strategy == "extra_buffer_lazy" && overlap:
		key = "extra_buffer_lazy_overlap"
	default:
		key = "extra_buffer_no_overlap"
	}
	if r, ok := p.StatePool.Ratios[key]; ok && r > 0 {
		return r
	}
	return map[string]int{"radix_off": 1, "no_buffer": 3, "extra_buffer_overlap": 5, "extra_buffer_lazy_overlap": 4, "extra_buffer_no_overlap": 4}[key]
}

// graphBatchSizes returns SGLang's decode capture sizes clamped to the
// effective max running requests.
func graphBatchSizes(spec bool, maxBS, mnr int, a *Args) []int {
	var bs []int
	if v, ok := a.Values["cuda_graph_bs_decode"].([]int); ok {
		bs = append(bs, v...)
	} else if spec {
		for i := 1; i <= 8; i++ {
			bs = append(bs, i)
		}
		for i := 10; i <= 32; i += 2 {
			bs = append(bs, i)
		}
		for i := 40; i <= 64; i += 4 {
			bs = append(bs, i)
		}
		for i := 72; i <= 256; i += 8 {
			bs = append(bs, i)
		}
		for i := 272; i <= maxBS; i += 16 {
			bs = append(bs, i)
		}
	} else {
		bs = append(bs, 1, 2, 4, 8, 12)
		for i := 16; i <= 256; i += 8 {
			bs = append(bs, i)
		}
		for i := 272; i < 512; i += 16 {
			bs = append(bs, i)
		}
		for i := 512; i <= maxBS; i += 32 {
			bs = append(bs, i)
		}
	}
	var out []int
	for _, b := range bs {
		if b <= maxBS && b <= mnr {
			out = append(out, b)
		}
	}
	if len(out) == 0 || out[len(out)-1] < mnr && mnr <= maxBS {
		out = append(out, mnr)
	}
	return out
}

func orInt(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func orF(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

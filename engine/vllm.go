package engine

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// VLLM is vllm-project/vllm's OpenAI-compatible server (`vllm serve MODEL`).
// Its facts cite vLLM's source as docs/engines/vllm.md lists it ("src:
// FILE"); the flag schema is testdata/flags/vllm-v0.11.1.yaml.
var VLLM = &Engine{
	Name:           "vllm",
	Title:          "vLLM",
	DefaultVersion: "v0.11.1",
	// src: entrypoints/cli/serve.py: usage "vllm serve [model_tag] [options]";
	// a positional model_tag takes precedence over --model.
	Command:          []string{"vllm", "serve"},
	Image:            "vllm/vllm-openai:latest",
	ReleaseImage:     "vllm/vllm-openai:v%s",
	ImageCommand:     []string{"vllm", "serve"},
	UsesGPUs:         true,
	ModelFlag:        "--model",
	ModelPositional:  true,
	DockerEntrypoint: true,
	ServedNameFlag:   "--served-model-name",
	// src: config/cache.py: the KV cache gets what gpu_memory_utilization
	// leaves after weights and activations.
	MemoryFractionFlag: "--gpu-memory-utilization",
	APIKeyFlag:         "--api-key",
	HostFlag:           "--host",
	PortFlag:           "--port",
	// src: cli_args.py: tool calls are parsed with --tool-call-parser, and
	// "auto" tool choice also needs --enable-auto-tool-choice (a rule).
	ToolParserFlag: "--tool-call-parser",
	// src: entrypoints/openai/api_server.py: GET /health calls
	// engine_client.check_health(): 200, or 503 on EngineDeadError.
	HealthPath: "/health",
	// uvicorn's line once the app (built after the engine) started; the
	// parser also takes vLLM's own "Starting vLLM API server" line, which a
	// --uvicorn-log-level above info does not hide.
	ReadyLine: "Application startup complete.",
	// src: v1/metrics/loggers.py (PrometheusStatLogger): always served on
	// /metrics; prometheus_client exposes a Counter vllm:X as vllm:X_total.
	Metrics: Metrics{
		GenerationTokens: "vllm:generation_tokens_total",
		PromptTokens:     "vllm:prompt_tokens_total",
		Running:          "vllm:num_requests_running",
		Queued:           "vllm:num_requests_waiting",
	},
	// src: v1/core/kv_cache_utils.py _check_enough_kv_cache_memory: the
	// KV cache got too little of the utilization (its messages say to
	// increase gpu_memory_utilization).
	PoolTooSmall: []string{
		"No available memory for the cache blocks",
		"larger than the available KV cache memory",
	},
	Signatures: []Signature{
		{Class: ClassIllegalMemoryAccess, Rank: 3, Texts: []string{
			"an illegal memory access was encountered",
			"cudaErrorIllegalAddress",
		}},
		{Class: ClassOOM, Rank: 2, Texts: []string{
			"CUDA out of memory", // torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...
			"OutOfMemoryError",
			"CUDA error: out of memory",
			// src: v1/core/kv_cache_utils.py _check_enough_kv_cache_memory.
			"No available memory for the cache blocks",
			"larger than the available KV cache memory",
			// src: v1/worker/gpu_worker.py: free memory below the requested share.
			"is less than desired GPU memory utilization",
		}},
		// argparse: "usage: vllm serve [model_tag] [options]" then
		// "vllm serve: error: ...", exit 2.
		{Class: ClassBadCommand, Rank: 1, ExitCodes: []int{2},
			Pattern: regexp.MustCompile(`^usage: |: error: (unrecognized arguments|argument |the following arguments are required|invalid choice)`)},
		// A config vLLM refuses while building its engine config (ValueError,
		// TypeError, NotImplementedError in the API server or the engine core),
		// and the API server's wrapper when the engine core died starting
		// (src: v1/engine/utils.py wait_for_engine_startup). Exit 1 before
		// ready only: a ValueError logged for one bad request is no crash.
		{Class: ClassStartupCrash, Rank: 1, ExitCodes: []int{1},
			Pattern: regexp.MustCompile(`(^|\) |\] )(ValueError|TypeError|NotImplementedError|AssertionError): |Engine core initialization failed`)},
		// src: v1/engine/exceptions.py EngineDeadError.
		{Class: ClassCrashed, Rank: 1, Texts: []string{"EngineCore encountered an issue. See stack trace (above) for the root cause."}},
	},
	// uvicorn: [Errno 98] error while attempting to bind on address ...: address already in use
	PortTaken:    []string{"address already in use", "Address already in use", "[Errno 98]"},
	NewLogParser: func() LogParser { return &vllmLog{} },
	Rules:        vllmRules{},
}

// Startup log patterns. They match anywhere in a line, so vLLM's
// "(EngineCore_DP0 pid=12) INFO 11-18 10:00:00 [kv_cache_utils.py:1087] "
// prefix is ignored; numbers carry thousands separators.
var (
	// src: v1/core/kv_cache_utils.py: "GPU KV cache size: %s tokens" and
	// "Maximum concurrency for %s tokens per request: %.2fx", logged on one
	// line or two depending on the version.
	reVLLMKVTokens   = regexp.MustCompile(`KV cache size: ([\d,]+) tokens`)
	reVLLMMaxConc    = regexp.MustCompile(`Maximum concurrency for ([\d,]+) tokens per request: ([0-9.]+)x`)
	reVLLMGPUBlocks  = regexp.MustCompile(`# (?i:gpu|cuda) blocks: (\d+)`) // V0 engine
	reVLLMChunked    = regexp.MustCompile(`Chunked prefill is enabled with max_num_batched_tokens=(\d+)`)
	reVLLMGraphEnd   = regexp.MustCompile(`Graph capturing finished in`)
	vllmReadyMarkers = []string{"Starting vLLM API server", "Application startup complete."}
)

// vllmLog parses vLLM's startup log.
type vllmLog struct {
	f      Facts
	blocks int // "# GPU blocks: N" (V0)
	ready  bool
}

func (p *vllmLog) Facts() Facts { return p.f }
func (p *vllmLog) Ready() bool  { return p.ready }

func (p *vllmLog) Line(line string) {
	line = LastFrame(line)
	for _, m := range vllmReadyMarkers {
		if strings.Contains(line, m) {
			p.ready = true
			return
		}
	}
	if m := reVLLMKVTokens.FindStringSubmatch(line); m != nil && p.f.MaxTotalNumTokens == 0 {
		// The first engine's size: with data parallelism each engine logs its own.
		p.f.MaxTotalNumTokens = atoi(strings.ReplaceAll(m[1], ",", ""))
		p.f.KVCacheTokens = p.f.MaxTotalNumTokens
	}
	if m := reVLLMMaxConc.FindStringSubmatch(line); m != nil && p.f.MaxConcurrency == 0 {
		p.f.ContextLen = atoi(strings.ReplaceAll(m[1], ",", ""))
		p.f.MaxConcurrency, _ = strconv.ParseFloat(m[2], 64)
		p.fromBlocks()
		return
	}
	switch {
	case strings.Contains(line, "blocks: "):
		if m := reVLLMGPUBlocks.FindStringSubmatch(line); m != nil && p.blocks == 0 {
			p.blocks = atoi(m[1])
			p.fromBlocks()
		}
	case strings.Contains(line, "Chunked prefill is enabled"):
		p.f.ChunkedPrefillSize = submatchInt(reVLLMChunked, line)
	case reVLLMGraphEnd.MatchString(line):
		p.f.CUDAGraph = true
	}
}

// fromBlocks derives the KV tokens of a V0 log, which gives "# GPU blocks:
// N" and the concurrency N x block_size / max_model_len but no token count:
// the block size is the valid one nearest to concurrency x len / N.
func (p *vllmLog) fromBlocks() {
	if p.f.MaxTotalNumTokens > 0 || p.blocks <= 0 || p.f.MaxConcurrency <= 0 || p.f.ContextLen <= 0 {
		return
	}
	per := p.f.MaxConcurrency * float64(p.f.ContextLen) / float64(p.blocks)
	best := 0
	for _, b := range vllmBlockSizes {
		if best == 0 || math.Abs(float64(b)-per) < math.Abs(float64(best)-per) {
			best = b
		}
	}
	p.f.MaxTotalNumTokens = p.blocks * best
}

// vllmBlockSizes are CacheConfig's BlockSize choices (src: config/cache.py).
var vllmBlockSizes = []int{1, 8, 16, 32, 64, 128, 256}

// vllmRules are vLLM's rules (docs/engines/vllm.md, "Rules").
type vllmRules struct{}

// vllmState is what vLLM would run a config with.
type vllmState struct {
	tp, pp, dp, dcp    int
	ep                 bool
	gmu                float64
	gmuSet             bool
	maxSeqs            int // 0: unset (vLLM picks 256 or 1024 by GPU class)
	maxBatched         int // 0: unset (2048 or 8192 by GPU class)
	maxModelLen        int // 0: unset (the model's)
	chunked            bool
	prefix             bool
	blockSize          int
	kvDtype            string
	async              bool
	spec               map[string]any // --speculative-config, nil when off
	specErr            error
	specTokens         int
	conflicts          []string
	toolParser         bool
	autoTool           bool
	mambaBlockSize     int
	runner             string
	notes              []string
	kvCacheMemoryBytes int
}

// vllmSwitch reads a BooleanOptionalAction pair: on, whether it was given,
// and whether both spellings were.
func vllmSwitch(v View, name string) (on, set, both bool) {
	pos, neg := v.On(name), v.On("--no-"+strings.TrimPrefix(name, "--"))
	return pos, pos || neg, pos && neg
}

func newVLLMState(v View, s Setup) vllmState {
	e := vllmState{}
	e.tp, _ = v.Int("--tensor-parallel-size", 1)
	e.pp, _ = v.Int("--pipeline-parallel-size", 1)
	e.dp, _ = v.Int("--data-parallel-size", 1)
	e.dcp, _ = v.Int("--decode-context-parallel-size", 1)
	e.tp, e.pp, e.dp, e.dcp = max(e.tp, 1), max(e.pp, 1), max(e.dp, 1), max(e.dcp, 1)
	e.gmu, e.gmuSet = v.Float("--gpu-memory-utilization", 0.9) // src: config/cache.py default 0.9
	e.maxSeqs, _ = v.Int("--max-num-seqs", 0)
	e.maxBatched, _ = v.Int("--max-num-batched-tokens", 0)
	e.maxModelLen, _ = v.Int("--max-model-len", 0)
	e.blockSize, _ = v.Int("--block-size", 16) // src: config/cache.py DEFAULT_BLOCK_SIZE
	e.kvDtype, _ = v.Str("--kv-cache-dtype")
	e.runner, _ = v.Str("--runner")
	e.kvCacheMemoryBytes, _ = v.Int("--kv-cache-memory-bytes", 0)
	e.mambaBlockSize, _ = v.Int("--mamba-block-size", 0)
	e.toolParser = v.On("--tool-call-parser")
	for _, name := range []string{"--enable-expert-parallel", "--enable-chunked-prefill", "--enable-prefix-caching",
		"--async-scheduling", "--enforce-eager", "--enable-auto-tool-choice", "--trust-remote-code"} {
		if _, _, both := vllmSwitch(v, name); both {
			e.conflicts = append(e.conflicts, name)
		}
	}
	e.ep, _, _ = vllmSwitch(v, "--enable-expert-parallel")
	e.async, _, _ = vllmSwitch(v, "--async-scheduling")
	e.autoTool, _, _ = vllmSwitch(v, "--enable-auto-tool-choice")

	// src: arg_utils.py _set_default_args: for a generation runner V1 sets
	// enable_chunked_prefill = True whatever was asked; prefix caching
	// defaults on, off for hybrid models ("still experimental").
	chunkedOn, chunkedSet, _ := vllmSwitch(v, "--enable-chunked-prefill")
	e.chunked = true
	if e.runner == "pooling" && chunkedSet {
		e.chunked = chunkedOn
	}
	if e.runner != "pooling" && chunkedSet && !chunkedOn {
		e.notes = append(e.notes, "V1 turns chunked prefill on for generation; --no-enable-chunked-prefill has no effect")
	}
	prefixOn, prefixSet, _ := vllmSwitch(v, "--enable-prefix-caching")
	e.prefix = !s.Hybrid
	if prefixSet {
		e.prefix = prefixOn
	}
	if s.Hybrid && e.prefix {
		e.notes = append(e.notes, "prefix caching on a hybrid model is experimental in vLLM")
	}
	if s.Hybrid && v.On("--block-size") {
		// src: model_executor/models/config.py (HybridAttentionMambaModelConfig):
		// the attention block size is raised until a page holds a mamba state.
		e.notes = append(e.notes, "vLLM may raise --block-size on a hybrid model (attention page >= mamba page)")
	}

	if raw, ok := v.Str("--speculative-config"); ok {
		e.specErr = json.Unmarshal([]byte(raw), &e.spec)
		if e.specErr == nil && e.spec == nil {
			e.specErr = fmt.Errorf("not a JSON object")
		}
		if n, ok := e.spec["num_speculative_tokens"].(float64); ok {
			e.specTokens = int(n)
		}
	}
	return e
}

// vllmSpecMethods are SpeculativeConfig's methods (src: config/speculative.py
// SpeculativeMethod, with EagleModelTypes and MTPModelTypes).
var vllmSpecMethods = []string{"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3",
	"deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp", "longcat_flash_mtp", "mtp", "pangu_ultra_moe_mtp"}

// vllmMemIrrelevant are flags that do not change vLLM's memory sizing.
var vllmMemIrrelevant = []string{"--model", "--served-model-name", "--reasoning-parser", "--tool-call-parser",
	"--enable-auto-tool-choice", "--no-enable-auto-tool-choice", "--api-key", "--trust-remote-code", "--no-trust-remote-code",
	"--seed", "--async-scheduling", "--no-async-scheduling",
	"--scheduling-policy", "--disable-log-stats", "--enable-log-requests", "--no-enable-log-requests", "--uvicorn-log-level",
	"--disable-uvicorn-access-log", "--no-disable-uvicorn-access-log", "--enable-chunked-prefill", "--no-enable-chunked-prefill"}

// vllmMemKey identifies configs whose memory sizing is the same. Prefix
// caching does not size a dense model's cache, but on a hybrid model it
// changes how mamba state is kept (src: config/cache.py mamba_block_size).
func vllmMemKey(v View, s Setup) string {
	irrelevant := vllmMemIrrelevant
	if !s.Hybrid {
		irrelevant = append(slices.Clip(irrelevant), "--enable-prefix-caching", "--no-enable-prefix-caching")
	}
	return memKey(v, irrelevant)
}

// The memory model: vLLM hands the KV cache what is left of
// gpu_memory_utilization x the GPU after weights, activations and CUDA
// graphs (src: v1/worker/gpu_worker.py determine_available_memory), so the
// study's memory hint reads reference.mem_fraction_static as the reference
// startup's --gpu-memory-utilization: KV = ref.kv_tokens + (gmu - ref) x
// 100 x kv_tokens_per_mem_fraction_point, less speculative_kv_tokens with
// speculative decoding, times 2 for an fp8 KV cache.
//
// vllmFeatures are its inputs, in the order a Learned fits them: memory
// utilization, speculative on (0/1), speculative tokens, tensor-parallel
// size, KV bytes factor (1, or 2 for fp8), prefix caching on a hybrid model
// (0/1; the hint does not cover it, a fit learns it).
func vllmFeatures(e *vllmState, s Setup) []float64 {
	gmu := e.gmu
	if !e.gmuSet && s.Memory.Known() {
		gmu = s.Memory.RefMemFraction
	}
	spec := 0.0
	if e.spec != nil {
		spec = 1
	}
	hybridPrefix := 0.0
	if s.Hybrid && e.prefix {
		hybridPrefix = 1
	}
	return []float64{gmu, spec, float64(e.specTokens), float64(e.tp), vllmDtypeFactor(e.kvDtype), hybridPrefix}
}

// vllmDtypeFactor is how many KV tokens fit where one of the model's dtype
// fits (src: config/cache.py CacheDType: fp8 stores one byte per value).
func vllmDtypeFactor(dtype string) float64 {
	if strings.HasPrefix(dtype, "fp8") {
		return 2
	}
	return 1
}

func vllmHintKV(m Memory, x []float64) float64 {
	kv := float64(m.RefKVTokens) + (x[0]-m.RefMemFraction)*100*m.PerMemFractionPoint
	if x[1] > 0 {
		kv -= m.SpecFixed + m.PerSpecState*x[2]
	}
	return kv * x[4]
}

// vllmPrior is the hint's KV prediction (0 without a hint, or when
// --kv-cache-memory-bytes sizes the cache instead of the utilization).
func vllmPrior(e *vllmState, s Setup, x []float64) float64 {
	if !s.Memory.Known() || e.kvCacheMemoryBytes > 0 {
		return 0
	}
	return vllmHintKV(s.Memory, x)
}

// Predict implements Rules: the KV tokens per engine (an exact observation,
// a fit to earlier trials, or the hint, rounded down to whole blocks) and
// the running requests the workload reaches.
func (vllmRules) Predict(v View, s Setup, l Learned) Prediction {
	e := newVLLMState(v, s)
	p := Prediction{RequestedMaxRunningRequests: e.maxSeqs, MaxRunningRequests: e.maxSeqs}
	key := vllmMemKey(v, s)
	var exact *Observation
	if l != nil {
		if o, ok := l.Exact(key); ok && o.KVTokens > 0 {
			exact = &o
		}
	}
	if exact != nil {
		p.KVTokens, p.KVSource = exact.KVTokens, "observed"
	} else {
		x := vllmFeatures(&e, s)
		prior := vllmPrior(&e, s, x)
		kv, se, src := 0.0, 0.0, ""
		if l != nil {
			if f, fse, ok := l.KV(x, prior); ok {
				kv, se, src = f, fse, "fitted"
			}
		}
		if src == "" && prior != 0 {
			kv, src = prior, "hint"
		}
		if src != "" {
			// src: kv_cache_utils.py: the cache is num_blocks x block_size
			// tokens; a hybrid model's block size is vLLM's to choose.
			if b := float64(e.blockSize); !s.Hybrid && b > 0 && kv > 0 {
				kv = math.Floor(kv/b) * b
			}
			p.KVTokens, p.KVTokensErr, p.KVSource = int(math.Round(kv)), int(math.Round(se)), src
		}
	}
	if s.Demand.Concurrency > 0 {
		switch {
		case s.Demand.Matrix:
			p.KVTokensNeeded = s.Demand.MinContext + s.Demand.MaxOutput
		default:
			p.PromptTokens = chatPrompt(s, l)
			p.KVTokensNeeded = p.PromptTokens + s.Demand.MaxTokens
		}
		if e.maxSeqs > 0 && e.maxSeqs*e.dp < s.Demand.Concurrency {
			e.notes = append(e.notes, fmt.Sprintf("--max-num-seqs %d x %d engine(s) < concurrency %d: the rest wait in vLLM's queue",
				e.maxSeqs, e.dp, s.Demand.Concurrency))
		}
	}
	p.Notes = e.notes
	return p
}

// Observe implements Rules.
func (vllmRules) Observe(v View, s Setup, p Prediction, f Facts) (Observation, bool) {
	if f.MaxTotalNumTokens <= 0 {
		return Observation{}, false
	}
	e := newVLLMState(v, s)
	o := Observation{MemKey: vllmMemKey(v, s), KVTokens: f.MaxTotalNumTokens, MaxRunning: e.maxSeqs}
	o.X = vllmFeatures(&e, s)
	o.Prior = vllmPrior(&e, s, o.X)
	return o, true
}

// Check implements Rules: the vLLM rules a config breaks, each citing where
// vLLM enforces it.
func (vllmRules) Check(v View, s Setup, p Prediction) []Rejection {
	e := newVLLMState(v, s)
	var out []Rejection
	reject := func(rule, format string, args ...any) {
		out = append(out, Rejection{Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	for _, name := range e.conflicts {
		reject("conflicting_switches", "%s and --no-%s both given; argparse keeps the last, so the config is ambiguous", name, strings.TrimPrefix(name, "--"))
	}

	// src: arg_utils.py: world size = pipeline x tensor parallel; each of the
	// data-parallel engines (data_parallel_size_local defaults to
	// data_parallel_size) has a world of its own.
	if gpus := e.tp * e.pp * e.dp; gpus > s.GPUsPerTrial {
		how := fmt.Sprintf("--tensor-parallel-size %d", e.tp)
		if e.pp > 1 {
			how += fmt.Sprintf(" x --pipeline-parallel-size %d", e.pp)
		}
		if e.dp > 1 {
			how += fmt.Sprintf(" x --data-parallel-size %d", e.dp)
		}
		reject("parallel_gpus", "%s = %d GPUs > gpus.per_trial %d", how, gpus, s.GPUsPerTrial)
	}
	// src: arg_utils.py create_engine_config: assert tp_size % dcp_size == 0.
	if e.tp%e.dcp != 0 {
		reject("dcp_divides_tp", "--decode-context-parallel-size %d does not divide --tensor-parallel-size %d", e.dcp, e.tp)
	}
	// src: config/parallel.py enable_expert_parallel: "Use expert
	// parallelism instead of tensor parallelism for MoE layers"; a dense
	// model has none, so the switch would only duplicate configs.
	if e.ep && !s.MoE {
		reject("expert_parallel_moe", "--enable-expert-parallel applies to MoE layers only; the study's model is not marked model.moe: true")
	}

	// src: config/cache.py: gpu_memory_utilization: Field(gt=0, le=1).
	if e.gmuSet && (e.gmu <= 0 || e.gmu > 1) {
		reject("gpu_memory_utilization", "--gpu-memory-utilization %v is outside (0, 1]", e.gmu)
	}

	// src: config/scheduler.py verify_max_model_len.
	if e.maxSeqs > 0 && e.maxBatched > 0 && e.maxBatched < e.maxSeqs {
		reject("batched_tokens_vs_seqs", "--max-num-batched-tokens %d < --max-num-seqs %d: vLLM requires max_num_batched_tokens >= max_num_seqs", e.maxBatched, e.maxSeqs)
	}
	if e.maxBatched == 0 && e.maxSeqs > 8192 {
		// src: arg_utils.py _set_default_args: unset max_num_batched_tokens is
		// 2048, or 8192 on GPUs of 70 GiB or more (not A100).
		reject("batched_tokens_vs_seqs", "--max-num-seqs %d > the default --max-num-batched-tokens (8192 at most): set --max-num-batched-tokens >= %d", e.maxSeqs, e.maxSeqs)
	}
	if !e.chunked && e.maxBatched > 0 && e.maxModelLen > 0 && e.maxBatched < e.maxModelLen {
		reject("batched_tokens_vs_model_len", "--max-num-batched-tokens %d < --max-model-len %d without chunked prefill: vLLM refuses sequences longer than max_num_batched_tokens", e.maxBatched, e.maxModelLen)
	}

	// src: arg_utils.py create_engine_config: async scheduling refuses
	// pipeline parallelism and speculative decoding.
	if e.async && e.pp > 1 {
		reject("async_scheduling", "--async-scheduling is not supported with --pipeline-parallel-size %d > 1", e.pp)
	}
	if e.async && e.spec != nil {
		reject("async_scheduling", "--async-scheduling is not supported with speculative decoding (--speculative-config)")
	}

	// src: arg_utils.py (--speculative-config is parsed with json.loads),
	// config/speculative.py (method, num_speculative_tokens > 0),
	// arg_utils.py _is_v1_supported_oracle (draft_model not in V1).
	if raw, ok := v.Str("--speculative-config"); ok {
		switch {
		case e.specErr != nil:
			reject("speculative_config", "--speculative-config %q is not a JSON object: %v", raw, e.specErr)
		default:
			method, hasMethod := e.spec["method"].(string)
			_, hasModel := e.spec["model"].(string)
			switch {
			case !hasMethod && !hasModel:
				reject("speculative_config", "--speculative-config needs \"method\" (one of %s) or a draft \"model\"", strings.Join(vllmSpecMethods, ", "))
			case hasMethod && !slices.Contains(vllmSpecMethods, method):
				reject("speculative_config", "--speculative-config method %q (did you mean %s?); valid: %s", method, Nearest(method, vllmSpecMethods), strings.Join(vllmSpecMethods, ", "))
			case method == "draft_model":
				reject("speculative_config", "--speculative-config method draft_model is not supported by the V1 engine")
			}
			if n, present := e.spec["num_speculative_tokens"]; present {
				if f, ok := n.(float64); !ok || f != math.Trunc(f) || f <= 0 {
					reject("speculative_config", "--speculative-config num_speculative_tokens %v; valid: an integer > 0", n)
				}
			} else if method == "ngram" || method == "suffix" {
				reject("speculative_config", "--speculative-config method %s needs num_speculative_tokens (it has no draft model to read it from)", method)
			}
		}
	}

	// src: cli_args.py validate_parsed_serve_args.
	if e.autoTool && !e.toolParser {
		reject("auto_tool_choice", "--enable-auto-tool-choice requires --tool-call-parser")
	}

	// src: config/cache.py mamba_block_size: "Can be set only when prefix
	// caching is enabled".
	if e.mambaBlockSize > 0 && !e.prefix {
		reject("mamba_block_size", "--mamba-block-size %d needs prefix caching on (--enable-prefix-caching; hybrid models default to off)", e.mambaBlockSize)
	}

	if p.KVTokens != 0 {
		switch {
		case p.KVTokens <= 0:
			// src: kv_cache_utils.py: "No available memory for the cache blocks".
			reject("kv_capacity", "%s: no memory left for the KV cache", kvText(p))
		case e.maxModelLen > 0 && p.KVTokens+2*p.KVTokensErr < e.maxModelLen:
			// src: kv_cache_utils.py _check_enough_kv_cache_memory: one
			// request of max_model_len must fit.
			reject("kv_capacity", "%s < --max-model-len %d: vLLM cannot serve one request of the model's max seq len", kvText(p), e.maxModelLen)
		case p.KVTokensNeeded > p.KVTokens+2*p.KVTokensErr:
			reject("kv_capacity", "%s < %s", kvText(p), needText(s, p))
		}
	}
	return out
}

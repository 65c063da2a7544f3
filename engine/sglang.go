package engine

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// SGLang is sgl-project/sglang's server (`python3 -m sglang.launch_server`
// or `sglang serve`). Its facts cite /work/shared/reference/sglang.md
// ("ref §N"): MAIN (after v0.5.15; the seed's v0.5.21 behaves the same in
// its data), with FEB-era (v0.5.9) differences noted where they matter.
var SGLang = &Engine{
	Name:           "sglang",
	Title:          "SGLang",
	DefaultVersion: "v0.5.21",
	Command:        []string{"python3", "-m", "sglang.launch_server"},
	Image:          "lmsysorg/sglang:latest",
	ReleaseImage:   "lmsysorg/sglang:v%s",
	ImageCommand:   []string{"python3", "-m", "sglang.launch_server"},
	UsesGPUs:       true,
	ModelFlag:      "--model-path",
	ServedNameFlag: "--served-model-name",
	APIKeyFlag:     "--api-key",
	HostFlag:       "--host",
	PortFlag:       "--port",
	ToolParserFlag: "--tool-call-parser",
	// ref §2: the pool is what --mem-fraction-static leaves after weights.
	MemoryFractionFlag: "--mem-fraction-static",
	// ref §1 Auto-adjustments: the default fraction reserves 512 MB +
	// max(chunked, 2048) x 1.5 MB + the graphs' reserve outside the pools.
	WorkspaceFlags: []string{"--chunked-prefill-size", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"},
	// ref §3 Fatal errors (Memory) and §1's state pool: each says to
	// increase --mem-fraction-static.
	PoolTooSmall: []string{
		"Not enough memory. Please try to increase --mem-fraction-static",
		"leave no GPU memory for the KV cache",
		"Not enough GPU memory for hybrid",
		"state cache is too small to serve any requests",
	},
	// ref §4: /health_generate runs a 1-token generate; 503 until warmup.
	HealthPath: "/health_generate",
	// ref §3 Startup 10 (http_server.py).
	ReadyLine:   "The server is fired up and ready to roll!",
	MetricsFlag: "--enable-metrics",
	// ref §4 /metrics.
	Metrics: Metrics{
		GenerationTokens: "sglang:generation_tokens_total",
		PromptTokens:     "sglang:prompt_tokens_total",
		Running:          "sglang:num_running_reqs",
		Queued:           "sglang:num_queue_reqs",
	},
	// ref §3 Fatal errors; matched on single, redacted log lines.
	Signatures: []Signature{
		{Class: ClassIllegalMemoryAccess, Rank: 3, Texts: []string{
			"an illegal memory access was encountered", // RuntimeError / torch.AcceleratorError / NCCL watchdog
			"cudaErrorIllegalAddress",
		}},
		{Class: ClassOOM, Rank: 2, Texts: []string{
			"CUDA out of memory", // torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...
			"OutOfMemoryError",   // torch.OutOfMemoryError / torch.cuda.OutOfMemoryError
			"CUDA error: out of memory",
			"Not enough memory",     // RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
			"Not enough GPU memory", // hybrid state cache sizing
			"leave no GPU memory for the KV cache",
			"state cache is too small to serve any requests",
			"scheduler died during initialization (exit code: -9)", // host OOM killer
		}},
		// argparse: "usage: launch_server.py [-h] ..." then "prog: error: ...", exit 2.
		{Class: ClassBadCommand, Rank: 1, ExitCodes: []int{2},
			Pattern: regexp.MustCompile(`^usage: |: error: (unrecognized arguments|argument |the following arguments are required|invalid choice)`)},
	},
	// uvicorn: [Errno 98] error while attempting to bind on address ...: address already in use
	PortTaken:    []string{"address already in use", "Address already in use", "[Errno 98]"},
	NewLogParser: func() LogParser { return &sglangLog{} },
	Rules:        sglangRules{},
}

// Startup log patterns (scheduler/memory_pool/http_server texts, ref §3).
// They match anywhere in a line, so the "[2026-02-12 11:38:29 TP0 EP0] "
// prefix is ignored.
var (
	// scheduler.py summary, TP rank 0 only; its max_running_requests is the
	// effective per-DP value after all caps.
	reSummaryTokens  = regexp.MustCompile(`\bmax_total_num_tokens=(\d+)`)
	reSummaryRunning = regexp.MustCompile(`\bmax_running_requests=(\d+)`)
	reSummaryChunked = regexp.MustCompile(`\bchunked_prefill_size=(-?\d+)`)
	reSummaryPrefill = regexp.MustCompile(`\bmax_prefill_tokens=(\d+)`)
	reSummaryContext = regexp.MustCompile(`\bcontext_len=(\d+)`)
	reSummaryAvail   = regexp.MustCompile(`\bavailable_gpu_mem=([0-9.]+)`)
	reMamba          = regexp.MustCompile(`Mamba Cache is allocated\. max_mamba_cache_size: (\d+)`)
	reKV             = regexp.MustCompile(`KV Cache is allocated\..*?#tokens: (\d+)`)
	reReduced        = regexp.MustCompile(`max_running_requests was reduced from the requested (\d+) to (\d+)`)
	// MAIN "Capture target decode CUDA graph end.", FEB "Capture cuda graph
	// end.", and piecewise/draft variants.
	reGraphEnd = regexp.MustCompile(`(?i)\bcapture\b.*\bcuda graph end\b`)
)

// sglangLog parses SGLang's startup log.
type sglangLog struct {
	f       Facts
	summary bool // the scheduler summary was seen; later summaries (other DP ranks) are ignored
	ready   bool
}

func (p *sglangLog) Facts() Facts { return p.f }
func (p *sglangLog) Ready() bool  { return p.ready }

func (p *sglangLog) Line(line string) {
	line = LastFrame(line)
	if strings.Contains(line, SGLang.ReadyLine) {
		p.ready = true
		return
	}
	if !p.summary && strings.Contains(line, "max_total_num_tokens=") {
		if m := reSummaryTokens.FindStringSubmatch(line); m != nil {
			p.summary = true
			p.f.MaxTotalNumTokens = atoi(m[1])
			p.f.MaxRunningRequests = submatchInt(reSummaryRunning, line)
			p.f.ChunkedPrefillSize = submatchInt(reSummaryChunked, line)
			p.f.MaxPrefillTokens = submatchInt(reSummaryPrefill, line)
			p.f.ContextLen = submatchInt(reSummaryContext, line)
			if m := reSummaryAvail.FindStringSubmatch(line); m != nil {
				p.f.AvailableGPUMemGB, _ = strconv.ParseFloat(m[1], 64)
			}
		}
		return
	}
	switch {
	case strings.Contains(line, "Mamba Cache is allocated"):
		if p.f.MambaCacheSize == 0 {
			p.f.MambaCacheSize = submatchInt(reMamba, line)
		}
	case strings.Contains(line, "KV Cache is allocated"):
		if p.f.KVCacheTokens == 0 {
			p.f.KVCacheTokens = submatchInt(reKV, line)
		}
	case strings.Contains(line, "was reduced from the requested"):
		if m := reReduced.FindStringSubmatch(line); m != nil && p.f.RequestedMaxRunningRequests == 0 {
			p.f.RequestedMaxRunningRequests = atoi(m[1])
			p.f.ReducedMaxRunningRequests = atoi(m[2])
		}
	case reGraphEnd.MatchString(line):
		p.f.CUDAGraph = true
	}
}

// submatchInt returns re's first group in line as an int (0 when absent).
func submatchInt(re *regexp.Regexp, line string) int {
	if m := re.FindStringSubmatch(line); m != nil {
		return atoi(m[1])
	}
	return 0
}

// atoi parses a decimal that a regexp already validated; on overflow it
// returns 0 rather than a wrapped value.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}

// sglangRules are SGLang's rules (ref §1 auto-adjustments, §2 state pool).
type sglangRules struct{}

// sglangState is what SGLang would run with after its startup adjustments.
type sglangState struct {
	tp, dp, ep, pp int
	dpAttention    bool
	attnDP         int // DP workers that split requests (dp with DP attention, else 1)
	radix, overlap bool
	strategy       string // effective mamba strategy: no_buffer | extra_buffer | extra_buffer_lazy
	mrr            int    // --max-running-requests as given (0 = unset)
	requested      int    // requested max running requests after the spec default
	slotsFlag      int    // --max-mamba-cache-size (0 = unset)
	memFrac        float64
	memFracSet     bool
	spec           string // "" or upper-cased algorithm, NEXTN mapped to EAGLE
	eagle          bool   // EAGLE, EAGLE3 or STANDALONE
	steps, topk    int
	draft          int
	draftSet       bool
	page, track    int
	fullRatio      float64
	attnBackend    string
	a2a            string
	ctxLen         int
	notes          []string
}

func newSGLangState(v View, hybrid bool) sglangState {
	e := sglangState{}
	e.tp, _ = v.Int("--tp-size", 1)
	e.dp, _ = v.Int("--dp-size", 1)
	e.ep, _ = v.Int("--ep-size", 1)
	e.pp, _ = v.Int("--pp-size", 1)
	e.dpAttention = v.On("--enable-dp-attention")
	if e.dpAttention && e.dp == 1 {
		// ref §1 Data parallelism: dp_size==1 forces enable_dp_attention=False.
		e.dpAttention = false
		e.notes = append(e.notes, "dp_size 1 turns DP attention off")
	}
	e.attnDP = 1
	if e.dpAttention {
		e.attnDP = e.dp
	}
	e.radix = !v.On("--disable-radix-cache")
	e.overlap = !v.On("--disable-overlap-schedule")
	e.mrr, _ = v.Int("--max-running-requests", 0)
	e.slotsFlag, _ = v.Int("--max-mamba-cache-size", 0)
	e.memFrac, e.memFracSet = v.Float("--mem-fraction-static", 0)
	e.page, _ = v.Int("--page-size", 1)
	e.track, _ = v.Int("--mamba-track-interval", 256)
	e.fullRatio, _ = v.Float("--mamba-full-memory-ratio", 0.9)
	e.attnBackend, _ = v.Str("--attention-backend")
	e.a2a, _ = v.Str("--moe-a2a-backend")
	e.ctxLen, _ = v.Int("--context-length", 0)

	if alg, ok := v.Str("--speculative-algorithm"); ok {
		e.spec = strings.ToUpper(alg)
		if e.spec == "NEXTN" {
			e.spec = "EAGLE" // ref §1 EAGLE: NEXTN -> EAGLE
		}
	}
	e.eagle = e.spec == "EAGLE" || e.spec == "EAGLE3" || e.spec == "STANDALONE"
	var stepsSet bool
	e.steps, stepsSet = v.Int("--speculative-num-steps", 0)
	e.topk, _ = v.Int("--speculative-eagle-topk", 0)
	e.draft, e.draftSet = v.Int("--speculative-num-draft-tokens", 0)
	if e.eagle {
		if !stepsSet {
			// ref §1 EAGLE: _auto_choose_speculative_params -> (3,1,4) for most archs.
			e.steps, e.topk, e.draft = 3, 1, 4
			e.notes = append(e.notes, "speculative steps/topk/draft auto (3, 1, 4)")
		}
		if e.topk == 0 {
			e.topk = 1
		}
		if !e.draftSet && stepsSet {
			e.draft = e.steps*e.topk + 1
		}
		if e.topk == 1 && e.draft != e.steps+1 {
			// ref §1 EAGLE l.624-632: adjusted to steps + 1 when topk == 1.
			e.draft = e.steps + 1
		}
	}
	e.requested = e.mrr
	if e.eagle && e.mrr == 0 {
		// ref §1 EAGLE l.507-511: unset -> 48 for speculative decoding.
		e.requested = 48
		e.notes = append(e.notes, "max running requests 48 (speculative default)")
	}
	// ref §1 Mamba strategy auto (overrides.py:1159-1200): extra_buffer if
	// overlap is on or page_size > 1, else no_buffer with overlap turned off.
	e.strategy, _ = v.Str("--mamba-radix-cache-strategy")
	if e.strategy == "" || e.strategy == "auto" {
		if e.overlap || e.page > 1 {
			e.strategy = "extra_buffer"
		} else {
			e.strategy = "no_buffer"
		}
	}
	if hybrid && e.strategy == "no_buffer" && e.overlap {
		e.overlap = false
		e.notes = append(e.notes, "mamba no_buffer turns the overlap scheduler off")
	}
	return e
}

// stateRatio is _calculate_mamba_ratio (ref §2 Ratio): 1 without radix,
// else 3 + extra with extra 2 for extra_buffer with overlap, 1 for
// extra_buffer_lazy with overlap or either extra-buffer strategy without
// overlap, 0 for no_buffer.
func (e *sglangState) stateRatio() int {
	if !e.radix {
		return 1
	}
	switch {
	case e.strategy == "extra_buffer" && e.overlap:
		return 5
	case e.strategy == "extra_buffer_lazy" || e.strategy == "extra_buffer":
		return 4
	}
	return 3
}

// ratioKey names the configurations that share one state ratio.
func (e *sglangState) ratioKey() string {
	return fmt.Sprintf("radix=%v strategy=%s overlap=%v", e.radix, e.strategy, e.overlap)
}

// ratioWhy names the configuration behind a ratio, for messages.
func (e *sglangState) ratioWhy() string {
	if !e.radix {
		return "without radix cache"
	}
	switch {
	case e.strategy == "extra_buffer" && e.overlap:
		return "with radix cache and overlap"
	case e.strategy == "extra_buffer_lazy" && e.overlap:
		return "with radix cache, extra_buffer_lazy and overlap"
	case e.strategy == "extra_buffer" || e.strategy == "extra_buffer_lazy":
		return "with radix cache, " + e.strategy + " and no overlap"
	}
	return "with radix cache (no_buffer)"
}

// perWorker is the requested max running requests per DP worker (0 unset).
func (e *sglangState) perWorker() int {
	if e.requested > 0 {
		return e.requested / e.attnDP
	}
	return 0
}

// memIrrelevant are flags that do not change memory sizing.
var memIrrelevant = []string{"--model-path", "--served-model-name", "--reasoning-parser", "--tool-call-parser",
	"--enable-metrics", "--api-key", "--log-level", "--trust-remote-code", "--random-seed", "--enable-cache-report",
	"--stream-response-default-include-usage", "--disable-cuda-graph"}

// memKey identifies configs whose memory sizing is the same.
func memKey(v View, irrelevant []string) string {
	var parts []string
	for name, vals := range v {
		if !slices.Contains(irrelevant, name) {
			parts = append(parts, name+"="+strings.Join(vals, ","))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// The memory model (ref §2 Pool size when unset; seed 000's startup logs):
// the memory left after weights is R(mf) = ref.kv_tokens + ref.state_slots
// * per_state_slot + (mf - ref.mf) * 100 * per_mem_fraction_point KV
// tokens. Each state slot takes per_state_slot of it; speculative decoding
// takes speculative_kv_tokens plus per_speculative_state for each
// intermediate state (min(requested, slots // ratio) x draft tokens). An
// auto-sized pool gets R * r/(1+r) with r = --mamba-full-memory-ratio
// (0.9), divided by per_state_slot (x (1 + draft/ratio) with speculative
// decoding).
//
// sglangFeatures are its inputs, in the order a Learned fits them:
// memory fraction, state slots, speculative on (0/1), intermediate
// speculative states, tensor-parallel size.
func sglangFeatures(e *sglangState, s Setup, slots, ratio int) []float64 {
	mf := e.memFrac
	if !e.memFracSet {
		mf = s.Memory.RefMemFraction
	}
	spec, inter := 0.0, 0.0
	if e.spec != "" {
		spec = 1
		if ratio > 0 {
			n := slots / ratio
			if pw := e.perWorker(); pw > 0 {
				n = min(pw, n)
			}
			inter = float64(n * max(e.draft, 1))
		}
	}
	return []float64{mf, float64(slots), spec, inter, float64(e.tp)}
}

// hintKV is the memory hint's prediction for features x.
func hintKV(m Memory, x []float64) float64 {
	kv := rest(m, x[0]) - x[1]*m.PerStateSlot
	if x[2] > 0 {
		kv -= m.SpecFixed + m.PerSpecState*x[3]
	}
	return kv
}

// rest is R(mf): KV tokens plus state slots' share at memory fraction mf.
func rest(m Memory, mf float64) float64 {
	return float64(m.RefKVTokens) + float64(m.RefStateSlots)*m.PerStateSlot + (mf-m.RefMemFraction)*100*m.PerMemFractionPoint
}

// hintUsable reports whether the memory hint can predict for the study.
func hintUsable(s Setup) bool {
	return s.Memory.Known() && !(s.Hybrid && s.Memory.PerStateSlot <= 0)
}

// Predict implements Rules: the effective limits for a config (ref §2
// Capping and Pool size when unset), with KV tokens from an exact
// observation, a fit to earlier trials, or the memory hint, in that order.
func (sglangRules) Predict(v View, s Setup, l Learned) Prediction {
	e := newSGLangState(v, s.Hybrid)
	p := Prediction{RequestedMaxRunningRequests: e.requested}
	perWorker := e.perWorker()
	if s.Hybrid {
		p.StateRatio = e.stateRatio()
		if l != nil {
			if r, ok := l.Ratio(e.ratioKey()); ok {
				p.StateRatio = r
			}
		}
	}
	slots, auto := 0, false
	switch {
	case !s.Hybrid:
	case e.slotsFlag > 0:
		slots = e.slotsFlag / e.attnDP
	case !e.radix && e.mrr > 0:
		slots = e.mrr / e.attnDP
	default:
		auto = true
	}
	key := memKey(v, memIrrelevant)
	var exact *Observation
	if l != nil {
		if o, ok := l.Exact(key); ok {
			exact = &o
		}
	}
	switch {
	case exact != nil && exact.KVTokens > 0:
		p.KVTokens, p.KVSource = exact.KVTokens, "observed"
		if auto {
			slots = exact.StateSlots
		}
	default:
		if auto && hintUsable(s) {
			m := s.Memory
			mf := e.memFrac
			if !e.memFracSet {
				mf = m.RefMemFraction
			}
			budget := rest(m, mf) * e.fullRatio / (1 + e.fullRatio)
			per := m.PerStateSlot
			if e.spec != "" && p.StateRatio > 0 {
				per *= 1 + float64(max(e.draft, 1))/float64(p.StateRatio)
			}
			slots = int(budget / per)
		}
		x := sglangFeatures(&e, s, slots, p.StateRatio)
		prior := 0.0
		if hintUsable(s) {
			prior = hintKV(s.Memory, x)
		}
		if l != nil {
			if kv, se, ok := l.KV(x, prior); ok {
				p.KVTokens, p.KVTokensErr, p.KVSource = int(math.Round(kv)), int(math.Round(se)), "fitted"
				break
			}
		}
		if prior != 0 {
			p.KVTokens, p.KVSource = int(math.Round(prior)), "hint"
		}
	}
	if auto && slots > 0 {
		e.notes = append(e.notes, fmt.Sprintf("auto state pool ~%d slots", slots))
	}
	p.StateSlots = slots

	// ref §2 Capping (resolve_max_num_reqs).
	kv := p.KVTokens
	mr := perWorker
	if kv > 0 {
		if mr > 0 {
			mr = min(mr, kv/2)
		} else if e.ctxLen > 0 {
			mr = min(max(min(int(float64(kv)/float64(e.ctxLen)*512), 4096), 2048), kv/2)
		}
	}
	if s.Hybrid && slots > 0 && mr > 0 {
		mr = min(mr, slots/p.StateRatio)
	}
	if exact != nil && exact.MaxRunning > 0 {
		mr = exact.MaxRunning
	}
	p.MaxRunningRequests = mr

	if s.Demand.Concurrency > 0 {
		switch {
		case s.Demand.Matrix:
			p.KVTokensNeeded = s.Demand.MinContext + s.Demand.MaxOutput
		default:
			p.PromptTokens = chatPrompt(s, l)
			p.KVTokensNeeded = p.PromptTokens + s.Demand.MaxTokens
		}
	}
	p.Notes = e.notes
	return p
}

// kvNeed is the chat workload's KV demand on one DP worker at its highest
// concurrency: max_total_num_tokens is per DP worker (ref §3: the scheduler
// summary is per DP worker's TP rank 0; ref §2: requests are split
// max_running_requests // attn_dp_size), so the running requests are split
// the same way. running is the total across workers (capped by mr per
// worker when known).
// chatPrompt is a chat request's prompt tokens: what the server counted
// (chat template included) when a startup taught it, else the nominal size.
// With the output tokens it is what the KV pool must hold for one request:
// the running requests beyond what the pool holds at once wait in the
// queue (or are retracted and resumed), so a smaller pool serves the
// workload slower, which the measurement scores, rather than not at all
// (on the long-context landscape the best config held 80% of its running
// requests' tokens).
func chatPrompt(s Setup, l Learned) int {
	if l != nil && l.PromptTokens() > 0 {
		return l.PromptTokens()
	}
	return s.Demand.PromptTokens
}

// Observe implements Rules.
func (sglangRules) Observe(v View, s Setup, p Prediction, f Facts) (Observation, bool) {
	if f.MaxTotalNumTokens <= 0 && f.MaxRunningRequests <= 0 {
		return Observation{}, false
	}
	e := newSGLangState(v, s.Hybrid)
	slots := f.MambaCacheSize
	if slots == 0 {
		slots = p.StateSlots
	}
	o := Observation{MemKey: memKey(v, memIrrelevant), KVTokens: f.MaxTotalNumTokens,
		MaxRunning: f.MaxRunningRequests, StateSlots: slots}
	o.X = sglangFeatures(&e, s, slots, p.StateRatio)
	if hintUsable(s) {
		o.Prior = hintKV(s.Memory, o.X)
	}
	if s.Hybrid && slots > 0 && f.MaxRunningRequests > 0 && e.requested > 0 && p.StateRatio > 0 {
		if r, ok := inferRatio(slots, e.perWorker(), f.MaxRunningRequests, p.StateRatio); ok {
			o.RatioKey, o.Ratio = e.ratioKey(), r
		}
	}
	return o, true
}

// inferRatio infers the state ratio from an observed cap: observed running
// requests with slots state slots and perWorker requested. ok is false when
// the observation agrees with the predicted ratio or says nothing.
func inferRatio(slots, perWorker, observed, predicted int) (int, bool) {
	if perWorker <= 0 {
		return 0, false
	}
	if observed >= perWorker {
		if slots/predicted >= perWorker {
			return 0, false // consistent: no cap predicted, none seen
		}
		// No cap seen although one was predicted: the ratio is at most slots // perWorker.
		if r := slots / perWorker; r >= 1 {
			return r, true
		}
		return 0, false
	}
	if slots/predicted == observed {
		return 0, false
	}
	for r := 1; r <= 16; r++ {
		if slots/r == observed {
			return r, true
		}
	}
	return 0, false
}

// Check implements Rules: the SGLang rules a config breaks.
func (sglangRules) Check(v View, s Setup, p Prediction) []Rejection {
	e := newSGLangState(v, s.Hybrid)
	var out []Rejection
	reject := func(rule, format string, args ...any) {
		out = append(out, Rejection{Rule: rule, Message: fmt.Sprintf(format, args...)})
	}

	// Parallel sizes vs GPUs (ref §1 Flag table: --tp-size, --dp-size,
	// --pp-size; Data parallelism: DP attention shards inside the TP group,
	// otherwise each DP replica has its own TP group).
	gpus, how := e.tp*e.pp, fmt.Sprintf("--tp-size %d", e.tp)
	if e.pp > 1 {
		how += fmt.Sprintf(" x --pp-size %d", e.pp)
	}
	if !e.dpAttention && e.dp > 1 {
		gpus *= e.dp
		how += fmt.Sprintf(" x --dp-size %d", e.dp)
	}
	if gpus > s.GPUsPerTrial {
		reject("parallel_gpus", "%s = %d GPUs > gpus.per_trial %d", how, gpus, s.GPUsPerTrial)
	}
	// EP shards experts inside the TP group (ref §1 Data parallelism / MoE:
	// A2A backends force ep_size = tp_size).
	if e.ep > e.tp || e.tp%e.ep != 0 {
		reject("ep_divides_tp", "--ep-size %d does not divide --tp-size %d", e.ep, e.tp)
	}
	if e.a2a != "" && e.a2a != "none" && e.ep != e.tp {
		reject("ep_a2a", "--moe-a2a-backend %s sets --ep-size to --tp-size %d; --ep-size %d would be overridden", e.a2a, e.tp, e.ep)
	}
	// ref §1 Data parallelism: with DP attention, assert tp_size % dp_size == 0.
	if e.dpAttention && e.tp%e.dp != 0 {
		reject("dp_attention", "--enable-dp-attention needs --dp-size %d to divide --tp-size %d", e.dp, e.tp)
	}

	if e.eagle {
		topk, _ := v.Int("--speculative-eagle-topk", 1)
		draft, draftSet := v.Int("--speculative-num-draft-tokens", 0)
		steps, stepsSet := v.Int("--speculative-num-steps", 0)
		// ref §1 EAGLE l.624-632: SGLang rewrites the draft count when topk == 1,
		// so another value would launch a different config than recorded.
		if stepsSet && draftSet && topk == 1 && draft != steps+1 {
			reject("eagle_draft_tokens", "--speculative-num-draft-tokens %d with --speculative-eagle-topk 1: SGLang sets it to --speculative-num-steps %d + 1 = %d", draft, steps, steps+1)
		}
		// A draft tree of steps levels and topk branches has at most steps*topk + 1 nodes.
		if stepsSet && draftSet && draft > steps*topk+1 {
			reject("eagle_draft_tokens", "--speculative-num-draft-tokens %d > --speculative-num-steps %d x --speculative-eagle-topk %d + 1 = %d", draft, steps, topk, steps*topk+1)
		}
		// ref §1 EAGLE validation errors.
		if e.attnBackend == "trtllm_mha" && e.topk > 1 {
			reject("eagle_backend", "trtllm_mha backend only supports topk = 1 for speculative decoding (--speculative-eagle-topk %d)", e.topk)
		}
		if e.topk > 1 && e.page > 1 && e.attnBackend != "" && !slices.Contains([]string{"flashinfer", "fa3", "triton"}, e.attnBackend) {
			reject("eagle_backend", "speculative_eagle_topk > 1 with page_size > 1 is only supported on flashinfer, fa3, triton; got --attention-backend %s", e.attnBackend)
		}
		if e.spec == "STANDALONE" && e.dpAttention {
			reject("eagle_backend", "standalone speculative decoding does not support DP attention")
		}
	}

	if s.Hybrid && e.radix && e.spec != "" {
		// ref §1 Mamba strategy: extra_buffer asserts; lazy is unsupported with spec.
		if e.strategy == "extra_buffer_lazy" {
			reject("mamba_strategy", "extra_buffer_lazy is unsupported with speculative decoding")
		}
		if e.strategy == "extra_buffer" && e.track < e.draft {
			reject("mamba_strategy", "--mamba-track-interval %d < --speculative-num-draft-tokens %d (extra_buffer needs >=)", e.track, e.draft)
		}
	}
	if s.Hybrid && e.radix && e.strategy != "no_buffer" && e.page > 0 && e.track%e.page != 0 {
		reject("mamba_strategy", "--mamba-track-interval %d is not a multiple of --page-size %d", e.track, e.page)
	}

	// ref §2 Capping step 3/4: effective = min(requested // dp, slots // ratio).
	if s.Hybrid && p.StateSlots > 0 && p.StateRatio > 0 {
		cap := p.StateSlots / p.StateRatio
		pool := fmt.Sprintf("--max-mamba-cache-size %d", p.StateSlots)
		switch {
		case e.slotsFlag == 0 && !e.radix && e.mrr > 0:
			pool = fmt.Sprintf("state pool %d (= --max-running-requests)", p.StateSlots)
		case e.slotsFlag == 0:
			pool = fmt.Sprintf("auto state pool (~%d slots predicted)", p.StateSlots)
		}
		switch {
		case cap <= 0:
			reject("state_slots", "%s %s: %d // %d = %d: the state cache is too small to serve any request", pool, e.ratioWhy(), p.StateSlots, p.StateRatio, cap)
		case e.requested > 0 && cap < e.perWorker() && !s.AcceptReduced:
			reject("limits_reduced", "%s %s: %d // %d = %d < %s", pool, e.ratioWhy(), p.StateSlots, p.StateRatio, cap, requestedText(&e))
		}
	}
	if p.KVTokens != 0 {
		switch perWorker := e.perWorker(); {
		case p.KVTokens <= 0:
			reject("kv_capacity", "predicted KV tokens %d: no memory left for the KV cache", p.KVTokens)
		case perWorker > 0 && p.KVTokens/2 < perWorker && !s.AcceptReduced:
			reject("limits_reduced", "predicted KV tokens %d // 2 = %d < %s", p.KVTokens, p.KVTokens/2, requestedText(&e))
		case p.KVTokensNeeded > p.KVTokens:
			reject("kv_capacity", "%s < %s", kvText(p), needText(s, p))
		}
	}
	return out
}

// kvText describes a KV prediction with where it came from and its error.
func kvText(p Prediction) string {
	switch p.KVSource {
	case "fitted":
		return fmt.Sprintf("predicted KV tokens %d ± %d (fitted to earlier trials' startups)", p.KVTokens, p.KVTokensErr)
	case "observed":
		return fmt.Sprintf("KV tokens %d (observed for the same memory settings)", p.KVTokens)
	}
	return fmt.Sprintf("predicted KV tokens %d", p.KVTokens)
}

func requestedText(e *sglangState) string {
	req := fmt.Sprintf("--max-running-requests %d", e.requested)
	if e.mrr == 0 {
		req = fmt.Sprintf("max running requests %d (speculative default)", e.requested)
	}
	if e.attnDP > 1 {
		req += fmt.Sprintf(" // --dp-size %d = %d per DP worker", e.attnDP, e.requested/e.attnDP)
	}
	return req
}

// needText says why the workload needs p.KVTokensNeeded KV tokens: the
// smallest matrix cell, or one request's prompt and output tokens.
func needText(s Setup, p Prediction) string {
	if s.Demand.Matrix {
		return fmt.Sprintf("%d needed by the smallest matrix cell (context %d + max_output %d)",
			p.KVTokensNeeded, s.Demand.MinContext, s.Demand.MaxOutput)
	}
	prompt := fmt.Sprintf("%d prompt", p.PromptTokens)
	if p.PromptTokens != s.Demand.PromptTokens {
		prompt = fmt.Sprintf("%d prompt as the server counted", p.PromptTokens)
	}
	return fmt.Sprintf("%d needed by one request (%s + %d max_tokens)", p.KVTokensNeeded, prompt, s.Demand.MaxTokens)
}

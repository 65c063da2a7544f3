package space

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/objective"
)

// The SGLang rules below cite /work/shared/reference/sglang.md ("ref §N").
// They follow MAIN (after v0.5.15, the seed's v0.5.21 behaves the same in its
// data); FEB-era (v0.5.9) differences are noted where they matter.

// flagView holds the engine flags of a config by canonical name; a switch
// maps to an empty, non-nil slice. The last occurrence wins.
type flagView map[string][]string

func (s *Study) view(flags []string) flagView {
	v := flagView{}
	for i := 0; i < len(flags); i++ {
		name, inline, hasInline := strings.Cut(flags[i], "=")
		spec, ok := s.Schema.Lookup(name)
		if !ok {
			continue
		}
		vals := []string{}
		switch {
		case spec.Type == "bool":
		case hasInline:
			vals = append(vals, inline)
		default:
			for i+1 < len(flags) && !strings.HasPrefix(flags[i+1], "--") {
				i++
				vals = append(vals, flags[i])
				if spec.Nargs != "+" {
					break
				}
			}
		}
		v[spec.Name] = vals
	}
	return v
}

func (v flagView) on(name string) bool { _, ok := v[name]; return ok }

func (v flagView) str(name string) (string, bool) {
	vals, ok := v[name]
	if !ok || len(vals) == 0 {
		return "", false
	}
	return vals[0], true
}

func (v flagView) int(name string, def int) (int, bool) {
	s, ok := v.str(name)
	if !ok {
		return def, false
	}
	n, err := parseHumanInt(s, true)
	if err != nil {
		return def, false
	}
	return int(n), true
}

func (v flagView) float(name string, def float64) (float64, bool) {
	s, ok := v.str(name)
	if !ok {
		return def, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return def, false
	}
	return f, true
}

// engineState is what SGLang would run with after its startup adjustments.
type engineState struct {
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

func (s *Study) state(v flagView) engineState {
	e := engineState{}
	e.tp, _ = v.int("--tp-size", 1)
	e.dp, _ = v.int("--dp-size", 1)
	e.ep, _ = v.int("--ep-size", 1)
	e.pp, _ = v.int("--pp-size", 1)
	e.dpAttention = v.on("--enable-dp-attention")
	if e.dpAttention && e.dp == 1 {
		// ref §1 Data parallelism: dp_size==1 forces enable_dp_attention=False.
		e.dpAttention = false
		e.notes = append(e.notes, "dp_size 1 turns DP attention off")
	}
	e.attnDP = 1
	if e.dpAttention {
		e.attnDP = e.dp
	}
	e.radix = !v.on("--disable-radix-cache")
	e.overlap = !v.on("--disable-overlap-schedule")
	e.mrr, _ = v.int("--max-running-requests", 0)
	e.slotsFlag, _ = v.int("--max-mamba-cache-size", 0)
	e.memFrac, e.memFracSet = v.float("--mem-fraction-static", 0)
	e.page, _ = v.int("--page-size", 1)
	e.track, _ = v.int("--mamba-track-interval", 256)
	e.fullRatio, _ = v.float("--mamba-full-memory-ratio", 0.9)
	e.attnBackend, _ = v.str("--attention-backend")
	e.a2a, _ = v.str("--moe-a2a-backend")
	e.ctxLen, _ = v.int("--context-length", 0)

	if alg, ok := v.str("--speculative-algorithm"); ok {
		e.spec = strings.ToUpper(alg)
		if e.spec == "NEXTN" {
			e.spec = "EAGLE" // ref §1 EAGLE: NEXTN -> EAGLE
		}
	}
	e.eagle = e.spec == "EAGLE" || e.spec == "EAGLE3" || e.spec == "STANDALONE"
	var stepsSet bool
	e.steps, stepsSet = v.int("--speculative-num-steps", 0)
	e.topk, _ = v.int("--speculative-eagle-topk", 0)
	e.draft, e.draftSet = v.int("--speculative-num-draft-tokens", 0)
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
	e.strategy, _ = v.str("--mamba-radix-cache-strategy")
	if e.strategy == "" || e.strategy == "auto" {
		if e.overlap || e.page > 1 {
			e.strategy = "extra_buffer"
		} else {
			e.strategy = "no_buffer"
		}
	}
	if s.Hybrid && e.strategy == "no_buffer" && e.overlap {
		e.overlap = false
		e.notes = append(e.notes, "mamba no_buffer turns the overlap scheduler off")
	}
	return e
}

// stateRatio is _calculate_mamba_ratio (ref §2 Ratio): 1 without radix,
// else 3 + extra with extra 2 for extra_buffer with overlap, 1 for
// extra_buffer_lazy with overlap or either extra-buffer strategy without
// overlap, 0 for no_buffer.
func (e *engineState) stateRatio() int {
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

// ratioWhy names the configuration behind a ratio, for messages.
func (e *engineState) ratioWhy() string {
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

// maxConcurrency is the highest number of requests the workload keeps in flight.
func (s *Study) maxConcurrency() int {
	levels := s.Workload.Chat.Concurrency
	if s.Workload.Kind == "matrix" {
		levels = s.Workload.Matrix.Concurrency
	}
	if len(levels) == 0 {
		return 0
	}
	return slices.Max(levels)
}

// kvNeed is the chat workload's KV demand on one DP worker at its highest
// concurrency: max_total_num_tokens is per DP worker (ref §3: the scheduler
// summary is per DP worker's TP rank 0; ref §2: requests are split
// max_running_requests // attn_dp_size), so the running requests are split
// the same way. running is the total across workers (capped by mr per
// worker when known); prompt defaults to the load generator's.
type kvNeed struct {
	running, perWorker, attnDP, prompt, maxTokens int
}

func (k kvNeed) tokens() int { return k.perWorker * (k.prompt + k.maxTokens) }

func (s *Study) chatKVNeed(conc, mr, attnDP int) kvNeed {
	attnDP = max(attnDP, 1)
	running := conc
	if mr > 0 {
		running = min(conc, mr*attnDP)
	}
	prompt := s.Workload.Chat.PromptTokens
	if prompt == 0 {
		prompt = objective.DefaultPromptTokens
	}
	return kvNeed{running: running, perWorker: (running + attnDP - 1) / attnDP, attnDP: attnDP,
		prompt: prompt, maxTokens: s.Workload.Chat.MaxTokens}
}

// predict computes the effective limits for a config (ref §2 Capping and
// Pool size when unset), with KV tokens from the memory model.
func (s *Study) predict(c *Config) Prediction {
	e := s.state(s.view(c.Flags))
	return s.predictState(c, &e)
}

func (s *Study) predictState(c *Config, e *engineState) Prediction {
	p := Prediction{RequestedMaxRunningRequests: e.requested}
	perWorker := 0
	if e.requested > 0 {
		perWorker = e.requested / e.attnDP
	}
	if s.Hybrid {
		p.StateRatio = s.learn.ratio(e)
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
	kv, autoSlots := s.learn.kvTokens(s, c, e, slots, auto, perWorker, p.StateRatio)
	if auto {
		slots = autoSlots
		if slots > 0 {
			e.notes = append(e.notes, fmt.Sprintf("auto state pool ~%d slots", slots))
		}
	}
	p.StateSlots, p.KVTokens = slots, kv

	// ref §2 Capping (resolve_max_num_reqs).
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
	if obs, ok := s.learn.exactRunning(s, c); ok {
		mr = obs
	}
	p.MaxRunningRequests = mr

	if conc := s.maxConcurrency(); conc > 0 {
		switch s.Workload.Kind {
		case "matrix":
			if len(s.Workload.Matrix.Contexts) > 0 {
				p.KVTokensNeeded = slices.Min(s.Workload.Matrix.Contexts) + s.Workload.Matrix.MaxOutput
			}
		default:
			p.KVTokensNeeded = s.chatKVNeed(conc, mr, e.attnDP).tokens()
		}
	}
	p.Notes = e.notes
	return p
}

// engineRules returns the SGLang rules a config breaks.
func (s *Study) engineRules(c *Config) []Rejection {
	e := s.state(s.view(c.Flags))
	p := c.Predicted
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
		v := s.view(c.Flags)
		topk, _ := v.int("--speculative-eagle-topk", 1)
		draft, draftSet := v.int("--speculative-num-draft-tokens", 0)
		steps, stepsSet := v.int("--speculative-num-steps", 0)
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
		req := s.requestedText(&e)
		perWorker := e.requested / e.attnDP
		switch {
		case cap <= 0:
			reject("state_slots", "%s %s: %d // %d = %d: the state cache is too small to serve any request", pool, e.ratioWhy(), p.StateSlots, p.StateRatio, cap)
		case e.requested > 0 && cap < perWorker && s.OnLimitsReduced != "accept":
			reject("limits_reduced", "%s %s: %d // %d = %d < %s", pool, e.ratioWhy(), p.StateSlots, p.StateRatio, cap, req)
		}
	}
	if p.KVTokens != 0 {
		switch perWorker := e.requested / e.attnDP; {
		case p.KVTokens <= 0:
			reject("kv_capacity", "predicted KV tokens %d: no memory left for the KV cache", p.KVTokens)
		case perWorker > 0 && p.KVTokens/2 < perWorker && s.OnLimitsReduced != "accept":
			reject("limits_reduced", "predicted KV tokens %d // 2 = %d < %s", p.KVTokens, p.KVTokens/2, s.requestedText(&e))
		case p.KVTokensNeeded > p.KVTokens:
			reject("kv_capacity", "predicted KV tokens %d < %s", p.KVTokens, s.needText(p, &e))
		}
	}
	return out
}

func (s *Study) requestedText(e *engineState) string {
	req := fmt.Sprintf("--max-running-requests %d", e.requested)
	if e.mrr == 0 {
		req = fmt.Sprintf("max running requests %d (speculative default)", e.requested)
	}
	if e.attnDP > 1 {
		req += fmt.Sprintf(" // --dp-size %d = %d per DP worker", e.attnDP, e.requested/e.attnDP)
	}
	return req
}

func (s *Study) needText(p Prediction, e *engineState) string {
	if s.Workload.Kind == "matrix" {
		return fmt.Sprintf("%d needed by the smallest matrix cell (context %d + max_output %d)",
			p.KVTokensNeeded, slices.Min(s.Workload.Matrix.Contexts), s.Workload.Matrix.MaxOutput)
	}
	k := s.chatKVNeed(s.maxConcurrency(), p.MaxRunningRequests, e.attnDP)
	if k.attnDP > 1 {
		return fmt.Sprintf("%d needed per DP worker: ceil(%d running / --dp-size %d) = %d x (%d prompt + %d max_tokens)",
			p.KVTokensNeeded, k.running, k.attnDP, k.perWorker, k.prompt, k.maxTokens)
	}
	return fmt.Sprintf("%d needed: %d running x (%d prompt + %d max_tokens)", p.KVTokensNeeded,
		k.perWorker, k.prompt, k.maxTokens)
}

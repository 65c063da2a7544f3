package engine

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// LlamaCpp is llama.cpp's llama-server. Its facts cite
// docs/engines/llamacpp.md ("doc §N"), gathered from the llama.cpp tree that
// npm node-llama-cpp@3.21.1 bundles (tag v0.4.0, commit 80fb11a) and checked
// against the binary `make llama-server` builds from it; file:line
// references are that tree's.
var LlamaCpp = &Engine{
	Name:           "llamacpp",
	Title:          "llama.cpp (llama-server)",
	DefaultVersion: "v0.4.0",
	Command:        []string{"llama-server"},
	// The CPU server image; its entrypoint is llama-server. Builds are
	// tagged server-bNNNN (ggml-org's package page lists server-cuda12-b9603
	// for CUDA; the CPU image has no variant).
	Image:      "ghcr.io/ggml-org/llama.cpp:server",
	BuildImage: "ghcr.io/ggml-org/llama.cpp:server-b%s",
	// doc §2: -m, not --model-path; --alias is the name /v1/models serves.
	ModelFlag:      "-m",
	ServedNameFlag: "--alias",
	APIKeyFlag:     "--api-key",
	HostFlag:       "--host",
	PortFlag:       "--port",
	// doc §5: /metrics answers 501 without --metrics, and the token check
	// needs it; doc §4: the llama_context facts (n_ctx, n_batch, ...) are
	// logged at verbosity 4 only.
	LaunchFlags: []string{"--metrics", "--verbosity", "4"},
	// doc §2 Other inputs: every option also reads LLAMA_ARG_* (applied
	// before the command line), and the API key LLAMA_API_KEY. Builds
	// before the log options' LLAMA_ARG_LOG_* names read LLAMA_LOG_COLORS,
	// LLAMA_LOG_VERBOSITY, LLAMA_LOG_PREFIX and LLAMA_LOG_TIMESTAMPS
	// (common/arg.cpp set_env): a verbosity below 4 hides the startup facts.
	ClearEnv: []string{"LLAMA_ARG_*", "LLAMA_API_KEY", "LLAMA_LOG_*"},
	// doc §3: /health is 503 while the model loads, 200 once ready.
	HealthPath: "/health",
	// doc §3: logged only after the model loaded; its wording differs by
	// build (reLlamaReady), "listening on " is in every form.
	ReadyLine:   "listening on ",
	MetricsFlag: "--metrics",
	// doc §5: counters, never the *_seconds rate gauges (reset by every
	// scrape); requests_deferred is a gauge.
	Metrics: Metrics{
		GenerationTokens: "llamacpp:tokens_predicted_total",
		PromptTokens:     "llamacpp:prompt_tokens_total",
		Running:          "llamacpp:requests_processing",
		Queued:           "llamacpp:requests_deferred",
	},
	// doc §6: every failure exits 1 within milliseconds.
	Signatures: []Signature{
		{Class: ClassModelLoad, Rank: 2, Texts: []string{
			"failed to load model",               // llama_model_load_from_file_impl / load_model: missing, not GGUF, truncated
			"exiting due to model loading error", // server.cpp:482
			"failed to create context",           // common_init_: -np > 256, quantized V without flash attention
			"failed to create_context",           // load_model's spelling of the same
			"requires flash_attn to be enabled",  // llama-context.cpp:3698-3706
		}},
		// common_params_parse_ex (arg.cpp:762-969): unknown flags, bad
		// values and missing values, then usage; exit 1, not argparse's 2.
		{Class: ClassBadCommand, Rank: 1, ExitCodes: []int{1}, Texts: []string{
			"error: invalid argument: ",
			"error while handling argument",
			"expected value for argument",
		}},
	},
	// doc §6 port in use: server-http.cpp:460.
	PortTaken:    []string{"couldn't bind HTTP server socket"},
	NewLogParser: func() LogParser { return &llamaLog{} },
	Rules:        llamaRules{},
}

// Startup log patterns (doc §3, §4). Every line starts with a timestamp
// ("0.00.210.713 I "), so they match anywhere in the line.
var (
	reLlamaSlots   = regexp.MustCompile(`load_model: initializing, n_slots = (\d+), n_ctx_slot = (\d+)(?:, kv_unified = '(true|false)')?`)
	reLlamaContext = regexp.MustCompile(`llama_context: (n_ctx|n_batch|n_ubatch)\s+= (\d+)`)
	reLlamaSystem  = regexp.MustCompile(`system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))? / (\d+)`)
	reLlamaPool    = regexp.MustCompile(`llama threadpool init, n_threads = (\d+)`)
	reLlamaFA      = regexp.MustCompile(`resolve_fused_ops: Flash Attention (enabled|disabled)`)
	// reLlamaReady is the line logged once the model loaded (doc §3):
	// "llama_server: listening on URL" (tools/server/server.cpp:515 of the
	// v0.4.0 tree, 80fb11a), "llama_server: server is listening on URL"
	// (later tools/server/server.cpp) and "main: server is listening on URL
	// - starting the main loop" (examples/server/server.cpp builds). Not
	// "router server is listening on" (router mode, no model) nor the older
	// builds' "HTTP server is listening, hostname: ..." (before the load).
	reLlamaReady = regexp.MustCompile(`\b(?:llama_server|main): (?:server is )?listening on `)
)

// llamaLog parses llama-server's startup log.
type llamaLog struct {
	f     Facts
	slots bool // the load_model summary was seen
	ready bool
}

func (p *llamaLog) Facts() Facts { return p.f }
func (p *llamaLog) Ready() bool  { return p.ready }

func (p *llamaLog) Line(line string) {
	line = LastFrame(line)
	switch {
	case reLlamaReady.MatchString(line):
		p.ready = true
	case strings.Contains(line, "load_model: initializing"):
		if m := reLlamaSlots.FindStringSubmatch(line); m != nil && !p.slots {
			p.slots = true
			p.f.MaxRunningRequests = atoi(m[1])
			p.f.ContextLen = atoi(m[2])
			p.f.KVUnified = m[3] == "true"
		}
	case strings.Contains(line, "llama_context: "):
		// The first context is the served model's (a draft model's follows).
		if m := reLlamaContext.FindStringSubmatch(line); m != nil {
			dst := map[string]*int{"n_ctx": &p.f.MaxTotalNumTokens, "n_batch": &p.f.BatchSize, "n_ubatch": &p.f.UBatchSize}[m[1]]
			if *dst == 0 {
				*dst = atoi(m[2])
			}
		}
	case strings.Contains(line, "system_info: n_threads"):
		if m := reLlamaSystem.FindStringSubmatch(line); m != nil && p.f.Threads == 0 {
			p.f.Threads = atoi(m[1])
			if m[2] != "" {
				p.f.ThreadsBatch = atoi(m[2])
			}
		}
	case strings.Contains(line, "llama threadpool init"):
		// At the default verbosity the only thread count in the log.
		if p.f.Threads == 0 {
			p.f.Threads = submatchInt(reLlamaPool, line)
		}
	case strings.Contains(line, "resolve_fused_ops: Flash Attention"):
		if m := reLlamaFA.FindStringSubmatch(line); m != nil && p.f.FlashAttention == "" {
			p.f.FlashAttention = m[1]
		}
	}
}

// llamaRules are llama-server's rules (doc §2 defaults and clamps, §6
// failures, §8 check rules).
type llamaRules struct{}

// LlamaPromptOverhead is how many more tokens than its nominal size
// sgtune's synthetic chat prompt is to llama-server: the ChatML template and
// the prompt's preamble in the Llama-2 SPM vocabulary of `make
// llama-server`'s model (doc §6: 256 -> 291 and 64 -> 99, read from
// llamacpp:prompt_tokens_total). The rules use it until a trial tells what
// the server really counted.
const LlamaPromptOverhead = 35

// llamaMaxSeq is LLAMA_MAX_SEQ (llama-cparams.h:8): more slots fail at
// context creation.
const llamaMaxSeq = 256

// quantizedKV are the cache types that need flash attention for V (doc §2).
var quantizedKV = []string{"q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}

// llamaState is what llama-server would run with after its own defaults
// and clamps (doc §2 table; llama-context.cpp:245-302; server.cpp:152-170).
type llamaState struct {
	np        int  // slots as given (-1: auto)
	slots     int  // slots it runs (auto: 4)
	auto      bool // -np auto
	kvu       bool // one KV pool shared by all slots
	ctx       int  // -c as given (0: the model's trained context)
	perSlot   int  // --kv-unified-per-slot (0: unset)
	nctx, seq int  // total KV cells and context per slot; 0 when unknown
	batch     int  // -b (default 2048)
	ubatch    int  // -ub (default 512)
	batchSet  bool
	ubatchSet bool
	fa        string
	ctv       string
	threads   int
	tbatch    int
	tSet      bool
	tbSet     bool
	notes     []string
}

func pad256(n int) int { return (n + 255) / 256 * 256 }

func newLlamaState(v View) llamaState {
	e := llamaState{}
	e.np, _ = v.Int("--parallel", -1)
	e.slots = e.np
	if e.np < 0 {
		// server.cpp:152-157: auto is 4 slots with a unified KV cache.
		e.auto, e.slots = true, 4
		e.notes = append(e.notes, "-np auto: 4 slots sharing one KV cache")
	}
	e.kvu = v.Switch("--kv-unified", e.auto)
	e.ctx, _ = v.Int("--ctx-size", 0)
	e.perSlot, _ = v.Int("--kv-unified-per-slot", 0)
	e.batch, e.batchSet = v.Int("--batch-size", 2048)
	e.ubatch, e.ubatchSet = v.Int("--ubatch-size", 512)
	e.fa, _ = v.Str("--flash-attn")
	e.ctv, _ = v.Str("--cache-type-v")
	e.threads, e.tSet = v.Int("--threads", -1)
	e.tbatch, e.tbSet = v.Int("--threads-batch", -1)
	ctx := e.ctx
	if ctx == 0 && e.perSlot > 0 {
		// server.cpp:160-170: the pool is sized np x per-slot when -c is unset.
		ctx = e.slots * e.perSlot
	}
	if ctx > 0 && e.slots >= 1 && e.slots <= llamaMaxSeq {
		// llama-context.cpp:288-302: n_ctx padded to 256; per slot n_ctx /
		// n_seq_max padded to 256 (the whole pool when unified), and n_ctx
		// rounded to slots x that.
		e.nctx = pad256(ctx)
		e.seq = e.nctx
		if !e.kvu {
			e.seq = pad256(e.nctx / e.slots)
			e.nctx = e.seq * e.slots
		}
		if e.perSlot > 0 {
			e.seq = min(e.seq, e.perSlot) // server-context.cpp:4011-4019
		}
	}
	return e
}

// llamaSizing are the flags that decide the KV pool, the slots and the
// context per slot: configs equal in them are sized the same.
var llamaSizing = []string{"--ctx-size", "--parallel", "--kv-unified", "--kv-unified-per-slot"}

func llamaMemKey(v View) string {
	sized := View{}
	for _, name := range llamaSizing {
		if vals, ok := v[name]; ok {
			sized[name] = vals
		}
	}
	return memKey(sized, nil)
}

// Predict implements Rules: slots, KV cells and context per slot from the
// flags, or as an earlier launch with the same sizing flags reported them.
func (llamaRules) Predict(v View, s Setup, l Learned) Prediction {
	e := newLlamaState(v)
	p := Prediction{MaxRunningRequests: e.slots, KVTokens: e.nctx, SlotContext: e.seq}
	if !e.auto {
		p.RequestedMaxRunningRequests = e.np
	}
	if e.nctx > 0 {
		p.KVSource = "rule"
	}
	if l != nil {
		if o, ok := l.Exact(llamaMemKey(v)); ok {
			if o.KVTokens > 0 {
				p.KVTokens, p.KVSource = o.KVTokens, "observed"
			}
			if o.MaxRunning > 0 {
				p.MaxRunningRequests = o.MaxRunning
			}
			if o.ContextLen > 0 {
				p.SlotContext = o.ContextLen
			}
		}
	}
	notes := e.notes
	if c := s.Demand.Concurrency; c > 0 {
		prompt := llamaPrompt(s, l)
		switch {
		case s.Demand.Matrix:
			p.KVTokensNeeded = s.Demand.MinContext + s.Demand.MaxOutput
		default:
			running := c
			if p.MaxRunningRequests > 0 {
				running = min(c, p.MaxRunningRequests)
			}
			p.PromptTokens = prompt
			p.KVTokensNeeded = running * (prompt + s.Demand.MaxTokens)
		}
		if p.MaxRunningRequests > 0 && p.MaxRunningRequests < c {
			// A request waits in llama-server's queue until a slot frees
			// (llamacpp:requests_deferred, doc §5).
			notes = append(notes, fmt.Sprintf("%d slots < concurrency %d: %d requests wait for a slot", p.MaxRunningRequests, c, c-p.MaxRunningRequests))
		}
	}
	p.Notes = notes
	return p
}

// llamaPrompt is the prompt size per request in llama tokens: what the
// server counted in earlier trials, else the nominal size plus
// LlamaPromptOverhead.
func llamaPrompt(s Setup, l Learned) int {
	if l != nil && l.PromptTokens() > 0 {
		return l.PromptTokens()
	}
	return s.Demand.PromptTokens + LlamaPromptOverhead
}

// isOff reports whether a -fa value turns flash attention off (arg.cpp:1336-1346).
func isOff(fa string) bool {
	return slices.Contains([]string{"off", "disabled", "false", "0"}, fa)
}

// Check implements Rules: the llama-server rules a config breaks (doc §8).
func (llamaRules) Check(v View, s Setup, p Prediction) []Rejection {
	e := newLlamaState(v)
	var out []Rejection
	reject := func(rule, format string, args ...any) {
		out = append(out, Rejection{Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	// doc §2 table: 0 is rejected at parse time, more than LLAMA_MAX_SEQ
	// fails at context creation.
	switch {
	case e.np == 0:
		reject("parallel", "-np 0: llama-server refuses it (\"invalid value for n_parallel\", arg.cpp:2546); valid: 1..%d, or -1 for auto", llamaMaxSeq)
	case e.np > llamaMaxSeq:
		reject("parallel", "-np %d > %d slots (LLAMA_MAX_SEQ): llama-server fails to create its context", e.np, llamaMaxSeq)
	}
	// llama-context.cpp:245-247: -b is capped to n_ctx and -ub to -b
	// without a word; the config would run with other sizes than recorded.
	if e.batchSet && e.nctx > 0 && e.batch > e.nctx {
		reject("batch_size", "-b %d > the context's %d cells (-c %d): llama-server caps the batch to %d silently", e.batch, e.nctx, e.ctx, e.nctx)
	}
	if e.ubatchSet {
		batch := e.batch
		if e.nctx > 0 {
			batch = min(batch, e.nctx)
		}
		if e.ubatch > batch {
			reject("ubatch_size", "-ub %d > the batch %d (-b): llama-server caps -ub to -b silently; valid: -ub <= -b", e.ubatch, batch)
		}
	}
	// llama-context.cpp:3698-3706: exit 1 at load.
	if slices.Contains(quantizedKV, e.ctv) && isOff(e.fa) {
		reject("flash_attn", "-ctv %s (a quantized V cache) with -fa %s: llama-server exits (\"quantized V cache requires flash_attn to be enabled\"); valid: -fa on or auto", e.ctv, e.fa)
	}
	// doc §1: with more threads than cores the OpenMP threads wait for
	// each other at every barrier (-t 2 on 2 shared cores collapsed).
	if c := s.CPUsPerTrial; c > 0 {
		if e.tSet && e.threads > c {
			reject("threads", "-t %d > cpus.per_trial %d", e.threads, c)
		}
		if e.tbSet && e.tbatch > c {
			reject("threads", "-tb %d > cpus.per_trial %d", e.tbatch, c)
		}
	}
	// doc §6: a prompt that fills the slot is answered HTTP 400; prompt +
	// max_tokens beyond it ends the stream early with no error
	// (server-context.cpp:1885-1893, 3191-3197).
	if p.SlotContext > 0 && s.Demand.Concurrency > 0 {
		if s.Demand.Matrix {
			if need := s.Demand.MinContext + s.Demand.MaxOutput; need > p.SlotContext {
				reject("slot_context", "%s = %d tokens per request < %d needed by the smallest matrix cell (context %d + max_output %d)",
					slotText(&e, p), p.SlotContext, need, s.Demand.MinContext, s.Demand.MaxOutput)
			}
		} else {
			estimate := s.Demand.PromptTokens + LlamaPromptOverhead
			prompt := p.PromptTokens
			if prompt == 0 {
				prompt = estimate
			}
			counted := prompt != estimate
			how := fmt.Sprintf("%d prompt tokens (estimated: %d + %d for the chat template)", prompt, s.Demand.PromptTokens, LlamaPromptOverhead)
			if counted {
				how = fmt.Sprintf("%d prompt tokens (as the server counted)", prompt)
			}
			switch need := prompt + s.Demand.MaxTokens; {
			case prompt >= p.SlotContext:
				reject("slot_context", "%s = %d tokens per request <= %s: every request is refused (HTTP 400 exceed_context_size_error)",
					slotText(&e, p), p.SlotContext, how)
			case need > p.SlotContext:
				reject("slot_context", "%s = %d tokens per request < %s + %d max_tokens = %d: requests would stop early without an error (finish_reason length)",
					slotText(&e, p), p.SlotContext, how, s.Demand.MaxTokens, need)
			}
		}
	}
	return out
}

// slotText says where a per-slot context came from.
func slotText(e *llamaState, p Prediction) string {
	switch {
	case p.KVSource == "observed":
		return "n_ctx_slot (observed for the same -c/-np)"
	case e.kvu:
		return fmt.Sprintf("the unified context ceil256(-c %d)", e.ctx)
	case e.ctx == 0:
		return fmt.Sprintf("--kv-unified-per-slot %d", e.perSlot)
	}
	return fmt.Sprintf("ceil256(ceil256(-c %d) / -np %d)", e.ctx, e.slots)
}

// Observe implements Rules: the slots, KV cells and context per slot the
// server reported, for configs with the same sizing flags.
func (llamaRules) Observe(v View, s Setup, p Prediction, f Facts) (Observation, bool) {
	if f.MaxRunningRequests <= 0 && f.MaxTotalNumTokens <= 0 && f.ContextLen <= 0 {
		return Observation{}, false
	}
	return Observation{MemKey: llamaMemKey(v), KVTokens: f.MaxTotalNumTokens, MaxRunning: f.MaxRunningRequests,
		ContextLen: f.ContextLen}, true
}

package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// Server is the simulated SGLang HTTP front end.
type Server struct {
	p       *Profile
	pl      *Plan
	args    *Args
	eng     *Engine
	speed   float64
	log     io.Writer
	ready   atomic.Bool
	created int64
	corrupt FaultEffect
	jsonAcc float64
	toolAcc float64
	mu      sync.Mutex
	hist    map[string]*histogram
	reqSeq  atomic.Uint64
	// salt varies the simulator's per-request draws (EOS position,
	// generated values); 0 is the live server's.
	salt uint64
}

func newServer(p *Profile, pl *Plan, a *Args, eng *Engine, speed float64, log io.Writer, rules []FaultRule) *Server {
	s := &Server{p: p, pl: pl, args: a, eng: eng, speed: speed, log: log, created: time.Now().Unix(),
		hist: map[string]*histogram{
			"time_to_first_token_seconds": newHistogram([]float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80}),
			"e2e_request_latency_seconds": newHistogram([]float64{0.5, 1, 2.5, 5, 10, 20, 40, 80, 160}),
		}}
	for _, r := range rules {
		if r.Effect.Kind == "corrupt" {
			s.corrupt = r.Effect
		}
	}
	return s
}

// Handler returns the HTTP routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", s.health)
	mux.HandleFunc("/health_generate", s.health)
	mux.HandleFunc("/v1/models", s.auth(s.models))
	mux.HandleFunc("/v1/models/", s.auth(s.model))
	mux.HandleFunc("/server_info", s.auth(s.serverInfo))
	mux.HandleFunc("/get_server_info", s.auth(s.serverInfo))
	mux.HandleFunc("/model_info", s.auth(s.modelInfo))
	mux.HandleFunc("/get_model_info", s.auth(s.modelInfo))
	mux.HandleFunc("/flush_cache", s.auth(s.flushCache))
	mux.HandleFunc("/v1/chat/completions", s.auth(s.chat))
	mux.HandleFunc("/metrics", s.metrics)
	return mux
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.pl.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+s.pl.APIKey {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"Unauthorized"}`)
			return
		}
		h(w, r)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func errorBody(msg string, code int) map[string]any {
	typ := "BadRequestError"
	if code == 404 {
		typ = "NotFoundError"
	}
	return map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": code}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if !s.ready.Load() || s.eng.Crashed() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if s.pl.Dialect == EngineVLLM {
		// vLLM's /health asks the engine core whether it is alive; it runs
		// no request (src: entrypoints/openai/api_server.py).
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.eng.RecentlyActive(time.Duration(20 / s.speed * float64(time.Second))) {
		w.WriteHeader(http.StatusOK)
		return
	}
	seq := &Seq{Prompt: 1, Limit: 1, Health: true, Notify: make(chan struct{}, 1)}
	if err := s.eng.Submit(seq); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	t := time.NewTimer(time.Duration(20 / s.speed * float64(time.Second)))
	defer t.Stop()
	for {
		select {
		case <-seq.Notify:
			if seq.Gen() > 0 || seq.Done() {
				if seq.Err() != nil {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusOK)
				return
			}
		case <-t.C:
			s.eng.Abort(seq)
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.")
			return
		case <-r.Context().Done():
			s.eng.Abort(seq)
			return
		}
	}
}

func (s *Server) modelCard() map[string]any {
	owner := "sglang"
	if s.pl.Dialect == EngineVLLM {
		owner = "vllm"
	}
	return map[string]any{"id": s.pl.ServedModelName, "object": "model", "created": s.created, "owned_by": owner,
		"root": s.pl.ServedModelName, "parent": nil, "max_model_len": s.pl.ContextLen}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"object": "list", "data": []any{s.modelCard()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	if name != s.pl.ServedModelName {
		body := errorBody(fmt.Sprintf("The model '%s' does not exist", name), 404)
		body["code"] = "model_not_found"
		writeJSON(w, 404, body)
		return
	}
	writeJSON(w, 200, s.modelCard())
}

func (s *Server) modelInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"model_path": s.pl.ModelPath, "tokenizer_path": s.pl.ModelPath, "is_generation": true,
		"preferred_sampling_params": nil, "weight_version": "default", "has_image_understanding": false, "has_audio_understanding": false,
		"model_type": "glm5_flash", "architectures": []string{s.p.Model.Architecture}})
}

// serverArgs is asdict(server_args) as the tokenizer process sees it, or,
// internal, as a scheduler sees it (/server_info's internal_states).
func (s *Server) serverArgs(internal bool) map[string]any {
	m := map[string]any{
		"model_path": s.pl.ModelPath, "tokenizer_path": s.pl.ModelPath, "served_model_name": s.pl.ServedModelName,
		"host": s.pl.Host, "port": s.pl.Port, "tp_size": s.pl.TP, "ep_size": s.pl.EP, "dp_size": s.pl.DP, "pp_size": s.pl.PP,
		"mem_fraction_static": s.pl.MemFraction, "chunked_prefill_size": s.pl.ChunkedPrefill,
		"max_prefill_tokens": s.pl.MaxPrefillTokens, "context_length": nullIfZero(s.args.Int("context_length", 0)),
		"disable_radix_cache": !s.pl.Radix, "disable_cuda_graph": !s.pl.CUDAGraph, "disable_overlap_schedule": !s.pl.Overlap,
		"max_mamba_cache_size": nullIfZero(s.args.Int("max_mamba_cache_size", 0)), "mamba_radix_cache_strategy": s.pl.Strategy,
		"kv_cache_dtype": s.pl.KVDtype, "speculative_algorithm": nullIfEmpty(s.pl.SpecAlgorithm),
		"speculative_num_steps": nullIfZero(s.pl.SpecSteps), "speculative_eagle_topk": nullIfZero(s.pl.SpecTopK),
		"speculative_num_draft_tokens": nullIfZero(s.pl.SpecDraftTokens), "cuda_graph_max_bs": s.pl.GraphMaxBS,
		"reasoning_parser": nullIfEmpty(s.pl.ReasoningParser), "tool_call_parser": nullIfEmpty(s.pl.ToolCallParser),
		"enable_metrics": s.pl.EnableMetrics, "api_key": nil, "max_running_requests": nullIfZero(s.pl.RequestedMRR),
	}
	for k, v := range s.args.Values {
		if _, ok := m[k]; !ok && !strings.HasPrefix(k, "sim_") && k != "api_key" {
			m[k] = v
		}
	}
	// The scheduler writes the pool size it resolved into its own
	// server_args; a dense model has no pool, so its value stays as
	// launched (null unless the flag was given), as at the top level.
	if internal && s.p.Model.Hybrid {
		m["max_mamba_cache_size"] = s.pl.StateSlots
	}
	return m
}

func nullIfZero(v int) any {
	if v == 0 {
		return nil
	}
	return v
}

func nullIfEmpty(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func (s *Server) serverInfo(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/get_server_info" {
		fmt.Fprintf(s.log, "[%s] Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead.\n", stamp())
	}
	st := s.eng.Snapshot()
	s.observe(st)
	info := s.serverArgs(false)
	internal := s.serverArgs(true)
	internal["last_gen_throughput"] = st.GenThroughput
	internal["memory_usage"] = map[string]any{"weight": round2(s.p.Memory.WeightsGB / float64(s.pl.TP)),
		"kvcache": round2(float64(s.pl.KVTokens) / s.p.Memory.KVTokensPerGB), "token_capacity": s.pl.KVTokens, "graph": 1.6}
	internal["effective_max_running_requests_per_dp"] = s.pl.EffectiveMRR
	if s.pl.SpecAlgorithm != "" {
		internal["avg_spec_accept_length"] = st.AcceptLen
	}
	info["status"] = "ready"
	info["max_total_num_tokens"] = s.pl.KVTokens
	info["max_req_input_len"] = s.pl.ContextLen - 5
	info["internal_states"] = []any{internal}
	info["version"] = "0.5.21"
	info["kv_events"] = nil
	// Not an SGLang field: the devices this server was given.
	info["sim_cuda_visible_devices"] = os.Getenv("CUDA_VISIBLE_DEVICES")
	writeJSON(w, 200, info)
}

func round2(f float64) float64 { return float64(int(f*100+0.5)) / 100 }

func (s *Server) flushCache(w http.ResponseWriter, r *http.Request) {
	ok, q, run := s.eng.FlushCache()
	if ok {
		fmt.Fprintf(s.log, "[%s%s] Cache flushed successfully!\n", stamp(), s.eng.logPf)
		w.WriteHeader(200)
		io.WriteString(w, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
		return
	}
	fmt.Fprintf(s.log, "[%s%s] Cache not flushed because there are pending requests. #queue-req: %d, #running-req: %d\n", stamp(), s.eng.logPf, q, run)
	w.WriteHeader(400)
	io.WriteString(w, "Cache not flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
}

// chatRequest is the subset of the OpenAI/SGLang chat request the sim reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
	IgnoreEOS           bool `json:"ignore_eos"`
	ResponseFormat      *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
		Schema json.RawMessage `json:"schema"`
	} `json:"response_format"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	SeparateReasoning  *bool           `json:"separate_reasoning"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
}

// messageText flattens a message's content (string or parts).
func messageText(raw json.RawMessage) string {
	// Fast path: a plain string without escapes is its own text (a 1M-token
	// prompt would otherwise be scanned and copied again here).
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && plainJSONString(raw[1:n-1]) {
		return string(raw[1 : n-1])
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// plainJSONString reports whether b, the inside of a JSON string the
// decoder has already validated, has no escapes or non-ASCII bytes.
func plainJSONString(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= 0x80 || c < 0x20 {
			return false
		}
	}
	return true
}

// CountTokens estimates tokens as words plus punctuation runs: the sim's
// tokenizer (sgtune's synthetic prompts are about one token per word).
func CountTokens(s string) int {
	n, in := 0, false
	i := 0
	// ASCII fast path (long prompts are ASCII); the rest rune by rune.
	for ; i < len(s) && s[i] < 0x80; i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			in = false
		default:
			if !in {
				n++
				in = true
			}
		}
	}
	for _, r := range s[i:] {
		if unicode.IsSpace(r) {
			in = false
			continue
		}
		if !in {
			n++
			in = true
		}
	}
	return n
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	recv := time.Now()
	if r.Method != http.MethodPost {
		writeJSON(w, 405, errorBody("Method Not Allowed", 405))
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, errorBody("Invalid request body: "+err.Error(), 400))
		return
	}
	if !s.ready.Load() {
		writeJSON(w, 503, errorBody("The server is not ready yet.", 503))
		return
	}
	seq, plan, code, msg := s.prepare(&req)
	if code != 0 {
		writeJSON(w, code, errorBody(msg, code))
		return
	}
	seq.Notify = make(chan struct{}, 1)
	seq.Received = recv
	if err := s.eng.Submit(seq); err != nil {
		writeJSON(w, 500, errorBody("engine unavailable", 500))
		return
	}
	id := newID()
	if req.Stream {
		incl := s.pl.DefaultIncludeUsage || (req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		cont := req.StreamOptions != nil && req.StreamOptions.ContinuousUsageStats
		s.stream(w, r, seq, plan, id, incl, cont)
	} else {
		s.complete(w, r, seq, plan, id)
	}
}

// prepare turns a chat request into the engine's sequence and the answer
// it will stream, as SGLang's tokenizer manager does: prompt tokens, limit,
// EOS draw and output plan. A refused request returns its HTTP status and
// message. Shared by the HTTP handler and the virtual-time loop.
func (s *Server) prepare(req *chatRequest) (seq *Seq, plan *outputPlan, code int, msg string) {
	return s.prepareParsed(req, readPrompt(req))
}

// promptInfo is what the tokenizer makes of a request's messages.
type promptInfo struct {
	tokens   int    // prompt tokens, tools included
	key      uint64 // hash of the whole prompt (seeds the answer's draws)
	lastUser string // the last user message
	// chain is the prompt's prefix-cache chain: one hash per full block
	// of cacheBlockTokens tokens, each naming the prefix up to its end.
	chain []uint64
}

// readPrompt renders the messages as the chat template does, counts their
// tokens and hashes them into the prefix-cache chain, in one pass over the
// text (a 1M-token prompt is read once). The tokens are, in order: the
// tool definitions' share (the template puts tools first), then for each
// message 3 special tokens and the words of "role: content\n", then the
// 2 tokens that open the answer.
func readPrompt(req *chatRequest) promptInfo {
	var prompt strings.Builder
	lastUser := ""
	cb := newChainBuilder()
	toolTok := 0
	for _, t := range req.Tools {
		n := (len(t.Function.Name) + len(t.Function.Description) + len(t.Function.Parameters)) / 4
		// The definition's tokens stand for its text: equal tool lists
		// share them, different ones part at the first tool.
		h := hashString(t.Function.Name + "\x00" + t.Function.Description + "\x00" + string(t.Function.Parameters))
		for i := range n {
			cb.marker('t', h+uint64(i))
		}
		toolTok += n
	}
	words := 0
	for _, m := range req.Messages {
		txt := messageText(m.Content)
		if m.Role == "user" {
			lastUser = txt
		}
		start := prompt.Len()
		prompt.WriteString(m.Role)
		prompt.WriteString(": ")
		prompt.WriteString(txt)
		prompt.WriteString("\n")
		for i := range 3 {
			cb.marker('m', uint64(i))
		}
		// The message ends in a newline: no word runs into the next.
		words += cb.words(prompt.String()[start:])
	}
	cb.marker('a', 0)
	cb.marker('a', 1)
	ptxt := prompt.String()
	promptTok := words + 3*len(req.Messages) + 2 + toolTok
	return promptInfo{tokens: promptTok, key: hashString(ptxt), lastUser: lastUser, chain: cb.chain}
}

// prepareParsed is prepare with the prompt already read.
func (s *Server) prepareParsed(req *chatRequest, pi promptInfo) (seq *Seq, plan *outputPlan, code int, msg string) {
	promptTok, lastUser := pi.tokens, pi.lastUser
	maxTok := 0
	switch {
	case req.MaxCompletionTokens != nil:
		maxTok = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		maxTok = *req.MaxTokens
	}
	ctxLen := s.pl.ContextLen
	if promptTok >= ctxLen {
		return nil, nil, 400, fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", promptTok, ctxLen)
	}
	if maxTok > 0 && promptTok+maxTok > ctxLen {
		return nil, nil, 400, fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.", ctxLen, promptTok+maxTok, promptTok, maxTok)
	}
	if maxTok < 0 {
		return nil, nil, 400, "max_tokens must be at least 0"
	}
	n := s.reqSeq.Add(1)
	key := pi.key
	seed := key ^ n*0x9e3779b97f4a7c15 ^ s.salt
	plan, errMsg := s.planOutput(req, lastUser, seed)
	if errMsg != "" {
		return nil, nil, 400, errMsg
	}
	seq = &Seq{Prompt: promptTok, PromptKey: key, Chain: pi.chain}
	natural := maxTok == 0
	if natural {
		maxTok = min(ctxLen-promptTok, 4096)
	}
	seq.Limit = max(maxTok, 0)
	if plan.finite != nil {
		seq.EOSAt = len(plan.finite)
	} else if !req.IgnoreEOS {
		if natural {
			seq.EOSAt = 128 + int(seed%384)
		} else if p := s.p.Perf.EOSPerToken; p > 0 {
			// Geometric draw of the EOS position.
			u := float64(seed>>11) / float64(1<<53)
			k := int(logOneMinus(u) / logOneMinus(p))
			if k >= 1 && k < seq.Limit {
				seq.EOSAt = k
			}
		}
	}
	if seq.Limit == 0 {
		seq.Limit = 1
	}
	return seq, plan, 0, ""
}

func logOneMinus(x float64) float64 {
	if x >= 1 {
		x = 0.999999999
	}
	return math.Log1p(-x)
}

// planOutput decides the answer: structured JSON, a tool call, or free text.
func (s *Server) planOutput(req *chatRequest, prompt string, seed uint64) (*outputPlan, string) {
	o := &outputPlan{seed: seed}
	thinking := s.pl.ReasoningParser != "" && (req.SeparateReasoning == nil || *req.SeparateReasoning)
	if v, ok := req.ChatTemplateKwargs["enable_thinking"].(bool); ok && !v {
		thinking = false
	}
	var pre []piece
	if thinking {
		for i := 0; i < 8; i++ {
			p := (&outputPlan{seed: seed, reasonN: 8}).pieceAt(i)
			pre = append(pre, p)
		}
	}
	toolChoice := "auto"
	forced := ""
	if len(req.ToolChoice) > 0 {
		var str string
		if json.Unmarshal(req.ToolChoice, &str) == nil {
			toolChoice = str
		} else {
			var obj struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if json.Unmarshal(req.ToolChoice, &obj) == nil && obj.Function.Name != "" {
				forced = obj.Function.Name
				toolChoice = "required"
			}
		}
	}
	if rf := req.ResponseFormat; rf != nil && (rf.Type == "json_schema" || rf.Type == "json_object") {
		var schema json.RawMessage
		switch {
		case rf.Type == "json_object":
			schema = json.RawMessage(`{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}`)
		case rf.JSONSchema != nil && len(rf.JSONSchema.Schema) > 0:
			schema = rf.JSONSchema.Schema
		case len(rf.Schema) > 0:
			schema = rf.Schema
		default:
			return nil, "schema_ is required for json_schema response format request."
		}
		txt, err := GenerateJSON(schema, prompt, seed)
		if err != nil {
			return nil, "Invalid JSON schema: " + err.Error()
		}
		if s.corruptNext(&s.jsonAcc, s.corrupt.JSONFrac) {
			txt = corruptJSON(txt)
		}
		o.finite = append(pre, chop(pContent, txt)...)
		return o, ""
	}
	if len(req.Tools) > 0 && toolChoice != "none" {
		defs := make([]toolDef, len(req.Tools))
		for i, t := range req.Tools {
			defs[i] = toolDef{Name: t.Function.Name, Description: t.Function.Description, Params: t.Function.Parameters}
		}
		idx := chooseTool(defs, prompt)
		for i, d := range defs {
			if d.Name == forced {
				idx = i
			}
		}
		params := defs[idx].Params
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		args, err := GenerateJSON(params, prompt, seed)
		if err != nil {
			return nil, "Invalid tool parameters schema: " + err.Error()
		}
		broken := s.corruptNext(&s.toolAcc, s.corrupt.ToolFrac)
		if s.pl.ToolCallParser == "" || broken {
			// No parser (or the parser failed): the raw call text is content.
			raw := fmt.Sprintf("<tool_call>%s\n", defs[idx].Name)
			var m map[string]any
			json.Unmarshal([]byte(args), &m)
			for _, k := range slices.Sorted(maps.Keys(m)) {
				v, _ := json.Marshal(m[k])
				raw += fmt.Sprintf("<arg_key>%s</arg_key>\n<arg_value>%s</arg_value>\n", k, strings.Trim(string(v), `"`))
			}
			if broken {
				raw = strings.Replace(raw, "<tool_call>", "<tool_call", 1)
			}
			raw += "</tool_call>"
			o.finite = append(pre, chop(pContent, raw)...)
			return o, ""
		}
		o.toolName = defs[idx].Name
		o.toolID = "call_" + newID()[:24]
		o.finite = append(pre, piece{pToolHdr, escapeJSON(defs[idx].Name)})
		o.finite = append(o.finite, chop(pToolArg, args)...)
		return o, ""
	}
	if thinking {
		o.reasonN = s.p.Model.ReasoningPct * 256 / 100
	}
	return o, ""
}

func (s *Server) corruptNext(acc *float64, frac float64) bool {
	if frac <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	*acc += frac
	if *acc >= 1-1e-9 {
		*acc -= 1
		return true
	}
	return false
}

// corruptJSON breaks a JSON document the way a broken kernel does:
// repeated garbage tokens and a missing close.
func corruptJSON(txt string) string {
	cut := len(txt) * 2 / 3
	return txt[:cut] + `!!!!!!`
}

// chunkWriter builds SSE frames from pre-built byte templates.
type chunkWriter struct {
	prefix []byte // data: {"id":...,"choices":[{"index":0,"delta":
	buf    []byte
	// continuous_usage_stats: usage on every chunk.
	continuous bool
	prompt     int
	gen        int
}

// tail closes a delta chunk, with usage when continuous usage is asked.
func (c *chunkWriter) tail() {
	if !c.continuous {
		c.buf = append(c.buf, chunkTail...)
		return
	}
	c.buf = append(c.buf, `,"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":`...)
	c.buf = strconv.AppendInt(c.buf, int64(c.prompt), 10)
	c.buf = append(c.buf, `,"total_tokens":`...)
	c.buf = strconv.AppendInt(c.buf, int64(c.prompt+c.gen), 10)
	c.buf = append(c.buf, `,"completion_tokens":`...)
	c.buf = strconv.AppendInt(c.buf, int64(c.gen), 10)
	c.buf = append(c.buf, "}}\n\n"...)
}

const chunkTail = `,"logprobs":null,"finish_reason":null,"matched_stop":null}]}` + "\n\n"

func newChunkWriter(id, model string, created int64) *chunkWriter {
	m, _ := json.Marshal(model)
	p := `data: {"id":"` + id + `","object":"chat.completion.chunk","created":` + strconv.FormatInt(created, 10) +
		`,"model":` + string(m) + `,"choices":[{"index":0,"delta":`
	return &chunkWriter{prefix: []byte(p), buf: make([]byte, 0, 1024)}
}

func (c *chunkWriter) role() {
	c.buf = append(c.buf, c.prefix...)
	c.buf = append(c.buf, `{"reasoning_content":null,"role":"assistant","content":""}`...)
	c.tail()
}

func (c *chunkWriter) text(kind pieceKind, txt string) {
	c.buf = append(c.buf, c.prefix...)
	if kind == pReason {
		c.buf = append(c.buf, `{"reasoning_content":"`...)
		c.buf = append(c.buf, txt...)
		c.buf = append(c.buf, `"}`...)
	} else {
		c.buf = append(c.buf, `{"reasoning_content":null,"content":"`...)
		c.buf = append(c.buf, txt...)
		c.buf = append(c.buf, `"}`...)
	}
	c.tail()
}

func (c *chunkWriter) tool(id, name, args string) {
	c.buf = append(c.buf, c.prefix...)
	c.buf = append(c.buf, `{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":`...)
	if id == "" {
		c.buf = append(c.buf, `null`...)
	} else {
		c.buf = append(c.buf, '"')
		c.buf = append(c.buf, id...)
		c.buf = append(c.buf, '"')
	}
	c.buf = append(c.buf, `,"index":0,"type":"function","function":{"name":`...)
	if name == "" {
		c.buf = append(c.buf, `null`...)
	} else {
		c.buf = append(c.buf, '"')
		c.buf = append(c.buf, name...)
		c.buf = append(c.buf, '"')
	}
	c.buf = append(c.buf, `,"arguments":"`...)
	c.buf = append(c.buf, args...)
	c.buf = append(c.buf, `"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`+"\n\n"...)
}

func (c *chunkWriter) finish(reason string, matched any) {
	c.buf = append(c.buf, c.prefix...)
	m, _ := json.Marshal(matched)
	c.buf = append(c.buf, `{"reasoning_content":null},"logprobs":null,"finish_reason":"`...)
	c.buf = append(c.buf, reason...)
	c.buf = append(c.buf, `","matched_stop":`...)
	c.buf = append(c.buf, m...)
	c.buf = append(c.buf, "}]}\n\n"...)
}

func (c *chunkWriter) usage(prompt, completion, reasoning, cached int, report bool) {
	// The usage chunk carries "choices":[] instead of a delta.
	p := c.prefix[:len(c.prefix)-len(`[{"index":0,"delta":`)]
	c.buf = append(c.buf, p...)
	details := "null"
	if report && cached > 0 {
		details = fmt.Sprintf(`{"cached_tokens":%d}`, cached)
	}
	c.buf = append(c.buf, fmt.Sprintf(`[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":%s,"reasoning_tokens":%d}}`+"\n\n",
		prompt, prompt+completion, completion, details, reasoning)...)
}

func (s *Server) finishFields(seq *Seq, plan *outputPlan) (string, any) {
	reason := seq.Finish()
	var matched any
	if reason == "stop" {
		matched = s.p.Model.EOSTokenID
	}
	if plan.toolName != "" && reason == "stop" {
		reason = "tool_calls"
		matched = nil
	}
	return reason, matched
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, seq *Seq, plan *outputPlan, id string, inclUsage, continuous bool) {
	fl, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	cw := newChunkWriter(id, s.pl.ServedModelName, time.Now().Unix())
	cw.continuous = continuous
	cw.prompt = seq.Prompt
	sent, reasoning := 0, 0
	for {
		select {
		case <-seq.Notify:
		case <-r.Context().Done():
			s.eng.Abort(seq)
			return
		}
		if seq.Err() != nil {
			// The engine died: the connection drops without a final chunk.
			panic(http.ErrAbortHandler)
		}
		// Read done before gen: gen is final once done is set.
		done := seq.Done()
		g := seq.Gen()
		if g > sent {
			if sent == 0 {
				cw.role()
			}
			// Merge this step's tokens per kind into one chunk each.
			var cur pieceKind
			var txt strings.Builder
			flush := func() {
				if txt.Len() == 0 && cur != pToolHdr {
					return
				}
				switch cur {
				case pToolHdr:
					cw.tool(plan.toolID, txt.String(), "")
				case pToolArg:
					cw.tool("", "", txt.String())
				default:
					cw.text(cur, txt.String())
				}
				txt.Reset()
			}
			cw.gen = g
			for i := sent; i < g; i++ {
				p := plan.at(i)
				if p.kind == pReason {
					reasoning++
				}
				if p.kind != cur || p.kind == pToolHdr {
					flush()
					cur = p.kind
				}
				txt.WriteString(p.text)
			}
			flush()
			sent = g
		}
		if done {
			reason, matched := s.finishFields(seq, plan)
			cw.finish(reason, matched)
			if inclUsage {
				cw.usage(seq.Prompt, g, reasoning, seq.Cached, s.pl.EnableCacheReport)
			}
			cw.buf = append(cw.buf, "data: [DONE]\n\n"...)
		}
		if len(cw.buf) > 0 {
			if _, err := w.Write(cw.buf); err != nil {
				s.eng.Abort(seq)
				return
			}
			cw.buf = cw.buf[:0]
			if fl != nil {
				fl.Flush()
			}
		}
		if done {
			return
		}
	}
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, seq *Seq, plan *outputPlan, id string) {
	for !seq.Done() {
		select {
		case <-seq.Notify:
		case <-r.Context().Done():
			s.eng.Abort(seq)
			return
		}
	}
	if seq.Err() != nil {
		panic(http.ErrAbortHandler)
	}
	g := seq.Gen()
	content, reasoning, args, nReason := plan.assemble(g)
	msg := map[string]any{"role": "assistant", "content": nil, "reasoning_content": nil, "tool_calls": nil}
	if content != "" || plan.toolName == "" {
		msg["content"] = content
	}
	if reasoning != "" {
		msg["reasoning_content"] = reasoning
	}
	if plan.toolName != "" {
		msg["tool_calls"] = []any{map[string]any{"id": plan.toolID, "index": 0, "type": "function",
			"function": map[string]any{"name": plan.toolName, "arguments": args}}}
	}
	reason, matched := s.finishFields(seq, plan)
	var details any
	if s.pl.EnableCacheReport && seq.Cached > 0 {
		details = map[string]any{"cached_tokens": seq.Cached}
	}
	writeJSON(w, 200, map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": s.pl.ServedModelName,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": reason, "matched_stop": matched}},
		"usage": map[string]any{"prompt_tokens": seq.Prompt, "total_tokens": seq.Prompt + g, "completion_tokens": g,
			"prompt_tokens_details": details, "reasoning_tokens": nReason},
	})
}

func unescapeJSON(s string) string {
	if !strings.ContainsRune(s, '\\') {
		return s
	}
	var out string
	if json.Unmarshal([]byte(`"`+s+`"`), &out) != nil {
		return s
	}
	return out
}

// histogram is a Prometheus histogram.
type histogram struct {
	bounds []float64
	counts []uint64
	sum    float64
	n      uint64
}

func newHistogram(b []float64) *histogram {
	return &histogram{bounds: b, counts: make([]uint64, len(b))}
}

func (h *histogram) add(v float64) {
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
		}
	}
	h.sum += v
	h.n++
}

func (s *Server) observe(st Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range st.TTFT {
		s.hist["time_to_first_token_seconds"].add(v)
	}
	for _, v := range st.E2E {
		s.hist["e2e_request_latency_seconds"].add(v)
	}
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if !s.pl.EnableMetrics {
		w.WriteHeader(404)
		io.WriteString(w, `{"detail":"Not Found"}`)
		return
	}
	st := s.eng.Snapshot()
	s.observe(st)
	if s.pl.Dialect == EngineVLLM {
		s.vllmMetrics(w, st)
		return
	}
	lbl := fmt.Sprintf(`engine_type="unified",model_name=%q,moe_ep_rank="0",pp_rank="0",tp_rank="0"`, s.pl.ServedModelName)
	clbl := fmt.Sprintf(`engine_type="unified",model_name=%q`, s.pl.ServedModelName)
	var b strings.Builder
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP sglang:%s %s\n# TYPE sglang:%s gauge\nsglang:%s{%s} %g\n", name, help, name, name, lbl, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP sglang:%s %s\n# TYPE sglang:%s counter\nsglang:%s{%s} %g\n", name, help, name, name, clbl, v)
	}
	usage := float64(st.UsedTokens) / float64(s.pl.KVTokens)
	gauge("num_running_reqs", "The number of running requests.", float64(st.Running))
	gauge("num_queue_reqs", "The number of requests in the waiting queue.", float64(st.Queued))
	gauge("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0)
	gauge("gen_throughput", "The generation throughput (token/s).", st.GenThroughput)
	hit := 0.0
	if st.PromptTok > 0 {
		hit = float64(st.CachedTok) / float64(st.PromptTok)
	}
	gauge("cache_hit_rate", "The prefix cache hit rate.", hit)
	gauge("token_usage", "The token usage.", usage)
	gauge("full_token_usage", "The token usage for full attention layers.", usage)
	// SGLang exports mamba_usage for every model (ref §4 /metrics) but
	// sets it only for a hybrid one: a dense model's reads 0.
	mamba := 0.0
	if s.p.Model.Hybrid {
		mamba = float64(st.Running*s.pl.Ratio) / float64(max(1, s.pl.StateSlots))
	}
	gauge("mamba_usage", "The mamba state usage.", mamba)
	gauge("num_used_tokens", "The number of used tokens.", float64(st.UsedTokens))
	gauge("is_cuda_graph", "Whether the batch is using CUDA graph.", b2f(s.pl.CUDAGraph))
	gauge("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", float64(s.pl.KVTokens))
	gauge("num_retracted_reqs", "The number of retracted requests.", 0)
	if s.pl.SpecAlgorithm != "" {
		gauge("spec_accept_length", "The average acceptance length of speculative decoding.", st.AcceptLen)
		gauge("spec_accept_rate", "The average acceptance rate of speculative decoding.", (st.AcceptLen-1)/float64(max(1, s.pl.SpecSteps)))
		gauge("spec_num_steps", "The number of speculative decoding steps.", float64(s.pl.SpecSteps))
		gauge("spec_num_draft_tokens", "The number of speculative draft tokens.", float64(s.pl.SpecDraftTokens))
	}
	counter("prompt_tokens_total", "Number of prefill tokens processed.", float64(st.PromptTok))
	counter("generation_tokens_total", "Number of generation tokens processed.", float64(st.GenTokens))
	counter("num_requests_total", "Number of requests processed.", float64(st.Requests))
	counter("num_aborted_requests_total", "Number of requests aborted.", float64(st.Aborted))
	fmt.Fprintf(&b, "# HELP sglang:cached_tokens_total Number of cached prompt tokens.\n# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{cache_source=\"device\",%s} %d\n", clbl, st.CachedTok)
	s.writeHistograms(&b, "sglang:", clbl)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	io.WriteString(w, b.String())
}

// writeHistograms writes the latency histograms in Prometheus' text format,
// each metric named with the engine's prefix ("sglang:", "vllm:") and
// labelled lbl.
func (s *Server) writeHistograms(b *strings.Builder, prefix, lbl string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(s.hist)) {
		h := s.hist[name]
		m := prefix + name
		fmt.Fprintf(b, "# HELP %s Histogram of %s.\n# TYPE %s histogram\n", m, name, m)
		for i, bd := range h.bounds {
			fmt.Fprintf(b, "%s_bucket{%s,le=\"%g\"} %d\n", m, lbl, bd, h.counts[i])
		}
		fmt.Fprintf(b, "%s_bucket{%s,le=\"+Inf\"} %d\n%s_sum{%s} %g\n%s_count{%s} %d\n", m, lbl, h.n, m, lbl, h.sum, m, lbl, h.n)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// listen opens the server socket.
func listen(host string, port int) (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
}

// serve runs the HTTP server until ctx ends.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		srv.Close()
		<-errc
		return nil
	case err := <-errc:
		return err
	}
}

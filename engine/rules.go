package engine

// Rules are an engine's arithmetic: what limits it would run a config with,
// and which configs cannot work. They are pure functions of their inputs;
// what earlier trials taught comes in through a Learned.
type Rules interface {
	// Predict returns the limits the engine would run a config with. l may
	// be nil (nothing learned yet: the rules and the memory hint alone).
	Predict(v View, s Setup, l Learned) Prediction
	// Check returns the rules the config breaks, given its prediction.
	Check(v View, s Setup, p Prediction) []Rejection
	// Observe turns a launched config's startup facts into what a Learned
	// keeps; ok is false when the facts teach nothing.
	Observe(v View, s Setup, p Prediction, f Facts) (Observation, bool)
}

// Setup is what the rules need beyond a config's flags: the study's GPUs,
// model, memory hint and workload.
type Setup struct {
	GPUsPerTrial int
	// CPUsPerTrial is how many CPU cores one trial's server may use (0:
	// not said; thread counts are then not checked).
	CPUsPerTrial int
	// Hybrid: the model has a linear-attention/mamba state pool.
	Hybrid bool
	// MoE: the model has mixture-of-experts layers (model.moe), so expert
	// parallelism can apply.
	MoE bool
	// AcceptReduced: a config whose limits the engine would reduce below
	// what was asked is launched anyway (on_limits_reduced: accept).
	AcceptReduced bool
	Memory        Memory
	Demand        Demand
}

// Demand is what the workload asks of the engine.
type Demand struct {
	Matrix bool
	// Concurrency is the most requests the workload keeps in flight.
	Concurrency int
	// PromptTokens and MaxTokens size one chat request (nominal figures;
	// a Learned may know what the server really counted).
	PromptTokens, MaxTokens int
	// MinContext and MaxOutput size the smallest matrix cell.
	MinContext, MaxOutput int
}

// Memory is the study's KV-capacity hint (the memory: section), in KV-token
// units, taken from one startup log and the seed's measured slopes. See
// docs/study-file.md.
type Memory struct {
	RefKVTokens         int     // reference.kv_tokens
	RefMemFraction      float64 // reference.mem_fraction_static
	RefStateSlots       int     // reference.state_slots
	PerStateSlot        float64 // kv_tokens_per_state_slot
	PerMemFractionPoint float64 // kv_tokens_per_mem_fraction_point (per 0.01)
	SpecFixed           float64 // speculative_kv_tokens
	PerSpecState        float64 // kv_tokens_per_speculative_state
}

// Known reports whether the hint was given.
func (m Memory) Known() bool { return m.RefKVTokens > 0 }

// Prediction is what the engine rules predict for a config.
type Prediction struct {
	RequestedMaxRunningRequests int `json:"requested_max_running_requests"`
	MaxRunningRequests          int `json:"max_running_requests"`
	StateSlots                  int `json:"state_slots"`
	StateRatio                  int `json:"state_ratio"`
	KVTokens                    int `json:"kv_tokens"`
	// KVTokensErr is the standard error of a KV-token prediction fitted to
	// earlier trials (0 for a rule, a hint or an exact observation).
	KVTokensErr int `json:"kv_tokens_err,omitempty"`
	// KVSource says where KVTokens came from: observed, fitted, hint.
	KVSource string `json:"kv_source,omitempty"`
	// KVTokensNeeded is what one request of the workload needs: prompt +
	// max tokens (a matrix: its smallest cell); 0 when unknown.
	KVTokensNeeded int `json:"kv_tokens_needed,omitempty"`
	// PromptTokens is the prompt size per request the need assumed.
	PromptTokens int `json:"prompt_tokens,omitempty"`
	// SlotContext is the context one request may use (llama.cpp's
	// n_ctx_slot); 0 when unknown or not per request.
	SlotContext int `json:"slot_context,omitempty"`
	// Notes list the engine's auto-adjustments the prediction assumed.
	Notes []string `json:"notes,omitempty"`
}

// Rejection explains why a config cannot work, with its numbers.
type Rejection struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Observation is what one launched config taught: its memory sizing key,
// the memory model's features and the facts the engine reported.
type Observation struct {
	// MemKey identifies configs whose memory sizing is the same.
	MemKey string
	// X are the memory model's features (engine-defined, one length per
	// engine); Prior is the hint's KV prediction for X (0 without a hint).
	X     []float64
	Prior float64
	// KVTokens, MaxRunning and StateSlots are what the engine reported;
	// ContextLen its context per request (0: not reported).
	KVTokens, MaxRunning, StateSlots, ContextLen int
	// RatioKey and Ratio: a state ratio the caps revealed (0: none).
	RatioKey string
	Ratio    int
}

// Learned is what earlier trials of a study taught about its configs. The
// search owns it; the rules only read it.
type Learned interface {
	// Exact returns the latest observation with the same memory key.
	Exact(memKey string) (Observation, bool)
	// KV predicts KV tokens for features x whose hint prediction is prior
	// (0: no hint) from the observations: prior plus a fitted residual, or
	// a direct fit without a hint. ok is false when nothing fits yet.
	KV(x []float64, prior float64) (kv, stderr float64, ok bool)
	// Ratio returns a learned state ratio for a ratio key.
	Ratio(key string) (int, bool)
	// PromptTokens is the prompt size per request the server counted in
	// earlier trials (0 when unknown).
	PromptTokens() int
}

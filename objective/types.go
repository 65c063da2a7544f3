// Package objective measures an OpenAI-compatible serving endpoint: workloads,
// the streaming load generator, metrics, quality gates, audits and the score.
// It measures a URL; it knows nothing of processes or storage.
package objective

import "time"

// Target is the server a workload is run against.
type Target struct {
	URL    string // base URL, e.g. http://127.0.0.1:30000
	Model  string // model name sent in requests; empty means ask /v1/models
	APIKey string // sent as a Bearer token when set
	// TokenCounter names the server's Prometheus counter of generated
	// tokens on /metrics (llama-server: llamacpp:tokens_predicted_total,
	// SGLang: sglang:generation_tokens_total). Its rise over each measured
	// chat point must equal the output tokens the client counted; empty
	// means the check is reported as skipped.
	TokenCounter string
	// NoCounter says why TokenCounter is empty (e.g. "GET /metrics: HTTP
	// 404"), the skipped check's reason; "" for a generic one.
	NoCounter string
	// LookupTimeout bounds each lookup of the server before a run
	// (/v1/models, /server_info, /metrics namespaces); 0 means
	// DefaultLookupTimeout. One that gets no answer within it ends the run
	// with a *NoAnswerError.
	LookupTimeout time.Duration
}

// Workload is what a trial is measured with.
type Workload struct {
	Kind    string      `yaml:"kind" json:"kind"` // "chat" (seed 000) or "matrix" (seed 004)
	Chat    ChatSpec    `yaml:"chat" json:"chat"`
	Matrix  MatrixSpec  `yaml:"matrix" json:"matrix"`
	Quality QualitySpec `yaml:"quality" json:"quality"`
	// HangTimeout fails a sweep when no token arrives for this long while
	// requests are in flight (seconds; 0 = default).
	HangTimeout float64 `yaml:"hang_timeout_s" json:"hang_timeout_s"`
}

// ChatSpec is the seed-000 sweep: concurrency levels, requests per level, repeats.
type ChatSpec struct {
	Concurrency  []int  `yaml:"concurrency" json:"concurrency"`
	Requests     []int  `yaml:"requests" json:"requests"`
	MaxTokens    int    `yaml:"max_tokens" json:"max_tokens"`
	Repeats      int    `yaml:"repeats" json:"repeats"`
	Warmup       *bool  `yaml:"warmup" json:"warmup"`
	PromptTokens int    `yaml:"prompt_tokens" json:"prompt_tokens"`
	PromptsFile  string `yaml:"prompts_file" json:"prompts_file,omitempty"`
	ReusePrompts bool   `yaml:"reuse_prompts" json:"reuse_prompts"`
	IgnoreEOS    bool   `yaml:"ignore_eos" json:"ignore_eos"`
	// Source makes the requests (workload.chat.source): a dataset,
	// length distributions, a shared system prompt, conversations; nil
	// sends synthetic prompts of PromptTokens.
	Source *SourceSpec `yaml:"source" json:"source,omitempty"`
	// RateSearch, when set, finds the highest request rate within the SLO
	// with open-loop probes after the concurrency levels (which may then
	// be left out); score.metric max_rate scores it.
	RateSearch *RateSearch `yaml:"rate_search" json:"rate_search,omitempty"`
	// CapacitySearch, when set, bisects between the measured levels after
	// the sweep, while the server is up, for the highest concurrency that
	// still meets its SLO (points with Phase "capacity").
	CapacitySearch *CapacitySearch `yaml:"capacity_search" json:"capacity_search,omitempty"`
}

// CapacitySearch configures the bisection for the capacity score.
type CapacitySearch struct {
	// SLO to hold; usually the study's score SLO.
	SLO []SLO `yaml:"slo" json:"slo"`
	// MaxProbes bounds the extra measurements (default 3).
	MaxProbes int `yaml:"max_probes" json:"max_probes"`
}

// MatrixSpec is the seed-004 context x concurrency speed matrix.
type MatrixSpec struct {
	Contexts    []int   `yaml:"contexts" json:"contexts"`
	Concurrency []int   `yaml:"concurrency" json:"concurrency"`
	DurationS   float64 `yaml:"duration_s" json:"duration_s"`
	MaxOutput   int     `yaml:"max_output" json:"max_output"`
	// Warmup sends each cell's requests once with a short output before
	// measuring it (uncounted; default on): the batch size is not cold and
	// the prompt is in the prefix cache.
	Warmup *bool `yaml:"warmup" json:"warmup"`
}

// QualitySpec configures the structured-output and tool-call gates.
type QualitySpec struct {
	Enabled      bool    `yaml:"enabled" json:"enabled"`
	JSONRequests int     `yaml:"json_requests" json:"json_requests"` // default 24
	ToolRequests int     `yaml:"tool_requests" json:"tool_requests"` // default 8
	MinPass      float64 `yaml:"min_pass" json:"min_pass"`           // fraction that must pass, default 1.0
}

// Stats summarises a sample (seconds), numpy-style linear percentiles.
type Stats struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// Audit holds the seed's per-point audit flags.
type Audit struct {
	RawCount     bool `json:"raw_count"`
	Completed    bool `json:"completed"`
	Failed       bool `json:"failed"`
	Tokens       bool `json:"tokens"`
	AllRequested bool `json:"all_requested"`
	// ServerTokens is the comparison with the server's generated-token
	// counter (measured chat points; nil where not attempted). Only a
	// failed check fails the audit; a skipped one says why it was not made.
	ServerTokens *TokenCheck `json:"server_tokens,omitempty"`
}

// Point is one (concurrency, repeat[, context]) measurement.
type Point struct {
	Phase       string `json:"phase,omitempty"` // "", "warmup", "prefill", "decode"
	Concurrency int    `json:"concurrency"`
	Repeat      int    `json:"repeat"`
	Context     int    `json:"context,omitempty"`
	State       string `json:"state"`            // passed | failed | interrupted (StateInterrupted); matrix: skipped
	Status      string `json:"status,omitempty"` // matrix: Valid, Requests queued, Over capacity, Not run
	Requested   int    `json:"requested"`
	Issued      int    `json:"issued"`
	Completed   int    `json:"completed"`
	Failed      int    `json:"failed"`
	// Cut counts requests still running when the point was stopped, neither
	// completed nor failed: matrix decode requests at the end of the cell's
	// fixed duration, or requests an interrupt (ErrInterrupted) cut short.
	Cut int `json:"cut,omitempty"`
	// Retried counts requests sent a second time, on a new connection,
	// because their reused keep-alive connection failed before any
	// response byte (a server that closes connections it advertised as
	// Keep-Alive). They are in Completed or Failed by their second attempt.
	Retried      int     `json:"retried"`
	OutputTokens int     `json:"output_tokens"`
	DurationS    float64 `json:"duration_s"`
	OutputTokS   float64 `json:"output_tok_s"`
	RequestsPerS float64 `json:"requests_s"`
	TTFT         Stats   `json:"ttft_s"`
	Latency      Stats   `json:"latency_s"`
	ITL          Stats   `json:"itl_s"`
	Audit        Audit   `json:"audit"`
	// Matrix cells: prompt tok/s of a prefill point; mean per-request decode
	// tok/s; average number of requests streaming during the cell.
	PromptTokS     float64 `json:"prompt_tok_s,omitempty"`
	PerRequestTokS float64 `json:"per_request_tok_s,omitempty"`
	AvgActive      float64 `json:"avg_active,omitempty"`
	// Open-loop points (requests sent at scheduled times whatever the
	// server does; see openloop.go); absent from closed-loop points.
	// OfferedRateS is the schedule's rate: (requests - 1) / (last - first
	// scheduled send), the inverse of its mean gap. AchievedRateS is the
	// rate the answers came back at: (completed - 1) / (last - first
	// completion).
	OfferedRateS float64 `json:"offered_rate_s,omitempty"`
	// Rate is the rate an open-loop probe was scheduled at (requests/s;
	// the rate search's level); OfferedRateS is what its draws came to.
	Rate          float64 `json:"rate,omitempty"`
	AchievedRateS float64 `json:"achieved_rate_s,omitempty"`
	// MaxInFlight is the most requests outstanding at once, each counted
	// from its scheduled send to its end. InFlightFirstHalf and
	// InFlightSecondHalf are the time-averaged number outstanding over the
	// first and second halves of the schedule's span: a server that keeps
	// up holds it steady (Little's law), one that falls behind lets it grow.
	MaxInFlight        int     `json:"max_in_flight,omitempty"`
	InFlightFirstHalf  float64 `json:"in_flight_first_half,omitempty"`
	InFlightSecondHalf float64 `json:"in_flight_second_half,omitempty"`
	// SendLagMaxS is the latest any request was sent after its scheduled
	// time: the load generator's own lateness (its TTFT still counts from
	// the schedule); large only when the client machine was overloaded or
	// the in-flight safety cap was reached.
	SendLagMaxS float64 `json:"send_lag_max_s,omitempty"`
	// KeptUp is the verdict on an open-loop point (nil for closed-loop
	// ones): false when AchievedRateS < 80% of OfferedRateS or the mean
	// TTFT grew through the level (TTFTGrowth above 1.5, by more than a
	// twentieth of the level's span). Behind says which, with the figures.
	KeptUp *bool `json:"kept_up,omitempty"`
	// TTFTGrowth is the mean TTFT of the requests scheduled in the second
	// half of the level over the first half's (a backlog grows it).
	TTFTGrowth float64 `json:"ttft_growth,omitempty"`
	Behind     string  `json:"behind,omitempty"`
	// Note says why a point has its status (matrix), why it failed, or
	// that it may be cold (its warm-up never reached the full batch).
	Note string `json:"note,omitempty"`
	// PrefixReusable is the share of the prompt words sent at this point
	// that a perfect prefix cache could have served (each prompt's longest
	// prefix that an earlier request of the run sent, in blocks of 16
	// words); set for workloads with a source. CachedTokens and
	// PromptTokens are the server's own counts (usage), where it reports
	// them: cached_tokens needs SGLang's --enable-cache-report or vLLM's
	// --enable-prompt-tokens-details.
	PrefixReusable float64 `json:"prefix_reusable,omitempty"`
	CachedTokens   int     `json:"cached_tokens,omitempty"`
	PromptTokens   int     `json:"prompt_tokens,omitempty"`
	// Outlier says why a measured point's figures are suspect: it
	// disagrees with its sibling repeats, or reads far below its level's
	// warm-up or a lower level (flagBelow). Multi-fidelity pruning does
	// not prune on it.
	Outlier string `json:"outlier,omitempty"`
}

// StateInterrupted is the State of a point that the caller's interrupt
// (ErrInterrupted) cut short: its figures cover part of its requests, so it
// is left out of the audit and the medians.
const StateInterrupted = "interrupted"

// Median summarises the repeats at one concurrency.
type Median struct {
	Repeats    int     `json:"repeats"`
	OutputTokS float64 `json:"output_tok_s"`
	TTFTP50    float64 `json:"ttft_p50_s"`
	TTFTP99    float64 `json:"ttft_p99_s"`
	LatencyP99 float64 `json:"latency_p99_s"`
	LatencyP50 float64 `json:"latency_p50_s"`
	ITLP50     float64 `json:"itl_p50_s"`
	ITLP99     float64 `json:"itl_p99_s"`
	// LogVarOutputTokS is the sample variance over the repeats of the
	// logarithm of output tok/s (0 with one repeat): how far one repeat
	// reads from the next, kept in the stored summary for the estimates.
	LogVarOutputTokS float64 `json:"log_var_output_tok_s,omitempty"`
}

// QualitySummary is shaped like the seed's: {"json": "24/24", "tool": "8/8"}.
type QualitySummary struct {
	JSON string `json:"json"`
	Tool string `json:"tool"`
}

// QualityCheck is one run of the quality gates.
type QualityCheck struct {
	Summary   QualitySummary `json:"summary"`
	JSONPass  int            `json:"json_pass"`
	JSONTotal int            `json:"json_total"`
	ToolPass  int            `json:"tool_pass"`
	ToolTotal int            `json:"tool_total"`
	Pass      bool           `json:"pass"`
	// Failures says why checks failed (at most 16 lines).
	Failures []string `json:"failures,omitempty"`
}

// Quality holds the gates run before and after the sweep.
type Quality struct {
	Before *QualityCheck `json:"before,omitempty"`
	After  *QualityCheck `json:"after,omitempty"`
}

// Result is everything one workload run measured. It is returned even when
// the run ended early with an error, holding the points completed so far.
type Result struct {
	Kind    string         `json:"kind,omitempty"` // chat | matrix
	Points  []Point        `json:"points"`
	Medians map[int]Median `json:"medians"`
	Quality *Quality       `json:"quality,omitempty"`
	// Audit is true when every point's audit flags hold and every point
	// requested was run.
	Audit OverallAudit `json:"audit"`
	// Warmup holds the uncounted warm-up points (Phase "warmup").
	Warmup []Point `json:"warmup,omitempty"`
	// Requests holds one record per measured request (goodput needs them).
	Requests []RequestRecord `json:"requests,omitempty"`
	// ReusePrompts says the repeats reused the same prompts (prefix cache warm).
	ReusePrompts bool `json:"reuse_prompts,omitempty"`
	// Model is the model name the requests were sent with.
	Model string `json:"model,omitempty"`
	// Server is what /server_info said, when the server has it.
	Server *ServerInfo `json:"server,omitempty"`
}

// OverallAudit sums up the audits of a Result.
type OverallAudit struct {
	OK     bool     `json:"ok"`
	Points int      `json:"points"`
	Errors []string `json:"errors"` // one line per point whose flags do not all hold
	// Interrupted says the caller stopped the run (ErrInterrupted); a point
	// it cut short (StateInterrupted) is left out of Points and Errors.
	Interrupted bool `json:"interrupted,omitempty"`
}

// ScoreSpec says which single number a study maximises.
type ScoreSpec struct {
	// Metric: "output_tok_s" (default), "goodput", "capacity" or
	// "max_rate".
	Metric      string `yaml:"metric" json:"metric"`
	Concurrency int    `yaml:"concurrency" json:"concurrency"` // target level for output_tok_s/goodput; 0 = highest measured
	// Context picks the matrix row scored (0 = smallest measured context).
	Context int   `yaml:"context" json:"context,omitempty"`
	SLO     []SLO `yaml:"slo" json:"slo"`
}

// SLO bounds one percentile of a latency metric, in seconds.
type SLO struct {
	Metric     string  `yaml:"metric" json:"metric"`         // ttft | latency | itl
	Percentile string  `yaml:"percentile" json:"percentile"` // mean | p50 | p90 | p99
	Max        float64 `yaml:"max_s" json:"max_s"`
}

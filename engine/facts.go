package engine

import (
	"bufio"
	"io"
	"regexp"
	"strings"
)

// Facts are what an engine's startup log says about the server it started.
// Field names and JSON keys follow SGLang's; other engines fill the fields
// that mean the same (see each engine's parser).
type Facts struct {
	// MaxTotalNumTokens is the KV cache in tokens per DP worker (SGLang
	// max_total_num_tokens; llama.cpp n_ctx; vLLM GPU blocks x block size).
	MaxTotalNumTokens int `json:"max_total_num_tokens"`
	// MaxRunningRequests is the effective number of requests that run at
	// once, per DP worker (SGLang max_running_requests after its caps;
	// llama.cpp n_slots).
	MaxRunningRequests          int     `json:"max_running_requests"`
	RequestedMaxRunningRequests int     `json:"requested_max_running_requests,omitempty"` // from a reduction warning
	ReducedMaxRunningRequests   int     `json:"reduced_max_running_requests,omitempty"`   // the warning's "to B"
	MambaCacheSize              int     `json:"max_mamba_cache_size,omitempty"`
	KVCacheTokens               int     `json:"kv_cache_tokens,omitempty"` // "KV Cache is allocated. ... #tokens: N"
	ChunkedPrefillSize          int     `json:"chunked_prefill_size,omitempty"`
	MaxPrefillTokens            int     `json:"max_prefill_tokens,omitempty"`
	ContextLen                  int     `json:"context_len,omitempty"` // per request (llama.cpp: n_ctx_slot)
	AvailableGPUMemGB           float64 `json:"available_gpu_mem_gb,omitempty"`
	CUDAGraph                   bool    `json:"cuda_graph"` // a CUDA graph capture finished
	// MaxConcurrency is the engine's own estimate of requests of its
	// context length it can hold at once (vLLM's "Maximum concurrency").
	MaxConcurrency float64 `json:"max_concurrency,omitempty"`
	StartupS       float64 `json:"startup_s"` // launch of the successful attempt to ready (set by the launcher)

	// CPU servers (llama.cpp): generation and batch threads, the logical
	// and physical batch sizes, whether the KV cache is one pool shared by
	// all slots, and whether flash attention ended up on.
	Threads        int    `json:"threads,omitempty"`
	ThreadsBatch   int    `json:"threads_batch,omitempty"`
	BatchSize      int    `json:"batch_size,omitempty"`
	UBatchSize     int    `json:"ubatch_size,omitempty"`
	KVUnified      bool   `json:"kv_unified,omitempty"`
	FlashAttention string `json:"flash_attention,omitempty"` // enabled | disabled
}

// LogParser accumulates Facts from startup log lines, one line at a time.
// It is not safe for concurrent use.
type LogParser interface {
	// Line feeds one log line (with or without its trailing newline).
	Line(line string)
	// Facts returns what was parsed so far.
	Facts() Facts
	// Ready reports whether the engine's ready line was seen (always true
	// for an engine without one).
	Ready() bool
}

// ParseLog reads a whole startup log with the engine's parser and returns
// its facts. Lines longer than 1 MiB are skipped.
func (e *Engine) ParseLog(r io.Reader) Facts {
	p := e.NewLogParser()
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Skip the rest of an over-long line.
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				break
			}
			continue
		}
		if len(line) > 0 {
			p.Line(string(line))
		}
		if err != nil {
			break
		}
	}
	return p.Facts()
}

// LastFrame drops a line's trailing newline and, for tqdm-style redraws
// joined by \r, everything but the last frame.
func LastFrame(line string) string {
	line = strings.TrimRight(line, "\r\n")
	if i := strings.LastIndexByte(line, '\r'); i >= 0 {
		line = line[i+1:]
	}
	return line
}

// Signature recognises a failure class in one log line.
type Signature struct {
	Class string
	// Texts: any of these substrings in a line; Pattern: or this regexp.
	Texts   []string
	Pattern *regexp.Regexp
	// Rank orders classes: a more specific cause seen later in the same
	// log replaces a less specific one.
	Rank int
	// ExitCodes, when not empty, are the exit statuses the class needs
	// (argparse's usage error exits 2); with another status the line is
	// only context.
	ExitCodes []int
}

// Failure classes a launched server can end with.
const (
	ClassIllegalMemoryAccess = "illegal_memory_access"
	ClassOOM                 = "oom"
	ClassStartupCrash        = "startup_crash"
	ClassStartupTimeout      = "startup_timeout"
	ClassHang                = "hang"
	ClassCrashed             = "crashed"
	ClassBadCommand          = "bad_command"
	// ClassModelLoad: the engine could not load the model or create its
	// context with these settings (llama.cpp: a missing or broken file,
	// too many slots, a quantized V cache without flash attention).
	ClassModelLoad = "model_load"
)

// Classify returns the signature a log line matches (nil for none) and
// whether the line says the listening port was taken.
func (e *Engine) Classify(line string) (sig *Signature, port bool) {
	for _, t := range e.PortTaken {
		if strings.Contains(line, t) {
			port = true
			break
		}
	}
	for i := range e.Signatures {
		s := &e.Signatures[i]
		if s.matches(line) {
			return s, port
		}
	}
	return nil, port
}

func (s *Signature) matches(line string) bool {
	for _, t := range s.Texts {
		if strings.Contains(line, t) {
			return true
		}
	}
	return s.Pattern != nil && s.Pattern.MatchString(line)
}

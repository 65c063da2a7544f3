// Package seed reads the published record of seed 000, the manual rescue
// study of GLM-5.3-Flash with SGLang on four H200 GPUs
// (testdata/profiles/calibration/seed000.json): its ten runs, each with the
// configuration it launched and the points it measured. The calibration
// tool compares the simulator with these points; the space tests check the
// engine rules against these configurations.
package seed

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// File is the record of seed 000.
type File struct {
	Runs []Run `json:"runs"` // in the order the seed ran them
}

// Run is one configuration the seed launched and what became of it.
type Run struct {
	Name              string          `json:"name"`  // e.g. quad-ep4-mtp5
	State             string          `json:"state"` // passed, failed, diagnostic_pass or configuration_rejected
	Reason            string          `json:"reason"`
	RawCompleted      int             `json:"raw_completed"` // requests completed over all raw records
	RawFailed         int             `json:"raw_failed"`
	CUDAIllegalMemory bool            `json:"cuda_illegal_memory"` // the run hit "an illegal memory access"
	Quality           json.RawMessage `json:"quality"`             // gate summaries per check file, as published
	Config            Config          `json:"config"`
	Points            []Point         `json:"points"`
}

// Config is the engine configuration of a run, with what the engine's
// startup log reported (the effective limits and KV tokens).
type Config struct {
	TP                     int     `json:"tp"`
	EP                     int     `json:"ep"`
	MaxModelLen            int     `json:"max_model_len"`          // --context-length
	MaxBatchedTokens       int     `json:"max_num_batched_tokens"` // --chunked-prefill-size
	MemoryFraction         float64 `json:"memory_fraction"`        // --mem-fraction-static
	PrefixCaching          bool    `json:"prefix_caching"`         // false: --disable-radix-cache
	DisableCUDAGraph       bool    `json:"disable_cuda_graph"`
	DisableOverlapSchedule bool    `json:"disable_overlap_schedule"`
	RequestedMaxRunning    int     `json:"requested_max_running_requests"`
	EffectiveMaxRunning    int     `json:"effective_max_running_requests"` // after the engine's caps
	StatePoolSlots         int     `json:"effective_state_pool_slots"`     // max_mamba_cache_size
	KVTokens               int     `json:"engine_kv_tokens"`
	SpecMethod             *string `json:"spec_method"` // nil without speculative decoding
	SpecSteps              *int    `json:"spec_num_steps"`
	SpecTokens             *int    `json:"spec_num_tokens"` // draft tokens
}

// Point is one measured (concurrency, repeat) point of a run.
type Point struct {
	File         string      `json:"file"` // rR-cC_summary.json: repeat R at concurrency C
	State        string      `json:"state"`
	Concurrency  int         `json:"concurrency"`
	Requested    int         `json:"requested"`
	Issued       int         `json:"issued"`
	Completed    int         `json:"completed"`
	Failed       int         `json:"failed"`
	OutputTokens int         `json:"output_tokens"`
	OutputTokS   float64     `json:"output_tok_s"`
	TTFT         Percentiles `json:"ttft_s"`
	Latency      Percentiles `json:"latency_s"`
}

// Percentiles summarise one statistic of a point, in seconds.
type Percentiles struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// Load reads the record at path.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seed record: %w", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("seed record %s: %w", path, err)
	}
	return &f, nil
}

// Run returns the run called name, or nil.
func (f *File) Run(name string) *Run {
	for i := range f.Runs {
		if f.Runs[i].Name == name {
			return &f.Runs[i]
		}
	}
	return nil
}

// Repeat returns the point of repeat rep (1-based) at concurrency conc, or
// nil when the run did not measure it.
func (r *Run) Repeat(rep, conc int) *Point {
	prefix := fmt.Sprintf("r%d-c%d_", rep, conc)
	for i := range r.Points {
		if strings.HasPrefix(r.Points[i].File, prefix) {
			return &r.Points[i]
		}
	}
	return nil
}

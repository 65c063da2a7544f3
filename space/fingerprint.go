package space

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Fingerprint returns, per section of the study file that decides what a
// trial's measurement means, a hash of what the file says there: the
// server that runs (engine, model, fixed flags, GPUs per trial), the load
// it is measured under (workload) and how it is scored (score). Trials
// measured under one fingerprint do not compare with trials measured
// under another, so a study resumed from an edited file must not mix
// them. A param's value means the flags it passes, so each param's flag
// and each choice's flag text count on their own (params.NAME and
// params.NAME[VALUE]), as do the derived flags: a choice added or dropped
// leaves the others' keys as they were. What only steers the search
// (budget, params' ranges and choices, constraints, GPU groups, launch
// settings, memory hints) is left out: widening a param or adding trials
// keeps every stored measurement valid, and each trial stores the flags it
// ran with.
func (s *Study) Fingerprint() (map[string]string, error) {
	// A file the study names counts by what it holds: its path depends on
	// where sgtune was started and, for workers, on which host.
	workload := s.Workload
	workload.Chat.PromptsFile = fileSum(workload.Chat.PromptsFile)
	sections := map[string]any{
		"engine": struct {
			Name    string
			Command []string
			Version string
			Env     map[string]string
			Schema  string
		}{s.Engine.Name, s.Engine.Command, s.Engine.Version, s.Engine.Env, fileSum(s.SchemaFile)},
		"model": struct {
			Path, Served, Revision string
			Hybrid, MoE            bool
		}{s.Model, s.ServedModelName, s.ModelRevision, s.Hybrid, s.MoE},
		"fixed":    s.Fixed,
		"gpus":     struct{ PerTrial, CPUsPerTrial int }{s.GPUsPerTrial, s.CPUsPerTrial},
		"workload": workload,
		"score":    s.Score,
		"derived":  s.Derived,
	}
	for _, p := range s.Params {
		sections["params."+p.Name] = struct {
			Flag, Template string
			Flags          []string
		}{p.Flag, p.Template, p.Flags}
		values := slices.Clone(p.Choices)
		if p.Type == "bool" {
			values = []string{"true", "false"}
		}
		// A value counts by the words it passes the engine: its values:
		// text, or its flag as the schema writes it (a switch's negation).
		for _, v := range p.withValuesKeys(values) {
			words, err := p.emit(v)
			if err != nil {
				return nil, fmt.Errorf("fingerprint params.%s[%s]: %w", p.Name, v, err)
			}
			sections["params."+p.Name+"["+v+"]"] = words
		}
	}
	out := make(map[string]string, len(sections))
	for name, v := range sections {
		b, err := json.Marshal(v) // maps marshal with sorted keys
		if err != nil {
			return nil, fmt.Errorf("fingerprint %s: %w", name, err)
		}
		sum := sha256.Sum256(b)
		out[name] = hex.EncodeToString(sum[:8])
	}
	return out, nil
}

// fileSum is "sha256:" and the hash of the file at p ("" stays "", and a
// file that cannot be read counts by its absolute path).
func fileSum(p string) string {
	if p == "" {
		return ""
	}
	b, err := os.ReadFile(p)
	if err != nil {
		if a, aerr := filepath.Abs(p); aerr == nil {
			return a
		}
		return p
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/objective"
)

// sloSyntax is what --slo accepts, for error messages.
const sloSyntax = `METRIC STAT < VALUE[s|ms], e.g. 'ttft p99 < 1s', 'latency p50 < 2500ms', 'itl mean < 0.05'; ` +
	`METRIC is ttft, latency or itl; STAT is mean, p50, p90 or p99; a bare VALUE is seconds; 'none' drops every SLO`

var sloRE = regexp.MustCompile(`^\s*([A-Za-z]+)\s+([A-Za-z0-9]+)\s*(<=|<|≤)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s)?\s*$`)

// parseSLO reads one --slo value. The bound is inclusive (an SLO holds
// while the statistic is at most the value), as in the study file's max_s.
func parseSLO(text string) (objective.SLO, error) {
	m := sloRE.FindStringSubmatch(text)
	if m == nil {
		return objective.SLO{}, fmt.Errorf("--slo %q: want %s", text, sloSyntax)
	}
	metric, stat := strings.ToLower(m[1]), strings.ToLower(m[2])
	switch metric {
	case "ttft", "latency", "itl":
	default:
		return objective.SLO{}, fmt.Errorf("--slo %q: metric %q; valid: ttft, latency, itl", text, m[1])
	}
	if stat == "median" {
		stat = "p50"
	}
	if _, ok := (objective.Stats{}).Get(stat); !ok {
		return objective.SLO{}, fmt.Errorf("--slo %q: statistic %q; valid: mean, p50, p90, p99", text, m[2])
	}
	v, err := strconv.ParseFloat(m[4], 64)
	if err != nil || math.IsInf(v, 0) || v <= 0 {
		return objective.SLO{}, fmt.Errorf("--slo %q: bound %q must be a positive number of seconds", text, m[4])
	}
	if m[5] == "ms" {
		v /= 1000
	}
	if v <= 0 {
		return objective.SLO{}, fmt.Errorf("--slo %q: bound too small", text)
	}
	return objective.SLO{Metric: metric, Percentile: stat, Max: v}, nil
}

// parseSLOs reads every --slo value; "none" alone means no SLO.
func parseSLOs(texts []string) ([]objective.SLO, error) {
	if len(texts) == 1 && strings.TrimSpace(strings.ToLower(texts[0])) == "none" {
		return []objective.SLO{}, nil
	}
	var out []objective.SLO
	for _, t := range texts {
		o, err := parseSLO(t)
		if err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

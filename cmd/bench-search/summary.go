package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// printSummary prints the landscape: the best config and its true score,
// how many configs are within 97% of it, the distribution of true scores,
// the failure classes, the standard error of the true scores and what the
// computation cost.
func printSummary(w io.Writer, ls *Landscape) {
	launched, started, withValues := 0, 0, 0
	classes := map[string]int{}
	for i := range ls.Configs {
		c := &ls.Configs[i]
		if !c.Launched() {
			continue
		}
		launched++
		if len(c.Values) > 0 {
			started++
		}
		if c.Mean > 0 {
			withValues++
		}
		if c.Class != "" && (len(c.Values) == 0 || c.Failed == len(c.Values)) {
			classes[c.Class]++
		}
	}
	fmt.Fprintf(w, "landscape of study %s on profile %s: %d configs, %d statically feasible, %d started, %d with a positive true score\n",
		ls.Study, ls.Profile, len(ls.Configs), launched, started, withValues)
	draws := fmt.Sprintf("%d draws", ls.Draws)
	if ls.ScreenDraws > 0 && ls.ScreenDraws < ls.Draws {
		draws = fmt.Sprintf("%d draws (every config %d, those then within %.0f%% of the best %d)", ls.Draws, ls.ScreenDraws, 100*ls.Refine, ls.Draws)
	}
	if ls.replay != nil {
		fmt.Fprintf(w, "true score: the value (score when the SLOs and gates hold, else 0) averaged over the %d runs measured for real per config; a launch replays one of them, its noise the real noise\n", ls.replay.table.Header.Repeats)
	} else {
		fmt.Fprintf(w, "true score: the value (score when the SLOs and gates hold, else 0) averaged over %s of the simulator's randomness, no measurement noise\n", draws)
	}
	if ls.Best < 0 || ls.Configs[ls.Best].Mean <= 0 {
		fmt.Fprintf(w, "no config has a positive true score; failures: %s\n", classList(classes))
		fmt.Fprintf(w, "cost: %.1f s wall (%.1f s startups), %d measurements run, %d reused, %d behaviour groups, %d workers\n", ls.WallS, ls.StartupS, ls.Runs, ls.Reused, ls.Groups, ls.Workers)
		return
	}
	b := &ls.Configs[ls.Best]
	fmt.Fprintf(w, "best: %s\n  true score %.1f (standard error %.1f, %.2f%%)\n", b.Params, b.Mean, b.SE, 100*b.SE/b.Mean)
	// Configs by true score.
	order := make([]int, 0, withValues)
	for i := range ls.Configs {
		if ls.Configs[i].Mean > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return ls.Configs[order[i]].Mean > ls.Configs[order[j]].Mean })
	within := 0
	for _, i := range order {
		if ls.Configs[i].Mean >= 0.97*b.Mean {
			within++
		}
	}
	fmt.Fprintf(w, "configs with a true score >= 97%% of the best: %d of %d started (%.2f%%)\n", within, started, 100*float64(within)/float64(max(1, started)))
	// The top behaviour groups: configs that measured the same (they differ
	// in flags the simulated engine does not feel, such as a memory
	// fraction whose KV pool is never full) are shown once.
	fmt.Fprintf(w, "top configs (one per group of configs that measured the same):\n")
	shown := map[[2]float64]int{}
	var rows []int
	for _, i := range order {
		c := &ls.Configs[i]
		k := [2]float64{float64(c.Group), c.Mean}
		if _, ok := shown[k]; !ok {
			if len(rows) == 12 {
				continue
			}
			rows = append(rows, i)
		}
		shown[k]++
	}
	for _, i := range rows {
		c := &ls.Configs[i]
		fmt.Fprintf(w, "  %6.2f%%  %8.1f ±%-5.1f %4d× %s\n", 100*c.Mean/b.Mean, c.Mean, c.SE, shown[[2]float64{float64(c.Group), c.Mean}], c.Params)
	}
	// Distribution of true score / best over started configs.
	bins := []struct {
		lo   float64
		name string
	}{{0.97, ">=97%"}, {0.95, "95-97%"}, {0.90, "90-95%"}, {0.80, "80-90%"}, {0.50, "50-80%"}, {1e-12, "0-50%"}}
	counts := make([]int, len(bins)+1)
	for i := range ls.Configs {
		c := &ls.Configs[i]
		if len(c.Values) == 0 {
			continue
		}
		r := c.Mean / b.Mean
		k := len(bins)
		for j, bn := range bins {
			if r >= bn.lo {
				k = j
				break
			}
		}
		counts[k]++
	}
	var parts []string
	for j, bn := range bins {
		parts = append(parts, fmt.Sprintf("%s: %d", bn.name, counts[j]))
	}
	parts = append(parts, fmt.Sprintf("0 (every draw failed or missed the SLO): %d", counts[len(bins)]))
	fmt.Fprintf(w, "distribution of true score / best (started configs): %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(w, "configs that never pass: %s\n", classList(classes))
	// Standard error among the configs near the top.
	var ses []float64
	for _, i := range order {
		c := &ls.Configs[i]
		if c.Mean >= 0.9*b.Mean {
			ses = append(ses, c.SE/b.Mean)
		}
	}
	if len(ses) > 0 {
		sort.Float64s(ses)
		fmt.Fprintf(w, "standard error of the true score, configs >= 90%% of the best (%d): median %.2f%%, max %.2f%% of the best (K=%d draws)\n",
			len(ses), 100*median(ses), 100*ses[len(ses)-1], ls.Draws)
	}
	fmt.Fprintf(w, "cost: %.1f s wall (%.1f s startups), %d measurements run, %d reused, %d behaviour groups, %d workers\n", ls.WallS, ls.StartupS, ls.Runs, ls.Reused, ls.Groups, ls.Workers)
}

func classList(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

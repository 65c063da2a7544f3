package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// member is one landscape of a suite: a study, scored on a simulator
// profile (the study command's own when empty) or on a table measured for
// real.
type member struct {
	Name    string `yaml:"name"`
	Study   string `yaml:"study"`
	Profile string `yaml:"profile"`
	Table   string `yaml:"table"`
	// Why says what the landscape tests (printed with its results).
	Why string `yaml:"why"`
	// Env holds variables the study file reads ($NAME) that nothing here
	// launches with: set while the study loads, where the environment
	// does not set them already.
	Env map[string]string `yaml:"env"`
}

// loadSuite reads a suite file: a YAML list of members. Paths (a profile
// is one when it names a .yaml file or a directory; else it is a bundled
// profile's name) are relative to the suite file's directory unless
// absolute.
func loadSuite(path string) ([]member, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Landscapes []member `yaml:"landscapes"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Landscapes) == 0 {
		return nil, fmt.Errorf("%s: landscapes: empty; want a list of {name, study, profile or table}", path)
	}
	dir := filepath.Dir(path)
	seen := map[string]bool{}
	for i := range doc.Landscapes {
		m := &doc.Landscapes[i]
		switch {
		case m.Name == "" || m.Study == "":
			return nil, fmt.Errorf("%s: landscapes[%d]: name and study are required", path, i)
		case seen[m.Name]:
			return nil, fmt.Errorf("%s: landscapes[%d]: name %q repeats", path, i, m.Name)
		case m.Profile != "" && m.Table != "":
			return nil, fmt.Errorf("%s: landscape %s: profile and table exclude each other", path, m.Name)
		}
		seen[m.Name] = true
		m.Study = relativeTo(dir, m.Study)
		if m.Table != "" {
			m.Table = relativeTo(dir, m.Table)
		}
		if strings.Contains(m.Profile, "/") || strings.HasSuffix(m.Profile, ".yaml") || strings.HasSuffix(m.Profile, ".yml") {
			m.Profile = relativeTo(dir, m.Profile)
		}
	}
	return doc.Landscapes, nil
}

// relativeTo is path read relative to dir, unless it is absolute (a
// suite kept outside the repository may name the repository's studies).
func relativeTo(dir, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}

// scored is one landscape's comparison.
type scored struct {
	Name   string
	Budget int
	Runs   []searchRun
}

// methodStats summarises one method on one landscape.
type methodStats struct {
	Ran            bool
	Median, Lo, Hi float64 // launches to a declared winner >= 97% (Budget+1: never)
	RegretAt       map[int]float64
	Crash, Infeas  float64 // mean launches per study
	InfeasibleSum  int
	Rounds         float64
	NeverDeclared  int // studies with no declared winner >= 97% within the budget
	Seeds          int
	FoundMedian    float64
	PrunedPerStudy float64
}

// stats summarises the runs of one method.
func (s scored) stats(name string, parallel int) methodStats {
	var rs []searchRun
	for _, r := range s.Runs {
		if r.Method == name {
			rs = append(rs, r)
		}
	}
	st := methodStats{RegretAt: map[int]float64{}, Seeds: len(rs)}
	if len(rs) == 0 {
		return st
	}
	st.Ran = true
	to := make([]float64, len(rs))
	found := make([]float64, len(rs))
	for i, r := range rs {
		to[i] = float64(r.TrialsTo97)
		found[i] = float64(r.FoundTo97)
		st.Crash += float64(r.CrashLaunches)
		st.Infeas += float64(r.InfeasibleLaunches)
		st.InfeasibleSum += r.InfeasibleLaunches
		st.PrunedPerStudy += float64(r.Pruned)
		if r.TrialsTo97 > s.Budget {
			st.NeverDeclared++
		}
	}
	n := float64(len(rs))
	st.Crash, st.Infeas, st.PrunedPerStudy = st.Crash/n, st.Infeas/n, st.PrunedPerStudy/n
	st.Median = median(to)
	st.Lo, st.Hi = medianCI(to)
	st.FoundMedian = median(found)
	st.Rounds = math.Ceil(st.Median / float64(max(parallel, 1)))
	for _, at := range []int{10, 20, 30, s.Budget} {
		if at > s.Budget {
			continue
		}
		reg := make([]float64, len(rs))
		for i, r := range rs {
			reg[i] = r.Regret[at-1]
		}
		st.RegretAt[at] = median(reg)
	}
	return st
}

// reported are the methods the suite table shows, in order.
var reported = []string{"ours", "random", "goptuna_tpe"}

// printScored prints one landscape's table: per method the median
// launches to a declared winner within 97% of the best with its 95%
// interval, the median regret after 10, 20 and 30 launches, and the crash
// and infeasible launches per study; a method not run prints "-".
func printScored(w io.Writer, s scored, parallel int) {
	fmt.Fprintf(w, "\n%s: launches to a declared winner >= 97%% of the best (%d = never), every launch counted; %d launches per study\n", s.Name, s.Budget+1, s.Budget)
	fmt.Fprintf(w, "  %-12s %-26s %-8s %-8s %-8s %-9s %-11s %s\n", "method", "to 97% [95% CI]", "regret10", "regret20", "regret30", "crash/st", "infeas/st", "never")
	names := slices.Clone(reported)
	for _, r := range s.Runs {
		if !slices.Contains(names, r.Method) {
			names = append(names, r.Method)
		}
	}
	for _, name := range names {
		st := s.stats(name, parallel)
		if !st.Ran {
			fmt.Fprintf(w, "  %-12s %-26s %-8s %-8s %-8s %-9s %-11s %s\n", name, "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		reg := func(at int) string {
			v, ok := st.RegretAt[at]
			if !ok {
				return "-"
			}
			return fmt.Sprintf("%.1f%%", 100*v)
		}
		to := fmt.Sprintf("%g [%g-%g]", st.Median, st.Lo, st.Hi)
		if parallel > 1 && name == "ours" {
			to += fmt.Sprintf(" %g rounds", st.Rounds)
		}
		fmt.Fprintf(w, "  %-12s %-26s %-8s %-8s %-8s %-9.1f %-11.1f %d/%d\n", name, to, reg(10), reg(20), reg(30), st.Crash, st.Infeas, st.NeverDeclared, st.Seeds)
	}
}

// suiteLine is the suite's last line: ours' worst and median (over the
// landscapes) median launches to 97%, its worst median regret after 30
// launches, the smallest ratio of random's median to ours and the
// statically infeasible launches of ours over every study.
func suiteLine(all []scored) string {
	var meds []float64
	worst, worstReg := 0.0, 0.0
	ratio := math.Inf(1)
	infeasible := 0
	for _, s := range all {
		o := s.stats("ours", 1)
		if !o.Ran {
			continue
		}
		meds = append(meds, o.Median)
		worst = max(worst, o.Median)
		at := min(30, s.Budget)
		worstReg = max(worstReg, o.RegretAt[at])
		infeasible += o.InfeasibleSum
		if r := s.stats("random", 1); r.Ran && o.Median > 0 {
			ratio = min(ratio, r.Median/o.Median)
		}
	}
	rs := "-"
	if !math.IsInf(ratio, 1) {
		rs = fmt.Sprintf("%.2f", ratio)
	}
	if len(meds) == 0 { // ours did not run: nothing of it to state
		return fmt.Sprintf("suite_landscapes=%d ours_worst_trials_to_97=- ours_median_trials_to_97=- ours_worst_regret_at_30=- random_over_ours_min=- infeasible_launches=-", len(all))
	}
	return fmt.Sprintf("suite_landscapes=%d ours_worst_trials_to_97=%g ours_median_trials_to_97=%g ours_worst_regret_at_30=%.1f%% random_over_ours_min=%s infeasible_launches=%d",
		len(meds), worst, median(meds), 100*worstReg, rs, infeasible)
}

// searchLine is one search's result as --runs writes it.
type searchLine struct {
	Landscape string    `json:"landscape"`
	Method    string    `json:"method"`
	Seed      int       `json:"seed"`
	To97      int       `json:"to97"`
	Found97   int       `json:"found97"`
	Crashes   int       `json:"crashes"`
	Regret    []float64 `json:"regret"`
}

// writeRuns writes every search of s, one JSON object per line.
func writeRuns(w io.Writer, s scored) error {
	enc := json.NewEncoder(w)
	for _, r := range s.Runs {
		if err := enc.Encode(searchLine{Landscape: s.Name, Method: r.Method, Seed: r.Seed, To97: r.TrialsTo97, Found97: r.FoundTo97, Crashes: r.CrashLaunches, Regret: r.Regret}); err != nil {
			return err
		}
	}
	return nil
}

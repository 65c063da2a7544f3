package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

// The bootstrap interval of a median holds the median, stays within the
// data, collapses when every seed agrees and is wide when they disagree.
func TestMedianCI(t *testing.T) {
	spread := []float64{17, 31, 12, 12, 3, 1, 27, 3, 4, 31, 19, 24, 1, 10, 18, 17, 24, 8, 7, 31}
	for _, tt := range []struct {
		name    string
		xs      []float64
		minWide float64
		maxWide float64
	}{
		{"every seed agrees", []float64{9, 9, 9, 9, 9}, 0, 0},
		{"one seed", []float64{4}, 0, 0},
		{"20 seeds of the GLM study", spread, 5, 30},
	} {
		lo, hi := medianCI(tt.xs)
		m := median(tt.xs)
		if lo > m || hi < m || lo < slices.Min(tt.xs) || hi > slices.Max(tt.xs) {
			t.Errorf("%s: interval %g-%g, median %g, data %g-%g", tt.name, lo, hi, m, slices.Min(tt.xs), slices.Max(tt.xs))
		}
		if w := hi - lo; w < tt.minWide || w > tt.maxWide {
			t.Errorf("%s: interval %g-%g is %g wide, want %g-%g", tt.name, lo, hi, w, tt.minWide, tt.maxWide)
		}
		if lo2, hi2 := medianCI(tt.xs); lo2 != lo || hi2 != hi {
			t.Errorf("%s: a second call gave %g-%g, want the same %g-%g", tt.name, lo2, hi2, lo, hi)
		}
	}
	if lo, hi := medianCI(nil); lo != 0 || hi != 0 {
		t.Errorf("no seeds: %g-%g", lo, hi)
	}
}

// A rung that replays the launches an earlier rung measured gets what a
// study measured afresh gets: the reuse changes no result.
func TestLadderReuseIsExact(t *testing.T) {
	st := loadSmall(t)
	st.Budget.Confirm = 2 // a study that confirms after its search runs the ladder
	c, index, best := virtualComparison(t, st, 8)
	m := method{Name: "ours"}
	shared := &memo{runs: map[uint64]*memoRun{}}
	if _, _, err := c.study(t.Context(), m, 3, 5, shared, index, best); err != nil {
		t.Fatal(err)
	}
	reused := len(shared.runs)
	replayed, recsA, err := c.study(t.Context(), m, 3, 8, shared, index, best)
	if err != nil {
		t.Fatal(err)
	}
	fresh, recsB, err := c.study(t.Context(), m, 3, 8, &memo{runs: map[uint64]*memoRun{}}, index, best)
	if err != nil {
		t.Fatal(err)
	}
	if reused == 0 || replayed != fresh {
		t.Fatalf("replayed %+v, fresh %+v (%d launches reused)", replayed, fresh, reused)
	}
	if len(recsA) != len(recsB) {
		t.Fatalf("%d trials replayed, %d fresh", len(recsA), len(recsB))
	}
	for i := range recsA {
		a, b := recsA[i], recsB[i]
		if a.State != b.State || a.ConfigKey != b.ConfigKey || (a.Score == nil) != (b.Score == nil) || (a.Score != nil && *a.Score != *b.Score) {
			t.Errorf("trial %d: replayed %s %s %v, fresh %s %s %v", i, a.State, a.ConfigKey, a.Score, b.State, b.ConfigKey, b.Score)
		}
	}
	if fresh.Launches <= 8 {
		t.Errorf("%d launches for budget 8: the confirmation runs are not counted", fresh.Launches)
	}
}

// A study whose launches all count in its budget declares after L
// launches of a longer run what the same study with budget L declares:
// the anytime scoring is the budget's own run.
func TestAnytimeIsTheBudgetsRun(t *testing.T) {
	st := loadSmall(t)
	st.Budget.Confirm, st.Budget.Parallel = 0, 1
	c, index, best := virtualComparison(t, st, 10)
	m := method{Name: "ours", Sampler: "bayes"}
	rungs, _, err := c.anytime(t.Context(), m, 4, index, best)
	if err != nil {
		t.Fatal(err)
	}
	if len(rungs) != 10 {
		t.Fatalf("%d rungs, want one per launch of 10", len(rungs))
	}
	for _, budget := range []int{3, 6, 9} {
		own, _, err := c.study(t.Context(), m, 4, budget, &memo{runs: map[uint64]*memoRun{}}, index, best)
		if err != nil {
			t.Fatal(err)
		}
		if got := rungs[budget-1]; got.Truth != own.Truth || own.Launches != budget {
			t.Errorf("budget %d: anytime declared %.3f after %d launches; the budget's own run %.3f after %d", budget, got.Truth, got.Launches, own.Truth, own.Launches)
		}
	}
}

// virtualComparison compares searches of st on its landscape in virtual
// time (the GLM profile, 2 draws a config) at budget launches; it returns
// the comparison, the configs' index by flags and the best true score.
func virtualComparison(t *testing.T, st *space.Study, budget int) (*comparison, map[string]int, float64) {
	t.Helper()
	ls, err := ComputeLandscape(t.Context(), st, landscapeOptions{Profile: "glm-5.3-flash-h200x4", Draws: 2, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	pre := search.Check(st, func(string) string { return "" })
	pre.Host = nil // sglang-sim need not be on PATH: nothing runs on this host
	c := &comparison{Study: st, Profile: "glm-5.3-flash-h200x4", Landscape: ls, Seeds: 1, Budget: budget, NoiseCV: 0.12, Workers: 1, Preflight: &pre,
		Backend: &virtualBackend{profile: "glm-5.3-flash-h200x4", noiseCV: 0.12, eng: newSimEngine(st)}}
	return c, landscapeIndex(t, c), ls.Configs[ls.Best].Mean
}

func landscapeIndex(t *testing.T, c *comparison) map[string]int {
	t.Helper()
	index := map[string]int{}
	for i, ct := range c.Landscape.Configs {
		cfg, err := c.Study.Resolve(ct.Params, nil)
		if err != nil {
			t.Fatal(err)
		}
		index[strings.Join(cfg.Flags, " ")] = i
	}
	return index
}

// The ladder covers every other budget up to 12, then every 5th, and
// always the full budget.
func TestLadder(t *testing.T) {
	for _, tt := range []struct {
		budget int
		want   []int
	}{
		{30, []int{2, 4, 6, 8, 10, 12, 15, 20, 25, 30}},
		{17, []int{2, 4, 6, 8, 10, 12, 15, 17}},
		{1, []int{1}},
	} {
		if got := ladder(tt.budget); !slices.Equal(got, tt.want) {
			t.Errorf("ladder(%d) = %v, want %v", tt.budget, got, tt.want)
		}
	}
}

// The suite line: ours' worst and median landscape, the worst regret,
// random's smallest lead and the infeasible launches; a method not run
// is "-", never 0.
func TestSuiteLine(t *testing.T) {
	runs := func(method string, to ...int) []searchRun {
		var out []searchRun
		for i, n := range to {
			r := searchRun{Method: method, Seed: i + 1, TrialsTo97: n, InfeasibleLaunches: 0}
			for l := 1; l <= 30; l++ {
				reg := 0.5
				if l >= n {
					reg = 0.01
				}
				r.Regret = append(r.Regret, reg)
			}
			out = append(out, r)
		}
		return out
	}
	a := scored{Name: "a", Budget: 30, Runs: append(runs("ours", 8, 9, 10), runs("random", 20, 31, 31)...)}
	b := scored{Name: "b", Budget: 30, Runs: append(runs("ours", 12, 14, 16), runs("random", 25, 28, 31)...)}
	got := suiteLine([]scored{a, b})
	want := "suite_landscapes=2 ours_worst_trials_to_97=14 ours_median_trials_to_97=11.5 ours_worst_regret_at_30=1.0% random_over_ours_min=2.00 infeasible_launches=0"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var out bytes.Buffer
	printScored(&out, scored{Name: "c", Budget: 30, Runs: runs("ours", 5)}, 1)
	if !regexp.MustCompile(`(?m)^  goptuna_tpe +- +- +- +-`).MatchString(out.String()) {
		t.Errorf("a method not run should print -:\n%s", out.String())
	}
	if got := suiteLine([]scored{{Name: "c", Budget: 30, Runs: runs("ours", 5)}}); !strings.Contains(got, "random_over_ours_min=- ") {
		t.Errorf("without random: %s", got)
	}
	if got := suiteLine([]scored{{Name: "c", Budget: 30, Runs: runs("random", 5)}}); got != "suite_landscapes=1 ours_worst_trials_to_97=- ours_median_trials_to_97=- ours_worst_regret_at_30=- random_over_ours_min=- infeasible_launches=-" {
		t.Errorf("without ours: %s", got)
	}
}

func TestLoadSuite(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "suite.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ms, err := loadSuite(write("landscapes:\n  - {name: a, study: s.yaml, profile: p.yaml}\n  - {name: b, study: ../t.yaml, profile: glm-5.3-flash-h200x4}\n" +
		"  - {name: c, study: /abs/u.yaml, table: /abs/u.table.json.gz}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Study != filepath.Join(dir, "s.yaml") || ms[0].Profile != filepath.Join(dir, "p.yaml") || ms[1].Profile != "glm-5.3-flash-h200x4" {
		t.Errorf("paths not relative to the suite: %+v", ms)
	}
	if ms[2].Study != "/abs/u.yaml" || ms[2].Table != "/abs/u.table.json.gz" {
		t.Errorf("absolute paths not kept: %+v", ms[2])
	}
	for _, body := range []string{
		"landscapes: []\n",
		"landscapes:\n  - {name: a}\n",
		"landscapes:\n  - {name: a, study: s}\n  - {name: a, study: t}\n",
		"landscapes:\n  - {name: a, study: s, profile: p, table: t}\n",
		"landscapes:\n  - {name: a, study: s, colour: red}\n",
	} {
		if _, err := loadSuite(write(body)); err == nil {
			t.Errorf("%q: no error", body)
		}
	}
}

// A study with two GPU groups runs its workers in turns (lockstep): the
// same seed gives the same trials, in the same order, run after run, and
// the two groups take the launches in turn.
func TestParallelStudyIsReproducible(t *testing.T) {
	st := loadSmall(t)
	st.Budget.Confirm, st.Budget.Parallel = 2, 2
	st.GPUGroups = [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}}
	c, index, best := virtualComparison(t, st, 12)
	m := method{Name: "ours", Sampler: "bayes"}
	trials := func() []string {
		_, recs, err := c.study(t.Context(), m, 5, 12, &memo{runs: map[uint64]*memoRun{}}, index, best)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			score := "-"
			if r.Score != nil {
				score = fmt.Sprintf("%.6g", *r.Score)
			}
			out = append(out, fmt.Sprintf("%d %s %s %s %s", r.Number, r.GPUs, r.State, r.ConfigKey, score))
		}
		return out
	}
	first := trials()
	for range 3 {
		if again := trials(); !slices.Equal(again, first) {
			t.Fatalf("the same seed ran other trials:\n%s\nthen\n%s", strings.Join(first, "\n"), strings.Join(again, "\n"))
		}
	}
	groups := map[string]int{}
	for _, line := range first {
		groups[strings.Fields(line)[1]]++
	}
	if len(groups) != 2 {
		t.Errorf("launches by group %v: want both groups used", groups)
	}
}

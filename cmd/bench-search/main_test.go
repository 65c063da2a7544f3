package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/space"
)

const smallStudy = "testdata/small.yaml"

func loadSmall(t *testing.T) *space.Study {
	t.Helper()
	st, err := space.Load(smallStudy)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSharingIsExact: sharing measurements between configs that behave
// the same changes no config's draws.
func TestSharingIsExact(t *testing.T) {
	st := loadSmall(t)
	opt := landscapeOptions{Profile: "glm-5.3-flash-h200x4", Draws: 3, Workers: 2}
	shared, err := ComputeLandscape(t.Context(), st, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.NoShare = true
	alone, err := ComputeLandscape(t.Context(), st, opt)
	if err != nil {
		t.Fatal(err)
	}
	if shared.Reused == 0 || alone.Reused != 0 || shared.Runs >= alone.Runs {
		t.Errorf("shared: %d runs %d reused; alone: %d runs %d reused", shared.Runs, shared.Reused, alone.Runs, alone.Reused)
	}
	for i := range shared.Configs {
		a, b := shared.Configs[i], alone.Configs[i]
		if a.Params.String() != b.Params.String() || !equal(a.Values, b.Values) || a.Class != b.Class {
			t.Errorf("%s: shared %v %s, alone %v %s", a.Params, a.Values, a.Class, b.Values, b.Class)
		}
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLandscape: the small space's landscape as the simulator's rules
// make it: 128 state slots with the radix cache and the overlap
// scheduler are rejected before launch (128/5 = 25 running < 32), overlap
// off fails the quality gate, EP1 without the radix cache and with the
// default pool (32 slots) crashes after 34 requests, and the best config
// is EP4 with EAGLE.
func TestLandscape(t *testing.T) {
	st := loadSmall(t)
	ls, err := ComputeLandscape(t.Context(), st, landscapeOptions{Profile: "glm-5.3-flash-h200x4", Draws: 4, ScreenDraws: 2, Refine: 0.9, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Configs) != 64 {
		t.Fatalf("%d configs, want 64", len(ls.Configs))
	}
	for _, c := range ls.Configs {
		p := c.Params
		switch {
		case p["radix_cache"] == true && p["state_slots"] == "128" && p["overlap"] == true:
			if c.Launched() {
				t.Errorf("%s launched; want rejected (25 running < 32)", p)
			}
		case p["overlap"] == false:
			if c.Class != "quality" || c.Mean != 0 {
				t.Errorf("%s: class %q mean %v, want a failed quality gate", p, c.Class, c.Mean)
			}
		case p["ep"] == "1" && p["radix_cache"] == false && p["state_slots"] == "auto":
			if c.Class != "illegal_memory_access" || c.Mean != 0 {
				t.Errorf("%s: class %q mean %v, want a crash", p, c.Class, c.Mean)
			}
		default:
			if c.Mean <= 0 || len(c.Values) < 2 {
				t.Errorf("%s: mean %v over %d draws", p, c.Mean, len(c.Values))
			}
		}
	}
	b := ls.Configs[ls.Best].Params
	if b["ep"] != "4" || b["speculative"] != "EAGLE" || b["overlap"] != true {
		t.Errorf("best %s", b)
	}
	var out bytes.Buffer
	printSummary(&out, ls)
	for _, want := range []string{"best: ", "configs with a true score >= 97% of the best", "standard error of the true score", "illegal_memory_access"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunCachesAndCompares: the command computes the landscape once,
// reads it from the cache the second time, and runs the random search.
func TestRunCachesAndCompares(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--study", smallStudy, "--draws", "2", "--screen-draws", "0", "--cache", dir, "--workers", "2"}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append(args, "--landscape"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json.gz"))
	if len(files) != 1 || !strings.Contains(errOut.String(), "landscape cached in") {
		t.Fatalf("cache files %v; log %s", files, errOut.String())
	}
	out.Reset()
	errOut.Reset()
	runs := filepath.Join(dir, "runs.jsonl")
	if code := run(context.Background(), append(args, "--seeds", "3", "--budget", "6", "--noise-cv", "0.12", "--methods", "ours,random", "--runs", runs), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// --runs: one line per search, each with a regret after every launch.
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for line := range strings.Lines(string(data)) {
		var r searchLine
		if err := json.Unmarshal([]byte(line), &r); err != nil || len(r.Regret) != 6 || r.To97 < 1 || r.To97 > 7 || (r.Method != "ours" && r.Method != "random") {
			t.Errorf("--runs line %q: %+v, %v", line, r, err)
		}
		n++
	}
	if n != 6 {
		t.Errorf("--runs wrote %d lines; want 2 methods x 3 seeds", n)
	}
	if !strings.Contains(errOut.String(), "landscape from") {
		t.Errorf("second run did not use the cache: %s", errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	summary := regexp.MustCompile(`^suite_landscapes=1 ours_worst_trials_to_97=[0-9.]+ ours_median_trials_to_97=[0-9.]+ ours_worst_regret_at_30=[0-9.]+% random_over_ours_min=[0-9.]+ infeasible_launches=[0-9]+$`)
	if last := lines[len(lines)-1]; !summary.MatchString(last) {
		t.Errorf("last line %q, want the issue's summary format", last)
	}
}

func TestBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nparams: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Landscapes with nothing to score a search against: no config
	// meets the SLO, or none starts (out of memory at every fraction: it
	// panicked indexing the best).
	small, err := os.ReadFile(smallStudy)
	if err != nil {
		t.Fatal(err)
	}
	variant := func(name, old, new string) string {
		p := filepath.Join(t.TempDir(), name)
		b := bytes.Replace(small, []byte(old), []byte(new), 1)
		if bytes.Equal(b, small) {
			t.Fatalf("%s: %q not in %s", name, old, smallStudy)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	unmet := variant("unmet.yaml", "max_s: 2}", "max_s: 0.001}")
	nostart := variant("nostart.yaml", "choices: [0.78, 0.85]", "choices: [0.97, 0.98]")
	tiny := []string{"--draws", "1", "--screen-draws", "0", "--seeds", "1", "--budget", "2", "--methods", "random"}
	for _, args := range [][]string{
		{"--study", smallStudy, "--draws", "0"},
		{"--study", smallStudy, "--noise-cv", "-1"},
		{"--study", smallStudy, "--profile", "no-such-profile"},
		{"--study", bad},
		{"--study", smallStudy, "extra"},
		{"--no-such-flag"},
		append([]string{"--study", unmet}, tiny...),
		append([]string{"--study", nostart}, tiny...),
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append(args, "--cache", t.TempDir()), &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

func TestStudyProfile(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want string
	}{
		{"sglang-sim --sim-profile glm-5.3-flash-rtxpro6000x8 --sim-speedup 25", "glm-5.3-flash-rtxpro6000x8"},
		{"sglang-sim --sim-profile=p.yaml", "p.yaml"},
		{"python3 -m sglang.launch_server", "glm-5.3-flash-h200x4"},
	} {
		if got := studyProfile(strings.Fields(tc.cmd)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.cmd, got, tc.want)
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// versusRE is the line run, status, best and the report print about the
// engine default of a confirmed study: its gain, or that it is as good.
var versusRE = regexp.MustCompile(`(?m)^(\d+\.\d\d× the engine default, pooled over 2 runs each \(trial 0: pooled [\d.]+\)|the engine default is as good as anything found \(pooled [\d.]+ vs trial \d+'s [\d.]+, within the spread [\d.]+\))$`)

// TestRunStatesEngineDefault runs studies against the simulator with
// budget.baseline left at its default: check prints the default's command
// line; the run launches it first; run's summary, status, best (text and
// JSON) and the report state the winner against it, the same line
// everywhere; a default that fails says how.
func TestRunStatesEngineDefault(t *testing.T) {
	buildBins(t, "sglang-sim")
	t.Run("confirmed", func(t *testing.T) {
		dir := t.TempDir()
		study := writeFile(t, dir, "s.yaml", studyYAML("def", 100, strings.Replace(fmt.Sprintf(twoParams, 3), "confirm: 0}", "confirm: 1}", 1)))
		db := filepath.Join(dir, "s.db")
		code, out := cli(t, nil, nil, "check", study)
		want := "engine default (budget.baseline: default, launched first and counted in budget.trials): sglang-sim --sim-profile glm-5.3-flash-h200x4 --sim-speedup 100 --model-path zai-org/GLM-5.3-Flash --tp-size 4 --max-running-requests 64 --reasoning-parser glm45 --tool-call-parser glm45\n" +
			"  sets no param; left to the engine (neither a flagless value nor default:): ep, mem_fraction\n"
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("check: exit %d, want %q in:\n%s", code, want, out)
		}
		code, out = cli(t, nil, nil, "run", study, "--storage", db)
		if code != 0 {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		if !strings.Contains(out, "trial 0 launching [engine default: ep, mem_fraction left to the engine]") {
			t.Errorf("run did not launch the engine default first:\n%s", out)
		}
		line := versusRE.FindString(out)
		t.Logf("line: %s", line)
		if line == "" {
			t.Fatalf("run's summary does not state the winner against the engine default:\n%s", out)
		}
		recs := records(t, db)
		if !recs[0].Baseline || len(recs[0].Omitted) != 2 || len(recs[0].Params) != 0 {
			t.Errorf("trial 0 %+v: want the engine default, no params stored", recs[0])
		}
		for _, args := range [][]string{{"status"}, {"best"}} {
			code, got := cli(t, nil, nil, append(args, "--storage", db)...)
			if code != 0 || !strings.Contains(got, line+"\n") {
				t.Errorf("%s: exit %d, want %q in:\n%s", args[0], code, line, got)
			}
		}
		code, status := cli(t, nil, nil, "status", "--storage", db)
		if code != 0 || !strings.Contains(status, "engine default") || !strings.Contains(status, "ep, mem_fraction left to the engine") {
			t.Errorf("status does not mark the engine default's trial:\n%s", status)
		}
		for _, args := range [][]string{{"status", "--json"}, {"best", "--json"}} {
			_, js := cli(t, nil, nil, append(args, "--storage", db)...)
			var doc struct {
				VersusDefault string `json:"versus_default"`
			}
			if err := json.Unmarshal([]byte(js), &doc); err != nil || doc.VersusDefault != line {
				t.Errorf("%s: versus_default %q (%v), want %q", strings.Join(args, " "), doc.VersusDefault, err, line)
			}
		}
		rdir := filepath.Join(dir, "report")
		if code, out := cli(t, nil, nil, "report", "--storage", db, "-o", rdir); code != 0 {
			t.Fatalf("report: exit %d\n%s", code, out)
		}
		sentence := strings.ToUpper(line[:1]) + line[1:] + "."
		for _, f := range []string{"report.md", "index.html"} {
			b, err := os.ReadFile(filepath.Join(rdir, f))
			if err != nil || !strings.Contains(string(b), strings.ReplaceAll(sentence, "'", "&#39;")) && !strings.Contains(string(b), sentence) {
				t.Errorf("%s lacks %q (%v)", f, sentence, err)
			}
		}
	})
	t.Run("fails at startup", func(t *testing.T) {
		// Without --tp-size the simulated engine loads the model on one
		// GPU: out of memory, as SGLang would be.
		dir := t.TempDir()
		body := strings.Replace(studyYAML("deffail", 100, `params:
  - {name: tp, type: categorical, choices: [4], flag: --tp-size}
  - {name: mem_fraction, type: categorical, choices: [0.78, 0.80], flag: --mem-fraction-static}
budget: {trials: 2, sampler: random, seed: 3, confirm: 0}
`), "  --tp-size: 4\n", "", 1)
		study := writeFile(t, dir, "s.yaml", body)
		db := filepath.Join(dir, "s.db")
		code, out := cli(t, nil, nil, "run", study, "--storage", db)
		if code != 0 {
			t.Fatalf("run: exit %d\n%s", code, out)
		}
		const line = "the engine default failed: oom at startup\n"
		if !strings.Contains(out, line) {
			t.Errorf("run's summary lacks %q:\n%s", line, out)
		}
		if code, got := cli(t, nil, nil, "status", "--storage", db); code != 0 || !strings.Contains(got, line) {
			t.Errorf("status: exit %d, want %q in:\n%s", code, line, got)
		}
	})
}

// TestCheckShowsEngineDefault: check prints the engine default's command
// line and says when the study's rules reject it before launch; with
// budget.baseline: none it prints none.
func TestCheckShowsEngineDefault(t *testing.T) {
	doc := "name: s\nengine: {name: sglang, command: sh -c true}\nmodel: org/m\ngpus: {per_trial: 4}\nfixed: {--tp-size: 4}\n" +
		"workload: {quality: {enabled: false}}\nparams:\n" +
		"  - {name: ep, type: categorical, choices: [1, 4], flag: --ep-size, default: 1}\n" +
		"  - {name: radix, type: bool, values: {false: --disable-radix-cache}}\n" +
		"constraints: [ep == gpus_per_trial]\n"
	for _, tc := range []struct {
		name, budget string
		want         []string
		not          string
	}{
		{"rejected", "", []string{
			"engine default (budget.baseline: default, launched first and counted in budget.trials): sh -c true --model-path org/m --tp-size 4\n",
			"  sets ep=1 radix=true\n",
			"  the rules reject it before launch; the run stores it infeasible:\n",
			`    constraint: constraint "ep == gpus_per_trial" is false with ep=1, gpus_per_trial=4` + "\n"}, ""},
		{"none", "budget: {baseline: none}\n", nil, "engine default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "s.yaml", doc+tc.budget)
			_, out := runCheck(t, path)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("check lacks %q:\n%s", w, out)
				}
			}
			if tc.not != "" && strings.Contains(out, tc.not) {
				t.Errorf("check mentions %q with budget.baseline: none:\n%s", tc.not, out)
			}
		})
	}
}

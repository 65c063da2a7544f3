package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/storage"
)

func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	conf := storedWinner(t, "best pooled score 1980.0 over 2 runs; the next, trial 1's 1802.5, is 177.5 lower, more than either spread (60.0, 25.0)",
		confirmed(3, [2]float64{0, 1950}, [2]float64{5, 2010}), confirmed(2, [2]float64{1, 1790}, [2]float64{6, 1815}))
	spec := `{"metric":"output_tok_s","concurrency":64,"slo":[{"metric":"ttft","percentile":"p99","max_s":2}]}`
	db := seedStudy(t, dir, rankingTrials, map[string]string{storage.AttrWinner: conf, attrScoreSpec: spec, attrBudget: "12"})
	out := filepath.Join(dir, "out")
	code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", out)
	if code != 0 {
		t.Fatalf("report: exit %d\n%s", code, msg)
	}
	page, err := os.ReadFile(filepath.Join(out, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	svgs := 0
	for _, m := range regexp.MustCompile(`<img src="([^"]+)"`).FindAllStringSubmatch(string(page), -1) {
		if b, err := os.ReadFile(filepath.Join(out, m[1])); err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("page shows %s: %v", m[1], err)
		} else {
			svgs++
		}
	}
	if svgs < 4 {
		t.Errorf("%d plots on the page, want at least 4", svgs)
	}
	for _, want := range []string{
		"score: output tok/s at c=64 with ttft p99 &lt; 2s",
		"3 of 12 launches",
		"<h2>Confirmation reruns</h2>",
		"1,950 / 2,010",
		// 1,990 - 1,805 = 185 > 90: a win, not a tie.
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if strings.Contains(string(page), "Tie within") {
		t.Error("a 185-point gap with a 90 spread reported as a tie")
	}
	if _, err := os.Stat(filepath.Join(out, "report.md")); err != nil {
		t.Error(err)
	}

	// -o naming a file, and export -o naming a directory: bad input.
	if code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", db); code != exitUsage || !strings.Contains(msg, "is a file: give a directory") {
		t.Errorf("report -o FILE: exit %d\n%s", code, msg)
	}
	if code, msg := cli(t, nil, nil, "export", "--storage", db, "-o", out); code != exitUsage || !strings.Contains(msg, "is a directory: give the script's file name") {
		t.Errorf("export -o DIR: exit %d\n%s", code, msg)
	}

	// Without -o: bad input, nothing written.
	if code, msg := cli(t, nil, nil, "report", "--storage", db); code != exitUsage {
		t.Errorf("report without -o: exit %d\n%s", code, msg)
	}
}

// report -o replaces only what an earlier report wrote, as export -o does:
// another index.html, report.md or plot stops it before it writes anything
// (exit 2, naming -o); an unwritable -o is bad input too.
func TestReportKeepsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, nil)
	for _, tc := range []struct{ name, body string }{
		{"index.html", "<!DOCTYPE html>\n<html><body>my own page</body></html>\n"},
		{"report.md", "# Study notes\n\nwhat I found by hand\n"},
		{"throughput.svg", "<svg>my plot</svg>"},
		{"effect-batch.svg", "<svg>my plot</svg>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			mine := writeFile(t, out, tc.name, tc.body)
			code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", out)
			if want := "-o " + out + ": " + mine + " not written by sgtune report"; code != exitUsage || !strings.Contains(msg, want) {
				t.Errorf("exit %d, want 2 and %q:\n%s", code, want, msg)
			}
			if b, err := os.ReadFile(mine); err != nil || string(b) != tc.body {
				t.Errorf("%s changed: %q, %v", tc.name, b, err)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 1 {
				t.Errorf("report wrote into %s: %v", out, ents)
			}
		})
	}

	code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", "/proc/nope")
	if code != exitUsage || !strings.Contains(msg, "-o /proc/nope: the report cannot be written there") || strings.Contains(msg, "report: report:") {
		t.Errorf("report -o /proc/nope: exit %d, want 2 naming -o\n%s", code, msg)
	}

	// An earlier report is replaced, also one an sgtune from before the
	// mark wrote.
	out := filepath.Join(dir, "r")
	for i := range 2 {
		if code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", out); code != 0 {
			t.Fatalf("report #%d: exit %d\n%s", i+1, code, msg)
		}
	}
	for _, name := range []string{"index.html", "report.md"} {
		p := filepath.Join(out, name)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		old := regexp.MustCompile(`<!-- Written by sgtune report[^\n]*-->\n`).ReplaceAll(b, nil)
		if len(old) == len(b) {
			t.Fatalf("%s carries no mark", name)
		}
		if err := os.WriteFile(p, old, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", out); code != 0 {
		t.Errorf("report over an earlier unmarked report: exit %d\n%s", code, msg)
	}
}

// A trial whose server log could not be written whole (the run stored
// sgtune.log_error) says so where the log is named afterwards: status
// (text and JSON) and the report, next to the log path. The other trials'
// logs are whole and get no such line.
func TestLogErrorShownAfterRun(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, nil)
	st, sid := openSeeded(t, db)
	trials, err := st.GetAllTrials(sid)
	if err != nil {
		t.Fatal(err)
	}
	const logErr = "launcher: write log: write logs/trial-1.log: no space left on device"
	for _, tr := range trials {
		if err := st.AnnotateTrial(tr.ID, storage.AttrLogPath, fmt.Sprintf("logs/trial-%d.log", tr.Number)); err != nil {
			t.Fatal(err)
		}
		if tr.Number == 1 {
			if err := st.AnnotateTrial(tr.ID, storage.AttrLogError, logErr); err != nil {
				t.Fatal(err)
			}
		}
	}

	code, out := cli(t, nil, nil, "status", "--storage", db)
	if want := "log: trial 1's server log logs/trial-1.log is incomplete: " + logErr + "\n"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("status: exit %d, want %q:\n%s", code, want, out)
	}
	if strings.Count(out, "is incomplete") != 1 {
		t.Errorf("status names a whole log as incomplete:\n%s", out)
	}
	code, out = cli(t, nil, nil, "status", "--storage", db, "--json")
	if want := `"log_error": "` + logErr + `"`; code != 0 || strings.Count(out, want) != 1 || strings.Count(out, `"log_error"`) != 1 {
		t.Errorf("status --json: exit %d, want %s once:\n%s", code, want, out)
	}

	outDir := filepath.Join(dir, "out")
	if code, msg := cli(t, nil, nil, "report", "--storage", db, "-o", outDir); code != 0 {
		t.Fatalf("report: exit %d\n%s", code, msg)
	}
	page, err := os.ReadFile(filepath.Join(outDir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(outDir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "· log logs/trial-1.log (incomplete: " + logErr + ")</div>"; !strings.Contains(string(page), want) || strings.Count(string(page), "(incomplete: ") != 1 {
		t.Errorf("index.html lacks %q, or names another log as incomplete", want)
	}
	if want := "- trial 1, complete: log: `logs/trial-1.log` (incomplete: " + logErr + ")\n"; !strings.Contains(string(md), want) || strings.Count(string(md), "(incomplete: ") != 1 {
		t.Errorf("report.md lacks %q, or names another log as incomplete:\n%s", want, md)
	}
}

package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteReport(t *testing.T) {
	s1, s2, s3 := 1865.9, 1419.3, 900.0
	trials := []Trial{
		{Number: 0, State: "complete", Score: &s2, ScoreOK: true, Params: map[string]interface{}{"ep": "1"},
			Levels: []Level{{1, 3, 107, 0.15, 0.16, 2.4}, {64, 3, 1419.3, 1.0, 7.2, 19.2}}},
		{Number: 1, State: "infeasible", Class: "limits_reduced", Reason: "256 // 5 = 51 < 64"},
		{Number: 2, State: "failed", Class: "illegal_memory_access", Reason: "RuntimeError: CUDA error | an illegal memory access"},
		{Number: 3, State: "complete", Score: &s1, ScoreOK: true, Params: map[string]interface{}{"ep": "4"},
			Flags:  []string{"--model-path", "m", "--ep-size", "4"},
			Levels: []Level{{1, 3, 107.4, 0.15, 0.16, 2.4}, {64, 3, 1865.9, 1.1, 2.6, 9.9}}},
		{Number: 4, State: "complete", Score: &s3, ScoreOK: false, Reason: "TTFT p99 9.1 s > 2 s"},
	}
	best := trials[3]
	dir := t.TempDir()
	if err := WriteReport(dir, Study{Name: "glm", Storage: "glm.db", Trials: trials, Best: &best}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Study glm",
		"5 trials (3 complete, 1 failed, 1 infeasible)",
		"## Best: trial 3, score 1865.90",
		"--model-path m --ep-size 4",
		"| 64 | 3 | 1865.9 | 1.100 | 2.600 | 9.90 |",
		"| 1 | 3 | 1865.90 | ep=4 |", // ranking: trial 3 first
		"| 2 | 0 | 1419.30 | ep=1 |",
		"| failed: illegal_memory_access | 2 | RuntimeError: CUDA error \\| an illegal memory access |",
		"| infeasible: limits_reduced | 1 | 256 // 5 = 51 < 64 |",
		"900.00 (SLO miss)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "| 3 | 4 |") {
		t.Error("a trial that missed its SLO was ranked")
	}
	for _, f := range []string{"progress.svg", "throughput.svg", "ttft-p99.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestWriteReportEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReport(dir, Study{Name: "empty"}); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "No trial met") {
		t.Errorf("empty study report:\n%s", md)
	}
	if _, err := os.Stat(filepath.Join(dir, "throughput.svg")); !os.IsNotExist(err) {
		t.Error("a plot was drawn without data")
	}
}

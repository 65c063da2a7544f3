package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var buf bytes.Buffer
	a := &app{stdout: &buf, stderr: &buf, getenv: os.Getenv}
	code := a.execute(context.Background(), append([]string{"check"}, args...))
	return code, buf.String()
}

func TestCheckGLMStudy(t *testing.T) {
	code, out := runCheck(t, "../../testdata/studies/glm-5.3-flash-h200x4.yaml")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"space: 21504 configs, every one checked",
		"--max-mamba-cache-size 256 with radix cache and overlap: 256 // 5 = 51 < --max-running-requests 64",
		"feasible: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckJSON(t *testing.T) {
	code, out := runCheck(t, "--json", "../../testdata/studies/demo.yaml")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, out)
	}
	var sv struct {
		Size       int  `json:"size"`
		Enumerated bool `json:"enumerated"`
		Feasible   int  `json:"feasible"`
		Infeasible int  `json:"infeasible"`
		Rejections []struct {
			Rule    string `json:"rule"`
			Message string `json:"message"`
			Count   int    `json:"count"`
		} `json:"rejections"`
	}
	if err := json.Unmarshal([]byte(out), &sv); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !sv.Enumerated || sv.Size != sv.Feasible+sv.Infeasible || sv.Feasible == 0 || len(sv.Rejections) == 0 {
		t.Errorf("survey %+v", sv)
	}
}

func TestCheckBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nengine: {name: sglang, command: sglang serve}\nmodel: m\nfixed: {--mem-fraction-statc: 0.8}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{bad}, "bad.yaml:4:9: fixed.--mem-fraction-statc: unknown flag --mem-fraction-statc (did you mean --mem-fraction-static?)"},
		{[]string{"../../testdata/studies/bad/wrong-type.yaml"}, "wrong-type.yaml:7:14: gpus.per_trial"},
		{[]string{filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{}, "accepts 1 arg"},
	}
	for _, tt := range tests {
		code, out := runCheck(t, tt.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", tt.args, code, exitUsage, out)
		}
		if !strings.Contains(out, tt.want) {
			t.Errorf("%v: output lacks %q:\n%s", tt.args, tt.want, out)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("check wrote files: %v", entries)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sgtune/sgtune/space"
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
	// Warnings (sglang-sim may not be on PATH) go to stderr: stdout is the document.
	var stdout, stderr bytes.Buffer
	a := &app{stdout: &stdout, stderr: &stderr, getenv: os.Getenv}
	code := a.execute(context.Background(), []string{"check", "--json", "../../testdata/studies/demo.yaml"})
	out := stdout.String()
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, stderr.String())
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
	two := filepath.Join(dir, "two.yaml")
	if err := os.WriteFile(two, []byte("name: x\nengine: {name: sglang, command: sglang serve}\nmodel: m\n---\nname: second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// run refused it only as it built the sampler, after writing files.
	grid := filepath.Join(dir, "grid.yaml")
	if err := os.WriteFile(grid, []byte("name: x\nengine: {name: sglang, command: sglang serve}\nmodel: m\n"+
		"params: [{name: m, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static}]\nbudget: {sampler: grid}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// check built every point of the grid (twice) before it said valid:
	// just past the cap here, out of memory at a few hundred million.
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte("name: x\nengine: {name: sglang, command: sglang serve}\nmodel: m\n"+
		"params: [{name: m, type: float, low: 0.5, high: 0.9, step: 0.0004, flag: --mem-fraction-static},\n"+
		"  {name: r, type: int, low: 1, high: 1000, flag: --max-running-requests}]\nbudget: {sampler: grid}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{bad}, "bad.yaml:4:9: fixed.--mem-fraction-statc: unknown flag --mem-fraction-statc (did you mean --mem-fraction-static?)"},
		{[]string{grid}, `grid.yaml:5:19: budget.sampler: "grid" needs a finite space: give every float param a step, or use bayes (m has no step)`},
		{[]string{huge}, `huge.yaml:6:19: budget.sampler: "grid" lists every config before its first trial, and the space has more than 1000000 (up to 1001000); use coarser steps or fewer choices (m has 1001 values, r 1000), or sampler bayes or random`},
		{[]string{two}, "two.yaml:4:1: a second YAML document starts here; a study file holds one document"},
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
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		t.Errorf("check wrote files: %v", entries)
	}
}

// TestCheckVerdicts covers the exit code and the warnings about this machine.
func TestCheckVerdicts(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// sh is on PATH wherever the tests run; the other command is not.
	const onPath = "engine: {name: sglang, command: sh -c true}\n"
	const missing = "engine: {name: sglang, command: sgtune-no-such-engine-xyz --flag}\n"
	// No quality gate: the tool-call warning has cases of its own.
	const gpus = "model: org/m\ngpus: {per_trial: 4}\nworkload: {quality: {enabled: false}}\n"
	tests := []struct {
		name, doc string
		env       map[string]string
		code      int
		want      []string // substrings of the output, in order
		not       []string
	}{
		{"feasible", "name: ok\n" + onPath + gpus + "fixed: {--tp-size: 4}\n", nil, exitOK,
			[]string{"study ok (", "): valid\n", "engine: sglang, command: sh -c true", "feasible: 1 (100.0%)"},
			[]string{"warning:", "no feasible config"}},
		{"version shown", "name: ok\nengine: {name: sglang, command: sh -c true, version: v0.5.21}\n" + gpus, nil, exitOK,
			[]string{"engine: sglang v0.5.21, command: sh -c true"}, []string{"warning:"}},
		{"version without a schema", "name: ok\nengine: {name: sglang, command: sh -c true, version: v0.6.0}\n" + gpus, nil, exitOK,
			[]string{"flags from bundled sglang-v0.5.21", "warning: " + filepath.Join(dir, "version-without-a-schema.yaml") +
				": engine.version v0.6.0: sgtune bundles no flag schema for it; flags and rules are checked as for sglang v0.5.21"}, nil},
		{"zero feasible", "name: none\n" + onPath + gpus + "params:\n  - {name: tp, type: categorical, choices: [8, 16], flag: --tp-size}\n", nil, exitUsage,
			[]string{"study none (", "): valid file, but no config is feasible", "feasible: 0 (0.0%), infeasible: 2", "parallel_gpus",
				"study none: no feasible config: none of its 2 configs passes the rules; top reasons: parallel_gpus: --tp-size"},
			nil},
		{"derived value no config passes", "name: d\n" + onPath + gpus + "params:\n  - {name: s, type: int, low: 1, high: 3}\n" +
			"derived:\n  - {flag: --speculative-num-draft-tokens, value: s + 0.5}\n", nil, exitUsage,
			[]string{"valid file, but no config is feasible", "flag_value: 3 configs",
				filepath.Join(dir, "derived-value-no-config-passes.yaml") + `:9:51: derived[--speculative-num-draft-tokens].value "s + 0.5": --speculative-num-draft-tokens "1.5" is not an integer`,
				"study d: no feasible config: none of its 3 configs passes the rules; top reasons: flag_value: " + filepath.Join(dir, "derived-value-no-config-passes.yaml") + ":9:51: derived[--speculative-num-draft-tokens]"},
			nil},
		{"missing engine", "name: far\n" + missing + gpus, nil, exitOK,
			[]string{"feasible: 1", `warning: ` + filepath.Join(dir, "missing-engine.yaml") + `: engine.command: cannot run "sgtune-no-such-engine-xyz": executable file not found in $PATH (is it installed and on PATH?); sgtune run will refuse to start on this machine`},
			[]string{"no feasible config"}},
		{"api key env unset", "name: k\n" + onPath + gpus + "launch: {api_key_env: SGTUNE_TEST_KEY}\n", nil, exitOK,
			[]string{"warning: launch.api_key_env: environment variable SGTUNE_TEST_KEY is empty or unset; sgtune run will refuse to start on this machine"}, nil},
		{"api key env set", "name: k\n" + onPath + gpus + "launch: {api_key_env: SGTUNE_TEST_KEY}\n", map[string]string{"SGTUNE_TEST_KEY": "x"}, exitOK,
			nil, []string{"warning:"}},
		{"api key file missing", "name: k\n" + onPath + gpus + "launch: {api_key_file: nokey}\n", nil, exitOK,
			[]string{"warning: launch.api_key_file: open " + filepath.Join(dir, "nokey") + ": no such file"}, nil},
		{"api key file readable", "name: k\n" + onPath + gpus + "launch: {api_key_file: key}\n", nil, exitOK,
			nil, []string{"warning:"}},
		{"tool gate without a tool-call parser", "name: t\n" + onPath + "model: org/m\ngpus: {per_trial: 4}\nworkload: {quality: {enabled: true, tool_requests: 2}}\n", nil, exitOK,
			[]string{"warning: the quality gate asks for tool calls (workload.quality) but no feasible config passes --tool-call-parser"}, nil},
		{"tool gate with a tool-call parser", "name: t\n" + onPath + "model: org/m\ngpus: {per_trial: 4}\nfixed: {--tool-call-parser: glm45}\nworkload: {quality: {enabled: true, tool_requests: 2}}\n", nil, exitOK,
			nil, []string{"warning:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tt.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			a := &app{stdout: &buf, stderr: &buf, getenv: func(k string) string { return tt.env[k] }}
			code := a.execute(context.Background(), []string{"check", path})
			out := buf.String()
			if code != tt.code {
				t.Errorf("exit %d, want %d\n%s", code, tt.code, out)
			}
			rest := out
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("output lacks %q (in order):\n%s", w, out)
					break
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, out)
				}
			}
		})
	}
}

// A when: that fails to evaluate for one choice is one error line with the
// configs it failed, not one line per config.
func TestCheckListsAResolveErrorOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	doc := "name: s\nengine: {name: sglang, command: sh -c true}\nmodel: org/m\nworkload: {quality: {enabled: false}}\nparams:\n" +
		"  - {name: slots, type: categorical, choices: [auto, 256], flag: --max-mamba-cache-size, values: {auto: ''}}\n" +
		"  - {name: radix, type: bool, values: {false: --disable-radix-cache}}\n" +
		"  - {name: overlap, type: bool, values: {false: --disable-overlap-schedule}}\n" +
		"  - {name: bs, type: int, low: 8, high: 16, step: 8, flag: --cuda-graph-max-bs, when: slots > 128}\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, out := runCheck(t, path)
	line := `error: params[bs].when "slots > 128": cannot order "auto" and 128 (4 configs)` + "\n"
	if n := strings.Count(out, "cannot order"); n != 1 || !strings.Contains(out, line) {
		t.Errorf("output has %d 'cannot order' lines, want one %q:\n%s", n, line, out)
	}
}

// The commands --help lists all run: help and completion too, which cobra
// adds only inside Execute; an unknown command is a usage error.
func TestListedCommandsRun(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"help", "run"}, 0, "Run proposes configurations"},
		{[]string{"completion", "bash"}, 0, "bash completion"},
		{[]string{"nope"}, 2, `unknown command "nope" for "sgtune"`},
		{[]string{"--version"}, 0, "sgtune " + buildVersion() + "\n"},
	} {
		if code, out := cli(t, nil, nil, tc.args...); code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("sgtune %s: exit %d, want %d with %q:\n%.300s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
}

// Reasons that differ only in their numbers are one line with the range
// each number spans once there are more than mergeAbove of them; a
// param's few choices keep a line each, and words such as fp8 are not
// numbers.
func TestMergeNumbers(t *testing.T) {
	kv := func(n string, c int) space.RejectionCount {
		return space.RejectionCount{Rule: "kv_capacity", Message: "predicted KV tokens " + n + ": no memory left for the KV cache", Count: c}
	}
	pool := func(s string, c int) space.RejectionCount {
		return space.RejectionCount{Rule: "limits_reduced", Message: "--max-mamba-cache-size " + s + " with overlap: " + s + " // 5 < 64", Count: c}
	}
	dtype := func(d string) space.RejectionCount {
		return space.RejectionCount{Rule: "r", Message: "--kv-cache-dtype " + d + " needs sm90", Count: 1}
	}
	got := mergeNumbers([]space.RejectionCount{
		kv("-108858", 32), kv("-20643", 32), kv("-197072", 32), kv("-5486", 8), kv("-1", 1), kv("-2", 1), kv("-3", 1), kv("-4", 1), kv("-5", 1),
		pool("128", 10), pool("256", 20),
		dtype("fp8_e4m3"), dtype("fp8_e5m2"), dtype("fp4"), dtype("fp16"),
	})
	want := []string{
		"109 predicted KV tokens -197072…-1: no memory left for the KV cache",
		"20 --max-mamba-cache-size 256 with overlap: 256 // 5 < 64",
		"10 --max-mamba-cache-size 128 with overlap: 128 // 5 < 64",
		"1 --kv-cache-dtype fp16 needs sm90",
		"1 --kv-cache-dtype fp4 needs sm90",
		"1 --kv-cache-dtype fp8_e4m3 needs sm90",
		"1 --kv-cache-dtype fp8_e5m2 needs sm90",
	}
	// A word "#" is text, not a number's place.
	var hashes []space.RejectionCount
	for i := range 9 {
		hashes = append(hashes, space.RejectionCount{Rule: "h", Message: fmt.Sprintf("group # %d of 9", i+1), Count: 1})
	}
	if h := mergeNumbers(hashes); len(h) != 1 || h[0].Message != "group # 1…9 of 9" || h[0].Count != 9 {
		t.Errorf("merged %+v, want one 'group # 1…9 of 9'", h)
	}
	var lines []string
	for _, r := range got {
		lines = append(lines, fmt.Sprintf("%d %s", r.Count, r.Message))
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// check --json on an invalid file still prints a document: the file is not
// valid and each problem is an entry; exit 2.
func TestCheckJSONInvalid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte("name: t\nengine: {name: sglang, command: python3 -m sglang.launch_server}\nmodel: {path: m}\nscore: {metric: tok_s}\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: os.Getenv}
	code := a.execute(context.Background(), []string{"check", "--json", path})
	var doc struct {
		Path   string   `json:"path"`
		Valid  *bool    `json:"valid"`
		Errors []string `json:"errors"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); code != exitUsage || err != nil || doc.Valid == nil || *doc.Valid || len(doc.Errors) != 2 ||
		!strings.Contains(doc.Errors[0], ":4:") || !strings.Contains(doc.Errors[1], "bogus: unknown field") {
		t.Errorf("exit %d, %v: %+v\nstdout %s\nstderr %s", code, err, doc, out.String(), errb.String())
	}
}

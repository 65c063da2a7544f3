package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/storage"
)

// setFlags rewrites a stored trial's config flags (trial 0 of seedStudy).
func setFlags(t *testing.T, db string, flags string) {
	t.Helper()
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.AnnotateTrial(1, "sgtune.config", `{"flags":`+flags+`}`); err != nil {
		t.Fatal(err)
	}
}

func TestExportHeaderAndShellcheck(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, map[string]string{storage.AttrModelRevision: "4f3a9c1e"})
	t.Setenv("SOURCE_DATE_EPOCH", "1796040000") // 2026-11-30
	script := filepath.Join(dir, "best.sh")
	code, out := cli(t, nil, nil, "export", "--storage", db, "-o", script)
	if code != 0 {
		t.Fatalf("export: exit %d\n%s", code, out)
	}
	body, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"#   study:          rescore\n",
		"#   trial:          0\n",
		"#   score:          2000.00 (2000.0 output tok/s at c=64 (median of 1))\n",
		"#   measured:       2000.0 output tok/s at concurrency 64, TTFT p99 1.586 s\n",
		"#   engine version: v0.5.21\n",
		"#   model revision: 4f3a9c1e\n",
		"#   date:           2026-11-30\n",
		`set -- --api-key "$SGTUNE_API_KEY" "$@"`,
		"  --mem-fraction-static 0.80 \\\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("script lacks %q:\n%s", want, body)
		}
	}
	if st, err := os.Stat(script); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("script not executable: %v", err)
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}
	if sc, err := exec.LookPath("shellcheck"); err == nil {
		if out, err := exec.Command(sc, "--severity=style", script).CombinedOutput(); err != nil {
			t.Errorf("shellcheck: %v\n%s", err, out)
		}
	}

	code, out = cli(t, nil, nil, "export", "--storage", db, "--format", "json", "--api-key-env", "MY_KEY")
	if code != 0 {
		t.Fatalf("export json: exit %d\n%s", code, out)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	for k, want := range map[string]any{"study": "rescore", "trial": 0.0, "score": 2000.0, "engine_version": "v0.5.21",
		"model_revision": "4f3a9c1e", "date": "2026-11-30", "api_key_env": "MY_KEY"} {
		if doc[k] != want {
			t.Errorf("json %s = %v, want %v", k, doc[k], want)
		}
	}
	if m, _ := doc["measured"].(map[string]any); m == nil || m["concurrency"] != 64.0 || m["output_tok_s"] != 2000.0 {
		t.Errorf("json measured = %v", doc["measured"])
	}
}

func TestExportRejectsInvalidFlags(t *testing.T) {
	for _, tt := range []struct {
		flags string
		want  []string
	}{
		{`["--model-path","m","--mem-fraction-statik","0.8"]`, []string{"--mem-fraction-statik", "closest valid flag: --mem-fraction-static"}},
		{`["--model-path","m","--mem-fraction-static","2"]`, []string{"--mem-fraction-static", "above"}},
		{`["--model-path","m","--disable-radix-cache","yes"]`, []string{"is not a flag"}},
	} {
		dir := t.TempDir()
		db := seedStudy(t, dir, rankingTrials, nil)
		setFlags(t, db, tt.flags)
		script := filepath.Join(dir, "best.sh")
		if err := os.WriteFile(script, []byte("previous\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		code, out := cli(t, nil, nil, "export", "--storage", db, "-o", script)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want 2\n%s", tt.flags, code, out)
		}
		for _, w := range append(tt.want, "nothing written") {
			if !strings.Contains(out, w) {
				t.Errorf("%s: message lacks %q:\n%s", tt.flags, w, out)
			}
		}
		if b, _ := os.ReadFile(script); string(b) != "previous\n" {
			t.Errorf("%s: the existing file was changed:\n%s", tt.flags, b)
		}
	}
}

// Once a study declared a winner on its confirmation runs, every command
// that names the best trial names that one, not the trial with the best
// single measurement (trial 0's 2000 here, which its rerun did not repeat).
func TestCommandsFollowTheDeclaredWinner(t *testing.T) {
	dir := t.TempDir()
	win := storedWinner(t, "best pooled score 1850.0 over 2 runs", confirmed(2, [2]float64{1, 1800}, [2]float64{4, 1900}),
		confirmed(3, [2]float64{0, 2000}, [2]float64{3, 1400}))
	db := seedStudy(t, dir, rankingTrials, map[string]string{storage.AttrWinner: win})
	script := filepath.Join(dir, "best.sh")
	if code, out := cli(t, nil, nil, "export", "--storage", db, "-o", script); code != 0 {
		t.Fatalf("export: exit %d\n%s", code, out)
	}
	if body, err := os.ReadFile(script); err != nil || !strings.Contains(string(body), "#   trial:          1\n") ||
		!strings.Contains(string(body), "#   confirmed:      pooled 1850.00 over 2 runs, spread 100.00\n") {
		t.Errorf("export wrote trial other than the winner 1, or without its confirmation (%v):\n%s", err, body)
	}
	// export --format json gives the confirmation as numbers, for scripts.
	code, out := cli(t, nil, nil, "export", "--storage", db, "--format", "json")
	var exp struct {
		Trial        int            `json:"trial"`
		Confirmation *report.Pooled `json:"confirmation"`
	}
	if err := json.Unmarshal([]byte(out), &exp); code != 0 || err != nil || exp.Trial != 1 || exp.Confirmation == nil ||
		*exp.Confirmation != (report.Pooled{Pooled: 1850, Runs: 2, Spread: 100}) {
		t.Errorf("export --format json: exit %d, %v, %+v:\n%s", code, err, exp, out)
	}
	// best --json carries the confirmation beside the trial's own fields.
	code, out = cli(t, nil, nil, "best", "--storage", db, "--json")
	var doc struct {
		Number    int            `json:"number"`
		Confirmed *search.Winner `json:"confirmed"`
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Number != 1 || doc.Confirmed == nil || doc.Confirmed.Pooled != 1850 {
		t.Errorf("best --json: exit %d, %v, %+v:\n%s", code, err, doc, out)
	}
	for _, tt := range []struct{ cmd, want string }{
		{"best", "study rescore: best trial 1, score 1850.00 pooled over 2 runs (first run 1800.00)\nconfirmed: pooled 1850.00 over 2 runs, spread 100.00: best pooled score 1850.0 over 2 runs\n"},
		{"status", "best: trial 1 (confirmed: pooled 1850.00 over 2 runs, spread 100.00)\n"},
	} {
		if code, out := cli(t, nil, nil, tt.cmd, "--storage", db); code != 0 || !strings.Contains(out, tt.want) {
			t.Errorf("%s: exit %d, output lacks %q:\n%s", tt.cmd, code, tt.want, out)
		}
	}
}

// An unreadable stored winner does not keep status, best or export from the
// trials (they warn and name the best trial); the report fails on it.
func TestUnreadableWinner(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, map[string]string{storage.AttrWinner: "{not json"})
	if code, out := cli(t, nil, nil, "status", "--storage", db); code != 0 || !strings.Contains(out, "best: trial 0 (score 2000.00); the stored winner is unreadable") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	if code, out := cli(t, nil, nil, "export", "--storage", db, "-o", filepath.Join(dir, "x.sh")); code != 0 || !strings.Contains(out, "warning:") {
		t.Errorf("export: exit %d\n%s", code, out)
	}
	if code, out := cli(t, nil, nil, "report", "--storage", db, "-o", filepath.Join(dir, "r")); code == 0 {
		t.Errorf("report with an unreadable winner: exit 0\n%s", out)
	}
}

// A stored winner that no longer holds (a search trial came after it, as
// when a study resumes with a larger budget) is not quoted beside the best
// trial that the commands name instead.
func TestStaleWinnerNotQuoted(t *testing.T) {
	dir := t.TempDir()
	win := storedWinner(t, "best pooled", confirmed(2, [2]float64{1, 1800}))
	db := seedStudy(t, dir, rankingTrials, map[string]string{storage.AttrWinner: win})
	for _, tt := range []struct{ cmd, want string }{
		{"best", "study rescore: best trial 0, score 2000.00\n"},
		{"status", "best: trial 0 (score 2000.00)\n"},
	} {
		code, out := cli(t, nil, nil, tt.cmd, "--storage", db)
		if code != 0 || !strings.Contains(out, tt.want) || strings.Contains(out, "confirmed") {
			t.Errorf("%s: exit %d, want %q and no confirmation:\n%s", tt.cmd, code, tt.want, out)
		}
	}
	script := filepath.Join(dir, "best.sh")
	if code, out := cli(t, nil, nil, "export", "--storage", db, "-o", script); code != 0 {
		t.Fatalf("export: exit %d\n%s", code, out)
	}
	if body, err := os.ReadFile(script); err != nil || strings.Contains(string(body), "confirmed") {
		t.Errorf("export quotes a stale confirmation (%v):\n%s", err, body)
	}
}

// A trial that is not a config to deploy still exports (to reproduce a
// crash), with a warning on stderr and in the script's header.
func TestExportWarnsUndeployable(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, []fakeTrial{
		{name: "ok", tokS: 2000, ttftLo: 0.2, ttftHi: 1.0},
		{name: "slow-tail", tokS: 2500, ttftLo: 0.2, ttftHi: 3.0},
	}, nil)
	for _, tc := range []struct {
		trial string
		want  string // in stderr and the header; "" for none
	}{
		{"0", ""},
		{"1", "trial 1 missed its SLO or quality gates (concurrency 64: ttft p99 2.972 s > 2.000 s)"},
	} {
		script := filepath.Join(dir, "t"+tc.trial+".sh")
		code, out := cli(t, nil, nil, "export", "--storage", db, "--trial", tc.trial, "-o", script)
		body, err := os.ReadFile(script)
		if code != 0 || err != nil {
			t.Fatalf("export --trial %s: exit %d, %v\n%s", tc.trial, code, err, out)
		}
		if tc.want == "" {
			if strings.Contains(out, "warning") || strings.Contains(string(body), "WARNING") {
				t.Errorf("trial %s passed, but export warns:\n%s\n%s", tc.trial, out, body)
			}
			continue
		}
		if !strings.Contains(out, "warning: "+tc.want) || !strings.Contains(string(body), "#   WARNING:        "+tc.want) {
			t.Errorf("export --trial %s: want warning %q on stderr and in the header:\n%s\n%s", tc.trial, tc.want, out, body)
		}
	}
}

func TestNotDeployable(t *testing.T) {
	score := 10.0
	for _, tc := range []struct {
		rec  search.Record
		want string
	}{
		{search.Record{Number: 1, State: search.StateComplete, ScoreOK: true, Score: &score}, ""},
		{search.Record{Number: 2, State: search.StateFailed, FailureClass: "illegal_memory_access", Reason: "CUDA error"},
			"trial 2 failed (illegal_memory_access: CUDA error); this config crashed or broke, export it to reproduce the failure, not to deploy"},
		{search.Record{Number: 3, State: search.StateInterrupted, Reason: "interrupted during measurement"},
			"trial 3 is interrupted, not measured to the end (interrupted during measurement); its config is untested under the study's workload"},
		{search.Record{Number: 4, State: search.StatePruned},
			"trial 4 is pruned, not measured to the end (no reason stored); its config is untested under the study's workload"},
		{search.Record{Number: 5, State: search.StateComplete, ScoreReason: "ttft p99 3.1 s > 2 s"},
			"trial 5 missed its SLO or quality gates (ttft p99 3.1 s > 2 s)"},
	} {
		if got := notDeployable(tc.rec); got != tc.want {
			t.Errorf("trial %d (%s): got %q, want %q", tc.rec.Number, tc.rec.State, got, tc.want)
		}
	}
}

// --command is split as a shell would; a line no shell could run is bad
// input and nothing is written.
func TestExportBadCommand(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, nil)
	script := filepath.Join(dir, "x.sh")
	for _, c := range []string{"sglang serve 'unterminated", " "} {
		code, out := cli(t, nil, nil, "export", "--storage", db, "--command", c, "-o", script)
		if code != exitUsage || !strings.Contains(out, "--command") || !strings.Contains(out, "nothing written") {
			t.Errorf("--command %q: exit %d, want 2 naming --command:\n%s", c, code, out)
		}
		if _, err := os.Stat(script); !os.IsNotExist(err) {
			t.Errorf("--command %q: a script was written (%v)", c, err)
		}
	}
	code, out := cli(t, nil, nil, "export", "--storage", db, "--command", `sglang serve --log-level "debug info"`, "-o", script)
	body, err := os.ReadFile(script)
	if code != 0 || err != nil || !strings.Contains(string(body), "exec sglang serve --log-level 'debug info' ") {
		t.Errorf("a quoted --command: exit %d, %v\n%s\n%s", code, err, out, body)
	}
}

// -o into a directory that does not exist is bad input, named plainly.
func TestExportNoDirectory(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)
	out := filepath.Join(t.TempDir(), "missing", "x.sh")
	code, text := cli(t, nil, nil, "export", "--storage", db, "-o", out)
	want := "-o " + out + ": no directory " + filepath.Dir(out) + " to write it in"
	if code != exitUsage || !strings.Contains(text, want) || strings.Contains(text, ".x.sh.") {
		t.Errorf("exit %d, want 2 with %q and no temporary name:\n%s", code, want, text)
	}
}

// -o replaces an earlier export (script or JSON) and nothing else: an
// export onto the storage or onto a file of the user's own exits 2 and
// leaves it as it was.
func TestExportOverwrite(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, nil)
	own := filepath.Join(dir, "notes.sh")
	if err := os.WriteFile(own, []byte("#!/bin/sh\necho mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{db, own} {
		before, err := os.ReadFile(target)
		if err != nil {
			t.Fatal(err)
		}
		code, text := cli(t, nil, nil, "export", "--storage", db, "-o", target)
		after, err := os.ReadFile(target)
		if code != exitUsage || !strings.Contains(text, "is not an earlier sgtune export; nothing written") || err != nil || string(after) != string(before) {
			t.Errorf("export -o %s: exit %d (want 2), file kept: %v\n%s", filepath.Base(target), code, string(after) == string(before), text)
		}
	}
	if code, text := cli(t, nil, nil, "status", "--storage", db); code != 0 {
		t.Errorf("status after the refused exports: exit %d\n%s", code, text)
	}
	for _, format := range []string{"bash", "docker", "json"} {
		out := filepath.Join(dir, "best."+format)
		for range 2 {
			if code, text := cli(t, nil, nil, "export", "--storage", db, "--format", format, "-o", out); code != 0 {
				t.Errorf("export --format %s twice to one file: exit %d\n%s", format, code, text)
			}
		}
	}
}

// The commands that read a study refuse an empty file and leave it empty
// (opening migrates: it became an empty study database).
func TestReadEmptyStorage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(db, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"best"}, {"export"}, {"report", "-o", t.TempDir()}, {"rescore", "--concurrency", "16"}} {
		code, text := cli(t, nil, nil, append(args, "--storage", db)...)
		fi, err := os.Stat(db)
		if code != exitUsage || !strings.Contains(text, "is an empty file, not a study database") || err != nil || fi.Size() != 0 {
			t.Errorf("%s on an empty file: exit %d (want 2), size %d\n%s", args[0], code, fi.Size(), text)
		}
	}
}

// A storage that is not a study database (a directory, a file that is not
// SQLite) is bad input for every command, run included, and stays as it was.
func TestNotAStorage(t *testing.T) {
	buildBins(t, "sglang-sim") // run checks its engine command first
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("x", 100, fmt.Sprintf(twoParams, 1)))
	text := writeFile(t, dir, "notes.txt", "not a database\n")
	for _, tc := range []struct{ storage, want string }{
		{dir, "is a directory, not a database file"},
		{text, "is not an SQLite database"},
	} {
		for _, args := range [][]string{{"status"}, {"best"}, {"run", study}} {
			code, out := cli(t, nil, nil, append(args, "--storage", tc.storage)...)
			if code != exitUsage || !strings.Contains(out, tc.want) {
				t.Errorf("%s --storage %s: exit %d (want 2 saying %q)\n%s", args[0], filepath.Base(tc.storage), code, tc.want, out)
			}
		}
	}
	if b, err := os.ReadFile(text); err != nil || string(b) != "not a database\n" {
		t.Errorf("the file was changed: %q, %v", b, err)
	}
}

// fullWriter fails every write as a full disk does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestFullDiskSaysWhatNext: a write that finds the disk full names it and
// says what to do (free space, run the same command again).
func TestFullDiskSaysWhatNext(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)
	code, out := cli(t, nil, fullWriter{}, "export", "--storage", db)
	if code == 0 || !strings.Contains(out, "no space left on device") ||
		!strings.Contains(out, "sgtune: the disk is full: free space there, then run the same command again\n") {
		t.Errorf("export to a full disk: exit %d\n%s", code, out)
	}
}

// TestReadOnlyClosedPipe: a command that only reads, piped into a reader
// that stops early (`sgtune status | head -1`), ends as Unix tools do, of
// SIGPIPE and silently; it exited 130 saying "interrupted", as if Ctrl-C
// had stopped a run.
func TestReadOnlyClosedPipe(t *testing.T) {
	bin := buildBins(t, "sgtune")
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)
	cmd := exec.Command(filepath.Join(bin, "sgtune"), "status", "--storage", db)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // the reader is gone before sgtune writes
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	err = cmd.Run()
	w.Close()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGPIPE || stderr.Len() > 0 {
		t.Errorf("status into a closed pipe: %v, stderr %q; want killed by SIGPIPE, nothing said", err, stderr.String())
	}
}

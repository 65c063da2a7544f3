package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
)

// llamaStudyFile is the study `make test-llama` runs.
const llamaStudyFile = "../../testdata/studies/llama-cpu.yaml"

// TestLlamaEndToEnd is `make test-llama` (scripts/test-llama.sh): sgtune
// against the real llama-server of `make llama-server`, as a user would run
// it. It runs testdata/studies/llama-cpu.yaml (12 launched trials plus the
// confirmation reruns), checks every measured point's token count against
// the server's own counter, launches a bad flag through the launcher and
// times its classification, exports the winner, starts the exported script
// and asks its /health, writes the report and checks that it says whether
// the winner is on the measured plateau. The summary line
//
//	trials=N complete=M token_mismatches=K bad_command_detect_ms=X winner_within_spread=yes|no
//
// is written to $SGTUNE_LLAMA_SUMMARY for the script to print last. It
// needs SGTUNE_LLAMA_E2E=1, LLAMA_SERVER and LLAMA_MODEL (minutes of work:
// `go test ./...` skips it).
func TestLlamaEndToEnd(t *testing.T) {
	if os.Getenv("SGTUNE_LLAMA_E2E") == "" {
		t.Skip("make test-llama runs this (SGTUNE_LLAMA_E2E=1): a study of minutes on the real llama-server")
	}
	server, model := os.Getenv("LLAMA_SERVER"), os.Getenv("LLAMA_MODEL")
	if server == "" || model == "" {
		t.Fatal("LLAMA_SERVER and LLAMA_MODEL must name make llama-server's binary and model")
	}
	// The study names its command as llama-server, found on PATH.
	t.Setenv("PATH", filepath.Dir(server)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out := os.Getenv("SGTUNE_LLAMA_OUT")
	if out == "" {
		out = t.TempDir()
	}
	db := filepath.Join(out, "llama.db")
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	a := &app{stdout: os.Stderr, stderr: os.Stderr, getenv: os.Getenv}
	sgtune := func(args ...string) {
		t.Helper()
		if code := a.execute(ctx, args); code != 0 {
			t.Fatalf("sgtune %s: exit %d", strings.Join(args, " "), code)
		}
	}

	// 1. The study.
	start := time.Now()
	sgtune("run", llamaStudyFile, "--storage", db, "--log-dir", filepath.Join(out, "logs"))
	t.Logf("study: %s", time.Since(start).Round(time.Second))

	// 2. Trials and token checks, from the storage.
	sf := studyFlags{storage: db}
	d, err := sf.open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.store.Close()
	points, err := d.store.StudyPoints(d.id)
	if err != nil {
		t.Fatal(err)
	}
	var launched, searched, complete, mismatches, checked int
	for _, r := range d.recs {
		if !(r.LogPath != "" || len(r.Facts) > 0 || r.State == search.StateComplete) {
			continue // infeasible or duplicate: never launched
		}
		launched++
		if r.ConfirmOf == nil {
			searched++
		}
		if r.State == search.StateComplete {
			complete++
		}
		for _, p := range points[r.ID] {
			if p.Phase != "" {
				continue // warm-ups are not measured
			}
			checked++
			if tc := p.Audit.ServerTokens; tc == nil || tc.State != objective.CheckPassed {
				mismatches++
				t.Errorf("trial %d c=%d r=%d: token check %+v", r.Number, p.Concurrency, p.Repeat, tc)
			}
		}
	}
	t.Logf("%d trials launched (%d by the search), %d complete; %d measured points checked against %s",
		launched, searched, complete, checked, engine.LlamaCpp.Metrics.GenerationTokens)
	if want := 12; searched != want {
		t.Errorf("the search launched %d trials, want the study's budget %d", searched, want)
	}
	if complete == 0 || checked == 0 {
		t.Errorf("%d complete trials, %d checked points", complete, checked)
	}

	// 3. A bad flag, launched as a trial would be.
	_, err = launcher.Start(ctx, launcher.Spec{Engine: engine.LlamaCpp, Argv: []string{"llama-server", "-m", model, "-np", "0"},
		LogPath: filepath.Join(out, "logs", "bad-flag.log"), StartupTimeout: time.Minute, Grace: 5 * time.Second})
	var f *launcher.Failure
	if !errors.As(err, &f) {
		t.Fatalf("bad flag: %v, want a launcher failure", err)
	}
	detectMS := float64(f.Detected.Microseconds()) / 1000
	t.Logf("bad flag: %s, exit %d, %q, classified %.3f ms after the exit", f.Class, f.ExitCode, f.Reason, detectMS)
	if f.Class != engine.ClassBadCommand || f.Detected <= 0 || f.Detected >= time.Second {
		t.Errorf("bad flag classified %s %v after the exit; want %s within 1 s", f.Class, f.Detected, engine.ClassBadCommand)
	}

	// 4. The winner's launch scripts; the bash one started for real.
	script := filepath.Join(out, "best-launch.sh")
	sgtune("export", "--storage", db, "--format", "bash", "-o", script)
	sgtune("export", "--storage", db, "--format", "docker", "-o", filepath.Join(out, "best-launch-docker.sh"))
	sgtune("export", "--storage", db, "--format", "json", "-o", filepath.Join(out, "best-launch.json"))
	for _, s := range []string{script, filepath.Join(out, "best-launch-docker.sh")} {
		if b, err := exec.Command("bash", "-n", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, b)
		}
	}
	if status, err := startScript(ctx, script, filepath.Join(out, "logs", "best-launch.log")); err != nil || status != http.StatusOK {
		t.Errorf("exported script: /health %d, %v", status, err)
	} else {
		t.Logf("exported script: llama-server answered /health %d", status)
	}

	// 5. The report and the plateau.
	sgtune("report", "--storage", db, "-o", filepath.Join(out, "report"))
	st, err := d.reportStudy(db)
	if err != nil {
		t.Fatal(err)
	}
	plateau, ok := report.PlateauOf(st)
	within := "no"
	if !ok {
		t.Error("the study declared no winner")
	} else {
		if plateau.On {
			within = "yes"
		}
		t.Log(plateau.Text())
		md, err := os.ReadFile(filepath.Join(out, "report", "report.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(md), plateau.Text()) {
			t.Errorf("report.md does not say %q", plateau.Text())
		}
		if !plateau.On {
			t.Errorf("the winner is not on the measured plateau: %s", plateau.Text())
		}
	}

	line := fmt.Sprintf("trials=%d complete=%d token_mismatches=%d bad_command_detect_ms=%.3f winner_within_spread=%s",
		launched, complete, mismatches, detectMS, within)
	t.Log(line)
	if p := os.Getenv("SGTUNE_LLAMA_SUMMARY"); p != "" {
		if err := os.WriteFile(p, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startScript runs an exported launch script on a free port, waits until
// its server answers /health 200 (or the script exits, or a minute passes),
// then stops it: SIGTERM to its process group, SIGKILL after 10 s.
func startScript(ctx context.Context, script, logPath string) (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	logf, err := os.Create(logPath)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("bash", script, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // ends when the script's process ends
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	deadline := time.Now().Add(time.Minute)
	status := 0
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err // for the deferred stop
			return status, fmt.Errorf("the script exited before /health answered 200: %v (log %s)", err, logPath)
		case <-time.After(100 * time.Millisecond):
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if status = resp.StatusCode; status == http.StatusOK {
			return status, nil
		}
	}
	return status, fmt.Errorf("no /health 200 within a minute (last %d; log %s)", status, logPath)
}

// TestLlamaSharedPrefix is make test-llama's shared-prefix study
// (testdata/studies/llama-prefix.yaml) on the real llama-server: every
// request carries the same 600-token system prompt, and the configs differ
// only in llama.cpp's prompt cache. The server's own count of cached prompt
// tokens (usage.prompt_tokens_details.cached_tokens) must show the cache:
// most of the prompt with --cache-prompt, none with --no-cache-prompt,
// while the prompts themselves would let a cache reuse most of them either
// way. It prints
//
//	llama_prefix cached_on=X% cached_off=Y% reusable=Z%
//
// and appends it to $SGTUNE_LLAMA_PREFIX_SUMMARY for the script.
func TestLlamaSharedPrefix(t *testing.T) {
	if os.Getenv("SGTUNE_LLAMA_E2E") == "" {
		t.Skip("make test-llama runs this (SGTUNE_LLAMA_E2E=1) on the real llama-server")
	}
	server := os.Getenv("LLAMA_SERVER")
	if server == "" || os.Getenv("LLAMA_MODEL") == "" {
		t.Fatal("LLAMA_SERVER and LLAMA_MODEL must name make llama-server's binary and model")
	}
	t.Setenv("PATH", filepath.Dir(server)+string(os.PathListSeparator)+os.Getenv("PATH"))
	dir := t.TempDir()
	db := filepath.Join(dir, "prefix.db")
	a := &app{stdout: os.Stderr, stderr: os.Stderr, getenv: os.Getenv}
	if code := a.execute(context.Background(), []string{"run", "../../testdata/studies/llama-prefix.yaml", "--storage", db, "--log-dir", filepath.Join(dir, "logs")}); code != 0 {
		t.Fatalf("sgtune run: exit %d", code)
	}
	d, err := (&studyFlags{storage: db}).open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.store.Close()
	points, err := d.store.StudyPoints(d.id)
	if err != nil {
		t.Fatal(err)
	}
	share := map[bool]float64{}
	reusable := 1.0
	seen := map[bool]bool{}
	for _, r := range d.recs {
		on := fmt.Sprint(r.Params["cache_prompt"]) == "true"
		for _, p := range points[r.ID] {
			if p.Phase != "" {
				continue
			}
			if p.PromptTokens == 0 {
				t.Fatalf("trial %d: the server reported no prompt tokens", r.Number)
			}
			share[on] = float64(p.CachedTokens) / float64(p.PromptTokens)
			reusable = min(reusable, p.PrefixReusable)
			seen[on] = true
		}
	}
	if !seen[true] || !seen[false] {
		t.Fatalf("measured configs: %v; want cache_prompt on and off", seen)
	}
	line := fmt.Sprintf("llama_prefix cached_on=%.0f%% cached_off=%.0f%% reusable=%.0f%%", 100*share[true], 100*share[false], 100*reusable)
	t.Log(line)
	if share[true] < 0.5 || share[false] > 0.05 || reusable < 0.8 {
		t.Errorf("%s; want on >= 50%%, off <= 5%%, reusable >= 80%%", line)
	}
	if p := os.Getenv("SGTUNE_LLAMA_PREFIX_SUMMARY"); p != "" {
		if err := os.WriteFile(p, []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

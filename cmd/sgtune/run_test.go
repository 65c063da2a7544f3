package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/objective/fakesse"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/shell"
	"github.com/sgtune/sgtune/storage"
)

// These tests run whole studies: the real launcher starts the real simulator
// binary, the real load generator measures it, and the real SQLite storage
// keeps the trials.

// buildBins builds the named commands into a fresh directory on PATH.
func buildBins(t *testing.T, names ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the simulator")
	}
	dir := t.TempDir()
	for _, n := range names {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, n), "github.com/sgtune/sgtune/cmd/"+n)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", n, err, out)
		}
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// studyYAML is a small study against the simulator; extra is appended.
func studyYAML(name string, speedup int, paramsAndMore string) string {
	return studyYAMLGroups(name, speedup, "[[0, 1, 2, 3]]", paramsAndMore)
}

// studyYAMLGroups is studyYAML with the given GPU groups.
func studyYAMLGroups(name string, speedup int, groups, paramsAndMore string) string {
	return fmt.Sprintf(`name: %s
engine:
  command: sglang-sim --sim-profile glm-5.3-flash-h200x4 --sim-speedup %d
  version: v0.5.21
model: {path: zai-org/GLM-5.3-Flash, hybrid: true}
fixed:
  --tp-size: 4
  --max-running-requests: 64
  --reasoning-parser: glm45
  --tool-call-parser: glm45
gpus: {per_trial: 4, groups: %s}
workload:
  kind: chat
  chat: {concurrency: [1, 8], requests: [2, 8], max_tokens: 32, repeats: 1, warmup: true}
  quality: {enabled: true, json_requests: 4, tool_requests: 2}
  hang_timeout_s: 3
score: {metric: output_tok_s, concurrency: 8}
launch: {startup_timeout: 1m}
%s`, name, speedup, groups, paramsAndMore)
}

const twoParams = `params:
  - name: ep
    type: categorical
    choices: [4]
    flag: --ep-size
  - name: mem_fraction
    type: categorical
    choices: [0.78, 0.80, 0.82, 0.84]
    flag: --mem-fraction-static
budget: {trials: %d, sampler: random, seed: 3, confirm: 0}
`

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// cli runs sgtune in-process and returns its exit code and output.
func cli(t *testing.T, interrupts <-chan os.Signal, stdout io.Writer, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	var w io.Writer = &out
	if stdout != nil {
		w = io.MultiWriter(&out, stdout)
	}
	a := &app{stdout: w, stderr: &errb, getenv: os.Getenv, interrupts: interrupts}
	code := a.execute(context.Background(), args)
	return code, out.String() + errb.String()
}

func records(t *testing.T, db string) []search.Record {
	t.Helper()
	code, out := cli(t, nil, nil, "status", "--storage", db, "--json")
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	var doc struct {
		Study  string          `json:"study"`
		Trials []search.Record `json:"trials"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return doc.Trials
}

func TestRunStatusBestExport(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	// The engine default's own test is TestRunStatesEngineDefault.
	study := writeFile(t, dir, "s.yaml", studyYAML("e2e", 100, strings.Replace(fmt.Sprintf(twoParams, 3), "confirm: 0}", "confirm: 0, baseline: none}", 1)))
	db := filepath.Join(dir, "s.db")

	code, out := cli(t, nil, nil, "run", study, "--storage", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "best: trial") {
		t.Errorf("run did not print the best trial:\n%s", out)
	}
	recs := records(t, db)
	launched := 0
	for _, r := range recs {
		if r.State == search.StateComplete {
			launched++
			if r.Score == nil || *r.Score <= 0 || !r.ScoreOK {
				t.Errorf("trial %d: complete without a positive score: %+v", r.Number, r)
			}
			if len(r.Params) != 2 || r.Params["mem_fraction"] == nil {
				t.Errorf("trial %d: params %v", r.Number, r.Params)
			}
		}
	}
	if launched == 0 {
		t.Fatalf("no complete trial:\n%s", out)
	}

	code, out = cli(t, nil, nil, "best", "--storage", db, "--json")
	if code != 0 || !strings.Contains(out, `"state": "complete"`) {
		t.Fatalf("best: exit %d\n%s", code, out)
	}
	script := filepath.Join(dir, "best.sh")
	code, out = cli(t, nil, nil, "export", "--storage", db, "--format", "bash", "-o", script,
		"--command", "python3 -m sglang.launch_server")
	if code != 0 {
		t.Fatalf("export: exit %d\n%s", code, out)
	}
	body, _ := os.ReadFile(script)
	for _, want := range []string{"exec python3 -m sglang.launch_server", "--model-path zai-org/GLM-5.3-Flash", "--mem-fraction-static"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("script lacks %q:\n%s", want, body)
		}
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v\n%s", err, out)
	}

	rdir := filepath.Join(dir, "report")
	if code, out := cli(t, nil, nil, "report", "--storage", db, "-o", rdir); code != 0 {
		t.Fatalf("report: exit %d\n%s", code, out)
	}
	md, _ := os.ReadFile(filepath.Join(rdir, "report.md"))
	for _, want := range []string{"# Study e2e", "## Best: trial", "| concurrency |", "throughput.svg"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	for _, svg := range []string{"progress.svg", "throughput.svg", "ttft-p99.svg"} {
		b, err := os.ReadFile(filepath.Join(rdir, svg))
		if err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s: not an SVG (%v)", svg, err)
		}
	}
}

// TestBadInputWritesNothing: a malformed study exits 2 and creates no database.
func TestBadInputWritesNothing(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "s.db")
	cases := map[string]string{
		"unknown field": "name: x\nengine: {command: sglang-sim}\nmodel: m\nbogus: 1\n",
		"bad yaml":      "name: [x\n",
		"missing engine": "name: x\nmodel: m\nengine: {command: no-such-engine-binary-xyz}\n" +
			"params: [{name: a, type: bool, values: {false: --disable-radix-cache}}]\n",
		// Every config needs 4 GPUs; trials get 1.
		"no feasible config": "name: x\nmodel: m\nengine: {command: \"true\"}\nfixed: {--tp-size: 4}\n" +
			"params: [{name: a, type: bool, values: {false: --disable-radix-cache}}]\n",
		// check said valid; run refused it building the sampler, after
		// creating the database and sgtune-logs/.
		"grid over a continuous space": "name: x\nmodel: m\nengine: {command: \"true\"}\n" +
			"params: [{name: m, type: float, low: 0.7, high: 0.9, flag: --mem-fraction-static}]\nbudget: {sampler: grid}\n",
		// run built every point of the grid, twice, then created the
		// database and sgtune-logs/ (past the cap here; out of memory at
		// a few hundred million points).
		"grid past its cap": "name: x\nmodel: m\nengine: {command: \"true\"}\n" +
			"params: [{name: m, type: float, low: 0.5, high: 0.9, step: 0.0004, flag: --mem-fraction-static},\n" +
			"  {name: r, type: int, low: 1, high: 1000, flag: --max-running-requests}]\nbudget: {sampler: grid}\n",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			study := writeFile(t, dir, "bad.yaml", body)
			code, out := cli(t, nil, nil, "run", study, "--storage", db)
			if code != exitUsage {
				t.Errorf("exit %d, want %d\n%s", code, exitUsage, out)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("bad input created %s", db)
			}
			if _, err := os.Stat(filepath.Join(dir, "sgtune-logs")); !os.IsNotExist(err) {
				t.Errorf("bad input created %s", filepath.Join(dir, "sgtune-logs"))
			}
		})
	}
	for _, args := range [][]string{{"nosuch"}, {"status", "--no-such-flag"}, {"export", "--format", "yaml", "--storage", db}} {
		if code, out := cli(t, nil, nil, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d\n%s", args, code, exitUsage, out)
		}
	}
	if code, out := cli(t, nil, nil, "run"); code != exitUsage {
		t.Errorf("run without a file: exit %d\n%s", code, out)
	}
	good := writeFile(t, dir, "good.yaml", "name: x\nmodel: m\nengine: {command: \"true\"}\n"+
		"params: [{name: a, type: bool, values: {false: --disable-radix-cache}}]\n")
	for _, tc := range []struct{ flag, value, want string }{
		{"--trials", "0", "--trials 0: want an integer >= 1 (leave it out for the study file's budget.trials)"},
		{"--parallel", "-1", "--parallel -1: want an integer >= 1 (leave it out for the study file's budget.parallel)"},
		{"--timeout", "0s", "--timeout 0s: want a positive duration such as 8h (leave it out for the study file's budget.timeout)"},
	} {
		code, out := cli(t, nil, nil, "run", good, "--storage", db, tc.flag, tc.value)
		if code != exitUsage || !strings.Contains(out, tc.want) {
			t.Errorf("run %s %s: exit %d, want 2 with %q\n%s", tc.flag, tc.value, code, tc.want, out)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Errorf("run %s %s created %s", tc.flag, tc.value, db)
		}
	}
	if code, out := cli(t, nil, nil, "status", "--storage", db); code != exitUsage {
		t.Errorf("status without storage: exit %d\n%s", code, out)
	}
}

// TestFailureClasses runs one trial per fault and checks each is classified,
// stored with a reason, and does not stop the study.
func TestFailureClasses(t *testing.T) {
	buildBins(t, "sglang-sim")
	cases := []struct {
		name, flags, class string
	}{
		// The profile's world-size rule: 8 ranks on a 4-GPU box.
		{"startup crash", "--tp-size 8", "startup_crash"},
		{"oom at startup", "--tp-size 4 --chunked-prefill-size 16384 --mem-fraction-static 0.88", "oom"},
		// Seed "reproduce": TP4 EP1, radix off, 64 slots crash under load.
		{"crash mid-sweep", "--tp-size 4 --ep-size 1 --disable-radix-cache --max-mamba-cache-size 64", "illegal_memory_access"},
		// DP attention deadlocks once more than 32 requests run: the
		// watchdog sees no token for hang_timeout_s.
		{"hang", "--tp-size 4 --dp-size 2 --enable-dp-attention --max-running-requests 128", "hang"},
		{"malformed command", "--tp-size 4 --sim-no-such-flag", "bad_command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			body := strings.Replace(studyYAML("faults", 100, ""), "  --tp-size: 4\n  --max-running-requests: 64\n", "", 1)
			// Enough requests to pass the crash-after-34-requests rule.
			body = strings.Replace(body, "concurrency: [1, 8], requests: [2, 8]", "concurrency: [1, 40], requests: [2, 40]", 1)
			body = strings.Replace(body, "concurrency: 8}", "concurrency: 40}", 1)
			body = strings.Replace(body, "per_trial: 4, groups: [[0, 1, 2, 3]]", "per_trial: 8, groups: [[0, 1, 2, 3, 4, 5, 6, 7]]", 1)
			body += fmt.Sprintf(`params:
  - name: fault
    type: categorical
    choices: [on]
    values: {on: %q}
budget: {trials: 1, sampler: random, confirm: 0, baseline: none}
`, c.flags)
			if c.class == "bad_command" {
				// The flag schema rejects unknown flags at load time; an
				// engine command the schema cannot see is the way to
				// hand the engine a flag it refuses.
				body = strings.Replace(body, "--sim-speedup 100", "--sim-speedup 100 --sim-no-such-flag", 1)
				body = strings.Replace(body, fmt.Sprintf("values: {on: %q}", c.flags), `values: {on: "--tp-size 4"}`, 1)
			}
			study := writeFile(t, dir, "s.yaml", body)
			db := filepath.Join(dir, "s.db")
			code, out := cli(t, nil, nil, "run", study, "--storage", db)
			if code != 0 {
				t.Fatalf("a study whose trials fail must still exit 0; got %d\n%s", code, out)
			}
			recs := records(t, db)
			if len(recs) != 1 || recs[0].State != search.StateFailed || recs[0].FailureClass != c.class {
				t.Fatalf("want one failed trial of class %s, got %+v\n%s", c.class, recs, out)
			}
			if recs[0].Reason == "" || recs[0].LogTail == "" {
				t.Errorf("failed trial lacks a reason or log tail: %+v", recs[0])
			}
		})
	}
}

// TestInterruptAndResume: the first Ctrl-C ends the running trial cleanly and
// marks it for retry; running the same command again re-runs it first and
// continues the numbering.
func TestInterruptAndResume(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("resume", 100, fmt.Sprintf(twoParams, 3)))
	db := filepath.Join(dir, "s.db")

	sig, w, done := interruptOn("trial 1 ready", 1, 0)
	code, out := cli(t, sig, w, "run", study, "--storage", db)
	<-done
	if code != exitInterrupted {
		t.Fatalf("interrupted run: exit %d, want %d\n%s", code, exitInterrupted, out)
	}
	recs := records(t, db)
	if len(recs) != 3 || recs[0].State != search.StateComplete || recs[1].State != search.StateInterrupted ||
		recs[2].State != search.StateWaiting || *recs[2].RetryOf != 1 {
		t.Fatalf("after Ctrl-C want [complete interrupted waiting (its re-run)], got %v\n%s", states(recs), out)
	}

	code, out = cli(t, nil, nil, "run", study, "--storage", db)
	if code != 0 {
		t.Fatalf("resumed run: exit %d\n%s", code, out)
	}
	recs = records(t, db)
	if len(recs) < 4 {
		t.Fatalf("want the interrupted trial re-run and the budget finished, got %v\n%s", states(recs), out)
	}
	if recs[2].RetryOf == nil || *recs[2].RetryOf != 1 || recs[2].State != search.StateComplete {
		t.Errorf("trial 2 should be the completed retry of trial 1: %+v", recs[2])
	}
	if fmt.Sprint(recs[2].Params) != fmt.Sprint(recs[1].Params) {
		t.Errorf("retry params %v differ from the interrupted trial's %v", recs[2].Params, recs[1].Params)
	}
	if recs[0].State != search.StateComplete || recs[0].Score == nil {
		t.Errorf("completed trial 0 was not kept: %+v", recs[0])
	}
}

func states(recs []search.Record) []string {
	s := make([]string, len(recs))
	for i, r := range recs {
		s[i] = fmt.Sprintf("%d:%s", r.Number, r.State)
	}
	return s
}

// lineWatch closes hit when a written line contains pattern.
// interruptOn returns, for cli, a signal channel and an output watch that
// send n SIGINTs (Ctrl-C) after a pause once the output shows pattern, or
// nothing if it does not within 2 minutes; done is closed when the sender
// has ended.
func interruptOn(pattern string, n int, after time.Duration) (sig chan os.Signal, w *lineWatch, done <-chan struct{}) {
	sig = make(chan os.Signal, n)
	w = &lineWatch{pattern: pattern, hit: make(chan struct{})}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		select {
		case <-w.hit:
			time.Sleep(after)
			for range n {
				sig <- syscall.SIGINT
			}
		case <-time.After(2 * time.Minute):
		}
	}()
	return sig, w, ended
}

type lineWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	pattern string
	hit     chan struct{}
	once    sync.Once
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.pattern) {
		w.once.Do(func() { close(w.hit) })
	}
	return len(p), nil
}

// TestParallelTrials runs two trials at once on two GPU groups sharing one database.
func TestParallelTrials(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAMLGroups("parallel", 100, "[[0, 1, 2, 3], [4, 5, 6, 7]]", fmt.Sprintf(twoParams, 4)))
	db := filepath.Join(dir, "s.db")
	code, out := cli(t, nil, nil, "run", study, "--storage", db, "--parallel", "2")
	if code != 0 {
		t.Fatalf("run --parallel 2: exit %d\n%s", code, out)
	}
	recs := records(t, db)
	groups := map[string]bool{}
	complete := 0
	for _, r := range recs {
		if r.State == search.StateComplete {
			complete++
			groups[r.GPUs] = true
		}
	}
	if complete < 2 || len(groups) != 2 {
		t.Fatalf("want complete trials on both GPU groups, got %d on %v\n%s", complete, groups, out)
	}
	// Two trials overlapped in time.
	overlap := false
	for i := range recs {
		for j := i + 1; j < len(recs); j++ {
			a, b := recs[i], recs[j]
			if a.End != nil && b.End != nil && a.Start.Before(*b.End) && b.Start.Before(*a.End) &&
				a.State == search.StateComplete && b.State == search.StateComplete {
				overlap = true
			}
		}
	}
	if !overlap {
		t.Errorf("no two complete trials overlapped in time:\n%s", out)
	}
	if code, out := cli(t, nil, nil, "run", study, "--storage", db, "--parallel", "3"); code != exitUsage {
		t.Errorf("--parallel 3 with 2 groups: exit %d\n%s", code, out)
	}
}

// startRun starts `sgtune run study --storage db` from bin as a process,
// its stderr to stderr, and returns it with its stdout; the test's cleanup
// kills it.
func startRun(t *testing.T, bin, study, db string, stderr io.Writer) (*exec.Cmd, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "sgtune"), "run", study, "--storage", db)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdout
}

// TestKill9Resume kills sgtune with SIGKILL in the middle of a trial: its
// server must die with it, and the next run must re-run the trial and keep
// every completed one.
func TestKill9Resume(t *testing.T) {
	bin := buildBins(t, "sglang-sim", "sgtune")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("kill9", 100, fmt.Sprintf(twoParams, 3)))
	db := filepath.Join(dir, "s.db")

	cmd, stdout := startRun(t, bin, study, db, os.Stderr)
	sc := bufio.NewScanner(stdout)
	var seen strings.Builder
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "trial 1 ready") {
			break
		}
	}
	if !strings.Contains(seen.String(), "trial 1 ready") {
		t.Fatalf("sgtune never got trial 1 ready:\n%s", seen.String())
	}
	// The tag is SGTUNE_TRIAL=<study>/<study id>/<trial number>.
	tagged := func() []string {
		return procsWithEnv(func(kv string) bool {
			return strings.HasPrefix(kv, "SGTUNE_TRIAL=kill9/") && strings.HasSuffix(kv, "/1")
		})
	}
	if len(tagged()) == 0 {
		t.Fatal("no server process carries trial 1's tag")
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	go io.Copy(io.Discard, stdout)
	_ = cmd.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for len(tagged()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if pids := tagged(); len(pids) > 0 {
		t.Fatalf("server processes %v outlived kill -9 of sgtune", pids)
	}

	code, out := cli(t, nil, nil, "run", study, "--storage", db)
	if code != 0 {
		t.Fatalf("run after kill -9: exit %d\n%s", code, out)
	}
	recs := records(t, db)
	if recs[0].State != search.StateComplete {
		t.Errorf("completed trial 0 lost: %+v", recs[0])
	}
	if recs[1].State != search.StateInterrupted {
		t.Errorf("trial 1 should be marked interrupted, got %s", recs[1].State)
	}
	retried := false
	for _, r := range recs {
		if r.RetryOf != nil && *r.RetryOf == 1 && r.State == search.StateComplete {
			retried = true
		}
	}
	if !retried {
		t.Errorf("trial 1 was not re-run: %v\n%s", states(recs), out)
	}
}

// TestUnwritableLogDir: a --log-dir that cannot be written is bad input
// before anything is stored; one where a trial's log cannot be made stops
// the run after a few trials instead of re-queueing them without end.
func TestUnwritableLogDir(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("logs", 100, fmt.Sprintf(twoParams, 3)))
	db := filepath.Join(dir, "s.db")
	file := writeFile(t, dir, "notadir", "")
	code, out := cli(t, nil, nil, "run", study, "--storage", db, "--log-dir", file)
	if _, err := os.Stat(db); code != exitUsage || !strings.Contains(out, "--log-dir "+file+": the servers' logs cannot be written there") || err == nil {
		t.Errorf("--log-dir FILE: exit %d (want 2), storage created: %v\n%s", code, err == nil, out)
	}

	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // where the study's trial logs would go
		if err := os.MkdirAll(filepath.Join(logs, "logs", fmt.Sprintf("trial-%d.log", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	code, out = cli(t, nil, nil, "run", study, "--storage", db, "--log-dir", logs)
	if code != exitFailure || !strings.Contains(out, "3 trials in a row could not be launched") {
		t.Errorf("trial logs that cannot be made: exit %d, want 1 naming the cause\n%s", code, out)
	}
	if recs := records(t, db); len(recs) > maxUnlaunchableForTest+1 {
		t.Errorf("%d trials stored, want at most %d: %v", len(recs), maxUnlaunchableForTest+1, states(recs))
	}
}

// maxUnlaunchableForTest is search's maxUnlaunchable.
const maxUnlaunchableForTest = 3

// TestClosedStdoutStops closes the pipe sgtune's output goes to (`sgtune
// run | head`) in the middle of a trial: sgtune must stop as on Ctrl-C
// (exit 130, the trial stored interrupted, its server stopped), not die of
// the write and leave the trial marked running.
func TestClosedStdoutStops(t *testing.T) {
	bin := buildBins(t, "sglang-sim", "sgtune")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("pipe", 100, fmt.Sprintf(twoParams, 3)))
	db := filepath.Join(dir, "s.db")

	var stderr bytes.Buffer
	cmd, stdout := startRun(t, bin, study, db, &stderr)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "trial 0 ready") {
	}
	stdout.Close() // the reader is gone: the next line sgtune writes breaks the pipe
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("sgtune still running 2 minutes after its output closed\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitInterrupted {
		t.Errorf("exit %d (%v), want %d as on Ctrl-C\n%s", code, err, exitInterrupted, stderr.String())
	}
	recs := records(t, db)
	for _, r := range recs {
		if r.State == search.StateRunning {
			t.Errorf("trial %d left running: %v", r.Number, states(recs))
		}
	}
	if pids := leftovers("SGTUNE_TRIAL=pipe/"); len(pids) > 0 {
		t.Errorf("server processes %v outlived sgtune", pids)
	}
}

// leftovers lists live processes whose environment has an entry starting with prefix.
func leftovers(prefix string) []string {
	return procsWithEnv(func(kv string) bool { return strings.HasPrefix(kv, prefix) })
}

// procsWithEnv lists live (not zombie) processes with an environment entry
// that match accepts.
func procsWithEnv(match func(string) bool) []string {
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if strings.Contains(string(stat), ") Z ") {
			continue // a zombie holds no resources
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if match(string(kv)) {
				pids = append(pids, e.Name())
				break
			}
		}
	}
	return pids
}

// TestSecondInterruptTearsDown: a second Ctrl-C tears the server down at once.
func TestSecondInterruptTearsDown(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("abort", 100, fmt.Sprintf(twoParams, 2)))
	db := filepath.Join(dir, "s.db")
	sig, w, done := interruptOn("trial 0 ready", 2, 0)
	start := time.Now()
	code, out := cli(t, sig, w, "run", study, "--storage", db)
	<-done
	if code != exitInterrupted {
		t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, out)
	}
	if pids := leftovers("SGTUNE_TRIAL=abort/"); len(pids) > 0 {
		t.Errorf("servers left after the second interrupt: %v", pids)
	}
	if !strings.Contains(out, "second interrupt") {
		t.Errorf("no word of the second interrupt:\n%s", out)
	}
	t.Logf("run returned %.1fs after start", time.Since(start).Seconds())
}

// TestAPIKeyNeverStored: the key reaches the server (requests without it get
// 401) but never the database, the logs or an export.
func TestAPIKeyNeverStored(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	const key = "sk-test-9f8e7d6c5b4a"
	t.Setenv("SGTUNE_TEST_KEY", key)
	body := studyYAML("apikey", 100, fmt.Sprintf(twoParams, 1))
	body = strings.Replace(body, "launch: {startup_timeout: 1m}", "launch: {startup_timeout: 1m, api_key_env: SGTUNE_TEST_KEY}", 1)
	study := writeFile(t, dir, "s.yaml", body)
	db := filepath.Join(dir, "s.db")
	code, out := cli(t, nil, nil, "run", study, "--storage", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	recs := records(t, db)
	if len(recs) != 1 || recs[0].State != search.StateComplete {
		t.Fatalf("want one complete trial measured with the key, got %v\n%s", states(recs), out)
	}
	script := filepath.Join(dir, "x.sh")
	if code, out := cli(t, nil, nil, "export", "--storage", db, "-o", script); code != 0 {
		t.Fatalf("export: %d\n%s", code, out)
	}
	var files []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && p != study {
			files = append(files, p)
		}
		return nil
	})
	if len(files) < 3 {
		t.Fatalf("expected the database, a log and the script, found %v", files)
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte(key)) {
			t.Errorf("%s contains the API key", f)
		}
	}
	if strings.Contains(out, key) {
		t.Error("the CLI printed the API key")
	}
	// The server got the key: its log shows where it was, redacted.
	if log, _ := os.ReadFile(recs[0].LogPath); !bytes.Contains(log, []byte("api_key='<redacted>'")) {
		t.Errorf("the server log does not show a redacted api_key:\n%.2000s", log)
	}
	t.Setenv("SGTUNE_TEST_KEY", "")
	if code, out := cli(t, nil, nil, "run", study, "--storage", filepath.Join(dir, "nokey.db")); code != exitUsage {
		t.Errorf("an unset key variable must be bad input; exit %d\n%s", code, out)
	}
}

// TestReadmeStudyIsValid keeps the README's example study loadable.
func TestReadmeStudyIsValid(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "```yaml\n")
	if i < 0 {
		t.Fatal("README has no yaml block")
	}
	j := strings.Index(s[i+8:], "```")
	study := writeFile(t, t.TempDir(), "readme.yaml", s[i+8:i+8+j])
	code, out := cli(t, nil, nil, "check", study)
	if code != 0 || !strings.Contains(out, "256 // 5 = 51 < --max-running-requests 64") {
		t.Errorf("check of the README study: exit %d\n%s", code, out)
	}
}

// TestTimeoutStopsLaunching: --timeout stops starting trials; the one in
// flight finishes and is kept.
func TestTimeoutStopsLaunching(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("timeout", 100, fmt.Sprintf(twoParams, 10)))
	db := filepath.Join(dir, "s.db")
	code, out := cli(t, nil, nil, "run", study, "--storage", db, "--timeout", "500ms")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	recs := records(t, db)
	if len(recs) != 1 || recs[0].State != search.StateComplete {
		t.Fatalf("want exactly the first trial, complete; got %v\n%s", states(recs), out)
	}
	if !strings.Contains(out, "timeout reached: no new trials; 9 of the budget's 10 launches are left, and the same command goes on with them") {
		t.Errorf("no word of the timeout and what to do next:\n%s", out)
	}
}

// TestBenchInterrupted: Ctrl-C stops `sgtune bench` promptly with exit 130.
func TestBenchInterrupted(t *testing.T) {
	srv := httptest.NewServer(&fakesse.Server{TokenInterval: 50 * time.Millisecond, Tokens: 200})
	defer srv.Close()
	sig := make(chan os.Signal, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		sig <- syscall.SIGINT
	}()
	start := time.Now()
	code, out := cli(t, sig, nil, "bench", "--url", srv.URL, "--concurrency", "4", "--requests", "8",
		"--repeats", "1", "--max-tokens", "200", "--warmup=false")
	if code != exitInterrupted {
		t.Fatalf("exit %d, want %d\n%s", code, exitInterrupted, out)
	}
	// Uninterrupted, the sweep takes 2 x 200 x 50 ms = 20 s.
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("bench took %v to stop after Ctrl-C", d)
	}
}

// TestParallelBeyondGroupsWritesNothing: --parallel above the GPU groups is bad input, checked before the storage is created.
func TestParallelBeyondGroupsWritesNothing(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("p", 100, fmt.Sprintf(twoParams, 1)))
	db := filepath.Join(dir, "s.db")
	if code, out := cli(t, nil, nil, "run", study, "--storage", db, "--parallel", "2"); code != exitUsage {
		t.Fatalf("exit %d, want %d\n%s", code, exitUsage, out)
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("--parallel beyond the groups created %s", db)
	}
	if code, out := cli(t, nil, nil, "run", study, "--storage", filepath.Join(dir, "missing", "s.db")); code != exitUsage {
		t.Errorf("storage in a missing directory: exit %d\n%s", code, out)
	}
}

// pasteHint runs the command a run's hint names (`sgtune ...`, from prefix
// to suffix in out) as a user pasting it would.
func pasteHint(t *testing.T, out, prefix, suffix string) (string, int, string) {
	t.Helper()
	_, rest, ok := strings.Cut(out, prefix)
	line, _, ok2 := strings.Cut(rest, suffix)
	if !ok || !ok2 {
		t.Fatalf("no hint %q...%q in:\n%s", prefix, suffix, out)
	}
	words, err := shell.Split(line)
	if err != nil || len(words) < 2 || words[0] != "sgtune" {
		t.Fatalf("hint %q: %v", line, err)
	}
	code, got := cli(t, nil, nil, words[1:]...)
	return line, code, got
}

// The commands a run's summary ends with work as printed: with --storage
// when it is not the default, and --study when the storage holds another
// study too.
func TestRunHintsPaste(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	t.Chdir(dir) // export -o best-launch.sh writes here
	t.Setenv("SGTUNE_STORAGE", "")
	db := seedStudy(t, dir, rankingTrials, nil) // another study, "rescore"

	study := writeFile(t, dir, "ok.yaml", studyYAML("hints", 100, fmt.Sprintf(twoParams, 1)))
	code, out := cli(t, nil, nil, "run", study, "--storage", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	line, code, got := pasteHint(t, out, "export it with: ", "\n")
	if want := "sgtune export --storage " + db + " --study hints --format bash -o best-launch.sh"; line != want || code != 0 {
		t.Errorf("hint %q (want %q): exit %d\n%s", line, want, code, got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "best-launch.sh")); err != nil || !strings.Contains(string(b), "# Launch script written by sgtune export.") {
		t.Errorf("the export hint wrote no script: %v", err)
	}

	// Every trial fails (8 ranks on a 4-GPU box): the hint names status.
	body := strings.Replace(studyYAML("fails", 100, fmt.Sprintf(twoParams, 1)), "--tp-size: 4", "--tp-size: 8", 1)
	body = strings.Replace(body, "per_trial: 4, groups: [[0, 1, 2, 3]]", "per_trial: 8, groups: [[0, 1, 2, 3, 4, 5, 6, 7]]", 1)
	code, out = cli(t, nil, nil, "run", writeFile(t, dir, "fails.yaml", body), "--storage", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	line, code, got = pasteHint(t, out, "see `", "` for the reasons")
	if want := "sgtune status --storage " + db + " --study fails"; line != want || code != 0 || !strings.Contains(got, "study fails: 1 trials (1 failed)") {
		t.Errorf("hint %q (want %q): exit %d\n%s", line, want, code, got)
	}
	// best says the same.
	_, out = cli(t, nil, nil, "best", "--storage", db, "--study", "fails")
	if line, code, got = pasteHint(t, out, "see `", "`)"); code != 0 || !strings.Contains(got, "study fails: 1 trials (1 failed)") {
		t.Errorf("best's hint %q: exit %d\n%s", line, code, got)
	}
}

// The hints leave out what a bare command finds by itself: the default
// storage, $SGTUNE_STORAGE, the only study. A path a shell would split is
// quoted.
func TestReadCommand(t *testing.T) {
	dir := t.TempDir()
	db := seedStudy(t, dir, rankingTrials, nil)
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, tc := range []struct{ path, env, want string }{
		{"sgtune.db", "", ""},
		{db, db, ""},
		{db, "", " --storage " + db},
		{"my runs/a.db", "", " --storage 'my runs/a.db'"},
		{"sgtune.db", db, " --storage sgtune.db"},
		// Hints are pasted and logged: a password stays out of them.
		{"postgres://tuner:s3cret@db:5432/tuner?sslmode=disable", "", " --storage 'postgres://tuner@db:5432/tuner?sslmode=disable'"},
		{"postgres://tuner@db/tuner?password=s3cret", "", " --storage postgres://tuner@db/tuner"},
	} {
		a := &app{getenv: func(k string) string {
			if k == "SGTUNE_STORAGE" {
				return tc.env
			}
			return ""
		}}
		got, note := a.readCommand(st, tc.path, "rescore")
		if got != tc.want {
			t.Errorf("storage %q, $SGTUNE_STORAGE %q: %q, want %q", tc.path, tc.env, got, tc.want)
		}
		if (note != "") != strings.Contains(tc.path, "s3cret") {
			t.Errorf("storage %q: password note %q", tc.path, note)
		}
	}
	if _, err := st.CreateNewStudy("other"); err != nil {
		t.Fatal(err)
	}
	a := &app{getenv: func(string) string { return "" }}
	if got, _ := a.readCommand(st, "sgtune.db", "rescore"); got != " --study rescore" {
		t.Errorf("two studies: %q, want %q", got, " --study rescore")
	}
}

// TestInterruptCutsRequestsNotFails: Ctrl-C during a level's requests
// stores the point it cuts short as interrupted and its cut requests as
// neither completed nor failed, as sgtune bench does: run's context is
// cancelled with objective.ErrInterrupted as the cause. With a plain
// cancel the load generator took the interrupt for a failure: the point
// was stored failed, with its requests failed ("context canceled").
func TestInterruptCutsRequestsNotFails(t *testing.T) {
	buildBins(t, "sglang-sim")
	dir := t.TempDir()
	// Long answers keep the level's requests in flight when Ctrl-C comes.
	body := strings.Replace(studyYAML("cut", 20, fmt.Sprintf(twoParams, 1)), "max_tokens: 32", "max_tokens: 4000", 1)
	study := writeFile(t, dir, "s.yaml", body)
	db := filepath.Join(dir, "s.db")
	sig, w, done := interruptOn("trial 0   C8 r1", 1, 300*time.Millisecond)
	code, out := cli(t, sig, w, "run", study, "--storage", db)
	<-done
	if code != exitInterrupted {
		t.Fatalf("interrupted run: exit %d, want %d\n%s", code, exitInterrupted, out)
	}
	store, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	id, err := store.GetStudyIDFromName("cut")
	if err != nil {
		t.Fatal(err)
	}
	trials, err := store.GetAllTrials(id)
	if err != nil || len(trials) == 0 {
		t.Fatalf("trials %v %v", trials, err)
	}
	pts, err := store.Points(trials[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := store.Requests(trials[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	cut := false
	for _, p := range pts {
		if p.Concurrency != 8 {
			continue
		}
		if p.State != objective.StateInterrupted || p.Failed != 0 || p.Cut == 0 {
			t.Errorf("point C%d r%d cut short by Ctrl-C: state %q, %d failed, %d cut; want interrupted, 0 failed", p.Concurrency, p.Repeat, p.State, p.Failed, p.Cut)
		}
		cut = true
	}
	if !cut {
		t.Fatalf("no C8 point stored for the interrupted trial: %+v\n%s", pts, out)
	}
	for _, q := range reqs {
		if strings.Contains(q.Error, "context canceled") {
			t.Errorf("request C%d #%d stored failed with %q", q.Concurrency, q.Index, q.Error)
		}
	}
}

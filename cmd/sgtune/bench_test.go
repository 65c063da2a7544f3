package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/objective/fakesse"
)

func TestBenchFlagsBadInput(t *testing.T) {
	ts := httptest.NewServer(&fakesse.Server{})
	defer ts.Close()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no url", []string{"bench"}, "--url is required"},
		{"bad url", []string{"bench", "--url", "localhost:30000"}, "want http://HOST:PORT"},
		{"mismatched requests", []string{"bench", "--url", ts.URL, "--concurrency", "1,2", "--requests", "4"}, "2 concurrency levels"},
		{"requests without levels", []string{"bench", "--url", ts.URL, "--requests", "4,8"}, "4 default concurrency levels"},
		{"zero concurrency", []string{"bench", "--url", ts.URL, "--concurrency", "0", "--requests", "4"}, ">= 1"},
		{"not a number", []string{"bench", "--url", ts.URL, "--concurrency", "x"}, "invalid argument"},
		{"zero repeats", []string{"bench", "--url", ts.URL, "--repeats", "0"}, "--repeats"},
		{"min pass", []string{"bench", "--url", ts.URL, "--min-pass", "1.5"}, "--min-pass 1.5: want a fraction in (0, 1]"},
		{"min pass zero", []string{"bench", "--url", ts.URL, "--quality", "--min-pass", "0"}, "--min-pass 0: want a fraction in (0, 1]"},
		{"min pass negative", []string{"bench", "--url", ts.URL, "--min-pass=-0.1"}, "--min-pass -0.1: want a fraction in (0, 1]"},
		{"empty api key", []string{"bench", "--url", ts.URL, "--api-key-env", "SGTUNE_TEST_NO_SUCH_VAR"}, "unset or empty"},
		{"workload", []string{"bench", "--url", ts.URL, "--workload", "soak"}, "want chat or matrix"},
		{"engine", []string{"bench", "--url", ts.URL, "--engine", "tgi"}, `--engine "tgi": want auto, none or one of llamacpp, sglang, vllm`},
		{"extra argument", []string{"bench", "--url", ts.URL, "extra"}, "no arguments"},
		{"matrix flag with chat", []string{"bench", "--url", ts.URL, "--duration", "5s"}, "--duration applies to --workload matrix only; this run is --workload chat"},
		{"chat flag with matrix", []string{"bench", "--url", ts.URL, "--workload", "matrix", "--requests", "8"}, "--requests applies to --workload chat only; this run is --workload matrix"},
		{"requests below level", []string{"bench", "--url", ts.URL, "--concurrency", "16", "--requests", "4"}, "concurrency 16 with 4 requests: a level needs at least as many requests as its concurrency"},
		{"prompts file", []string{"bench", "--url", ts.URL, "--prompts-file", "/nonexistent/prompts.jsonl"}, "--prompts-file: prompts file: open /nonexistent/prompts.jsonl: no such file or directory"},
		{"dataset", []string{"bench", "--url", ts.URL, "--dataset", "/nonexistent/data.json"}, "--dataset: /nonexistent/data.json: no such file or directory"},
		{"slo without max rate", []string{"bench", "--url", ts.URL, "--slo", "ttft p99 < 1s"}, "--slo, --rate-requests and --arrival go with --max-rate"},
		{"trace without timestamps", []string{"bench", "--url", ts.URL, "--max-rate", "4", "--arrival", "trace", "--dataset", "../../testdata/datasets/pairs-small.csv"}, "--arrival trace: ../../testdata/datasets/pairs-small.csv has no timestamps"},
		{"bad arrival", []string{"bench", "--url", ts.URL, "--max-rate", "4", "--arrival", "zipf"}, `arrival "zipf"`},
		{"bad slo", []string{"bench", "--url", ts.URL, "--max-rate", "4", "--slo", "ttft p42 < 1s"}, "--slo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			if code := a.execute(context.Background(), tt.args); code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %s", code, exitUsage, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("bad input wrote to stdout: %s", out.String())
			}
			if ts.Config.Handler.(*fakesse.Server).Requests() != 0 {
				t.Error("bad input sent requests")
			}
		})
	}
}

func TestBenchJSON(t *testing.T) {
	srv := &fakesse.Server{APIKey: "k"}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(k string) string { return map[string]string{"KEY": "k"}[k] }}
	code := a.execute(context.Background(), []string{"bench", "--url", ts.URL, "--api-key-env", "KEY", "--concurrency", "1,4",
		"--requests", "2,8", "--repeats", "2", "--max-tokens", "6", "--quality", "--json"})
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc struct {
		Points []struct {
			Concurrency, Repeat, Requested, Issued, Completed, Failed int
			OutputTokens                                              int                `json:"output_tokens"`
			OutputTokS                                                float64            `json:"output_tok_s"`
			TTFT                                                      map[string]float64 `json:"ttft_s"`
			Latency                                                   map[string]float64 `json:"latency_s"`
			Audit                                                     map[string]any     `json:"audit"`
			State                                                     string
		} `json:"points"`
		Medians map[string]map[string]float64 `json:"medians"`
		Quality struct {
			Before, After struct {
				Summary map[string]string `json:"summary"`
			}
		} `json:"quality"`
		Audit struct{ OK bool } `json:"audit"`
		Model string            `json:"model"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	if len(doc.Points) != 4 {
		t.Fatalf("%d points, want 4", len(doc.Points))
	}
	for _, p := range doc.Points {
		if p.State != "passed" || p.Completed != p.Requested || p.Issued != p.Requested || p.OutputTokens != 6*p.Requested {
			t.Errorf("point %+v", p)
		}
		for _, k := range []string{"raw_count", "completed", "failed", "tokens", "all_requested"} {
			if p.Audit[k] != true {
				t.Errorf("c=%d r=%d: audit %s false", p.Concurrency, p.Repeat, k)
			}
		}
		if tc, _ := p.Audit["server_tokens"].(map[string]any); tc["state"] != "passed" || tc["metric"] != "sglang:generation_tokens_total" {
			t.Errorf("c=%d r=%d: server_tokens %v", p.Concurrency, p.Repeat, p.Audit["server_tokens"])
		}
		for _, k := range []string{"mean", "p50", "p90", "p99"} {
			if p.TTFT[k] <= 0 || p.Latency[k] <= 0 {
				t.Errorf("c=%d: ttft_s/latency_s lack %s", p.Concurrency, k)
			}
		}
	}
	if m := doc.Medians["4"]; m["repeats"] != 2 || m["output_tok_s"] <= 0 || m["ttft_p99_s"] <= 0 || m["latency_p99_s"] <= 0 {
		t.Errorf("medians[4] = %v", m)
	}
	for _, s := range []map[string]string{doc.Quality.Before.Summary, doc.Quality.After.Summary} {
		if s["json"] != "24/24" || s["tool"] != "8/8" {
			t.Errorf("quality summary %v, want 24/24 and 8/8", s)
		}
	}
	if !doc.Audit.OK || doc.Model != "fake/model" {
		t.Errorf("audit %v model %q", doc.Audit, doc.Model)
	}
	if !strings.Contains(errb.String(), "c=4 r=2/2") || !strings.Contains(errb.String(), "quality after") {
		t.Errorf("progress on stderr: %s", errb.String())
	}
}

func TestBenchTableAndFailure(t *testing.T) {
	tests := []struct {
		name     string
		srv      *fakesse.Server
		args     []string
		wantCode int
		wantOut  []string
	}{
		{"table", &fakesse.Server{}, []string{"--concurrency", "2", "--requests", "4", "--repeats", "1", "--max-tokens", "3"}, exitOK,
			[]string{"TTFT p99", "medians over repeats", "audit: ok (1 points)"}},
		{"corrupt quality", &fakesse.Server{Corrupt: true}, []string{"--concurrency", "1", "--requests", "1", "--quality"}, exitFailure,
			[]string{"quality before: json 0/24, tool 0/8 (FAIL)"}},
		{"matrix", &fakesse.Server{KVTokens: 400}, []string{"--workload", "matrix", "--contexts", "64,256", "--concurrency", "1,2", "--duration", "100ms", "--max-output", "8"}, exitOK,
			[]string{"prefill:", "Over capacity", "sustained decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(tt.srv)
			defer ts.Close()
			var out, errb bytes.Buffer
			a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			code := a.execute(context.Background(), append([]string{"bench", "--url", ts.URL}, tt.args...))
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr %s", code, tt.wantCode, errb.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// TestBenchURLForms: --url takes the server's root or the OpenAI base URL
// ending in /v1 (it went to /v1/v1/models and failed with HTTP 404); a path
// in front of /v1 (a reverse proxy's prefix) is kept.
func TestBenchURLForms(t *testing.T) {
	srv := &fakesse.Server{}
	ts := httptest.NewServer(http.StripPrefix("/proxy", srv))
	defer ts.Close()
	tests := []struct{ name, url, want string }{
		{"root", ts.URL + "/proxy", ts.URL + "/proxy"},
		{"root with slash", ts.URL + "/proxy/", ts.URL + "/proxy"},
		{"openai base", ts.URL + "/proxy/v1", ts.URL + "/proxy"},
		{"openai base with slash", ts.URL + "/proxy/v1/", ts.URL + "/proxy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			code := a.execute(context.Background(), []string{"bench", "--url", tt.url, "--concurrency", "1", "--requests", "2",
				"--repeats", "1", "--max-tokens", "3", "--json"})
			if code != exitOK {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitOK, errb.String())
			}
			var doc benchDoc
			if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
				t.Fatalf("bench --json: %v\n%s", err, out.String())
			}
			if doc.URL != tt.want || doc.Model != "fake/model" || doc.Engine != "sglang" || !doc.Audit.OK {
				t.Errorf("url %q model %q engine %q audit %+v; want url %q, fake/model, sglang (from /metrics), audit ok", doc.URL, doc.Model, doc.Engine, doc.Audit, tt.want)
			}
		})
	}
}

// stallFrom serves fakesse, except that chat request number from (1-based)
// and every later one stall until the client goes away; stalled is closed
// when the first of them arrives.
type stallFrom struct {
	srv     *fakesse.Server
	from    int64
	n       atomic.Int64
	once    sync.Once
	stalled chan struct{}
}

func (s *stallFrom) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/chat/completions" && s.n.Add(1) >= s.from {
		// With the body read, the server sees the client go away.
		io.Copy(io.Discard, r.Body)
		s.once.Do(func() { close(s.stalled) })
		<-r.Context().Done()
		return
	}
	s.srv.ServeHTTP(w, r)
}

// TestBenchInterruptedPoint: Ctrl-C during a point exits 130 and marks that
// point interrupted: its cut request counts neither as completed nor as
// failed, the audit leaves it out instead of failing on all_requested, and
// the JSON error says interrupted (it said failed, 'audit: FAILED
// [all_requested]' and '...: context canceled').
func TestBenchInterruptedPoint(t *testing.T) {
	tests := []struct {
		name       string
		from       int64 // the first chat request that stalls
		wantPoints []string
		wantAudit  string // the JSON audit, compacted
		wantError  string
		wantTable  []string
	}{
		{"second repeat", 3, []string{"passed", "interrupted"}, `{"ok":true,"points":1,"errors":[],"interrupted":true}`,
			"concurrency 1 repeat 2: interrupted", []string{"interrupted\n", "audit: ok (1 points; the run was interrupted)"}},
		{"first repeat", 1, []string{"interrupted"}, `{"ok":false,"points":0,"errors":["interrupted before any point was measured"],"interrupted":true}`,
			"concurrency 1 repeat 1: interrupted", []string{"interrupted\n", "audit: none (interrupted before any point was measured)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(extra ...string) (int, string, string) {
				h := &stallFrom{srv: &fakesse.Server{}, from: tt.from, stalled: make(chan struct{})}
				ts := httptest.NewServer(h)
				defer ts.Close()
				interrupts := make(chan os.Signal, 1)
				var out, errb bytes.Buffer
				a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }, interrupts: interrupts}
				done := make(chan int)
				go func() { // ends when bench does, after the interrupt
					done <- a.execute(context.Background(), append([]string{"bench", "--url", ts.URL, "--concurrency", "1", "--requests", "2",
						"--repeats", "2", "--max-tokens", "3", "--warmup=false"}, extra...))
				}()
				<-h.stalled
				interrupts <- os.Interrupt
				return <-done, out.String(), errb.String()
			}
			code, out, errs := run("--json")
			if code != exitInterrupted || !strings.HasSuffix(errs, "sgtune: interrupted\n") {
				t.Errorf("exit %d, want %d; stderr %s", code, exitInterrupted, errs)
			}
			var doc benchDoc
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("bench --json: %v\n%s", err, out)
			}
			var states []string
			for _, p := range doc.Points {
				states = append(states, p.State)
			}
			if fmt.Sprint(states) != fmt.Sprint(tt.wantPoints) {
				t.Errorf("point states %v, want %v", states, tt.wantPoints)
			}
			if last := doc.Points[len(doc.Points)-1]; last.Failed != 0 || last.Cut != 1 || last.Completed != 0 || last.Audit.ServerTokens != nil {
				t.Errorf("interrupted point: failed %d cut %d completed %d token check %+v; want 0, 1, 0 and none", last.Failed, last.Cut, last.Completed, last.Audit.ServerTokens)
			}
			var raw struct{ Audit json.RawMessage }
			json.Unmarshal([]byte(out), &raw)
			var audit bytes.Buffer
			json.Compact(&audit, raw.Audit)
			if audit.String() != tt.wantAudit {
				t.Errorf("audit %s, want %s", audit.String(), tt.wantAudit)
			}
			if doc.Error != tt.wantError {
				t.Errorf("error %q, want %q", doc.Error, tt.wantError)
			}
			code, out, _ = run()
			if code != exitInterrupted || strings.Contains(out, "FAILED") {
				t.Errorf("exit %d, want %d, and no FAILED in the table:\n%s", code, exitInterrupted, out)
			}
			for _, w := range tt.wantTable {
				if !strings.Contains(out, w) {
					t.Errorf("table lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestBenchHelpAndReadmeNameEngines: bench --help and the README's command
// table name every --engine value the code takes (auto, none and each
// engine with a generated-token counter), and the help names each engine's
// counter. The help left out vllm and its counter, the README none.
func TestBenchHelpAndReadmeNameEngines(t *testing.T) {
	want := append([]string{"auto", "none"}, counterEngines()...)
	slices.Sort(want)
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := a.execute(context.Background(), []string{"bench", "--help"}); code != exitOK {
		t.Fatalf("bench --help: exit %d: %s", code, errb.String())
	}
	help := out.String()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `sgtune bench .*$").FindString(string(readme))
	engineRE := regexp.MustCompile(`--engine ([a-z\\|]+)`)
	flagLine := regexp.MustCompile(`(?m)^\s+--engine string .*$`).FindString(help)
	tests := []struct {
		name, text string
		values     func(string) []string
	}{
		{"README bench row", row, func(s string) []string {
			m := engineRE.FindStringSubmatch(s)
			if m == nil {
				return nil
			}
			return strings.Split(m[1], `\|`)
		}},
		{"--engine flag help", flagLine, func(s string) []string {
			var got []string
			for _, v := range want {
				if regexp.MustCompile(`\b` + v + `\b`).MatchString(s) {
					got = append(got, v)
				}
			}
			return got
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.values(tt.text)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("names --engine values %v, want %v:\n%s", got, want, tt.text)
			}
		})
	}
	for _, e := range engine.All() {
		if c := e.Metrics.GenerationTokens; c != "" && !strings.Contains(help, "--engine "+e.Name+": "+c) {
			t.Errorf("bench --help does not name %s's counter %s:\n%s", e.Name, c, help)
		}
	}
}

// TestBenchNotEventStream: a chat answer that is not an event stream fails
// its request naming the Content-Type (it said 'stream ended without
// [DONE]'); a truncated event stream still says that.
func TestBenchNotEventStream(t *testing.T) {
	tests := []struct {
		name, contentType, body, want string
	}{
		{"html page", "text/html; charset=utf-8", "<html><body>Sign in</body></html>",
			"1 of 1 requests failed: the server answered with Content-Type text/html, not an event stream (text/event-stream)"},
		{"whole JSON answer", "application/json", `{"choices":[{"message":{"content":"hi"}}]}`,
			"1 of 1 requests failed: the server answered with Content-Type application/json, not an event stream (text/event-stream)"},
		{"truncated event stream", "text/event-stream", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n",
			"1 of 1 requests failed: stream ended without [DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &fakesse.Server{}
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/chat/completions" {
					srv.ServeHTTP(w, r)
					return
				}
				w.Header().Set("Content-Type", tt.contentType)
				io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			var out, errb bytes.Buffer
			a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			code := a.execute(context.Background(), []string{"bench", "--url", ts.URL, "--concurrency", "1", "--requests", "1", "--repeats", "1"})
			if code != exitFailure {
				t.Errorf("exit %d, want %d", code, exitFailure)
			}
			if want := "sgtune: bench: warm-up at concurrency 1: " + tt.want + "\n"; !strings.HasSuffix(errb.String(), want) {
				t.Errorf("stderr %q, want it to end in %q", errb.String(), want)
			}
		})
	}
}

// TestBenchTokenCheck: the engine is told by /metrics (fakesse serves
// sglang: metrics) or by --engine, and a server counter that disagrees with
// the client's count fails the audit and the command.
func TestBenchTokenCheck(t *testing.T) {
	tests := []struct {
		name       string
		srv        *fakesse.Server
		engine     string
		wantCode   int
		wantEngine string
		wantState  string
		wantOut    string
	}{
		{"auto-detected sglang", &fakesse.Server{}, "auto", exitOK, "sglang", objective.CheckPassed, "sglang:generation_tokens_total: 2 of 2 points equal"},
		{"counter disagrees", &fakesse.Server{CounterSkew: 2}, "auto", exitFailure, "sglang", objective.CheckFailed, "2 DIFFER"},
		{"wrong engine named", &fakesse.Server{}, "llamacpp", exitOK, "llamacpp", objective.CheckSkipped, "has no llamacpp:tokens_predicted_total"},
		{"none", &fakesse.Server{}, "none", exitOK, "", objective.CheckSkipped, "not checked (no generated-token counter is named"},
		{"no metrics", &fakesse.Server{NoMetrics: true}, "auto", exitOK, "", objective.CheckSkipped, "server token counter: not checked (GET /metrics: HTTP 404"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(tt.srv)
			defer ts.Close()
			run := func(extra ...string) (int, string, string) {
				var out, errb bytes.Buffer
				a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
				code := a.execute(context.Background(), append([]string{"bench", "--url", ts.URL, "--engine", tt.engine,
					"--concurrency", "1,2", "--requests", "2,4", "--repeats", "1", "--max-tokens", "4"}, extra...))
				return code, out.String(), errb.String()
			}
			code, out, errs := run("--json")
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr %s", code, tt.wantCode, errs)
			}
			var doc benchDoc
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("bench --json: %v\n%s", err, out)
			}
			if doc.Engine != tt.wantEngine || len(doc.Points) != 2 {
				t.Fatalf("engine %q, %d points", doc.Engine, len(doc.Points))
			}
			for _, p := range doc.Points {
				if tc := p.Audit.ServerTokens; tc == nil || tc.State != tt.wantState {
					t.Errorf("c=%d: token check %+v, want %s", p.Concurrency, tc, tt.wantState)
				}
			}
			if tt.wantState == objective.CheckFailed && (doc.Audit.OK || !strings.Contains(errs, "audit failed") || !strings.Contains(errs, "server_tokens: the client counted")) {
				t.Errorf("audit %+v, stderr %s", doc.Audit, errs)
			}
			if _, out, _ = run(); !strings.Contains(out, tt.wantOut) {
				t.Errorf("table lacks %q:\n%s", tt.wantOut, out)
			}
		})
	}
}

// startSim builds cmd/sglang-sim into a temporary directory, starts it with
// args on a free port, waits for /health_generate and returns its URL. The
// process is killed when the test ends.
func startSim(t *testing.T, args ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the simulator")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "sglang-sim")
	build := exec.Command(goBin, "build", "-o", bin, "github.com/sgtune/sgtune/cmd/sglang-sim")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the simulator: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var logBuf bytes.Buffer
	cmd := exec.Command(bin, append(args, "--port", fmt.Sprint(port))...)
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url + "/health_generate")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case <-done:
			t.Fatalf("simulator exited before it was ready:\n%s", logBuf.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("simulator not ready after 60 s:\n%s", logBuf.String())
		}
	}
}

// TestBenchUnreachable: a URL nothing listens on gives the connection
// error alone on stderr, nothing on stdout, exit code 1.
func TestBenchUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	for _, extra := range [][]string{nil, {"--json"}, {"--model", "m", "--quality"}} {
		t.Run(strings.Join(append([]string{"plain"}, extra...), " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			code := a.execute(context.Background(), append([]string{"bench", "--url", url}, extra...))
			if code != exitFailure {
				t.Errorf("exit %d, want %d", code, exitFailure)
			}
			if want := "sgtune: cannot reach " + url + ": connect: connection refused\n"; errb.String() != want {
				t.Errorf("stderr %q, want %q", errb.String(), want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

// silentServer listens on a free port, accepts connections and never
// answers; it returns the server's URL. The listener and the connections
// are closed when the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() { // ends when the listener is closed
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// TestBenchNoAnswer: a server that accepts the connection and never
// answers ends bench after the lookup bound (here --hang-timeout's 200ms)
// with the URL that did not answer, exit code 1 and nothing on stdout,
// whichever lookup comes first. (It hung forever on /v1/models.)
func TestBenchNoAnswer(t *testing.T) {
	tests := []struct {
		name string
		args []string
		path string
	}{
		{"metrics first", nil, "/metrics"},
		{"model given", []string{"--model", "m"}, "/metrics"},
		{"no metrics probe", []string{"--engine", "sglang"}, "/v1/models"},
		{"model given, no metrics probe", []string{"--engine", "none", "--model", "m", "--json"}, "/server_info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := silentServer(t)
			// A guard, not an assertion: without the bound the command
			// would never return.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			code := a.execute(ctx, append([]string{"bench", "--url", url, "--hang-timeout", "200ms"}, tt.args...))
			if code != exitFailure {
				t.Errorf("exit %d, want %d", code, exitFailure)
			}
			want := "sgtune: " + url + tt.path + " did not answer within 200ms (the server accepted the connection but sent no response)\n"
			if got := errb.String(); !strings.HasSuffix(got, want) {
				t.Errorf("stderr %q, want it to end in %q", got, want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

// TestBenchAgainstSimulator runs `sgtune bench --json --quality` against
// the real simulator binary: every point's audit holds, completed equals
// requested, and a healthy server passes 24/24 and 8/8.
func TestBenchAgainstSimulator(t *testing.T) {
	if os.Getenv("SGTUNE_SKIP_SIM") != "" {
		t.Skip("SGTUNE_SKIP_SIM set")
	}
	url := startSim(t, "--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4", "--tool-call-parser", "glm47",
		"--reasoning-parser", "glm45", "--sim-speedup", "100", "--enable-metrics")
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: os.Getenv}
	code := a.execute(context.Background(), []string{"bench", "--url", url, "--concurrency", "1,16", "--requests", "4,32",
		"--repeats", "2", "--max-tokens", "32", "--quality", "--json"})
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var doc benchDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out.String())
	}
	if len(doc.Points) != 4 {
		t.Fatalf("%d points, want 4", len(doc.Points))
	}
	for _, p := range doc.Points {
		if !p.Audit.OK() || p.Completed != p.Requested || p.State != "passed" || p.OutputTokens == 0 {
			t.Errorf("c=%d r=%d: state %s, completed %d of %d, %d tokens, audit %+v", p.Concurrency, p.Repeat, p.State, p.Completed, p.Requested, p.OutputTokens, p.Audit)
		}
		// The simulator's own counter agrees with the client's count.
		if tc := p.Audit.ServerTokens; tc == nil || tc.State != objective.CheckPassed || tc.Server != int64(p.OutputTokens) {
			t.Errorf("c=%d r=%d: token check %+v, want passed with %d", p.Concurrency, p.Repeat, tc, p.OutputTokens)
		}
	}
	if doc.Engine != "sglang" || doc.TokenCounter != "sglang:generation_tokens_total" {
		t.Errorf("engine %q counter %q, want sglang's", doc.Engine, doc.TokenCounter)
	}
	for _, q := range []*objective.QualityCheck{doc.Quality.Before, doc.Quality.After} {
		if q == nil || q.Summary.JSON != "24/24" || q.Summary.Tool != "8/8" {
			t.Errorf("quality %+v, want 24/24 and 8/8", q)
		}
	}
	if doc.Server == nil || doc.Server.MaxTotalNumTokens <= 0 || !doc.Audit.OK {
		t.Errorf("server %+v, audit %+v", doc.Server, doc.Audit)
	}
}

// TestBenchMaxRateAgainstSimulator: --max-rate probes the simulator open
// loop on ShareGPT-format requests behind a shared system prompt; the
// JSON carries each probe's rates and verdict, the table the max rate.
func TestBenchMaxRateAgainstSimulator(t *testing.T) {
	if os.Getenv("SGTUNE_SKIP_SIM") != "" {
		t.Skip("SGTUNE_SKIP_SIM set")
	}
	url := startSim(t, "--sim-profile", "llama-3.1-8b-h100x2", "--model-path", "m", "--tp-size", "2", "--sim-speedup", "20", "--enable-cache-report")
	args := []string{"bench", "--url", url, "--max-rate", "16", "--rate-requests", "32", "--slo", "ttft p99 < 2s",
		"--dataset", "../../testdata/datasets/sharegpt-small.json", "--shared-prefix-tokens", "500", "--max-tokens", "64"}
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: os.Getenv}
	if code := a.execute(context.Background(), append(args, "--json")); code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	var doc benchDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out.String())
	}
	probes, good := 0, 0
	for _, p := range doc.Points {
		if p.Phase != objective.PhaseRate {
			continue
		}
		probes++
		if math.Abs(p.OfferedRateS-p.Rate) > 1e-6*p.Rate || p.AchievedRateS <= 0 || p.KeptUp == nil || p.PrefixReusable < 0.5 || p.CachedTokens == 0 {
			t.Errorf("probe at %g: offered %g achieved %g kept up %v reusable %.2f cached %d", p.Rate, p.OfferedRateS, p.AchievedRateS, p.KeptUp, p.PrefixReusable, p.CachedTokens)
		}
		if *p.KeptUp {
			good++
		}
	}
	if probes < 3 || good == 0 || good == probes {
		t.Errorf("%d probes, %d kept up: want a search that found a rate it could not keep up with", probes, good)
	}
	out.Reset()
	if code := a.execute(context.Background(), args); code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "max rate: ") || strings.Contains(out.String(), "max rate: none") {
		t.Errorf("table lacks the max rate:\n%s", out.String())
	}
}

// TestBenchQualityAgainstCorruptingSimulator: the simulator profile's
// no-overlap fault corrupts outputs as in seed 000 (JSON 12/24, tools 0/8);
// the gate fails and bench exits 1 without sweeping.
func TestBenchQualityAgainstCorruptingSimulator(t *testing.T) {
	if os.Getenv("SGTUNE_SKIP_SIM") != "" {
		t.Skip("SGTUNE_SKIP_SIM set")
	}
	url := startSim(t, "--sim-profile", "glm-5.3-flash-h200x4", "--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4",
		"--tool-call-parser", "glm47", "--reasoning-parser", "glm45", "--disable-overlap-schedule", "--sim-speedup", "100")
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: os.Getenv}
	code := a.execute(context.Background(), []string{"bench", "--url", url, "--concurrency", "1", "--requests", "2", "--repeats", "1", "--quality", "--json"})
	if code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	var doc benchDoc
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out.String())
	}
	q := doc.Quality.Before
	if q == nil || q.Pass || q.Summary.JSON == "24/24" || q.Summary.Tool == "8/8" {
		t.Errorf("quality before %+v, want a failed gate", q)
	}
	if len(doc.Points) != 0 || !strings.Contains(doc.Error, "quality gate failed") {
		t.Errorf("%d points, error %q", len(doc.Points), doc.Error)
	}
	t.Logf("corrupting simulator: json %s, tool %s", q.Summary.JSON, q.Summary.Tool)
}

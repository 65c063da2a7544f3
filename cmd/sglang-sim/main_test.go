package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var simBin string

// TestMain builds the real binary once; the tests run it as a process.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sglang-sim-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	simBin = filepath.Join(dir, "sglang-sim")
	out, err := exec.Command("go", "build", "-o", simBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running simulator.
type proc struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	log  strings.Builder
	done chan struct{}
	code int
}

func (p *proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// start runs the simulator with args; the process is killed and reaped at
// the end of the test.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	port := freePort(t)
	args = append([]string{"--model-path", "zai-org/GLM-5.3-Flash", "--port", fmt.Sprint(port)}, args...)
	p := &proc{cmd: exec.Command(simBin, args...), url: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	go func() {
		err := p.cmd.Wait()
		pw.Close()
		// Wait returns once the output is read from the pipe, maybe before
		// the scanner has added its last lines to the log: done means the
		// whole log is there.
		<-scanned
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if err := syscall.Kill(p.cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists: %v", p.cmd.Process.Pid, err)
		}
	})
	return p
}

// wait waits for a log line or the exit.
func (p *proc) wait(t *testing.T, line string, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(p.Log(), line) {
			return true
		}
		select {
		case <-p.done:
			time.Sleep(20 * time.Millisecond)
			return strings.Contains(p.Log(), line)
		case <-time.After(2 * time.Millisecond):
		}
	}
	return false
}

func (p *proc) exited(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("simulator did not exit; log:\n%s", p.Log())
	}
	return 0
}

func get(url, key string) (int, []byte, error) {
	req, _ := http.NewRequest("GET", url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, nil
}

func post(url, key, body string) (int, []byte, error) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, nil
}

// TestServe runs the seed's quad-ep4-mtp5 configuration (256 slots, radix
// on, EAGLE 5) and checks the log, readiness, endpoints and streams.
func TestServe(t *testing.T) {
	const key = "sk-test"
	p := start(t, "--tp", "4", "--ep", "4", "--mem-fraction-static", "0.78", "--chunked-prefill-size", "4096",
		"--max-running-requests", "64", "--max-mamba-cache-size", "256", "--speculative-algorithm", "EAGLE",
		"--speculative-num-steps", "5", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "6",
		"--reasoning-parser", "glm45", "--tool-call-parser", "glm47", "--enable-metrics", "--api-key", key,
		"--sim-speedup", "50")
	if !p.wait(t, "Uvicorn running on", 20*time.Second) {
		t.Fatalf("no Uvicorn line; log:\n%s", p.Log())
	}
	// 503 while the warm-up runs, 200 once fired up.
	saw503 := false
	for i := 0; i < 2000 && !strings.Contains(p.Log(), "fired up"); i++ {
		if code, _, err := get(p.url+"/health_generate", ""); err == nil && code == 503 {
			saw503 = true
		}
		time.Sleep(time.Millisecond)
	}
	if !p.wait(t, "The server is fired up and ready to roll!", 10*time.Second) {
		t.Fatalf("not ready; log:\n%s", p.Log())
	}
	if !saw503 {
		t.Log("did not observe 503 during the warm-up window (timing); readiness still checked")
	}
	if code, _, err := get(p.url+"/health_generate", ""); err != nil || code != 200 {
		t.Fatalf("/health_generate after ready: %d %v", code, err)
	}
	log := p.Log()
	order := []string{"server_args=ServerArgs(", "Load weight end.", "max_running_requests was reduced from the requested 64 to 51 (per dp worker) due to the available KV cache capacity.",
		"Mamba Cache is allocated. max_mamba_cache_size: 256", "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 789", "Capture target verify CUDA graph begin.",
		"max_total_num_tokens=789", "max_running_requests=51, context_len=", "Uvicorn running on", "The server is fired up and ready to roll!"}
	at := 0
	for _, l := range order {
		i := strings.Index(log[at:], l)
		if i < 0 {
			t.Fatalf("log line %q missing or out of order; log:\n%s", l, log)
		}
		at += i
	}
	// Auth.
	if code, body, _ := get(p.url+"/v1/models", ""); code != 401 || string(body) != `{"error":"Unauthorized"}` {
		t.Errorf("no key: %d %s", code, body)
	}
	code, body, _ := get(p.url+"/server_info", key)
	var info struct {
		MaxTotal int `json:"max_total_num_tokens"`
		Internal []struct {
			Eff    int      `json:"effective_max_running_requests_per_dp"`
			Accept *float64 `json:"avg_spec_accept_length"`
		} `json:"internal_states"`
	}
	if err := json.Unmarshal(body, &info); err != nil || code != 200 || len(info.Internal) != 1 {
		t.Fatalf("/server_info: %d %s", code, body)
	}
	if info.Internal[0].Eff != 51 || info.Internal[0].Accept == nil || info.MaxTotal < 780000 || info.MaxTotal > 800000 {
		t.Errorf("/server_info: %+v", info)
	}
	// A stream with usage.
	code, body, _ = post(p.url+"/v1/chat/completions", key, `{"model":"zai-org/GLM-5.3-Flash","messages":[{"role":"user","content":"Say something long."}],"stream":true,"max_tokens":40,"ignore_eos":true,"stream_options":{"include_usage":true}}`)
	frames := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	if code != 200 || len(frames) < 5 || frames[len(frames)-1] != "data: [DONE]" {
		t.Fatalf("stream: %d %s", code, body)
	}
	if !strings.Contains(frames[0], `"delta":{"reasoning_content":null,"role":"assistant","content":""}`) {
		t.Errorf("first chunk %s", frames[0])
	}
	if !strings.Contains(string(body), `"reasoning_content":"`) || !strings.Contains(string(body), `"finish_reason":"length"`) {
		t.Errorf("want reasoning deltas and finish length: %s", body)
	}
	if !strings.Contains(frames[len(frames)-2], `"choices":[],"usage":{"prompt_tokens":`) || !strings.Contains(frames[len(frames)-2], `"completion_tokens":40`) {
		t.Errorf("usage chunk %s", frames[len(frames)-2])
	}
	// Structured output.
	code, body, _ = post(p.url+"/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"Weather in Paris as JSON."}],"max_tokens":300,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object","properties":{"city":{"type":"string","minLength":1},"t":{"type":"integer","minimum":-50,"maximum":50}},"required":["city","t"]}}}}`)
	var resp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Finish string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || code != 200 || len(resp.Choices) != 1 {
		t.Fatalf("json_schema: %d %s", code, body)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &obj); err != nil || obj["city"] == nil || obj["t"] == nil {
		t.Errorf("json_schema content %q: %v", resp.Choices[0].Message.Content, err)
	}
	// Tool call.
	code, body, _ = post(p.url+"/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"Set a timer for 15 minutes."}],"stream":true,"max_tokens":300,"tools":[{"type":"function","function":{"name":"get_weather","description":"Get the weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"set_timer","description":"Set a countdown timer.","parameters":{"type":"object","properties":{"minutes":{"type":"integer","minimum":1}},"required":["minutes"]}}}]}`)
	if code != 200 || !strings.Contains(string(body), `"function":{"name":"set_timer","arguments":""}`) || !strings.Contains(string(body), `"finish_reason":"tool_calls"`) {
		t.Errorf("tool call stream: %d %s", code, body)
	}
	// Context length.
	code, body, _ = post(p.url+"/v1/chat/completions", key, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2000000}`)
	if code != 400 || !strings.Contains(string(body), `"object":"error"`) || !strings.Contains(string(body), "maximum context length") {
		t.Errorf("context length: %d %s", code, body)
	}
	// Metrics.
	if code, body, _ := get(p.url+"/metrics", ""); code != 200 || !strings.Contains(string(body), "sglang:num_running_reqs{") || !strings.Contains(string(body), "sglang:spec_accept_length") {
		t.Errorf("/metrics: %d %.300s", code, body)
	}
	// SIGTERM: clean exit.
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exited(t, 10*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM %d", code)
	}
}

// TestCrashRule: seed "reproduce" (TP4, EP1, radix off, 64 slots) dies
// with an illegal memory access within its first requests.
func TestCrashRule(t *testing.T) {
	p := start(t, "--tp", "4", "--ep", "1", "--mem-fraction-static", "0.85", "--disable-radix-cache", "--max-running-requests", "64", "--sim-speedup", "100")
	if !p.wait(t, "fired up", 20*time.Second) {
		t.Fatalf("not ready:\n%s", p.Log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ok := 0
	for i := 0; i < 40; i++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			ok++
		}
	}
	code := p.exited(t, 10*time.Second)
	log := p.Log()
	if code == 0 || ok < 30 || ok > 34 {
		t.Errorf("exit %d after %d completed requests", code, ok)
	}
	for _, l := range []string{"Scheduler hit an exception: Traceback (most recent call last):", "RuntimeError: CUDA error: an illegal memory access was encountered",
		"CUDA kernel errors might be asynchronously reported", "SIGQUIT received. signum=None, frame=None. It usually means one child failed."} {
		if !strings.Contains(log, l) {
			t.Errorf("log lacks %q", l)
		}
	}
}

func TestStartupFailures(t *testing.T) {
	cases := []struct {
		name string
		args []string
		line string
		code int
	}{
		{"oom", []string{"--tp", "4", "--mem-fraction-static", "0.95"}, "torch.OutOfMemoryError: CUDA out of memory.", 1},
		{"state pool too small", []string{"--tp", "4", "--max-mamba-cache-size", "3", "--max-running-requests", "8"}, "state cache is too small to serve any requests", 1},
		{"usage", []string{"--tp-size", "x"}, "sglang serve: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'x'", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, append(c.args, "--sim-speedup", "100")...)
			code := p.exited(t, 20*time.Second)
			if code != c.code || !strings.Contains(p.Log(), c.line) {
				t.Errorf("exit %d (want %d); log:\n%s", code, c.code, p.Log())
			}
			if c.code == 1 && !strings.Contains(p.Log(), "Received sigquit from a child process.") {
				t.Errorf("no sigquit line")
			}
		})
	}
}

// TestHangRule: DP attention stops producing tokens under load; health
// checks then fail while the process stays up until SIGTERM.
func TestHangRule(t *testing.T) {
	p := start(t, "--tp", "4", "--dp", "2", "--enable-dp-attention", "--sim-speedup", "100")
	if !p.wait(t, "fired up", 20*time.Second) {
		t.Fatalf("not ready:\n%s", p.Log())
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var completed sync.Map
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"stream":true}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "[DONE]") {
				completed.Store(i, true)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	code, _, err := get(p.url+"/health_generate", "")
	cancel()
	wg.Wait()
	if err != nil || code != 503 {
		t.Errorf("/health_generate during the hang: %d %v", code, err)
	}
	n := 0
	completed.Range(func(any, any) bool { n++; return true })
	if n > 0 {
		t.Errorf("%d streams completed during a hang", n)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.exited(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}

// TestCorruptRule: seed "no-overlap" answers half the structured requests
// with broken JSON and no tool calls.
func TestCorruptRule(t *testing.T) {
	p := start(t, "--tp", "4", "--mem-fraction-static", "0.85", "--disable-radix-cache", "--max-running-requests", "64",
		"--disable-overlap-schedule", "--tool-call-parser", "glm47", "--sim-speedup", "100")
	if !p.wait(t, "fired up", 20*time.Second) {
		t.Fatalf("not ready:\n%s", p.Log())
	}
	valid := 0
	for i := 0; i < 4; i++ {
		_, body, err := post(p.url+"/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"JSON please"}],"max_tokens":200,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a","b"]}}}}`)
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		json.Unmarshal(body, &resp)
		var v map[string]any
		if len(resp.Choices) == 1 && json.Unmarshal([]byte(resp.Choices[0].Message.Content), &v) == nil {
			valid++
		}
	}
	if valid != 2 {
		t.Errorf("%d of 4 structured answers valid, want 2", valid)
	}
	_, body, _ := post(p.url+"/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"Set a timer"}],"max_tokens":200,"tools":[{"type":"function","function":{"name":"set_timer","parameters":{"type":"object","properties":{"minutes":{"type":"integer"}}}}}]}`)
	if strings.Contains(string(body), `"tool_calls":[`) {
		t.Errorf("tool call parsed despite the corruption: %s", body)
	}
}

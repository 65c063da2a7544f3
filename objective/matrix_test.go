package objective

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sgtune/sgtune/objective/fakesse"
)

func TestCellFits(t *testing.T) {
	tests := []struct {
		kv, ctx, out, conc int
		want               bool
	}{
		{0, 1 << 20, 4096, 128, true}, // unknown capacity: run it
		{1000, 100, 100, 5, true},     // exactly full
		{1000, 100, 100, 6, false},
		{3343552, 1019 * 1024, 4096, 4, false},
		{3343552, 1019 * 1024, 4096, 3, true},
	}
	for _, tt := range tests {
		if got := CellFits(tt.kv, tt.ctx, tt.out, tt.conc); got != tt.want {
			t.Errorf("CellFits(%d, %d, %d, %d) = %v, want %v", tt.kv, tt.ctx, tt.out, tt.conc, got, tt.want)
		}
	}
}

func TestRunMatrix(t *testing.T) {
	// KV 1000 tokens: ctx 64 (+64 out) fits 7 requests; ctx 256 fits 3.
	srv := &fakesse.Server{KVTokens: 1000, MaxRunning: 3, TokenInterval: 2 * time.Millisecond}
	w := Workload{Kind: "matrix", Matrix: MatrixSpec{Contexts: []int{64, 256}, Concurrency: []int{1, 2, 4}, DurationS: 0.25, MaxOutput: 64}}
	res, err := Run(context.Background(), fake(t, srv), w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		phase     string
		ctx, conc int
	}
	got := map[key]Point{}
	for _, p := range res.Points {
		got[key{p.Phase, p.Context, p.Concurrency}] = p
	}
	want := []struct {
		k      key
		status string
	}{
		{key{PhasePrefill, 64, 1}, StatusValid},
		{key{PhaseDecode, 64, 1}, StatusValid},
		{key{PhaseDecode, 64, 2}, StatusValid},
		{key{PhaseDecode, 64, 4}, StatusQueued}, // 4 > max running 3
		{key{PhasePrefill, 256, 1}, StatusValid},
		{key{PhaseDecode, 256, 1}, StatusValid},
		{key{PhaseDecode, 256, 2}, StatusValid},
		{key{PhaseDecode, 256, 4}, StatusOverCapacity},
	}
	if len(res.Points) != len(want) {
		t.Errorf("%d points, want %d", len(res.Points), len(want))
	}
	for _, w := range want {
		p, ok := got[w.k]
		if !ok {
			t.Errorf("%v: missing", w.k)
			continue
		}
		if p.Status != w.status {
			t.Errorf("%v: status %q (%s), want %q", w.k, p.Status, p.Note, w.status)
		}
		if p.Status == StatusOverCapacity {
			if p.Issued != 0 || !strings.Contains(p.Note, "> 1000 KV tokens") {
				t.Errorf("%v: over capacity but issued %d, note %q", w.k, p.Issued, p.Note)
			}
			continue
		}
		if !p.Audit.OK() || p.State != "passed" {
			t.Errorf("%v: state %s audit %+v", w.k, p.State, p.Audit)
		}
		if w.k.phase == PhasePrefill && (p.PromptTokS <= 0 || p.TTFT.P50 <= 0) {
			t.Errorf("%v: prefill %+v", w.k, p)
		}
		if w.k.phase == PhaseDecode {
			if p.OutputTokS <= 0 || p.PerRequestTokS <= 0 || p.AvgActive < 0.5*float64(w.k.conc) || p.DurationS < 0.24 {
				t.Errorf("%v: decode tok/s %.1f per request %.1f active %.2f for %.2f s", w.k, p.OutputTokS, p.PerRequestTokS, p.AvgActive, p.DurationS)
			}
			if p.Cut == 0 && p.Completed == 0 {
				t.Errorf("%v: nothing completed or cut", w.k)
			}
		}
	}
	if v, ok, why := Score(ScoreSpec{Metric: "capacity"}, res); !ok || v != 2 {
		t.Errorf("matrix capacity = %v %v %s, want 2 (c=4 queued)", v, ok, why)
	}
}

func TestMatrixStopsEarly(t *testing.T) {
	srv := &fakesse.Server{FailFrom: 4}
	w := Workload{Kind: "matrix", HangTimeout: 5, Matrix: MatrixSpec{Contexts: []int{64, 128}, Concurrency: []int{1, 2}, DurationS: 0.2, MaxOutput: 8}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := Run(ctx, fake(t, srv), w, Options{})
	if !errors.Is(err, ErrFailedRequests) {
		t.Fatalf("Run: %v, want ErrFailedRequests", err)
	}
	var statuses []string
	for _, p := range res.Points {
		statuses = append(statuses, fmt.Sprintf("%s/%d/%d:%s", p.Phase, p.Context, p.Concurrency, p.Status))
	}
	// Requests 1-3 (server warm-up, prefill 64, warm-up of decode 64 c1)
	// succeed; from the decode cell on, every request fails.
	got := strings.Join(statuses, " ")
	for _, want := range []string{"prefill/64/1:Valid", "decode/64/2:Not run", "prefill/128/1:Not run", "decode/128/1:Not run"} {
		if !strings.Contains(got, want) {
			t.Errorf("statuses %s lack %s", got, want)
		}
	}
}

func TestParseQueueMetric(t *testing.T) {
	in := "# HELP x\nsglang:num_queue_reqs{dp_rank=\"0\"} 3.0\nsglang:num_queue_reqs{dp_rank=\"1\"} 2\nsglang:num_running_reqs 7\n"
	if got := parseQueueMetric(bufio.NewScanner(strings.NewReader(in))); got != 5 {
		t.Errorf("queue = %d, want 5", got)
	}
}

// TestMatrixQueuedFromStreams: a server that runs only 2 streams at once
// and does not say so is caught by the steady-state streaming count.
func TestMatrixQueuedFromStreams(t *testing.T) {
	srv := &fakesse.Server{RunLimit: 2, TokenInterval: 2 * time.Millisecond}
	w := Workload{Kind: "matrix", Matrix: MatrixSpec{Contexts: []int{64}, Concurrency: []int{2, 4}, DurationS: 0.3, MaxOutput: 500}}
	res, err := Run(context.Background(), fake(t, srv), w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{2: StatusValid, 4: StatusQueued}
	for _, p := range res.Points {
		if p.Phase != PhaseDecode {
			continue
		}
		if p.Status != want[p.Concurrency] {
			t.Errorf("c=%d: status %q (%s), want %q", p.Concurrency, p.Status, p.Note, want[p.Concurrency])
		}
		if p.Concurrency == 4 && !strings.Contains(p.Note, "at most 2 of 4 requests streamed at once") {
			t.Errorf("c=4 note %q", p.Note)
		}
	}
}

// TestMatrixPrefillOverCapacity: a context larger than the KV cache is
// skipped whole, before anything is sent for it.
func TestMatrixPrefillOverCapacity(t *testing.T) {
	srv := &fakesse.Server{KVTokens: 500}
	w := Workload{Kind: "matrix", Matrix: MatrixSpec{Contexts: []int{600}, Concurrency: []int{1, 2}, DurationS: 0.1, MaxOutput: 8, Warmup: boolp(false)}}
	res, err := Run(context.Background(), fake(t, srv), w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) != 3 {
		t.Fatalf("%d points, want 3", len(res.Points))
	}
	for _, p := range res.Points {
		if p.Status != StatusOverCapacity || p.Issued != 0 {
			t.Errorf("%s c=%d: status %q, issued %d", p.Phase, p.Concurrency, p.Status, p.Issued)
		}
	}
	if n := srv.Requests(); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
}

// TestMatrixOverContext: a cell whose prompt and output exceed the
// server's context length (max_model_len) is skipped, not sent: the server
// refuses it (HTTP 400) and that failed the whole trial.
func TestMatrixOverContext(t *testing.T) {
	srv := &fakesse.Server{KVTokens: 100000, MaxModelLen: 300}
	w := Workload{Kind: "matrix", Matrix: MatrixSpec{Contexts: []int{64, 256, 400}, Concurrency: []int{1}, DurationS: 0.1, MaxOutput: 64, Warmup: boolp(false)}}
	res, err := Run(context.Background(), fake(t, srv), w, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"prefill 64": StatusValid, "decode 64": StatusValid,
		"prefill 256": StatusValid, "decode 256": StatusOverCapacity, // 256 + 64 > 300
		"prefill 400": StatusOverCapacity, "decode 400": StatusOverCapacity,
	}
	if len(res.Points) != len(want) {
		t.Errorf("%d points, want %d", len(res.Points), len(want))
	}
	for _, p := range res.Points {
		k := fmt.Sprintf("%s %d", p.Phase, p.Context)
		if p.Status != want[k] {
			t.Errorf("%s: status %q (%s), want %q", k, p.Status, p.Note, want[k])
		}
		if p.Status == StatusOverCapacity && (p.Issued != 0 || !strings.Contains(p.Note, "> the server's context length 300")) {
			t.Errorf("%s: issued %d, note %q", k, p.Issued, p.Note)
		}
	}
}

// TestMatrixReadsModelsOnce: a matrix run reads /v1/models once, whether
// it names the model from it or only reads the context length there (a
// server whose /server_info has no context_length); it read it twice
// when it named the model. The one read's max_model_len still skips the
// over-long cell.
func TestMatrixReadsModelsOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string // Target.Model; "" asks /v1/models
	}{
		{"model asked", ""},
		{"model given", "fake/model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &fakesse.Server{KVTokens: 100000, MaxModelLen: 300}
			var models atomic.Int64
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1/models" {
					models.Add(1)
				}
				srv.ServeHTTP(w, r)
			}))
			t.Cleanup(ts.Close)
			w := Workload{Kind: "matrix", Matrix: MatrixSpec{Contexts: []int{64, 400}, Concurrency: []int{1}, DurationS: 0.1, MaxOutput: 64, Warmup: boolp(false)}}
			res, err := Run(context.Background(), Target{URL: ts.URL, Model: tc.model}, w, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if n := models.Load(); n != 1 {
				t.Errorf("/v1/models read %d times, want once", n)
			}
			over := 0
			for _, p := range res.Points {
				if p.Status == StatusOverCapacity {
					over++
				}
			}
			if over != 2 { // context 400: its prefill and its decode cell
				t.Errorf("%d cells over the context length 300, want 2: %+v", over, res.Points)
			}
		})
	}
}

package objective

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/objective/fakesse"
)

func TestParseCounter(t *testing.T) {
	const llama = `# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 4096
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 3.25
`
	tests := []struct {
		name, text, metric string
		want, half         float64
		found              bool
		wantErr            string
	}{
		{"llama-server", llama, "llamacpp:tokens_predicted_total", 4096, 0, true, ""},
		{"a longer name with the same prefix is not the metric", llama, "llamacpp:tokens_predicted", 0, 0, false, ""},
		{"label sets are summed", "sglang:generation_tokens_total{model_name=\"m\",tp_rank=\"0\"} 100.0\nsglang:generation_tokens_total{model_name=\"m\",tp_rank=\"1\"} 28.0 1700000000\n",
			"sglang:generation_tokens_total", 128, 0, true, ""},
		{"labels holding braces and spaces", "x_total{a=\"} y\"} 7\n", "x_total", 7, 0, true, ""},
		// C++ streams print 6 significant digits: 1234567 reads 1.23457e+06.
		{"6 significant digits", "llamacpp:tokens_predicted_total 1.23457e+06\n", "llamacpp:tokens_predicted_total", 1234570, 5, true, ""},
		{"missing", llama, "sglang:generation_tokens_total", 0, 0, false, ""},
		{"not a number", "x_total abc\n", "x_total", 0, 0, false, "not a number"},
		{"no value", "x_total{a=\"b\"}\n", "x_total", 0, 0, false, "no value"},
		{"NaN", "x_total NaN\n", "x_total", 0, 0, false, "not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, found, err := parseCounter(bufio.NewScanner(strings.NewReader(tt.text)), tt.metric)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || found != tt.found || s.value != tt.want || s.halfULP != tt.half {
				t.Errorf("got %+v found %v err %v, want %v ±%v found %v", s, found, err, tt.want, tt.half, tt.found)
			}
		})
	}
}

func FuzzParseCounter(f *testing.F) {
	f.Add("llamacpp:tokens_predicted_total 1.23457e+06\n")
	f.Add("x_total{a=\"b\"} 3 17\nx_total{a=\"c\"} 4\n")
	f.Fuzz(func(t *testing.T, text string) {
		s, found, err := parseCounter(bufio.NewScanner(strings.NewReader(text)), "x_total")
		if err == nil && !found && s.value != 0 {
			t.Errorf("value %v without a sample", s.value)
		}
	})
}

// counterServer serves fakesse's chat and models endpoints, and /metrics as
// metrics says: fakesse's own (with its token counter) when nil.
func counterServer(t *testing.T, srv *fakesse.Server, metrics http.HandlerFunc) Target {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/", srv)
	if metrics != nil {
		mux.HandleFunc("/metrics", metrics)
	}
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return Target{URL: ts.URL, TokenCounter: "sglang:generation_tokens_total"}
}

func TestTokenCheck(t *testing.T) {
	tests := []struct {
		name       string
		srv        *fakesse.Server
		metrics    http.HandlerFunc
		noCounter  bool
		wantState  string
		wantReason string
	}{
		// The counter also counts the warm-up and quality requests: only
		// its rise over each measured point is compared.
		{"counter agrees", &fakesse.Server{}, nil, false, CheckPassed, ""},
		{"counted by chunks without usage", &fakesse.Server{NoUsage: true}, nil, false, CheckPassed, ""},
		{"counter disagrees", &fakesse.Server{CounterSkew: 1}, nil, false, CheckFailed, "rose by"},
		{"no metrics endpoint", &fakesse.Server{}, func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with --metrics"}}`, http.StatusNotImplemented)
		}, false, CheckSkipped, "HTTP 501"},
		{"metric missing", &fakesse.Server{}, func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintln(w, "llamacpp:tokens_predicted_seconds_total 1.5")
		}, false, CheckSkipped, "has no sglang:generation_tokens_total"},
		{"no counter named", &fakesse.Server{}, nil, true, CheckSkipped, "no generated-token counter is named"},
	}
	defer func(d time.Duration) { counterSettle = d }(counterSettle)
	counterSettle = 50 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := counterServer(t, tt.srv, tt.metrics)
			if tt.noCounter {
				target.TokenCounter = ""
			}
			w := smallChat()
			w.Quality.Enabled = true
			var lines []string
			res, err := Run(context.Background(), target, w, Options{Progress: func(l string) { lines = append(lines, l) }})
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if len(res.Points) != 4 {
				t.Fatalf("%d points", len(res.Points))
			}
			for _, p := range res.Points {
				tc := p.Audit.ServerTokens
				if tc == nil {
					t.Fatalf("c=%d r=%d: no token check", p.Concurrency, p.Repeat)
				}
				if tc.State != tt.wantState || !strings.Contains(tc.Reason, tt.wantReason) {
					t.Errorf("c=%d r=%d: check %+v, want %s %q", p.Concurrency, p.Repeat, tc, tt.wantState, tt.wantReason)
				}
				if tc.Client != p.OutputTokens {
					t.Errorf("check client %d, point tokens %d", tc.Client, p.OutputTokens)
				}
				if tt.wantState == CheckPassed && tc.Server != int64(p.OutputTokens) {
					t.Errorf("passed with server %d, client %d", tc.Server, p.OutputTokens)
				}
				if tt.wantState == CheckFailed && tc.Server != int64(p.OutputTokens+p.Requested) {
					t.Errorf("server %d, want %d (one extra token per request)", tc.Server, p.OutputTokens+p.Requested)
				}
				failed := tt.wantState == CheckFailed
				if p.Audit.OK() == failed || (p.State == "failed") != failed {
					t.Errorf("c=%d r=%d: state %s audit ok %v with check %s", p.Concurrency, p.Repeat, p.State, p.Audit.OK(), tc.State)
				}
			}
			if res.Audit.OK == (tt.wantState == CheckFailed) {
				t.Errorf("overall audit %+v", res.Audit)
			}
			if tt.wantState == CheckFailed && !strings.Contains(strings.Join(res.Audit.Errors, "\n"), "server_tokens: the client counted") {
				t.Errorf("audit errors %q lack the reason", res.Audit.Errors)
			}
			if tt.wantState == CheckFailed && !strings.Contains(strings.Join(lines, "\n"), "TOKEN MISMATCH") {
				t.Errorf("progress lines %q do not report the mismatch", lines)
			}
		})
	}
}

// The check waits a moment for a counter that is published after the
// stream ended, and fails one that never catches up.
func TestTokenCheckLaggingCounter(t *testing.T) {
	srv := &fakesse.Server{}
	var scrapes int
	var lag int64
	target := counterServer(t, srv, func(w http.ResponseWriter, r *http.Request) {
		scrapes++
		// Every second scrape (the one after the point) first reports the
		// counter short by lag tokens.
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, r)
		text := rec.Body.String()
		if scrapes%2 == 0 && lag > 0 {
			var v int64
			for _, line := range strings.Split(text, "\n") {
				if strings.HasPrefix(line, "sglang:generation_tokens_total") {
					fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%d", &v)
					text = strings.Replace(text, line, fmt.Sprintf("sglang:generation_tokens_total %d", v-lag), 1)
				}
			}
		}
		fmt.Fprint(w, text)
	})
	c := newClient(target, 1)
	defer c.close()
	body, err := chatBody("fake/model", userMsg("hi"), 4, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lag = 4
	probe := c.startTokenProbe(context.Background())
	b, err := c.closedLoop(context.Background(), [][]byte{body}, 1, DefaultHangTimeout, false)
	if err != nil {
		t.Fatal(err)
	}
	// The second scrape lags; the third (a re-read) is exact.
	if tc := probe.finish(context.Background(), c, int(b.tokens)); tc.State != CheckPassed {
		t.Errorf("lagging counter: %+v", tc)
	}
	if scrapes != 3 {
		t.Errorf("%d scrapes, want 3 (before, lagging after, settled)", scrapes)
	}
}

func TestMetricsNamespaces(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP llamacpp:prompt_tokens_total x\n# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 3\nllamacpp:n_decode_total 5\nprocess_cpu_seconds_total 1\nsglang:x{a=\"b:c\"} 1\n")
	}))
	defer ts.Close()
	got, err := MetricsNamespaces(context.Background(), Target{URL: ts.URL})
	if err != nil || strings.Join(got, ",") != "llamacpp,sglang" {
		t.Errorf("got %v %v, want [llamacpp sglang]", got, err)
	}
}

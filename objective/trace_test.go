package objective

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sgtune/sgtune/objective/fakesse"
)

// TestRequestTrace checks that Options.Trace reports every streamed
// request of the chat workload with a consistent timeline that lines up
// with the server's own timestamps and with the recorded TTFT.
func TestRequestTrace(t *testing.T) {
	const delay = 15 * time.Millisecond
	for _, tc := range []struct {
		name      string
		warmup    bool
		conc, n   int
		repeats   int
		wantWarm  int // per warm-up wave
		wantMeas  int
		maxDialsM int // new connections allowed in measured points
	}{
		{"warm-up and two repeats", true, 4, 8, 2, 4, 16, 1},
		{"no warm-up", false, 3, 6, 1, 0, 6, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Tokens spaced out so a wave's requests decode together (the
			// warm-up has to show its full batch).
			srv := &fakesse.Server{FirstTokenDelay: delay, TokenInterval: 3 * time.Millisecond}
			w := Workload{Chat: ChatSpec{Concurrency: []int{tc.conc}, Requests: []int{tc.n}, MaxTokens: 3, Repeats: tc.repeats, Warmup: boolp(tc.warmup)}}
			var traces []RequestTrace
			res, err := Run(context.Background(), fake(t, srv), w, Options{Trace: func(tr RequestTrace) { traces = append(traces, tr) }})
			if err != nil {
				t.Fatal(err)
			}
			var warm, meas []RequestTrace
			for _, tr := range traces {
				switch tr.Phase {
				case "warmup":
					warm = append(warm, tr)
				case "":
					meas = append(meas, tr)
				default:
					t.Errorf("phase %q", tr.Phase)
				}
			}
			// A warm-up wave whose requests did not decode together (a
			// loaded machine) is followed by another, up to maxWarmupWaves:
			// every wave is traced.
			issued := 0
			for _, p := range res.Warmup {
				issued += p.Issued
			}
			if tc.warmup != (len(res.Warmup) > 0) || len(warm) != issued || len(warm)%max(tc.wantWarm, 1) != 0 || len(warm) > maxWarmupWaves*tc.wantWarm ||
				len(meas) != tc.wantMeas || len(meas) != len(res.Requests) {
				t.Fatalf("%d warm-up traces for %d warm-up requests in %d waves, %d measured traces for %d records; want %d per wave (at most %d waves) and %d",
					len(warm), issued, len(res.Warmup), len(meas), len(res.Requests), tc.wantWarm, maxWarmupWaves, tc.wantMeas)
			}
			dials := 0
			for i, tr := range meas {
				rec := res.Requests[i]
				if !tr.OK || tr.Concurrency != tc.conc || tr.Repeat != rec.Repeat {
					t.Fatalf("trace %d: ok %v conc %d repeat %d, record repeat %d", i, tr.OK, tr.Concurrency, tr.Repeat, rec.Repeat)
				}
				if !(tr.Start > 0 && tr.Start <= tr.GotConn && tr.GotConn <= tr.WroteRequest && tr.WroteRequest <= tr.FirstByte && tr.FirstByte <= tr.FirstToken) {
					t.Fatalf("trace %d out of order: %+v", i, tr)
				}
				if got := time.Duration(tr.FirstToken - tr.Start).Seconds(); abs(got-rec.TTFT) > 1e-6 {
					t.Errorf("trace %d: first token - start = %.6f s, record TTFT %.6f s", i, got, rec.TTFT)
				}
				hs, err := strconv.ParseInt(tr.Header.Get(fakesse.StartHeader), 10, 64)
				if err != nil {
					t.Fatalf("trace %d: server start header: %v", i, err)
				}
				// The server's handler starts after the client's TTFT origin
				// and at least the injected delay before the first token.
				if hs < tr.Start || tr.FirstToken-hs < delay.Nanoseconds() {
					t.Errorf("trace %d: handler start %d outside [start %d, first token %d - %v]", i, hs, tr.Start, tr.FirstToken, delay)
				}
				if !tr.Reused {
					dials++
				}
			}
			if dials > tc.maxDialsM {
				t.Errorf("%d new connections in measured points, want at most %d", dials, tc.maxDialsM)
			}
		})
	}
}

// TestNoTraceByDefault checks that requests carry no trace unless asked.
func TestNoTraceByDefault(t *testing.T) {
	c := newClient(fake(t, &fakesse.Server{}), 2)
	defer c.close()
	body, err := chatBody("fake/model", userMsg("hi"), 2, false, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, trace := range []bool{false, true} {
		c.trace = trace
		b, err := c.closedLoop(context.Background(), [][]byte{body, body}, 2, time.Minute, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range b.results {
			if (r.trace != nil) != trace {
				t.Errorf("trace=%v: result trace %v", trace, r.trace)
			}
		}
	}
}

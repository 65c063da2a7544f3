package fakesse

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTimings checks the per-request timeline the fake exposes for the
// load generator's TTFT breakdown.
func TestTimings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		n     int
	}{
		{"no delay", 0, 2},
		{"delay", 10 * time.Millisecond, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(&Server{FirstTokenDelay: tc.delay})
			defer ts.Close()
			var starts []int64
			for range tc.n {
				resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
					strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`))
				if err != nil {
					t.Fatal(err)
				}
				hs, err := strconv.ParseInt(resp.Header.Get(StartHeader), 10, 64)
				if err != nil {
					t.Fatalf("%s header: %v", StartHeader, err)
				}
				starts = append(starts, hs)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
				}
				resp.Body.Close()
			}
			resp, err := http.Get(ts.URL + "/fake/timings")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var tims []Timing
			if err := json.NewDecoder(resp.Body).Decode(&tims); err != nil {
				t.Fatal(err)
			}
			if len(tims) != tc.n {
				t.Fatalf("%d timings for %d requests", len(tims), tc.n)
			}
			for i, tm := range tims {
				if tm.Start != starts[i] {
					t.Errorf("timing %d: start %d, header said %d", i, tm.Start, starts[i])
				}
				if d := time.Duration(tm.FirstToken - tm.Start); d < tc.delay {
					t.Errorf("timing %d: first token %v after the handler started, want >= %v", i, d, tc.delay)
				}
			}
		})
	}
}

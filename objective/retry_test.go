package objective

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// connKey carries a per-connection request counter in the request context.
type connKey struct{}

// dropMode says what closeServer does with a request.
type dropMode int

const (
	dropReused      dropMode = iota // close a reused connection before answering (llama-server's effect)
	dropAll                         // close every connection before answering
	cutReused                       // on a reused connection, close after the headers and one chunk
	keepAliveHonest                 // a well-behaved server, for the control case
)

// closeServer is a streaming chat server that advertises keep-alive and then
// breaks it as mode says. The behaviour is deterministic: whether a request
// arrives on a connection that already served one decides its fate, not a
// race with the client's pool.
func closeServer(t *testing.T, mode dropMode, tokens int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var dials atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
			return
		case "/v1/chat/completions":
		default:
			http.NotFound(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		n := r.Context().Value(connKey{}).(*atomic.Int64).Add(1)
		hangUp := func() {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			conn.Close()
		}
		if mode == dropAll || (mode == dropReused && n > 1) {
			hangUp()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Keep-Alive", "timeout=5, max=100")
		fl := w.(http.Flusher)
		for i := range tokens {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"},\"finish_reason\":null}]}\n\n", i)
			fl.Flush()
			if mode == cutReused && n > 1 {
				hangUp()
				return
			}
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":%d}}\n\n", tokens)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	ts.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		dials.Add(1)
		return context.WithValue(ctx, connKey{}, new(atomic.Int64))
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts, &dials
}

// The fake really breaks a client that trusts Keep-Alive: a plain net/http
// client's second POST on the same connection fails with EOF, as sgtune's
// did against llama-server before the retry.
func TestCloseServerBreaksKeepAlive(t *testing.T) {
	ts, _ := closeServer(t, dropReused, 2)
	hc := &http.Client{Transport: NewTransport(1)}
	defer hc.CloseIdleConnections()
	post := func() error {
		resp, err := hc.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := post(); err != nil {
		t.Fatalf("first request: %v", err)
	}
	err := post()
	if err == nil {
		t.Fatal("second request on the reused connection succeeded; the fake does not close it")
	}
	if !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "reset") {
		t.Errorf("second request: %v, want EOF or connection reset", err)
	}
}

func TestRetryOnStaleConnection(t *testing.T) {
	tests := []struct {
		name                       string
		mode                       dropMode
		n                          int
		completed, failed, retried int
		wantErr                    string // in a failed record's error
	}{
		// Requests 2, 4, 6, 8 find the connection of the request before
		// them closed, and succeed on a new one; 1, 3, 5, 7 dial afresh.
		{"closed reused connection is retried", dropReused, 8, 8, 0, 4, ""},
		// A failure on a new connection is the server's: no retry.
		{"fresh connection failure is not retried", dropAll, 4, 0, 4, 0, "EOF"},
		// Bytes arrived before the failure: the request may have run, no retry.
		{"failure after response bytes is not retried", cutReused, 4, 2, 2, 0, ""},
		{"honest keep-alive server", keepAliveHonest, 8, 8, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, dials := closeServer(t, tt.mode, 3)
			c := newClient(Target{URL: ts.URL}, 1)
			defer c.close()
			bodies := make([][]byte, tt.n)
			for i := range bodies {
				bodies[i] = []byte(`{"model":"m","stream":true}`)
			}
			b, err := c.closedLoop(context.Background(), bodies, 1, 10*time.Second, false)
			if err != nil {
				t.Fatalf("closedLoop: %v", err)
			}
			p, recs := b.point("", 1, 1, 0)
			if p.Completed != tt.completed || p.Failed != tt.failed || p.Retried != tt.retried {
				t.Fatalf("completed %d failed %d retried %d, want %d %d %d; records %+v",
					p.Completed, p.Failed, p.Retried, tt.completed, tt.failed, tt.retried, recs)
			}
			if !p.Audit.OK() {
				t.Errorf("audit %+v", p.Audit)
			}
			for i, r := range recs {
				if r.Retried {
					if r.RetryCause == "" || !r.OK || r.OutputTokens != 3 {
						t.Errorf("request %d: retried record %+v", i, r)
					}
					if i%2 == 0 {
						t.Errorf("request %d was retried; it ran on a new connection", i)
					}
				}
				if !r.OK && tt.wantErr != "" && !strings.Contains(r.Error, tt.wantErr) {
					t.Errorf("request %d: error %q, want %q", i, r.Error, tt.wantErr)
				}
			}
			// Every attempt is a connection the server saw: an honest
			// server is served over one connection.
			if tt.mode == keepAliveHonest && dials.Load() != 1 {
				t.Errorf("%d connections to a keep-alive server, want 1", dials.Load())
			}
			if tt.mode == dropReused && dials.Load() != int64(tt.n) {
				t.Errorf("%d connections, want %d (4 first attempts + 4 retries)", dials.Load(), tt.n)
			}
		})
	}
}

// A retried request's times count from its first attempt.
func TestRetryKeepsFirstAttemptOrigin(t *testing.T) {
	ts, _ := closeServer(t, dropReused, 2)
	c := newClient(Target{URL: ts.URL}, 1)
	defer c.close()
	w := &watch{}
	body := []byte(`{"model":"m","stream":true}`)
	if r := c.stream(context.Background(), body, w, false); !r.rec.OK || r.rec.Retried {
		t.Fatalf("first request: %+v", r.rec)
	}
	before := time.Now()
	r := c.stream(context.Background(), body, w, false)
	if !r.rec.OK || !r.rec.Retried {
		t.Fatalf("second request: %+v", r.rec)
	}
	if r.start.After(before.Add(50*time.Millisecond)) || r.start.Before(before) {
		t.Errorf("origin %v is not the first attempt's (request began %v)", r.start, before)
	}
}

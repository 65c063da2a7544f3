package objective

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// HTTPDoer is what go-openai calls to send a request.
type HTTPDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// ExtrasDoer is an HTTPDoer that merges SGLang-specific fields into every
// JSON request body before sending it. go-openai has no ExtraBody for chat
// requests and drops `temperature: 0` (omitempty), so `ignore_eos`,
// `min_tokens` and an explicit zero temperature travel this way.
type ExtrasDoer struct {
	Doer   HTTPDoer
	Extras map[string]any
}

// Do patches the body of req with d.Extras and sends it.
func (d ExtrasDoer) Do(req *http.Request) (*http.Response, error) {
	if len(d.Extras) > 0 && req.Body != nil && req.Method == http.MethodPost {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body, err = patchBody(body, d.Extras)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return d.Doer.Do(req)
}

// patchBody merges extras into a JSON object, replacing existing keys.
// Nested objects given as map[string]any are merged one level deep, so
// `stream_options` can gain `continuous_usage_stats` without losing
// `include_usage`.
func patchBody(body []byte, extras map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("patch request body: %w", err)
	}
	for k, v := range extras {
		if sub, ok := v.(map[string]any); ok {
			var old map[string]json.RawMessage
			if raw, ok := m[k]; ok {
				_ = json.Unmarshal(raw, &old)
			}
			if old == nil {
				old = map[string]json.RawMessage{}
			}
			for sk, sv := range sub {
				b, err := json.Marshal(sv)
				if err != nil {
					return nil, err
				}
				old[sk] = b
			}
			b, err := json.Marshal(old)
			if err != nil {
				return nil, err
			}
			m[k] = b
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("patch request body: %s: %w", k, err)
		}
		m[k] = b
	}
	return json.Marshal(m)
}

// NewTransport returns an http.Transport for conns concurrent streams to
// one host: enough idle connections that closed-loop workers reuse theirs
// (the default of 2 per host made 70% more dials at C128), no compression.
func NewTransport(conns int) *http.Transport {
	if conns < 64 {
		conns = 64
	}
	return &http.Transport{
		Proxy:                 nil, // measurement traffic never goes through a proxy
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns * 2,
		MaxIdleConnsPerHost:   conns * 2,
		MaxConnsPerHost:       0,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: 0, // a queued request may wait long for headers; hangs are caught by the progress watchdog
	}
}

// NewOpenAIClient returns a go-openai client for t that sends extras with
// every request. Sweeps use sgtune's own reader; this client is what
// bench-loadgen compares against.
func NewOpenAIClient(t Target, conns int, extras map[string]any) *openai.Client {
	key := t.APIKey
	if key == "" {
		key = "EMPTY"
	}
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = strings.TrimRight(t.URL, "/") + "/v1"
	// No http.Client.Timeout: it would cap the whole stream. Contexts bound requests.
	cfg.HTTPClient = ExtrasDoer{Doer: &http.Client{Transport: NewTransport(conns)}, Extras: extras}
	return openai.NewClientWithConfig(cfg)
}

// client posts chat requests and hands back their SSE streams.
type client struct {
	base   string
	apiKey string
	hc     *http.Client
	// fresh sends the second attempt of a request whose reused connection
	// died before answering: keep-alives off, so it always dials a new
	// connection (the pool may hold more connections the server closed).
	fresh *http.Client
	trace bool // record a RequestTrace per streamed request
	// tokenMetric is the server's generated-token counter (Target.TokenCounter),
	// noCounter why there is none (Target.NoCounter).
	tokenMetric, noCounter string
	// lookupTimeout bounds each lookup (Target.LookupTimeout).
	lookupTimeout time.Duration
}

func newClient(t Target, conns int) *client {
	ft := NewTransport(1)
	ft.DisableKeepAlives = true
	return &client{
		base:   strings.TrimRight(t.URL, "/"),
		apiKey: t.APIKey,
		hc:     &http.Client{Transport: NewTransport(conns)},
		fresh:  &http.Client{Transport: ft},

		tokenMetric:   t.TokenCounter,
		noCounter:     t.NoCounter,
		lookupTimeout: cmp.Or(t.LookupTimeout, DefaultLookupTimeout),
	}
}

func (c *client) close() {
	c.hc.CloseIdleConnections()
	c.fresh.CloseIdleConnections()
}

// HTTPError is a non-2xx answer from the server.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d: %s", e.Status, e.Body)
}

// UnreachableError reports that no connection to the server could be made
// (refused, no route, unknown host): nothing was measured.
type UnreachableError struct {
	URL string // the server's base URL
	Err error  // the dial error
}

// Error says which URL could not be reached and why, e.g. "cannot reach
// http://127.0.0.1:1: connect: connection refused".
func (e *UnreachableError) Error() string {
	why := e.Err.Error()
	var op *net.OpError
	if errors.As(e.Err, &op) && op.Err != nil {
		why = op.Err.Error() // without "dial tcp ADDR", which the URL says
	}
	return "cannot reach " + e.URL + ": " + why
}

// Unwrap returns the dial error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// unreachable returns an *UnreachableError for base when err is a failure
// to connect, else nil.
func unreachable(base string, err error) *UnreachableError {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &UnreachableError{URL: base, Err: op}
	}
	return nil
}

// DefaultLookupTimeout bounds each lookup of the server before a run when
// Target.LookupTimeout is 0: they are small answers that a working server
// gives at once.
const DefaultLookupTimeout = 10 * time.Second

// NoAnswerError reports a server that accepted the connection but sent no
// answer to a lookup within its bound: nothing was measured. It wraps
// ErrHang, as a stalled server is a hang.
type NoAnswerError struct {
	URL   string        // the URL asked, e.g. http://127.0.0.1:30000/v1/models
	After time.Duration // the bound that ran out
}

// Error says which URL did not answer and for how long it was waited for.
func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("%s did not answer within %s (the server accepted the connection but sent no response)", e.URL, e.After)
}

// Unwrap returns ErrHang.
func (e *NoAnswerError) Unwrap() error { return ErrHang }

// lookup is getJSON bounded by the client's lookup timeout: when the bound
// runs out (and not ctx), the error is a *NoAnswerError.
func (c *client) lookup(ctx context.Context, path string, v any) error {
	lctx, cancel := context.WithTimeoutCause(ctx, c.lookupTimeout, errNoAnswer)
	defer cancel()
	err := c.getJSON(lctx, path, v)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(lctx), errNoAnswer) {
		return &NoAnswerError{URL: c.base + path, After: c.lookupTimeout}
	}
	return err
}

// errNoAnswer is the cause of a lookup's context when its bound ran out.
var errNoAnswer = errors.New("lookup timeout")

// post sends body to path and returns the response when it is 2xx.
func (c *client) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	req, err := c.newPost(ctx, path, body)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

// newPost builds a JSON POST of body to path. It is separate from send so
// that the load generator can take its TTFT origin after building the
// request (URL parsing, header maps: ~5 µs of its own bookkeeping) and
// just before the transport takes a connection and writes.
func (c *client) newPost(ctx context.Context, path string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return req, nil
}

// send sends req and returns the response when it is 2xx.
func (c *client) send(req *http.Request) (*http.Response, error) {
	return c.sendWith(c.hc, req)
}

// sendFresh is send on a new connection that is closed after the response.
func (c *client) sendFresh(req *http.Request) (*http.Response, error) {
	return c.sendWith(c.fresh, req)
}

func (c *client) sendWith(hc *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		resp.Body.Close()
		return nil, &HTTPError{Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// getJSON fetches path and decodes it into v.
func (c *client) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &HTTPError{Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if s, ok := v.(*[]byte); ok {
		*s = b
		return nil
	}
	return json.Unmarshal(b, v)
}

// servedModel is one model /v1/models lists.
type servedModel struct {
	ID          string `json:"id"`
	MaxModelLen int    `json:"max_model_len"`
}

// resolveModel returns model, or the first model /v1/models lists. listed
// is that list, for maxModelLen, so that a run reads /v1/models once; it is
// nil when model was given and nothing was read.
func (c *client) resolveModel(ctx context.Context, model string) (name string, listed []servedModel, err error) {
	if model != "" {
		return model, nil, nil
	}
	var list struct {
		Data []servedModel `json:"data"`
	}
	if err := c.lookup(ctx, "/v1/models", &list); err != nil {
		if na := (*NoAnswerError)(nil); errors.As(err, &na) {
			return "", nil, na
		}
		return "", nil, fmt.Errorf("ask /v1/models for the served model: %w", err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", nil, errors.New("/v1/models lists no model; pass the model name")
	}
	return list.Data[0].ID, list.Data, nil
}

// maxModelLen returns the max_model_len /v1/models gives model (0 when
// it does not say or cannot be read: the caller then assumes no limit).
// listed is what resolveModel read; /v1/models is asked only when it is
// nil.
func (c *client) maxModelLen(ctx context.Context, model string, listed []servedModel) int {
	if listed == nil {
		var list struct {
			Data []servedModel `json:"data"`
		}
		if err := c.lookup(ctx, "/v1/models", &list); err != nil {
			return 0
		}
		listed = list.Data
	}
	for _, m := range listed {
		if m.ID == model {
			return m.MaxModelLen
		}
	}
	return 0
}

// ServerInfo is what sgtune reads from SGLang's /server_info.
type ServerInfo struct {
	MaxTotalNumTokens   int `json:"max_total_num_tokens,omitempty"`
	MaxRunningRequests  int `json:"max_running_requests,omitempty"`
	EffectiveMaxRunning int `json:"effective_max_running_requests,omitempty"`
	// ContextLength is the most tokens one request may hold, prompt and
	// output, as /server_info's context_length says it (set with
	// --context-length); 0 when it does not (a matrix run then reads
	// /v1/models' max_model_len).
	ContextLength int            `json:"context_length,omitempty"`
	Version       string         `json:"version,omitempty"`
	Raw           map[string]any `json:"-"`
}

// serverInfo fetches /server_info (or the older /get_server_info). It
// returns nil and the last error when neither answers: not every OpenAI
// server has them. A *NoAnswerError from the first is returned at once.
func (c *client) serverInfo(ctx context.Context) (*ServerInfo, error) {
	var raw map[string]any
	if err := c.lookup(ctx, "/server_info", &raw); err != nil {
		if na := (*NoAnswerError)(nil); errors.As(err, &na) {
			return nil, na
		}
		if err := c.lookup(ctx, "/get_server_info", &raw); err != nil {
			return nil, err
		}
	}
	si := &ServerInfo{Raw: raw}
	si.MaxTotalNumTokens = intOf(raw["max_total_num_tokens"])
	si.ContextLength = intOf(raw["context_length"])
	si.MaxRunningRequests = intOf(raw["max_running_requests"])
	if v, ok := raw["version"].(string); ok {
		si.Version = v
	}
	if states, ok := raw["internal_states"].([]any); ok && len(states) > 0 {
		if st, ok := states[0].(map[string]any); ok {
			if si.MaxTotalNumTokens == 0 {
				si.MaxTotalNumTokens = intOf(st["max_total_num_tokens"])
			}
			si.EffectiveMaxRunning = intOf(st["effective_max_running_requests_per_dp"])
		}
	}
	return si, nil
}

func intOf(v any) int {
	if f, ok := v.(float64); ok {
		return int(f)
	}
	return 0
}

package objective

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Token check states.
const (
	CheckPassed  = "passed"
	CheckFailed  = "failed"
	CheckSkipped = "skipped"
)

// TokenCheck compares the output tokens the load generator counted over a
// point with the rise of the server's own generated-token counter (a
// Prometheus counter on /metrics) over the same interval. A check that could
// not be made (no counter named, /metrics unavailable, the metric missing)
// is skipped, never passed.
type TokenCheck struct {
	Metric string `json:"metric,omitempty"`
	State  string `json:"state"` // passed | failed | skipped
	// Client is the point's OutputTokens; Server is the counter's rise.
	Client int   `json:"client"`
	Server int64 `json:"server"`
	// Tolerance is how far the two may differ because the server printed
	// the counter rounded (llama-server writes values of 1e6 and more with
	// 6 significant digits); 0 when both scrapes were exact.
	Tolerance int64  `json:"tolerance,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// counterScrape is one reading of a counter: its value summed over its label
// sets, and how far that may be from the true value because of rounding.
type counterScrape struct {
	value, halfULP float64
}

// tokenProbe brackets a run of requests with scrapes of the server's
// generated-token counter. The zero value (no metric) yields a skipped check.
type tokenProbe struct {
	metric string
	before counterScrape
	err    error // why the check cannot be made
}

// startTokenProbe scrapes the counter before the measured requests.
func (c *client) startTokenProbe(ctx context.Context) *tokenProbe {
	tp := &tokenProbe{metric: c.tokenMetric}
	if tp.metric == "" {
		tp.err = errors.New(cmp.Or(c.noCounter, "no generated-token counter is named for this server"))
		return tp
	}
	tp.before, tp.err = c.scrapeCounter(ctx, tp.metric)
	return tp
}

// counterSettle bounds how long finish waits for the server to publish the
// last requests' tokens: a counter updated just after the final SSE chunk
// was sent may lag the client by a moment.
// (A variable so that tests of a mismatch need not wait.)
var counterSettle = time.Second

// finish scrapes the counter again and compares its rise with client.
func (tp *tokenProbe) finish(ctx context.Context, c looper, client int) *TokenCheck {
	tc := &TokenCheck{Metric: tp.metric, Client: client, State: CheckSkipped}
	if interrupted(ctx) {
		tc.Reason = "interrupted"
		return tc
	}
	if tp.err != nil {
		tc.Reason = tp.err.Error()
		return tc
	}
	deadline := time.Now().Add(counterSettle)
	for {
		after, err := c.scrapeCounter(ctx, tp.metric)
		if err != nil {
			tc.Reason = "after the point: " + err.Error()
			return tc
		}
		delta := after.value - tp.before.value
		tc.Server = int64(math.Round(delta))
		tc.Tolerance = int64(math.Floor(tp.before.halfULP + after.halfULP))
		switch {
		case delta < 0:
			tc.State = CheckFailed
			tc.Reason = fmt.Sprintf("%s went down from %.0f to %.0f during the point (server restarted?)", tp.metric, tp.before.value, after.value)
		case math.Abs(delta-float64(client)) <= float64(tc.Tolerance)+1e-9:
			tc.State = CheckPassed
			tc.Reason = ""
			return tc
		default:
			tc.State = CheckFailed
			tc.Reason = fmt.Sprintf("the client counted %d output tokens but %s rose by %d", client, tp.metric, tc.Server)
			if tc.Tolerance > 0 {
				tc.Reason += fmt.Sprintf(" (±%d for the counter's rounding)", tc.Tolerance)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return tc
		}
		select {
		case <-ctx.Done():
			return tc
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// scrapeCounter reads metric from /metrics, summed over its label sets.
func (c *client) scrapeCounter(ctx context.Context, metric string) (counterScrape, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return counterScrape{}, err
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return counterScrape{}, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counterScrape{}, fmt.Errorf("GET /metrics: HTTP %d (is the server's metrics endpoint on? llama-server: --metrics, SGLang: --enable-metrics)", resp.StatusCode)
	}
	s, found, err := parseCounter(bufio.NewScanner(resp.Body), metric)
	if err != nil {
		return counterScrape{}, fmt.Errorf("GET /metrics: %w", err)
	}
	if !found {
		return counterScrape{}, fmt.Errorf("/metrics has no %s", metric)
	}
	return s, nil
}

// parseCounter sums the samples of metric in Prometheus text format. A
// sample is `name value [timestamp]` or `name{labels} value [timestamp]`.
func parseCounter(sc *bufio.Scanner, metric string) (counterScrape, bool, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var s counterScrape
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric) {
			continue
		}
		rest := line[len(metric):]
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return s, found, fmt.Errorf("%s: unterminated labels in %q", metric, line)
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this name as a prefix
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return s, found, fmt.Errorf("%s: no value in %q", metric, line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return s, found, fmt.Errorf("%s: value %q is not a number", metric, f[0])
		}
		s.value += v
		s.halfULP += halfULP(f[0])
		found = true
	}
	return s, found, sc.Err()
}

// halfULP is the rounding error a counter's text may carry. A value written
// in exponent form is taken as rounded to 6 significant digits: C++ streams'
// default precision, which llama-server's /metrics uses (`1.23457e+06`).
// Integers and decimal fractions are exact for token counts.
func halfULP(text string) float64 {
	i := strings.IndexAny(text, "eE")
	if i < 0 {
		return 0
	}
	exp, err := strconv.Atoi(text[i+1:])
	if err != nil {
		return 0
	}
	return math.Pow(10, float64(exp-5)) / 2
}

// MetricsNamespaces returns the distinct Prometheus namespaces (the part of
// a metric name before its first ':', e.g. "llamacpp" or "sglang") of the
// samples the server's /metrics lists, so that a caller can tell which
// engine it measures. An error means /metrics did not answer 200; a
// *NoAnswerError that it did not answer within t's lookup timeout.
func MetricsNamespaces(ctx context.Context, t Target) ([]string, error) {
	c := newClient(t, 1)
	defer c.close()
	var body []byte
	if err := c.lookup(ctx, "/metrics", &body); err != nil {
		if na := (*NoAnswerError)(nil); errors.As(err, &na) {
			return nil, na
		}
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		ns, _, ok := strings.Cut(name, ":")
		if ok && ns != "" && !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out, nil
}

// checkTokens records tc in p's audit; a failed check fails the point.
func (p *Point) checkTokens(tc *TokenCheck) {
	p.Audit.ServerTokens = tc
	if tc != nil && tc.State == CheckFailed {
		p.State = "failed"
	}
}

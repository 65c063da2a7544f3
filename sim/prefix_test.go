package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// words returns n words of filler whose text depends on tag.
func words(tag string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s%d ", tag, i%97)
	}
	return b.String()
}

// chatBody is a streaming chat request with a system and a user message.
func chatBody(system, user string, maxTok int) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "m", "stream": true, "max_tokens": maxTok, "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}},
	})
	return b
}

// sharedSystem is the ~2,000-token system prompt of the shared-prefix
// workloads.
var sharedSystem = words("rule", 2000)

// prefixWorkload returns n bodies: every one after the shared system
// prompt (shared) or each led by its own tag (unique), with a short unique
// user message.
func prefixWorkload(n int, shared bool) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		sys := sharedSystem
		if !shared {
			sys = fmt.Sprintf("tag-%d ", i) + sharedSystem
		}
		out[i] = chatBody(sys, fmt.Sprintf("question %d: %s", i, words(fmt.Sprintf("q%d-", i), 20)), 16)
	}
	return out
}

// readBody reads a request body as the server does.
func readBody(t *testing.T, body []byte) promptInfo {
	t.Helper()
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	return readPrompt(&req)
}

// TestPromptChain: the chain has one hash per full block of the prompt's
// tokens (the count the server reports, template and tools included); two
// prompts share exactly the blocks of their common leading tokens.
func TestPromptChain(t *testing.T) {
	shared := readBody(t, chatBody(sharedSystem, "first", 8))
	other := readBody(t, chatBody(sharedSystem, "second question", 8))
	tagged := readBody(t, chatBody("tag-1 "+sharedSystem, "first", 8))
	toolReq := func(desc string) promptInfo {
		b, _ := json.Marshal(map[string]any{"messages": []map[string]any{{"role": "user", "content": sharedSystem}},
			"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "description": desc,
				"parameters": json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}}})
		return readBody(t, b)
	}
	toolA, toolB := toolReq(strings.Repeat("look up the weather ", 10)), toolReq(strings.Repeat("look up the weather ", 10)+"!")
	// The system message's tokens: 3 template tokens, "system:" and its
	// 2,000 words.
	sysBlocks := (3 + 1 + 2000) / cacheBlockTokens
	for _, tc := range []struct {
		name       string
		a, b       promptInfo
		minS, maxS int // shared leading blocks
	}{
		{"same system, other user", shared, other, sysBlocks, sysBlocks + 1},
		{"a leading tag", shared, tagged, 0, 0},
		{"itself", shared, shared, len(shared.chain), len(shared.chain)},
		{"other tools", toolA, toolB, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pi := range []promptInfo{tc.a, tc.b} {
				if len(pi.chain) != pi.tokens/cacheBlockTokens {
					t.Errorf("%d blocks for %d tokens", len(pi.chain), pi.tokens)
				}
			}
			n := 0
			for n < min(len(tc.a.chain), len(tc.b.chain)) && tc.a.chain[n] == tc.b.chain[n] {
				n++
			}
			for i := n; i < min(len(tc.a.chain), len(tc.b.chain)); i++ {
				if tc.a.chain[i] == tc.b.chain[i] {
					t.Errorf("block %d equal after the prompts parted at %d", i, n)
				}
			}
			if n < tc.minS || n > tc.maxS {
				t.Errorf("%d shared blocks, want %d..%d", n, tc.minS, tc.maxS)
			}
		})
	}
	// The chain reads the same words CountTokens counts, Unicode spaces
	// and invalid bytes included.
	for _, s := range []string{"", "a", " a  b\tc\n", "naïve café\u00a0x\u2003y", "bad\xffbyte \xc3", strings.Repeat("w ", 100)} {
		cb := newChainBuilder()
		if got, want := cb.words(s), CountTokens(s); got != want || cb.total != want {
			t.Errorf("words(%q) = %d (%d tokens hashed), CountTokens %d", s, got, cb.total, want)
		}
	}
}

// prefixRun is one closed loop's outcome under the virtual clock.
type prefixRun struct {
	cached   int64   // prompt tokens served from the cache
	ttft     float64 // mean
	duration float64
}

// closedLoop runs bodies at concurrency conc through a virtual server
// launched with argv, every one of them to its end.
func closedLoop(t *testing.T, p *Profile, argv []string, bodies [][]byte, conc int) (LoopResult, *Virtual) {
	t.Helper()
	v, err := NewVirtual(argv, VirtualOptions{Profile: p})
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.ClosedLoop(bodies, conc, 600, false)
	if err != nil || res.Completed != len(bodies) {
		t.Fatalf("%v: completed %d of %d: %v", argv, res.Completed, len(bodies), err)
	}
	return res, v
}

// runPrefix runs bodies through a virtual server launched with argv.
func runPrefix(t *testing.T, p *Profile, argv []string, bodies [][]byte, conc int) prefixRun {
	t.Helper()
	res, v := closedLoop(t, p, argv, bodies, conc)
	sum := 0.0
	for _, ex := range res.Exchanges {
		sum += ex.TTFT
	}
	return prefixRun{cached: v.eng.Snapshot().CachedTok, ttft: sum / float64(len(res.Exchanges)), duration: res.DurationS}
}

// TestPrefixCacheSharedVsUnique: requests that share a 2,000-token system
// prompt are served from the radix cache after the first wave (about
// 2,000 cached tokens each), and so reach their first token clearly sooner
// than with --disable-radix-cache; requests that each start with their own
// tag hit nothing and gain nothing. On the dense example profile the radix
// cache changes nothing else; on the hybrid GLM profile it also costs
// state-pool admission, so there unique prompts may be slower, not faster.
func TestPrefixCacheSharedVsUnique(t *testing.T) {
	dense, err := ParseProfile([]byte(docExampleProfile(t)))
	if err != nil {
		t.Fatal(err)
	}
	const n, conc = 48, 4
	for _, tc := range []struct {
		name string
		p    *Profile
		argv []string
		// ratio is the most a shared prefix's mean TTFT may be, as a
		// fraction of the one without the radix cache.
		ratio float64
	}{
		// 2,000 tokens at 60,000 tok/s are about half of a warm TTFT.
		{"dense", dense, []string{"--model-path", "m", "--tp-size", "2"}, 0.8},
		// GLM on 4x H200 prefills 2,000 tokens in about 13 ms of a
		// TTFT of front end, prefill base and first-shape penalties:
		// the direction only.
		{"hybrid", mustProfile(t, "glm-5.3-flash-h200x4"), []string{"--model-path", "m", "--tp-size", "4", "--ep-size", "4", "--mem-fraction-static", "0.85", "--max-running-requests", "64"}, 0.99},
	} {
		for _, shared := range []bool{true, false} {
			name := tc.name + "/unique"
			if shared {
				name = tc.name + "/shared"
			}
			t.Run(name, func(t *testing.T) {
				bodies := prefixWorkload(n, shared)
				on := runPrefix(t, tc.p, tc.argv, bodies, conc)
				off := runPrefix(t, tc.p, append(tc.argv, "--disable-radix-cache"), bodies, conc)
				t.Logf("cached tokens %d (radix on), %d (off); mean TTFT %.1f ms on, %.1f ms off; duration %.3f s on, %.3f s off",
					on.cached, off.cached, on.ttft*1000, off.ttft*1000, on.duration, off.duration)
				if off.cached != 0 {
					t.Errorf("%d cached tokens with the radix cache off", off.cached)
				}
				if !shared {
					if on.cached != 0 {
						t.Errorf("unique prompts: %d cached tokens, want 0", on.cached)
					}
					if on.ttft < off.ttft*0.97 || on.duration < off.duration*0.97 {
						t.Errorf("unique prompts gain from the radix cache: TTFT %.4f vs %.4f s, duration %.3f vs %.3f s", on.ttft, off.ttft, on.duration, off.duration)
					}
					return
				}
				// The first wave of conc requests is prefilled together,
				// before any of them is cached; every later one hits the
				// system prompt, rounded down to whole blocks.
				sysTok := 3 + 1 + 2000
				if lo, hi := int64(n-conc)*int64(sysTok-cacheBlockTokens), int64(n)*int64(sysTok+40); on.cached < lo || on.cached > hi {
					t.Errorf("shared prefix: %d cached tokens, want %d..%d (about %d per request after the first wave)", on.cached, lo, hi, sysTok)
				}
				if on.ttft > off.ttft*tc.ratio {
					t.Errorf("shared prefix: mean TTFT %.4f s with the radix cache, %.4f s without; want at most %.2f of it", on.ttft, off.ttft, tc.ratio)
				}
				if on.duration > off.duration {
					t.Errorf("shared prefix: duration %.3f s with the radix cache, %.3f s without", on.duration, off.duration)
				}
			})
		}
	}
}

// TestPrefixCacheEviction: a pool too small for every prefix evicts the
// least recently used blocks, keeps the cache within the KV tokens, marks
// the run as bound by the pool, and never leaves a block whose prefix is
// gone. A prefix used again stays; one left alone is evicted and missed.
func TestPrefixCacheEviction(t *testing.T) {
	dense, err := ParseProfile([]byte(docExampleProfile(t)))
	if err != nil {
		t.Fatal(err)
	}
	// Room for two 2,000-token prefixes, not three.
	v, err := NewVirtual([]string{"--model-path", "m", "--tp-size", "2", "--max-total-tokens", "5000"}, VirtualOptions{Profile: dense})
	if err != nil {
		t.Fatal(err)
	}
	if v.pl.KVTokens != 5000 {
		t.Fatalf("KV tokens %d, want 5000", v.pl.KVTokens)
	}
	prefix := func(k int) string { return words(fmt.Sprintf("p%d-", k), 2000) }
	chains := map[int][]uint64{}
	for _, step := range []struct {
		prefix int
		hit    bool // most of the prefix is served from the cache
	}{
		{0, false}, {1, false}, {0, true}, {2, false}, // 2 evicts 1's leaves: 0 was used since
		// 1 and 2 lost their deepest blocks: each misses most of its
		// prefix and, reinserted, evicts the least recently used.
		{0, true}, {1, false}, {2, false},
		{1, true}, // 2 evicted 0's leaves, not 1's
	} {
		body := chatBody(prefix(step.prefix), "one more", 4)
		chains[step.prefix] = readBody(t, body).chain
		before := v.eng.Snapshot().CachedTok
		if res, err := v.ClosedLoop([][]byte{body}, 1, 600, false); err != nil || res.Completed != 1 {
			t.Fatalf("prefix %d: %+v %v", step.prefix, res, err)
		}
		cached := v.eng.Snapshot().CachedTok - before
		if hit := cached > 1900; hit != step.hit {
			t.Errorf("prefix %d: %d cached tokens, want a hit %v", step.prefix, cached, step.hit)
		}
		e := v.eng
		if got := e.cache.tokens(); got > v.pl.KVTokens {
			t.Errorf("cache holds %d tokens, pool %d", got, v.pl.KVTokens)
		}
		// No orphans: each prompt's cached blocks are a prefix of its chain.
		for k, ch := range chains {
			in := 0
			for _, h := range ch {
				if _, ok := e.cache.blocks[h]; ok {
					in++
				}
			}
			if m := e.cache.match(ch); m != in {
				t.Errorf("prefix %d: %d blocks cached but only %d reachable from the start", k, in, m)
			}
		}
	}
	if sp := v.Span(); !sp.KVBound || sp.KVPeak <= v.pl.KVTokens {
		t.Errorf("span %+v: want KV-bound with a peak above %d", sp, v.pl.KVTokens)
	}
}

// TestCacheReportHTTP: through the HTTP handler, the prefix cache shows in
// the Prefill batch line's #cached-token, in /metrics'
// sglang:cached_tokens_total{cache_source="device"} and, with
// --enable-cache-report only and when there were cached tokens, in the
// usage chunk's prompt_tokens_details.cached_tokens (null otherwise).
func TestCacheReportHTTP(t *testing.T) {
	dense, err := ParseProfile([]byte(docExampleProfile(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		report bool
		shared bool
	}{
		{"shared, report", true, true},
		{"shared, no report", false, true},
		{"unique, report", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := []string{"--model-path", "m", "--tp-size", "2", "--enable-metrics"}
			if tc.report {
				argv = append(argv, "--enable-cache-report")
			}
			a, err := ParseArgs(argv)
			if err != nil {
				t.Fatal(err)
			}
			pl := Resolve(a, dense)
			if pl.Err != nil {
				t.Fatal(pl.Err)
			}
			log := &syncBuffer{}
			eng := NewEngine(dense, pl, nil, 50, log, nil)
			srv := newServer(dense, pl, a, eng, 50, io.Discard, nil)
			srv.ready.Store(true)
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); eng.Run(ctx) }()
			defer func() { cancel(); wg.Wait() }()
			ts := httptest.NewServer(srv.Handler())
			defer ts.Close()

			total := 0
			for i, body := range prefixWorkload(3, tc.shared) {
				details := streamUsage(t, ts.URL, body)
				cached := 0
				if details != "null" {
					var d struct {
						Cached int `json:"cached_tokens"`
					}
					if err := json.Unmarshal([]byte(details), &d); err != nil || d.Cached <= 0 {
						t.Fatalf("request %d: prompt_tokens_details %s", i, details)
					}
					cached = d.Cached
				}
				// What the engine cached, whether reported or not.
				want := 0
				if tc.shared && i > 0 {
					want = (3 + 1 + 2000) / cacheBlockTokens * cacheBlockTokens
				}
				if !tc.report && details != "null" {
					t.Errorf("request %d: prompt_tokens_details %s without --enable-cache-report, want null", i, details)
				}
				if tc.report && cached != want {
					t.Errorf("request %d: cached_tokens %d (details %s), want %d", i, cached, details, want)
				}
				total += want
			}
			re := regexp.MustCompile(`Prefill batch, #new-seq: 1, #new-token: \d+, #cached-token: (\d+),`)
			var logged []int
			for _, m := range re.FindAllStringSubmatch(log.String(), -1) {
				n, _ := strconv.Atoi(m[1])
				logged = append(logged, n)
			}
			if len(logged) != 3 || logged[0]+logged[1]+logged[2] != total {
				t.Errorf("Prefill lines' #cached-token %v, want 3 summing to %d", logged, total)
			}
			resp, err := http.Get(ts.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			m, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			line := fmt.Sprintf(`sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name=%q} %d`, pl.ServedModelName, total)
			if !strings.Contains(string(m), line+"\n") {
				t.Errorf("/metrics lacks %q:\n%s", line, m)
			}
		})
	}
}

// streamUsage sends a streaming request and returns the usage chunk's
// prompt_tokens_details as JSON text.
func streamUsage(t *testing.T, url string, body []byte) string {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	details := ""
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Usage *struct {
				Details json.RawMessage `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if c.Usage != nil {
			details = string(c.Usage.Details)
		}
	}
	if details == "" {
		t.Fatal("no usage chunk")
	}
	return details
}

// BenchmarkReadPrompt: reading a 2,000-token shared-prefix request
// (counting and hashing its chain) is a small part of a request's cost.
func BenchmarkReadPrompt(b *testing.B) {
	var req chatRequest
	if err := json.Unmarshal(chatBody(sharedSystem, "what now?", 16), &req); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		readPrompt(&req)
	}
}

package sim

import (
	"encoding/json"
	"io"
	"math"
	"testing"
	"time"
	"unicode"
)

// countTokensRunes is CountTokens without the ASCII fast path.
func countTokensRunes(s string) int {
	n, in := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			in = false
			continue
		}
		if !in {
			n++
			in = true
		}
	}
	return n
}

func TestCountTokens(t *testing.T) {
	for _, s := range []string{"", " ", "one", "one two", "  a\tb\nc\r\n", "x\u00a0y", "héllo wörld", "a \u2003 b", "tail é", "\v\fz"} {
		if got, want := CountTokens(s), countTokensRunes(s); got != want {
			t.Errorf("CountTokens(%q) = %d, want %d", s, got, want)
		}
	}
}

func FuzzCountTokens(f *testing.F) {
	for _, s := range []string{"a b", "é a", "\u00a0x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := CountTokens(s), countTokensRunes(s); got != want {
			t.Errorf("CountTokens(%q) = %d, want %d", s, got, want)
		}
	})
}

// TestMessageText: the fast path for plain strings agrees with decoding.
func TestMessageText(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`"plain text"`, "plain text"},
		{`"with \"quotes\" and \\ and \n"`, "with \"quotes\" and \\ and \n"},
		{`"caf\u00e9"`, "café"},
		{`"café"`, "café"},
		{`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`, "ab"},
		{`""`, ""},
		{`42`, ""},
	} {
		if got := messageText(json.RawMessage(tc.raw)); got != tc.want {
			t.Errorf("messageText(%s) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestStepKVParallel: with kv_parallel_batch the KV term follows the
// per-request context up to that many requests, then the total.
func TestStepKVParallel(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	_, pl := resolveArgv(t, p, seedConfigs[5].argv) // quad-ep4
	for _, tc := range []struct {
		par, b, kv int
		wantKV     float64 // ms
	}{
		{0, 4, 2_000_000, 2.0},
		{1, 4, 2_000_000, 2.0},
		{8, 1, 1_000_000, 1.0},
		{8, 4, 2_000_000, 0.5},
		{8, 16, 2_000_000, 0.25},
	} {
		q := *p
		q.Perf.KVMSPerMToken = 1
		q.Perf.KVParallelBatch = tc.par
		e := NewEngine(&q, pl, nil, 1, io.Discard, nil)
		got := e.StepMS(tc.b, tc.kv, false) - e.StepMS(tc.b, 0, false)
		if math.Abs(got-tc.wantKV) > 1e-9 {
			t.Errorf("par %d batch %d kv %d: KV term %.4f ms, want %.4f", tc.par, tc.b, tc.kv, got, tc.wantKV)
		}
	}
}

// TestAdmitPressure: the admission cost grows with the pool's pressure
// (running and cached states), is zero with the radix cache off and hides
// behind a running batch's step with the overlap scheduler.
func TestAdmitPressure(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	q := *p
	q.StatePool.AdmitMS = 10
	q.StatePool.AdmitBatchMS = 0
	q.StatePool.AdmitPressureExp = 1
	batch := func(n int) []*Seq {
		out := make([]*Seq, n)
		for i := range out {
			out[i] = &Seq{Prompt: 100, Limit: 10}
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		cfg             int // seedConfigs index
		running, cached int
		admit           int
		batchMS, exp    float64
		want            float64 // s
	}{
		{"radix off", 5, 0, 0, 16, 0, 1, 0},
		{"state128 empty pool", 6, 0, 0, 16, 0, 1, 0.16 * 80 / 128},
		{"state128 cached states", 6, 0, 48, 16, 0, 1, 0.16},
		{"state384 empty pool", 8, 0, 0, 16, 0, 1, 0.16 * 80 / 384},
		{"per batch", 6, 0, 48, 16, 40, 1, 0.2},
		{"exponent", 6, 0, 0, 16, 0, 2, 0.16 * 0.625 * 0.625},
		{"hidden behind a step", 8, 10, 0, 1, 0, 1, 0},
	} {
		q := q
		q.StatePool.AdmitBatchMS = tc.batchMS
		q.StatePool.AdmitPressureExp = tc.exp
		_, pl := resolveArgv(t, &q, seedConfigs[tc.cfg].argv)
		e := NewEngine(&q, pl, nil, 1, io.Discard, nil)
		e.running = batch(tc.running)
		e.cachedStates = tc.cached
		got := e.admitS(batch(tc.admit))
		if math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: admit %.4f s, want %.4f", tc.name, got, tc.want)
		}
		if pl.Radix && e.cachedStates > max(0, pl.StateSlots-(tc.running+tc.admit)*pl.Ratio) {
			t.Errorf("%s: %d cached states left in a pool of %d", tc.name, e.cachedStates, pl.StateSlots)
		}
	}
}

// TestSubmitReceived: a request's simulated start is when it reached the
// server, so the simulator's own parsing does not add to its latency.
func TestSubmitReceived(t *testing.T) {
	p := mustProfile(t, "glm-5.3-flash-h200x4")
	_, pl := resolveArgv(t, p, seedConfigs[5].argv)
	e := NewEngine(p, pl, nil, 10, io.Discard, nil)
	recv := time.Now()
	time.Sleep(20 * time.Millisecond) // "parsing": 0.2 s simulated
	s := &Seq{Prompt: 10, Limit: 4, Received: recv}
	if err := e.Submit(s); err != nil {
		t.Fatal(err)
	}
	late := &Seq{Prompt: 10, Limit: 4}
	if err := e.Submit(late); err != nil {
		t.Fatal(err)
	}
	if d := late.start - s.start; d < 0.19 {
		t.Errorf("start of a request received 20 ms (wall) earlier is only %.3f s (sim) earlier", d)
	}
	if got, want := s.arrive-s.start, p.Perf.FrontendMS/1000-e.OverheadMS/1000*10; math.Abs(got-want) > 1e-9 {
		t.Errorf("front-end latency %.4f s, want %.4f", got, want)
	}
}

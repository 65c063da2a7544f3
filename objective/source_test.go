package objective

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDataset(t *testing.T) {
	tests := []struct {
		name, file, text string
		entries          int
		want             string // error substring; "" for none
	}{
		{"sharegpt", "d.json", `[{"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello you two"}]},
 {"conversations": [{"from": "gpt", "value": "only a reply"}]}]`, 1, ""},
		{"jsonl prompt and messages", "d.jsonl", `{"prompt": "say hi", "output_tokens": 12}

{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
`, 2, ""},
		{"jsonl pairs", "d.jsonl", `{"input_tokens": 100, "output_tokens": 20}`, 1, ""},
		{"csv pairs", "d.csv", "input_tokens,output_tokens\n100,20\n7,3\n", 2, ""},
		{"empty", "d.jsonl", "\n\n", 0, "d.jsonl: empty; valid: ShareGPT JSON"},
		{"not json", "d.jsonl", "{\"prompt\": \"a\"}\nnot json\n", 0, "d.jsonl:2: not a JSON object"},
		{"jsonl missing fields", "d.jsonl", "{\"prompt\": \"a\"}\n{\"text\": \"b\"}\n", 0, `d.jsonl:2: no "prompt", "messages" or "input_tokens"; valid:`},
		{"jsonl pair without output", "d.jsonl", `{"input_tokens": 10}`, 0, "d.jsonl:1: a length pair needs input_tokens >= 1 and output_tokens >= 1"},
		{"jsonl bad output", "d.jsonl", `{"prompt": "a", "output_tokens": 0}`, 0, "d.jsonl:1: output_tokens 0; valid: an integer >= 1"},
		{"messages without content", "d.jsonl", `{"messages": [{"role": "user"}]}`, 0, `d.jsonl:1: messages[0]: missing "role" or "content"`},
		{"sharegpt broken", "d.json", "[\n{\"conversations\": [{\"from\": \"human\", \"value\": \"a\"}]},\n{\"conversations\": [}\n]", 0, "d.json:3: conversation 1: not a ShareGPT conversation"},
		{"sharegpt no list", "d.json", "[\n {\"id\": 1}\n]", 0, `d.json:2: conversation 0: no "conversations" list`},
		{"sharegpt turn fields", "d.json", "[\n {\"conversations\": [{\"from\": \"human\"}]}\n]", 0, `d.json:2: conversation 0, turn 0: missing "from" or "value"`},
		{"sharegpt nothing usable", "d.json", `[{"conversations": [{"from": "human", "value": "a"}]}]`, 0, "no usable request (1 conversations skipped"},
		{"csv header", "d.csv", "in,out\n1,2\n", 0, `d.csv:1: header "in,out" lacks input_tokens or output_tokens`},
		{"csv value", "d.csv", "input_tokens,output_tokens\n10,5\n10,x\n", 0, `d.csv:3: input_tokens "10", output_tokens "x"; valid: integers >= 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := LoadDataset(writeFile(t, tt.file, tt.text))
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v, want %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ds.Entries) != tt.entries {
				t.Errorf("%d entries, want %d", len(ds.Entries), tt.entries)
			}
		})
	}
}

// The bundled ShareGPT fixture: every conversation usable, the first human
// turn as the prompt, the reply's length as the output length.
func TestLoadDatasetFixture(t *testing.T) {
	ds, err := LoadDataset("../testdata/datasets/sharegpt-small.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Entries) != 64 || ds.Skipped != 0 {
		t.Fatalf("%d entries, %d skipped; want 64, 0", len(ds.Entries), ds.Skipped)
	}
	e := ds.Entries[0]
	if e.Line != 2 || !strings.HasPrefix(e.Messages[0].Content, "Question 0:") || e.OutputTokens < 4 {
		t.Errorf("first entry %+v", e)
	}
	if _, err := LoadDataset("../testdata/datasets/pairs-small.csv"); err != nil {
		t.Error(err)
	}
}

func FuzzLoadDataset(f *testing.F) {
	for _, s := range []string{`[{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]`,
		`{"prompt": "x", "output_tokens": 3}`, `{"messages": [{"role": "user", "content": "x"}]}`, "[", "{", ""} {
		f.Add(s, false)
	}
	f.Add("input_tokens,output_tokens\n1,2\n", true)
	f.Fuzz(func(t *testing.T, text string, csv bool) {
		name := "d.jsonl"
		if csv {
			name = "d.csv"
		}
		ds, err := LoadDataset(writeFile(t, name, text))
		if err == nil && len(ds.Entries) == 0 {
			t.Fatal("no error and no entries")
		}
		if err != nil && !strings.Contains(err.Error(), "d.") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

func TestLengthDist(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		d              LengthDist
		mean, tol      float64
		minimum, maxim int
	}{
		{LengthDist{Dist: "fixed", Mean: 300}, 300, 0, 300, 300},
		{LengthDist{Dist: "uniform", Min: 100, Max: 300}, 200, 5, 100, 300},
		{LengthDist{Dist: "normal", Mean: 500, StdDev: 50}, 500, 5, 1, 1 << 30},
		{LengthDist{Dist: "lognormal", Mean: 800, StdDev: 400}, 800, 25, 1, 1 << 30},
		{LengthDist{Dist: "lognormal", Mean: 800, StdDev: 400, Min: 700, Max: 900}, 800, 40, 700, 900},
	}
	for _, tt := range tests {
		if msg := tt.d.Check(); msg != "" {
			t.Fatalf("%+v: %s", tt.d, msg)
		}
		sum := 0.0
		const n = 20000
		for range n {
			v := tt.d.Draw(rng)
			if v < tt.minimum || v > tt.maxim {
				t.Fatalf("%+v drew %d", tt.d, v)
			}
			sum += float64(v)
		}
		if m := sum / n; math.Abs(m-tt.mean) > tt.tol {
			t.Errorf("%+v: mean %.1f, want %.0f ± %.0f", tt.d, m, tt.mean, tt.tol)
		}
	}
	for _, bad := range []LengthDist{{Dist: "zipf"}, {Dist: "uniform", Min: 5, Max: 2}, {Dist: "fixed"}, {Dist: "normal", Mean: 10, StdDev: -1}} {
		if bad.Check() == "" {
			t.Errorf("%+v passes Check", bad)
		}
	}
}

func sourceFor(spec SourceSpec) *source {
	s, err := newSource(ChatSpec{Source: &spec, MaxTokens: 64, PromptTokens: 100})
	if err != nil {
		panic(err)
	}
	return s
}

// A shared system prompt is the same text in every request of its group,
// at every level and repeat: a perfect prefix cache could reuse most of
// what is sent. Unique prompts leave nothing to reuse.
func TestSourceSharedPrefix(t *testing.T) {
	shared := sourceFor(SourceSpec{SharedPrefix: 2000, Seed: 1})
	reqs := shared.requests(16, 1, 32)
	if len(reqs) != 32 {
		t.Fatalf("%d requests", len(reqs))
	}
	sys := reqs[0].Messages[0]
	if sys.Role != "system" || countWords(sys.Content) < 1990 {
		t.Fatalf("first message %s of %d words", sys.Role, countWords(sys.Content))
	}
	if other := shared.requests(64, 2, 4)[3].Messages[0].Content; other != sys.Content {
		t.Error("another level's system prompt differs")
	}
	reusable, total := PrefixReuse(reqs, map[uint64]bool{})
	if f := float64(reusable) / float64(total); f < 0.85 {
		t.Errorf("shared prefix: %.2f reusable, want >= 0.85 (31 of 32 requests reuse ~2000 of ~2100 words)", f)
	}
	unique := sourceFor(SourceSpec{InputTokens: &LengthDist{Dist: "fixed", Mean: 2000}, Seed: 1})
	if r, tot := PrefixReuse(unique.requests(16, 1, 32), map[uint64]bool{}); float64(r)/float64(tot) > 0.02 {
		t.Errorf("unique prompts: %d of %d words reusable", r, tot)
	}
	groups := sourceFor(SourceSpec{SharedPrefix: 500, PrefixGroups: 4, Seed: 1}).requests(8, 1, 8)
	if groups[0].Messages[0].Content == groups[1].Messages[0].Content || groups[0].Messages[0].Content != groups[4].Messages[0].Content {
		t.Error("request i should share the system prompt of group i mod 4 only")
	}
}

// Turn t of a conversation resends turns 1..t-1 with their replies;
// requests go out turn by turn.
func TestSourceTurns(t *testing.T) {
	reqs := sourceFor(SourceSpec{Turns: 3, OutputTokens: &LengthDist{Dist: "fixed", Mean: 20}, Seed: 3}).requests(4, 1, 12)
	// 4 conversations: requests 0-3 are first turns, 4-7 second, 8-11 third.
	for i, r := range reqs {
		want := 1 + 2*(i/4)
		if len(r.Messages) != want {
			t.Fatalf("request %d has %d messages, want %d", i, len(r.Messages), want)
		}
		if !r.Hold || r.MaxTokens != 20 {
			t.Fatalf("request %d: max_tokens %d hold %v, want 20 held", i, r.MaxTokens, r.Hold)
		}
	}
	if reqs[4].Messages[0].Content != reqs[0].Messages[0].Content || reqs[8].Messages[2].Content != reqs[4].Messages[2].Content {
		t.Error("a later turn does not resend the conversation's history")
	}
	if r, tot := PrefixReuse(reqs, map[uint64]bool{}); r == 0 || r >= tot {
		t.Errorf("turns: %d of %d words reusable", r, tot)
	}
}

// A dataset's entries are sampled with the seed; a reply's length is held.
func TestSourceDataset(t *testing.T) {
	s := sourceFor(SourceSpec{Dataset: "../testdata/datasets/sharegpt-small.json", Seed: 5})
	a, b := s.requests(16, 1, 16), s.requests(16, 1, 16)
	for i := range a {
		if a[i].Messages[0].Content != b[i].Messages[0].Content {
			t.Fatal("the same level and repeat drew different requests")
		}
		if !a[i].Hold || a[i].MaxTokens < 1 {
			t.Fatalf("request %d: output length %d not held", i, a[i].MaxTokens)
		}
	}
	if c := s.requests(16, 2, 16); c[0].Messages[0].Content == a[0].Messages[0].Content && c[1].Messages[0].Content == a[1].Messages[0].Content {
		t.Error("another repeat drew the same sample")
	}
	pairs := sourceFor(SourceSpec{Dataset: "../testdata/datasets/pairs-small.csv", Seed: 5}).requests(4, 1, 4)
	if w := countWords(pairs[0].Messages[0].Content); w < 60 {
		t.Errorf("a length pair's prompt has %d words", w)
	}
}

// Traces: Mooncake JSONL (timestamps in ms) and the Azure CSV keep each
// request's time; a trace must be in time order and timed throughout.
func TestLoadDatasetTraces(t *testing.T) {
	for _, f := range []string{"mooncake-small.jsonl", "azure-small.csv"} {
		ds, err := LoadDataset("../testdata/datasets/" + f)
		if err != nil {
			t.Fatal(err)
		}
		last := ds.Entries[len(ds.Entries)-1]
		if !ds.Timed || len(ds.Entries) != 64 || ds.Entries[0].At != 0 || last.At <= 1 || last.InputTokens < 1 || last.OutputTokens < 1 {
			t.Errorf("%s: timed %v, %d entries, last %+v", f, ds.Timed, len(ds.Entries), last)
		}
	}
	for _, tt := range []struct{ name, file, text, want string }{
		{"back in time", "d.jsonl", `{"timestamp": 2000, "input_length": 5, "output_length": 5}
{"timestamp": 1000, "input_length": 5, "output_length": 5}`, "d.jsonl:2: timestamp before the previous request's"},
		{"partly timed", "d.jsonl", `{"timestamp": 2000, "input_length": 5, "output_length": 5}
{"input_tokens": 5, "output_tokens": 5}`, "d.jsonl:2: no timestamp, unlike line 1"},
		{"azure time", "d.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,10\n", `d.csv:2: timestamp "yesterday"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := LoadDataset(writeFile(t, tt.file, tt.text)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// A trace replay sends the trace's requests in order at its own times
// (the rate search then scales them to each probe's rate); successive
// levels replay successive stretches, wrapping at the end.
func TestSourceTraceReplay(t *testing.T) {
	spec := ChatSpec{Source: &SourceSpec{Dataset: "../testdata/datasets/mooncake-small.jsonl"}, MaxTokens: 64, PromptTokens: 100,
		RateSearch: &RateSearch{Arrival: ArrivalTrace}}
	s, err := newSource(spec)
	if err != nil {
		t.Fatal(err)
	}
	es := s.data.Entries
	reqs, offs := s.requests(0, 1, 16), s.traceOffsets(0, 16)
	for i := range reqs {
		if reqs[i].MaxTokens != es[i].OutputTokens || !reqs[i].Hold {
			t.Fatalf("request %d holds %d tokens, want entry %d's %d", i, reqs[i].MaxTokens, i, es[i].OutputTokens)
		}
		want := time.Duration(es[i].At * float64(time.Second))
		if d := offs[i] - want; d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("offset %d = %v, want the trace's %v", i, offs[i], want)
		}
	}
	wrapped := s.traceOffsets(3, 40) // entries 56..63, then 0..31: times keep rising
	for i := 1; i < len(wrapped); i++ {
		if wrapped[i] < wrapped[i-1] {
			t.Fatalf("offsets go back at %d: %v", i, wrapped)
		}
	}
}

// prefixReuser gives what PrefixReuse over the run's batches gives, for a
// run whose history the memo has seen (the second run), one it has not
// (the first), and one that leaves the common path part way (the third).
func TestPrefixReuserMemo(t *testing.T) {
	src := sourceFor(SourceSpec{SharedPrefix: 300, PrefixGroups: 3, InputTokens: &LengthDist{Dist: "fixed", Mean: 40}, Seed: 7})
	batch := func(level, repeat, n int) (sourceKey, *sourceBatch) {
		return sourceKey{model: "m", source: "test-prefix-reuser", level: level, repeat: repeat, n: n, maxTokens: 64},
			&sourceBatch{reqs: src.requests(level, repeat, n)}
	}
	type call struct{ level, repeat, n int }
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"first run", []call{{4, -1, 4}, {4, 1, 8}, {4, 2, 8}}},
		{"same run again", []call{{4, -1, 4}, {4, 1, 8}, {4, 2, 8}}},
		{"another run after the first batch", []call{{4, -1, 4}, {8, 1, 8}, {4, 2, 8}}},
	} {
		var r prefixReuser
		seen := map[uint64]bool{}
		for i, c := range tc.calls {
			k, b := batch(c.level, c.repeat, c.n)
			gotR, gotT := r.add(k, b)
			wantR, wantT := PrefixReuse(b.reqs, seen)
			if gotR != wantR || gotT != wantT {
				t.Errorf("%s: batch %d: reuse %d of %d words, want %d of %d", tc.name, i, gotR, gotT, wantR, wantT)
			}
		}
	}
}

package objective

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// SourceSpec says where a chat workload's requests come from
// (workload.chat.source): a dataset file, or synthetic prompts whose
// input and output lengths follow distributions; either may carry a system
// prompt shared by groups of requests and be sent as multi-turn
// conversations that resend their history. Unset, the workload sends
// synthetic prompts of chat.prompt_tokens with chat.max_tokens, as before.
//
// Lengths are counted in words: the synthetic text is common English words,
// about one token each in current chat tokenizers; a dataset's text is
// counted the same way (whitespace-separated words), a rough estimate.
type SourceSpec struct {
	// Dataset is a file of requests: ShareGPT JSON (a list of
	// {"conversations": [{"from": "human", "value": ...}, {"from": "gpt",
	// ...}]}: the first human turn is the prompt, the reply after it gives
	// the output length), JSONL with "prompt" or OpenAI "messages" and an
	// optional "output_tokens", or JSONL/CSV of input_tokens,output_tokens
	// pairs (prompts of those lengths are made). Sampled with Seed.
	Dataset string `yaml:"dataset" json:"dataset,omitempty"`
	// InputTokens and OutputTokens draw each synthetic request's prompt
	// and output length (nil: chat.prompt_tokens and chat.max_tokens).
	InputTokens  *LengthDist `yaml:"input_tokens" json:"input_tokens,omitempty"`
	OutputTokens *LengthDist `yaml:"output_tokens" json:"output_tokens,omitempty"`
	// SharedPrefix is the length of a system prompt that requests share
	// (0: none), PrefixGroups how many different ones (request i uses
	// group i mod PrefixGroups; default 1).
	SharedPrefix int `yaml:"shared_prefix_tokens" json:"shared_prefix_tokens,omitempty"`
	PrefixGroups int `yaml:"prefix_groups" json:"prefix_groups,omitempty"`
	// Turns makes conversations of that many user turns (default 1): turn
	// t resends the t-1 earlier turns and their replies, so its prompt
	// extends the one before; a level's requests are sent turn by turn.
	Turns int `yaml:"turns" json:"turns,omitempty"`
	// Seed draws the lengths and the dataset sample (with the level and
	// repeat); the study's budget.seed by default.
	Seed uint64 `yaml:"seed" json:"seed,omitempty"`
}

// LengthDist is a distribution of token counts.
type LengthDist struct {
	// Dist: fixed (Mean), uniform (Min..Max), normal (Mean, StdDev) or
	// lognormal (Mean and StdDev of the lengths themselves); draws are
	// rounded and clamped to [Min, Max] where those are set (Min at
	// least 1).
	Dist   string  `yaml:"dist" json:"dist"`
	Mean   float64 `yaml:"mean" json:"mean,omitempty"`
	StdDev float64 `yaml:"stddev" json:"stddev,omitempty"`
	Min    int     `yaml:"min" json:"min,omitempty"`
	Max    int     `yaml:"max" json:"max,omitempty"`
}

// Dists are the distributions LengthDist.Dist names.
var Dists = []string{"fixed", "uniform", "normal", "lognormal"}

// Check says what is wrong with d, "" when nothing.
func (d LengthDist) Check() string {
	switch d.Dist {
	case "fixed":
		if d.Mean < 1 {
			return "fixed needs mean >= 1"
		}
	case "uniform":
		if d.Min < 1 || d.Max < d.Min {
			return "uniform needs 1 <= min <= max"
		}
	case "normal", "lognormal":
		if d.Mean < 1 || d.StdDev < 0 {
			return d.Dist + " needs mean >= 1 and stddev >= 0"
		}
	default:
		return fmt.Sprintf("dist %q; valid: %s", d.Dist, strings.Join(Dists, ", "))
	}
	if d.Max > 0 && d.Max < d.Min {
		return "max below min"
	}
	return ""
}

// Draw returns one length.
func (d LengthDist) Draw(rng *rand.Rand) int {
	var v float64
	switch d.Dist {
	case "fixed":
		v = d.Mean
	case "uniform":
		v = float64(d.Min + rng.IntN(d.Max-d.Min+1))
	case "normal":
		v = d.Mean + d.StdDev*rng.NormFloat64()
	case "lognormal":
		// The underlying normal's parameters from the lengths' mean and
		// standard deviation.
		s2 := math.Log1p(d.StdDev * d.StdDev / (d.Mean * d.Mean))
		v = math.Exp(math.Log(d.Mean) - s2/2 + math.Sqrt(s2)*rng.NormFloat64())
	}
	n := int(math.Round(v))
	n = max(n, d.Min, 1)
	if d.Max > 0 {
		n = min(n, d.Max)
	}
	return n
}

// Entry is one request of a dataset file.
type Entry struct {
	Line     int // where it starts in the file
	Messages []openai.ChatCompletionMessage
	// InputTokens is set for a length pair (no text): a prompt of that
	// many tokens is made.
	InputTokens int
	// OutputTokens is the output length to hold (0: the workload's
	// max_tokens).
	OutputTokens int
	// At is when a trace sent the request, in seconds from its first
	// request; set when every entry of the file has a timestamp.
	At float64
	at *float64 // the timestamp read, in seconds (absolute)
}

// Dataset is a dataset file's requests.
type Dataset struct {
	Path    string
	Entries []Entry
	// Skipped counts ShareGPT conversations without a human turn followed
	// by a reply (as vLLM's and SGLang's benchmarks skip them).
	Skipped int
	// Timed says every entry has a timestamp (a trace: Mooncake JSONL's
	// timestamp, the Azure LLM inference trace's TIMESTAMP, a timestamp
	// column): rate_search's arrival trace replays them in order.
	Timed bool
}

// DatasetError is a problem at one line of a dataset file.
type DatasetError struct {
	Path string
	Line int // 0: the whole file
	Msg  string
}

func (e *DatasetError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Msg)
	}
	return e.Path + ": " + e.Msg
}

const datasetFormats = "ShareGPT JSON (a list of {\"conversations\": [{\"from\": \"human\", \"value\": ...}, {\"from\": \"gpt\", \"value\": ...}]}), " +
	"JSONL with \"prompt\" or \"messages\" and an optional \"output_tokens\", JSONL or CSV of input_tokens, output_tokens, " +
	"or a trace: Mooncake JSONL (timestamp ms, input_length, output_length) or the Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens)"

// LoadDataset reads a dataset file (see SourceSpec.Dataset). A file that
// cannot be read as any of the formats is a *DatasetError naming the line
// and what would be valid.
func LoadDataset(path string) (*Dataset, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &DatasetError{Path: path, Msg: fmt.Sprintf("%v; valid: a readable file", errors.Unwrap(err))}
	}
	ds := &Dataset{Path: path}
	trimmed := bytes.TrimSpace(b)
	switch {
	case len(trimmed) == 0:
		return nil, &DatasetError{Path: path, Msg: "empty; valid: " + datasetFormats}
	case strings.EqualFold(filepath.Ext(path), ".csv"):
		err = ds.readCSV(b)
	case trimmed[0] == '[':
		err = ds.readShareGPT(b)
	default:
		err = ds.readJSONL(b)
	}
	if err != nil {
		return nil, err
	}
	if len(ds.Entries) == 0 {
		return nil, &DatasetError{Path: path, Msg: fmt.Sprintf("no usable request (%d conversations skipped: no human turn with a reply); valid: %s", ds.Skipped, datasetFormats)}
	}
	if err := ds.times(); err != nil {
		return nil, err
	}
	return ds, nil
}

// times sets each entry's At from its timestamp when every entry has one:
// a trace must not go back in time. Some but not all timestamped is an
// error at the first entry without one.
func (ds *Dataset) times() error {
	var first *Entry
	for i := range ds.Entries {
		e := &ds.Entries[i]
		switch {
		case e.at == nil && first != nil:
			return ds.fail(e.Line, "no timestamp, unlike line %d; valid: a timestamp on every request of a trace, or on none", first.Line)
		case e.at == nil:
			continue
		case first == nil && i > 0:
			return ds.fail(e.Line, "a timestamp, unlike line %d; valid: a timestamp on every request of a trace, or on none", ds.Entries[0].Line)
		case first == nil:
			first = e
		}
		e.At = *e.at - *first.at
		if i > 0 && e.At < ds.Entries[i-1].At {
			return ds.fail(e.Line, "timestamp before the previous request's; valid: a trace in time order")
		}
	}
	ds.Timed = first != nil
	return nil
}

func lineAt(b []byte, off int64) int {
	return 1 + bytes.Count(b[:min(int(off), len(b))], []byte{'\n'})
}

func (ds *Dataset) fail(line int, format string, args ...any) error {
	return &DatasetError{Path: ds.Path, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// readShareGPT reads a JSON list of ShareGPT conversations, one element at
// a time, so that an error names the element's line.
func (ds *Dataset) readShareGPT(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return ds.fail(1, "not JSON (%v); valid: %s", err, datasetFormats)
	}
	for i := 0; dec.More(); i++ {
		line := lineAt(b, dec.InputOffset()+1)
		var conv struct {
			Conversations *[]struct {
				From  *string `json:"from"`
				Value *string `json:"value"`
			} `json:"conversations"`
		}
		if err := dec.Decode(&conv); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				line = lineAt(b, se.Offset)
			}
			return ds.fail(line, "conversation %d: not a ShareGPT conversation (%v); valid: {\"conversations\": [{\"from\": \"human\", \"value\": \"...\"}, ...]}", i, err)
		}
		if conv.Conversations == nil {
			return ds.fail(line, "conversation %d: no \"conversations\" list; valid: {\"conversations\": [{\"from\": \"human\", \"value\": \"...\"}, {\"from\": \"gpt\", \"value\": \"...\"}]}", i)
		}
		prompt, reply := -1, -1
		for k, turn := range *conv.Conversations {
			if turn.From == nil || turn.Value == nil {
				return ds.fail(line, "conversation %d, turn %d: missing \"from\" or \"value\"; valid: {\"from\": \"human\"|\"gpt\", \"value\": \"...\"}", i, k)
			}
			from := strings.ToLower(*turn.From)
			if prompt < 0 && (from == "human" || from == "user") && strings.TrimSpace(*turn.Value) != "" {
				prompt = k
			} else if prompt >= 0 && reply < 0 {
				reply = k
			}
		}
		if prompt < 0 || reply < 0 {
			ds.Skipped++
			continue
		}
		turns := *conv.Conversations
		ds.Entries = append(ds.Entries, Entry{Line: line,
			Messages:     userMsg(*turns[prompt].Value),
			OutputTokens: max(1, countWords(*turns[reply].Value))})
	}
	if _, err := dec.Token(); err != nil {
		return ds.fail(lineAt(b, dec.InputOffset()), "not JSON after the last conversation (%v); valid: one JSON list", err)
	}
	return nil
}

// readJSONL reads one JSON object per line: a prompt, messages, or a
// length pair.
func (ds *Dataset) readJSONL(b []byte) error {
	for n, raw := range bytes.Split(b, []byte{'\n'}) {
		line := n + 1
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 {
			continue
		}
		var obj struct {
			Prompt       *string                         `json:"prompt"`
			Messages     *[]openai.ChatCompletionMessage `json:"messages"`
			InputTokens  *int                            `json:"input_tokens"`
			OutputTokens *int                            `json:"output_tokens"`
			MaxTokens    *int                            `json:"max_tokens"`
			// Mooncake's trace: timestamp in milliseconds.
			Timestamp    *float64 `json:"timestamp"`
			InputLength  *int     `json:"input_length"`
			OutputLength *int     `json:"output_length"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return ds.fail(line, "not a JSON object (%v); valid: %s", err, datasetFormats)
		}
		e := Entry{Line: line}
		if obj.Timestamp != nil {
			at := *obj.Timestamp / 1000
			e.at = &at
		}
		if obj.InputTokens == nil {
			obj.InputTokens = obj.InputLength
		}
		out := obj.OutputTokens
		if out == nil {
			out = obj.MaxTokens
		}
		if out == nil {
			out = obj.OutputLength
		}
		if out != nil {
			if *out < 1 {
				return ds.fail(line, "output_tokens %d; valid: an integer >= 1", *out)
			}
			e.OutputTokens = *out
		}
		switch {
		case obj.Prompt != nil:
			if strings.TrimSpace(*obj.Prompt) == "" {
				return ds.fail(line, "empty \"prompt\"; valid: a non-empty string")
			}
			e.Messages = userMsg(*obj.Prompt)
		case obj.Messages != nil:
			if len(*obj.Messages) == 0 {
				return ds.fail(line, "empty \"messages\"; valid: OpenAI chat messages [{\"role\": \"user\", \"content\": \"...\"}]")
			}
			for k, m := range *obj.Messages {
				if m.Role == "" || m.Content == "" {
					return ds.fail(line, "messages[%d]: missing \"role\" or \"content\"; valid: {\"role\": \"system\"|\"user\"|\"assistant\", \"content\": \"...\"}", k)
				}
			}
			e.Messages = *obj.Messages
		case obj.InputTokens != nil:
			if *obj.InputTokens < 1 || out == nil {
				return ds.fail(line, "a length pair needs input_tokens >= 1 and output_tokens >= 1; valid: {\"input_tokens\": 512, \"output_tokens\": 128}")
			}
			e.InputTokens = *obj.InputTokens
		default:
			return ds.fail(line, "no \"prompt\", \"messages\" or \"input_tokens\"; valid: %s", datasetFormats)
		}
		ds.Entries = append(ds.Entries, e)
	}
	return nil
}

// readCSV reads input_tokens, output_tokens pairs under a header naming
// them (other columns are ignored).
func (ds *Dataset) readCSV(b []byte) error {
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return ds.fail(1, "not CSV (%v); valid: a header with input_tokens and output_tokens, then one pair per line", err)
	}
	in, out, ts := slices.Index(header, "input_tokens"), slices.Index(header, "output_tokens"), slices.Index(header, "timestamp")
	azure := false
	if in < 0 && out < 0 {
		// The Azure LLM inference trace: TIMESTAMP,ContextTokens,GeneratedTokens.
		in, out, ts = slices.Index(header, "ContextTokens"), slices.Index(header, "GeneratedTokens"), slices.Index(header, "TIMESTAMP")
		azure = in >= 0 && out >= 0 && ts >= 0
	}
	if in < 0 || out < 0 {
		return ds.fail(1, "header %q lacks input_tokens or output_tokens; valid: input_tokens,output_tokens[,timestamp] or TIMESTAMP,ContextTokens,GeneratedTokens", strings.Join(header, ","))
	}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		line, _ := r.FieldPos(0)
		if err != nil {
			return ds.fail(line, "not CSV (%v); valid: input_tokens,output_tokens per line", err)
		}
		if len(rec) <= max(in, out, ts) {
			return ds.fail(line, "%d fields; valid: every column of the header on every line", len(rec))
		}
		a, errA := strconv.Atoi(strings.TrimSpace(rec[in]))
		c, errC := strconv.Atoi(strings.TrimSpace(rec[out]))
		if errA != nil || errC != nil || a < 1 || c < 1 {
			return ds.fail(line, "input_tokens %q, output_tokens %q; valid: integers >= 1", rec[in], rec[out])
		}
		e := Entry{Line: line, InputTokens: a, OutputTokens: c}
		if ts >= 0 {
			at, err := csvTime(strings.TrimSpace(rec[ts]), azure)
			if err != nil {
				return ds.fail(line, "timestamp %q: %v; valid: seconds, or the Azure trace's 2023-11-16 18:15:46.6805900", rec[ts], err)
			}
			e.at = &at
		}
		ds.Entries = append(ds.Entries, e)
	}
}

// csvTime reads a timestamp column: seconds, or the Azure trace's date
// and time (its clock has no zone; only differences are used).
func csvTime(s string, azure bool) (float64, error) {
	if !azure {
		return strconv.ParseFloat(s, 64)
	}
	t, err := time.Parse("2006-01-02 15:04:05.9999999", s)
	if err != nil {
		return 0, err
	}
	return float64(t.UnixNano()) / 1e9, nil
}

// Longest returns the entry whose prompt and output lengths add up to the
// most tokens (estimated for text as words), and that total.
func (ds *Dataset) Longest() (Entry, int) {
	var best Entry
	most := -1
	for _, e := range ds.Entries {
		n := e.InputTokens
		if n == 0 {
			for _, m := range e.Messages {
				n += countWords(m.Content)
			}
		}
		n += e.OutputTokens
		if n > most {
			best, most = e, n
		}
	}
	return best, most
}

func countWords(s string) int { return len(strings.Fields(s)) }

// ChatRequest is one request a source made.
type ChatRequest struct {
	Messages []openai.ChatCompletionMessage
	// MaxTokens is the output length; Hold says the length is the
	// source's (a dataset's reply, a drawn length): the request asks the
	// engine to ignore EOS so that the output has that length.
	MaxTokens int
	Hold      bool
}

// sourceBodies encodes a source's requests. A request whose output
// length the source holds asks the engine to ignore EOS (ignore_eos, which
// SGLang, vLLM and llama.cpp's server all accept in the request body);
// maxTokens below the workload's (a short warm-up) caps every request.
func sourceBodies(model string, reqs []ChatRequest, maxTokens int, spec ChatSpec) ([][]byte, error) {
	out := make([][]byte, len(reqs))
	for i, r := range reqs {
		mt := r.MaxTokens
		if maxTokens < spec.MaxTokens {
			mt = min(mt, maxTokens)
		}
		b, err := chatBody(model, r.Messages, mt, r.Hold || spec.IgnoreEOS, nil, nil)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

// source makes a level's requests from a SourceSpec.
type source struct {
	spec      SourceSpec
	data      *Dataset
	maxTokens int
	promptTok int
	reuse     bool
	// inOrder replays a trace: entries in file order with their times.
	inOrder bool
}

func newSource(spec ChatSpec) (*source, error) {
	s := &source{spec: *spec.Source, maxTokens: spec.MaxTokens, promptTok: spec.PromptTokens, reuse: spec.ReusePrompts,
		inOrder: spec.RateSearch != nil && spec.RateSearch.Arrival == ArrivalTrace}
	if s.promptTok <= 0 {
		s.promptTok = DefaultPromptTokens
	}
	if s.spec.Dataset != "" {
		ds, err := LoadDataset(s.spec.Dataset)
		if err != nil {
			return nil, err
		}
		s.data = ds
	}
	return s, nil
}

// requests makes n requests for a level's repeat, the same ones for the
// same (level, repeat) and seed (with reuse_prompts, the same for every
// repeat). Conversations of several turns are made whole and sent turn by
// turn: every conversation's first turn, then every second turn, ...
func (s *source) requests(level, repeat, n int) []ChatRequest {
	if s.reuse {
		repeat = 0
	}
	rng := rand.New(rand.NewPCG(s.spec.Seed^uint64(level)<<20, uint64(repeat)+1))
	turns := max(1, s.spec.Turns)
	convs := (n + turns - 1) / turns
	var pick []int
	switch {
	case s.data != nil && s.inOrder:
		pick = s.traceSlice(level, n)
	case s.data != nil:
		pick = rng.Perm(len(s.data.Entries))
	}
	groups := max(1, s.spec.PrefixGroups)
	byTurn := make([][]ChatRequest, turns)
	for c := range convs {
		var history []openai.ChatCompletionMessage
		if s.spec.SharedPrefix > 0 {
			history = append(history, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: s.systemPrompt(c % groups)})
		}
		for t := range turns {
			tag := fmt.Sprintf("[c%d r%d #%d.%d]", level, repeat, c, t)
			user, maxTok, hold := s.turn(rng, pick, c*turns+t, tag)
			msgs := append(slices.Clip(history), user...)
			byTurn[t] = append(byTurn[t], ChatRequest{Messages: msgs, MaxTokens: maxTok, Hold: hold})
			// The next turn resends this one with a reply of its length.
			reply := syntheticPrompt(rng, "", maxTok+10)
			history = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: reply})
		}
	}
	var out []ChatRequest
	for _, reqs := range byTurn {
		out = append(out, reqs...)
	}
	return out[:n]
}

// traceSlice is the entries a trace replay of level sends, in the trace's
// order: n of them from an offset that moves with the level (wrapping at
// the end), so that successive probes replay successive stretches.
func (s *source) traceSlice(level, n int) []int {
	total := len(s.data.Entries)
	start := ((level*n)%total + total) % total
	out := make([]int, n)
	for i := range out {
		out[i] = (start + i) % total
	}
	return out
}

// traceOffsets is the send schedule of traceSlice(level, n): the trace's
// own times, a wrap continuing after the trace's span plus one mean gap.
func (s *source) traceOffsets(level, n int) []time.Duration {
	es := s.data.Entries
	gap := es[len(es)-1].At / float64(max(1, len(es)-1))
	out := make([]time.Duration, 0, n)
	t, prev := 0.0, -1
	for _, k := range s.traceSlice(level, n) {
		if prev >= 0 {
			d := es[k].At - es[prev].At
			if d < 0 { // wrapped from the trace's end to its start
				d = gap
			}
			t += d
		}
		out = append(out, time.Duration(t*float64(time.Second)))
		prev = k
	}
	return out
}

// turn is the user part of request k: a dataset entry, or a synthetic
// prompt of the drawn (or the workload's) length.
func (s *source) turn(rng *rand.Rand, pick []int, k int, tag string) ([]openai.ChatCompletionMessage, int, bool) {
	maxTok, hold := s.maxTokens, false
	if d := s.spec.OutputTokens; d != nil {
		maxTok, hold = d.Draw(rng), true
	}
	if s.data != nil {
		e := s.data.Entries[pick[k%len(pick)]]
		if e.OutputTokens > 0 {
			maxTok, hold = e.OutputTokens, true
		}
		if e.InputTokens > 0 {
			return userMsg(syntheticPrompt(rng, tag, e.InputTokens)), maxTok, hold
		}
		return e.Messages, maxTok, hold
	}
	in := s.promptTok
	if d := s.spec.InputTokens; d != nil {
		in = d.Draw(rng)
	}
	return userMsg(syntheticPrompt(rng, tag, in)), maxTok, hold
}

// systemPrompt is group g's shared system prompt: the same text for every
// level and repeat, so that a prefix cache keeps it across the sweep.
func (s *source) systemPrompt(g int) string {
	rng := rand.New(rand.NewPCG(s.spec.Seed, uint64(g)+1<<32))
	return syntheticPrompt(rng, fmt.Sprintf("[system %d]", g), s.spec.SharedPrefix)
}

// reuseBlock is the granularity, in words, at which PrefixReuse matches
// prompt prefixes (a paged cache reuses whole pages).
const reuseBlock = 16

// PrefixReuse measures what a perfect prefix cache could reuse of reqs,
// sent in order: for each request, the longest prefix of its prompt (its
// messages' roles and words, in whole blocks of reuseBlock words) that an
// earlier request of reqs or of seen already sent. It returns the reusable
// words and the words sent in all; seen is updated with reqs' prefixes.
func PrefixReuse(reqs []ChatRequest, seen map[uint64]bool) (reusable, total int) {
	for _, r := range reqs {
		var words []string
		for _, m := range r.Messages {
			words = append(words, m.Role+":")
			words = append(words, strings.Fields(m.Content)...)
		}
		total += len(words)
		h := fnv.New64a() // each Sum64 covers the whole prefix so far
		hit := true
		for i := 0; i+reuseBlock <= len(words); i += reuseBlock {
			for _, w := range words[i : i+reuseBlock] {
				h.Write([]byte(w))
				h.Write([]byte{0})
			}
			key := h.Sum64()
			if hit && seen[key] {
				reusable += reuseBlock
			} else {
				hit = false
			}
			seen[key] = true
		}
	}
	return reusable, total
}

package sim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// pieceKind says where a token's text goes in the stream.
type pieceKind byte

const (
	pReason  pieceKind = 'r'
	pContent pieceKind = 'c'
	pToolHdr pieceKind = 'h'
	pToolArg pieceKind = 'a'
)

// piece is one token's text, already escaped for a JSON string.
type piece struct {
	kind pieceKind
	text string
}

// outputPlan is what a request will say, token by token.
type outputPlan struct {
	finite     []piece // structured outputs: the whole answer
	reasonN    int     // free text: leading reasoning tokens
	seed       uint64
	toolName   string
	toolID     string
	toolCalled bool
}

// vocab is the free-text vocabulary; each entry is one token.
var vocab = strings.Fields(`the model of a serving engine runs requests in batches and each step
produces one token for every running request while the scheduler admits new work from the queue when
memory allows it so that throughput grows with the batch until the kernels saturate and latency rises
with it as well as the cache holds prefixes for reuse across turns which saves prefill time on long
prompts that share a system message or documents in retrieval pipelines with many users at once`)

// pieceAt returns the i-th token of a free-text answer.
func (o *outputPlan) pieceAt(i int) piece {
	w := vocab[(int(o.seed%997)+i*7)%len(vocab)]
	k := pContent
	if i < o.reasonN {
		k = pReason
	}
	if i == 0 || i == o.reasonN {
		return piece{k, w}
	}
	return piece{k, " " + w}
}

// at returns token i of the plan.
func (o *outputPlan) at(i int) piece {
	if o.finite != nil {
		return o.finite[i]
	}
	return o.pieceAt(i)
}

// escapeJSON escapes s for use inside a JSON string literal.
func escapeJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// chop splits s into tokens of about 4 bytes, escaped.
func chop(kind pieceKind, s string) []piece {
	var out []piece
	r := []rune(s)
	for i := 0; i < len(r); {
		n := 4
		if i+n > len(r) {
			n = len(r) - i
		}
		out = append(out, piece{kind, escapeJSON(string(r[i : i+n]))})
		i += n
	}
	return out
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// genContext carries what value generation may borrow from the prompt.
type genContext struct {
	prompt  string
	caps    []string  // capitalised words
	codes   []string  // 3-letter upper-case codes
	numbers []float64 // numbers in the prompt
	dates   []string
	used    map[string]bool
	rng     *rand.Rand
}

func newGenContext(prompt string, seed uint64) *genContext {
	g := &genContext{prompt: prompt, used: map[string]bool{}, rng: rand.New(rand.NewPCG(seed, 7))}
	fields := strings.FieldsFunc(prompt, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(",.?!:;()'\"", r)
	})
	for i, f := range fields {
		switch {
		case len(f) == 10 && f[4] == '-' && f[7] == '-':
			g.dates = append(g.dates, f)
		case len(f) == 3 && strings.ToUpper(f) == f && unicode.IsLetter(rune(f[0])):
			g.codes = append(g.codes, f)
		case i > 0 && len(f) > 2 && unicode.IsUpper(rune(f[0])) && strings.ToUpper(f) != f:
			g.caps = append(g.caps, f)
		}
		if v, err := strconv.ParseFloat(f, 64); err == nil {
			g.numbers = append(g.numbers, v)
		}
	}
	return g
}

func (g *genContext) take(list []string) string {
	for _, s := range list {
		if !g.used[s] {
			g.used[s] = true
			return s
		}
	}
	return ""
}

// genValue produces a value that satisfies schema s (the subset used by
// structured-output checks: object, required, string with length bounds,
// integer/number with bounds, boolean, array with item bounds, enum).
func (g *genContext) genValue(s map[string]any, name string) any {
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[g.rng.IntN(len(e))]
	}
	if c, ok := s["const"]; ok {
		return c
	}
	typ := schemaType(s)
	switch typ {
	case "object":
		props, _ := s["properties"].(map[string]any)
		obj := map[string]any{}
		// In key order: the draws (and so the answer's length) must not
		// depend on map iteration order.
		for _, k := range slices.Sorted(maps.Keys(props)) {
			ps, _ := props[k].(map[string]any)
			obj[k] = g.genValue(ps, k)
		}
		return obj
	case "array":
		items, _ := s["items"].(map[string]any)
		n := 2
		if v, ok := num(jsonNum(s["minItems"])); ok {
			n = max(n, int(v))
		}
		if v, ok := num(jsonNum(s["maxItems"])); ok {
			n = min(n, int(v))
		}
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			out = append(out, g.genValue(items, name))
		}
		return out
	case "integer", "number":
		lo, hasLo := num(jsonNum(s["minimum"]))
		hi, hasHi := num(jsonNum(s["maximum"]))
		if v, ok := num(jsonNum(s["exclusiveMinimum"])); ok {
			lo, hasLo = v+1e-3, true
		}
		if v, ok := num(jsonNum(s["exclusiveMaximum"])); ok {
			hi, hasHi = v-1e-3, true
		}
		v := math.NaN()
		for _, x := range g.numbers {
			if (!hasLo || x >= lo) && (!hasHi || x <= hi) && (typ == "number" || x == math.Trunc(x)) {
				v = x
				break
			}
		}
		if math.IsNaN(v) {
			switch {
			case hasLo && hasHi:
				v = lo + (hi-lo)*0.35
			case hasLo:
				v = lo + 12
			case hasHi:
				v = math.Min(hi, 12)
			default:
				v = 42
			}
		}
		if typ == "integer" {
			v = math.Ceil(v)
			if hasHi && v > hi {
				v = math.Floor(hi)
			}
			return int64(v)
		}
		return math.Round(v*100) / 100
	case "boolean":
		return g.rng.IntN(2) == 0
	case "null":
		return nil
	}
	return g.genString(s, name)
}

func (g *genContext) genString(s map[string]any, name string) string {
	minL, maxL := 0, 1<<30
	if v, ok := num(jsonNum(s["minLength"])); ok {
		minL = int(v)
	}
	if v, ok := num(jsonNum(s["maxLength"])); ok {
		maxL = int(v)
	}
	lname := strings.ToLower(name)
	var v string
	switch {
	case strings.Contains(lname, "date") || s["format"] == "date":
		if v = g.take(g.dates); v == "" {
			v = "2026-12-24"
		}
	case strings.Contains(lname, "email") || s["format"] == "email":
		v = "alex.morgan@example.com"
	case maxL == 3 && minL == 3:
		if v = g.take(g.codes); v == "" {
			v = strings.ToUpper(vocab[g.rng.IntN(len(vocab))] + "xxx")[:3]
		}
	default:
		if v = g.take(g.caps); v == "" {
			v = vocab[g.rng.IntN(len(vocab))] + " " + vocab[g.rng.IntN(len(vocab))]
		}
	}
	for len(v) < minL {
		v += " " + vocab[g.rng.IntN(len(vocab))]
	}
	if len(v) > maxL {
		v = strings.TrimSpace(v[:maxL])
		for len(v) < minL {
			v += "x"
		}
	}
	return v
}

func schemaType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		for _, x := range t {
			if str, ok := x.(string); ok && str != "null" {
				return str
			}
		}
	}
	if _, ok := s["properties"]; ok {
		return "object"
	}
	if _, ok := s["items"]; ok {
		return "array"
	}
	return "string"
}

func jsonNum(v any) any {
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		return f
	}
	return v
}

// GenerateJSON returns JSON text valid against schema (raw JSON), using
// values borrowed from the prompt where they fit.
func GenerateJSON(schema []byte, prompt string, seed uint64) (string, error) {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return "", fmt.Errorf("schema: %w", err)
	}
	g := newGenContext(prompt, seed)
	v := g.genValue(s, "")
	b, err := json.Marshal(v)
	return string(b), err
}

// toolDef is a declared function.
type toolDef struct {
	Name        string
	Description string
	Params      json.RawMessage
}

var synonyms = map[string]string{
	"dollar": "currency", "dollars": "currency", "euro": "currency", "euros": "currency", "yen": "currency",
	"pound": "currency", "pounds": "currency", "money": "currency", "currencies": "currency", "usd": "currency",
	"eur": "currency", "jpy": "currency", "gbp": "currency", "raining": "weather", "rain": "weather",
	"sunny": "weather", "temperature": "weather", "flight": "flights", "fly": "flights", "remind": "timer",
	"alarm": "timer", "minutes": "timer",
}

func bag(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) }) {
		if len(w) < 3 {
			continue
		}
		m[w] = true
		if syn, ok := synonyms[w]; ok {
			m[syn] = true
		}
		if strings.HasSuffix(w, "s") {
			m[strings.TrimSuffix(w, "s")] = true
		}
	}
	return m
}

// chooseTool picks the declared function that best matches the prompt.
func chooseTool(tools []toolDef, prompt string) int {
	pb := bag(prompt)
	best, bestScore := 0, -1
	for i, t := range tools {
		tb := bag(strings.ReplaceAll(t.Name, "_", " ") + " " + t.Description + " " + string(t.Params))
		score := 0
		for w := range tb {
			if pb[w] {
				score++
			}
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

package space

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/engine"
)

// The expression language of `when:`, `constraints:` and derived `value:`.
//
//	expr    = or
//	or      = and { "or" and }
//	and     = not { "and" not }
//	not     = "not" not | cmp
//	cmp     = sum [ ("=="|"!="|"<"|"<="|">"|">=") sum | ["not"] "in" list ]
//	sum     = prod { ("+"|"-") prod }
//	prod    = unary { ("*"|"/"|"//"|"%") unary }
//	unary   = "-" unary | primary
//	primary = number | string | "true" | "false" | "null" | name
//	        | name "(" expr { "," expr } ")" | "(" expr ")"
//	list    = "[" expr { "," expr } "]"
//
// Names are parameter names, predicted.<field> (constraints only) and
// gpus_per_trial; functions are min, max and abs. Integers stay integers under
// + - * // %; "/" gives a float; "//" and "%" floor like Python. and/or short-
// circuit. A name whose parameter is inactive (its when: is false) is unset:
// a when: that uses it is false, and a constraint that uses it is skipped.
// There are no assignments, loops or calls other than the three functions.

// errUnset reports that an expression used an unset name.
var errUnset = errors.New("name is not set")

// Expr is a compiled expression.
type Expr struct {
	src  string
	root node
}

// String returns the source text.
func (e *Expr) String() string { return e.src }

// Names lists every name the expression reads.
func (e *Expr) Names() []string {
	var out []string
	seen := map[string]bool{}
	walk(e.root, func(n node) {
		if v, ok := n.(nameNode); ok && !seen[string(v)] {
			seen[string(v)] = true
			out = append(out, string(v))
		}
	})
	return out
}

// Eval evaluates the expression with the given names.
func (e *Expr) Eval(env map[string]any) (any, error) { return e.root.eval(env) }

// EvalBool evaluates a condition.
func (e *Expr) EvalBool(env map[string]any) (bool, error) {
	v, err := e.Eval(env)
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("%q gives %s, not true/false", e.src, describe(v))
	}
	return b, nil
}

// ParseExpr compiles src.
func ParseExpr(src string) (*Expr, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	n, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, fmt.Errorf("unexpected %q at offset %d", t.text, t.pos)
	}
	return &Expr{src: src, root: n}, nil
}

type tokKind int

const (
	tEOF tokKind = iota
	tNum
	tStr
	tName
	tOp
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func lex(s string) ([]token, error) {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == '_' ||
				s[j] == 'e' || s[j] == 'E' || (s[j] == '+' || s[j] == '-') && j > i && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			out = append(out, token{tNum, s[i:j], i})
			i = j
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			out = append(out, token{tStr, s[i+1 : i+1+j], i})
			i += j + 2
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '.' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, token{tName, s[i:j], i})
			i = j
		default:
			op := ""
			for _, o := range []string{"==", "!=", "<=", ">=", "//", "<", ">", "+", "-", "*", "/", "%", "(", ")", "[", "]", ","} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("unexpected character %q at offset %d", c, i)
			}
			out = append(out, token{tOp, op, i})
			i += len(op)
		}
	}
	return append(out, token{tEOF, "end of expression", len(s)}), nil
}

type parser struct {
	toks  []token
	i     int
	depth int
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }
func (p *parser) isOp(op string) bool {
	t := p.peek()
	return t.kind == tOp && t.text == op
}
func (p *parser) isWord(w string) bool {
	t := p.peek()
	return t.kind == tName && t.text == w
}

func (p *parser) or() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > 100 {
		return nil, errors.New("expression nested too deeply")
	}
	l, err := p.and()
	for err == nil && p.isWord("or") {
		p.next()
		var r node
		if r, err = p.and(); err == nil {
			l = logicNode{"or", l, r}
		}
	}
	return l, err
}

func (p *parser) and() (node, error) {
	l, err := p.not()
	for err == nil && p.isWord("and") {
		p.next()
		var r node
		if r, err = p.not(); err == nil {
			l = logicNode{"and", l, r}
		}
	}
	return l, err
}

func (p *parser) not() (node, error) {
	if p.isWord("not") {
		p.next()
		x, err := p.not()
		return notNode{x}, err
	}
	return p.cmp()
}

func (p *parser) cmp() (node, error) {
	l, err := p.sum()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if t.kind == tOp {
		switch t.text {
		case "==", "!=", "<", "<=", ">", ">=":
			p.next()
			r, err := p.sum()
			return binNode{t.text, l, r}, err
		}
	}
	negate := false
	if p.isWord("not") && p.i+1 < len(p.toks) && p.toks[p.i+1].kind == tName && p.toks[p.i+1].text == "in" {
		p.next()
		negate = true
	}
	if p.isWord("in") {
		p.next()
		if !p.isOp("[") {
			return nil, fmt.Errorf("expected [ after in at offset %d", p.peek().pos)
		}
		p.next()
		var items []node
		for {
			it, err := p.or()
			if err != nil {
				return nil, err
			}
			items = append(items, it)
			if p.isOp(",") {
				p.next()
				continue
			}
			if !p.isOp("]") {
				return nil, fmt.Errorf("expected , or ] at offset %d", p.peek().pos)
			}
			p.next()
			break
		}
		var n node = inNode{l, items}
		if negate {
			n = notNode{n}
		}
		return n, nil
	}
	if negate {
		return nil, fmt.Errorf("expected in after not at offset %d", p.peek().pos)
	}
	return l, nil
}

func (p *parser) sum() (node, error) {
	l, err := p.prod()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		op := p.next().text
		var r node
		if r, err = p.prod(); err == nil {
			l = binNode{op, l, r}
		}
	}
	return l, err
}

func (p *parser) prod() (node, error) {
	l, err := p.unary()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		op := p.next().text
		var r node
		if r, err = p.unary(); err == nil {
			l = binNode{op, l, r}
		}
	}
	return l, err
}

func (p *parser) unary() (node, error) {
	if p.isOp("-") {
		minus := p.next()
		x, err := p.unary()
		return binNode{"-", litNode{int64(0), minus.pos}, x}, err
	}
	return p.primary()
}

func (p *parser) primary() (node, error) {
	t := p.next()
	switch t.kind {
	case tNum:
		txt := strings.ReplaceAll(t.text, "_", "")
		if n, err := strconv.ParseInt(txt, 10, 64); err == nil {
			return litNode{n, t.pos}, nil
		}
		f, err := strconv.ParseFloat(txt, 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q at offset %d", t.text, t.pos)
		}
		return litNode{f, t.pos}, nil
	case tStr:
		return litNode{t.text, t.pos}, nil
	case tName:
		switch t.text {
		case "true":
			return litNode{true, t.pos}, nil
		case "false":
			return litNode{false, t.pos}, nil
		case "null":
			return litNode{nil, t.pos}, nil
		case "and", "or", "not", "in":
			return nil, fmt.Errorf("unexpected %q at offset %d", t.text, t.pos)
		}
		if p.isOp("(") {
			switch t.text {
			case "min", "max", "abs":
			default:
				return nil, fmt.Errorf("unknown function %s at offset %d; valid: min, max, abs", t.text, t.pos)
			}
			p.next()
			var args []node
			for !p.isOp(")") {
				a, err := p.or()
				if err != nil {
					return nil, err
				}
				args = append(args, a)
				if p.isOp(",") {
					p.next()
				} else if !p.isOp(")") {
					return nil, fmt.Errorf("expected , or ) at offset %d", p.peek().pos)
				}
			}
			p.next()
			if (t.text == "abs" && len(args) != 1) || len(args) == 0 {
				return nil, fmt.Errorf("%s takes %s argument(s)", t.text, map[bool]string{true: "one", false: "one or more"}[t.text == "abs"])
			}
			return callNode{t.text, args}, nil
		}
		return nameNode(t.text), nil
	case tOp:
		if t.text == "(" {
			x, err := p.or()
			if err != nil {
				return nil, err
			}
			if !p.isOp(")") {
				return nil, fmt.Errorf("expected ) at offset %d", p.peek().pos)
			}
			p.next()
			return x, nil
		}
	}
	return nil, fmt.Errorf("unexpected %q at offset %d", t.text, t.pos)
}

type node interface {
	eval(env map[string]any) (any, error)
}

// litNode is a literal; pos is its offset in the source (of the "-" for
// the 0 that a unary minus subtracts from), for static checks' messages.
type litNode struct {
	v   any
	pos int
}
type nameNode string
type notNode struct{ x node }
type logicNode struct {
	op   string
	l, r node
}
type binNode struct {
	op   string
	l, r node
}
type inNode struct {
	x     node
	items []node
}
type callNode struct {
	fn   string
	args []node
}

func walk(n node, f func(node)) {
	f(n)
	switch v := n.(type) {
	case notNode:
		walk(v.x, f)
	case logicNode:
		walk(v.l, f)
		walk(v.r, f)
	case binNode:
		walk(v.l, f)
		walk(v.r, f)
	case inNode:
		walk(v.x, f)
		for _, it := range v.items {
			walk(it, f)
		}
	case callNode:
		for _, a := range v.args {
			walk(a, f)
		}
	}
}

func (n litNode) eval(map[string]any) (any, error) { return n.v, nil }

func (n nameNode) eval(env map[string]any) (any, error) {
	v, ok := env[string(n)]
	if !ok || v == nil {
		return nil, fmt.Errorf("%s: %w", string(n), errUnset)
	}
	return v, nil
}

func (n notNode) eval(env map[string]any) (any, error) {
	v, err := n.x.eval(env)
	if err != nil {
		return nil, err
	}
	b, ok := v.(bool)
	if !ok {
		return nil, fmt.Errorf("not needs true/false, got %s", describe(v))
	}
	return !b, nil
}

func (n logicNode) eval(env map[string]any) (any, error) {
	l, err := n.l.eval(env)
	if err != nil {
		return nil, err
	}
	lb, ok := l.(bool)
	if !ok {
		return nil, fmt.Errorf("%s needs true/false, got %s", n.op, describe(l))
	}
	if n.op == "or" && lb || n.op == "and" && !lb {
		return lb, nil
	}
	r, err := n.r.eval(env)
	if err != nil {
		return nil, err
	}
	rb, ok := r.(bool)
	if !ok {
		return nil, fmt.Errorf("%s needs true/false, got %s", n.op, describe(r))
	}
	return rb, nil
}

func (n inNode) eval(env map[string]any) (any, error) {
	x, err := n.x.eval(env)
	if err != nil {
		return nil, err
	}
	for _, it := range n.items {
		v, err := it.eval(env)
		if err != nil {
			return nil, err
		}
		if equal(x, v) {
			return true, nil
		}
	}
	return false, nil
}

func (n callNode) eval(env map[string]any) (any, error) {
	var vals []any
	for _, a := range n.args {
		v, err := a.eval(env)
		if err != nil {
			return nil, err
		}
		if _, ok := Number(v); !ok {
			return nil, fmt.Errorf("%s needs numbers, got %s", n.fn, describe(v))
		}
		vals = append(vals, v)
	}
	if n.fn == "abs" {
		if i, ok := vals[0].(int64); ok {
			if i < 0 {
				i = -i
			}
			return i, nil
		}
		f, _ := Number(vals[0])
		return math.Abs(f), nil
	}
	best := vals[0]
	for _, v := range vals[1:] {
		c, _ := compare(v, best)
		if n.fn == "min" && c < 0 || n.fn == "max" && c > 0 {
			best = v
		}
	}
	return best, nil
}

func (n binNode) eval(env map[string]any) (any, error) {
	l, err := n.l.eval(env)
	if err != nil {
		return nil, err
	}
	r, err := n.r.eval(env)
	if err != nil {
		return nil, err
	}
	switch n.op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<", "<=", ">", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, err
		}
		switch n.op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		}
		return c >= 0, nil
	}
	li, lInt := l.(int64)
	ri, rInt := r.(int64)
	if lInt && rInt {
		switch n.op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "//", "%":
			if ri == 0 {
				return nil, errors.New("division by zero")
			}
			q, m := li/ri, li%ri
			if m != 0 && (m < 0) != (ri < 0) {
				q--
				m += ri
			}
			if n.op == "//" {
				return q, nil
			}
			return m, nil
		}
	}
	lf, lok := Number(l)
	rf, rok := Number(r)
	if !lok || !rok {
		return nil, fmt.Errorf("%s needs numbers, got %s and %s", n.op, describe(l), describe(r))
	}
	switch n.op {
	case "+":
		return lf + rf, nil
	case "-":
		return lf - rf, nil
	case "*":
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return lf / rf, nil
	case "//":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return math.Floor(lf / rf), nil
	case "%":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return lf - math.Floor(lf/rf)*rf, nil
	}
	return nil, fmt.Errorf("unknown operator %s", n.op)
}

// Number returns a param value or an expression's value as a float64:
// true for the numeric kinds a study's values take (int, int64, float64).
func Number(v any) (float64, bool) {
	switch x := v.(type) {
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func equal(a, b any) bool {
	af, aok := Number(a)
	bf, bok := Number(b)
	if aok && bok {
		return af == bf
	}
	return a == b
}

func compare(a, b any) (int, error) {
	af, aok := Number(a)
	bf, bok := Number(b)
	switch {
	case aok && bok:
		switch {
		case af < bf:
			return -1, nil
		case af > bf:
			return 1, nil
		}
		return 0, nil
	}
	as, aStr := a.(string)
	bs, bStr := b.(string)
	if aStr && bStr {
		return strings.Compare(as, bs), nil
	}
	return 0, fmt.Errorf("cannot order %s and %s", describe(a), describe(b))
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(x)
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// domain is what a static check knows of the values a name takes.
type domain struct {
	name string
	// values are every value the name takes, as expressions see them; nil
	// for a numeric range (int and float params), whose kind alone is known.
	values []any
	// what says what the values are, for messages: "speculative's choices
	// are strings", "spec_steps is an int param".
	what string
	// rangeText describes a numeric range for messages: "1..5 step 2".
	rangeText string
}

// exprProblem is a comparison that a static check finds pointless or
// broken for every value, at an offset in the expression's source.
type exprProblem struct {
	pos int
	msg string
}

// checkComparisons finds the comparisons of a name with a constant that
// cannot do what they say for any value the name takes: a constant the name
// never equals (a typo of a choice, a string for a bool), or an ordering of
// values that cannot be ordered against it. dom gives a name's domain; nil
// skips the name (predictions, a param whose own definition is broken).
// A number outside an int or float param's range is fine: mem_fraction <
// 0.95 says something whatever the range.
func (e *Expr) checkComparisons(dom func(name string) *domain) []exprProblem {
	var out []exprProblem
	check := func(x, c node, op string, nameLeft bool) {
		name, ok := x.(nameNode)
		if !ok {
			return
		}
		v, pos, ok := constant(c)
		if !ok {
			return
		}
		d := dom(string(name))
		if d == nil {
			return
		}
		text := string(name) + " " + op + " " + literal(v)
		if !nameLeft {
			text = literal(v) + " " + op + " " + string(name)
		}
		if msg := d.compare(op, v, text); msg != "" {
			out = append(out, exprProblem{pos, msg})
		}
	}
	walk(e.root, func(n node) {
		switch v := n.(type) {
		case binNode:
			switch v.op {
			case "==", "!=", "<", "<=", ">", ">=":
				check(v.l, v.r, v.op, true)
				check(v.r, v.l, v.op, false)
			}
		case inNode:
			for _, it := range v.items {
				check(v.x, it, "in", true)
			}
		}
	})
	return out
}

// constant evaluates a part of an expression that reads no names; pos is
// where it starts in the source.
func constant(n node) (v any, pos int, ok bool) {
	pos, ok = -1, true
	walk(n, func(x node) {
		switch y := x.(type) {
		case nameNode:
			ok = false
		case litNode:
			if pos < 0 || y.pos < pos {
				pos = y.pos
			}
		}
	})
	if !ok || pos < 0 {
		return nil, 0, false
	}
	v, err := n.eval(nil)
	return v, pos, err == nil
}

// compare says what is wrong with comparing the domain's name with the
// constant c by op ("in" for an item of an in list); "" when nothing is.
// text is the comparison, for the message.
func (d *domain) compare(op string, c any, text string) string {
	ck := kindOf(c)
	kinds := map[string]bool{}
	if d.values == nil {
		kinds["number"] = true
	}
	for _, v := range d.values {
		kinds[kindOf(v)] = true
	}
	var outcome string
	switch op {
	case "==":
		outcome = text + " is always false"
	case "!=":
		outcome = text + " is always true"
	case "in":
		outcome = "that item of " + d.name + " in [...] never matches"
	default:
		// Numbers order against numbers and strings against strings;
		// anything else fails to evaluate (and rejects the config).
		for k := range kinds {
			if k == ck && (k == "number" || k == "string") {
				return ""
			}
		}
		if len(kinds) == 1 && kinds["bool"] {
			return fmt.Sprintf("%s, which cannot be ordered: %s cannot be evaluated; valid: %s, not %s, or %s == true",
				d.what, text, d.name, d.name, d.name)
		}
		valid := "a number"
		if !kinds["number"] {
			valid = fmt.Sprintf("%s == or != one of %s", d.name, d.list())
		} else if d.values == nil {
			valid += " (" + d.name + " is " + d.rangeText + ")"
		}
		return fmt.Sprintf("%s and %s is %s: %s cannot be evaluated for any of them; valid: %s",
			d.what, literal(c), kindNoun(ck), text, valid)
	}
	if !kinds[ck] {
		valid := d.list()
		if d.values == nil {
			valid = "a number (" + d.name + " is " + d.rangeText + ")"
		}
		return fmt.Sprintf("%s and %s is %s: %s; valid: %s", d.what, literal(c), kindNoun(ck), outcome, valid)
	}
	if d.values == nil || slices.ContainsFunc(d.values, func(v any) bool { return equal(v, c) }) {
		return ""
	}
	hint := ""
	if s, ok := c.(string); ok {
		var strs []string
		for _, v := range d.values {
			if t, ok := v.(string); ok {
				if strings.EqualFold(s, t) {
					strs = []string{t}
					break
				}
				strs = append(strs, t)
			}
		}
		hint = " (did you mean " + literal(engine.Nearest(s, strs)) + "?)"
	}
	return fmt.Sprintf("%s never takes %s%s: %s; valid: %s", d.name, literal(c), hint, outcome, d.list())
}

// list is the domain's values as an expression would write them.
func (d *domain) list() string {
	parts := make([]string, len(d.values))
	for i, v := range d.values {
		parts[i] = literal(v)
	}
	return strings.Join(parts, ", ")
}

// kindOf names the kind of an expression value.
func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	}
	if _, ok := Number(v); ok {
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

func kindNoun(kind string) string {
	switch kind {
	case "null":
		return "no value"
	case "bool":
		return "a boolean"
	}
	return "a " + kind
}

// literal writes a value as an expression literal: 'EAGLE', 4, true.
func literal(v any) string {
	if s, ok := v.(string); ok {
		// Quoted as Go would when it needs escapes: a message stays on
		// one line.
		if q := strconv.Quote(s); q[1:len(q)-1] == s && !strings.Contains(s, "'") {
			return "'" + s + "'"
		}
		return strconv.Quote(s)
	}
	return describe(v)
}

// kinds is what kinds of value the expression can give ("number",
// "string", "bool", "null"), as far as dom tells of the names it reads;
// nil when that is not known.
func (e *Expr) kinds(dom func(name string) *domain) map[string]bool {
	return nodeKinds(e.root, dom)
}

func nodeKinds(n node, dom func(string) *domain) map[string]bool {
	switch v := n.(type) {
	case litNode:
		return map[string]bool{kindOf(v.v): true}
	case nameNode:
		if v == "gpus_per_trial" || strings.HasPrefix(string(v), "predicted.") {
			return map[string]bool{"number": true}
		}
		d := dom(string(v))
		if d == nil {
			return nil
		}
		out := map[string]bool{}
		if d.values == nil {
			out["number"] = true
		}
		for _, x := range d.values {
			out[kindOf(x)] = true
		}
		return out
	case notNode, logicNode, inNode:
		return map[string]bool{"bool": true}
	case binNode:
		switch v.op {
		case "==", "!=", "<", "<=", ">", ">=":
			return map[string]bool{"bool": true}
		}
	}
	// Arithmetic and min, max, abs give a number or fail.
	return map[string]bool{"number": true}
}

// kindsText describes a set of kinds: "a string or a boolean".
func kindsText(kinds map[string]bool) string {
	var parts []string
	for _, k := range []string{"number", "string", "bool", "null"} {
		if kinds[k] {
			parts = append(parts, kindNoun(k))
		}
	}
	return strings.Join(parts, " or ")
}

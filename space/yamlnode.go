package space

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sgtune/sgtune/engine"
)

// FieldError is one problem in a study file, at a line and column.
type FieldError struct {
	File  string
	Line  int
	Col   int
	Field string // dotted path, e.g. params[ep].low
	Msg   string // what is wrong; what is valid
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Col, e.Field, e.Msg)
}

// LoadError holds every problem found in a study file; it wraps ErrInvalid.
type LoadError struct{ Errs []*FieldError }

func (e *LoadError) Error() string {
	var b strings.Builder
	for i, fe := range e.Errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *LoadError) Unwrap() error { return ErrInvalid }

// maxErrors bounds how many problems one load reports.
const maxErrors = 20

// dec walks a study document and collects positioned errors.
type dec struct {
	file  string
	lines []string // the file's lines, to place errors inside a scalar
	errs  []*FieldError

	// paramAt is each param's index in the file, and self and selfAt the
	// name and index of the param whose when: is compiled, while params are
	// decoded.
	paramAt map[string]int
	self    string
	selfAt  int
	// emitted holds each param's flags, in st.Params order, and
	// derivedFlags each derived entry's, in st.Derived order, for
	// sharedFlags.
	emitted      []map[string]*emittedFlag
	derivedFlags []derivedFlag
}

func (d *dec) failAt(line, col int, path, format string, args ...any) {
	if len(d.errs) >= maxErrors {
		return
	}
	fe := &FieldError{File: d.file, Line: line, Col: col, Field: path, Msg: fmt.Sprintf(format, args...)}
	// A check run once per value of a param (its flag, for each choice)
	// finds the same fault each time: it is one error.
	for _, e := range d.errs {
		if *e == *fe {
			return
		}
	}
	d.errs = append(d.errs, fe)
}

func (d *dec) fail(n *yaml.Node, path, format string, args ...any) {
	line, col := 1, 1
	if n != nil {
		line, col = n.Line, n.Column
	}
	d.failAt(line, col, path, format, args...)
}

// exprPos is the line and column of offset off of the expression src, the
// value of scalar n: the column inside the scalar when the file holds src
// as is on n's line (a plain or quoted one-line scalar without escapes),
// else n's own position.
func (d *dec) exprPos(n *yaml.Node, src string, off int) (line, col int) {
	if n == nil {
		return 1, 1
	}
	line, col = n.Line, n.Column
	if line < 1 || line > len(d.lines) || col < 1 || off < 0 || off > len(src) {
		return line, col
	}
	text := d.lines[line-1]
	at := 0 // byte offset of column col: columns count characters
	for i := 1; i < col && at < len(text); i++ {
		_, size := utf8.DecodeRuneInString(text[at:])
		at += size
	}
	if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
		at++
		col++
	}
	if at > len(text) || !strings.HasPrefix(text[at:], src) {
		return n.Line, n.Column
	}
	return line, col + utf8.RuneCountInString(src[:off])
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// syntaxError positions a YAML parser error.
func (d *dec) syntaxError(err error) {
	line := 1
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = yamlLineRE.ReplaceAllString(msg, "")
	msg = strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(msg), ":")), ":")
	// The parser's message does not always say tab ("found character
	// that cannot start any token" is a tab where a key or item starts),
	// and its line for one that does can be the line before: find the tab.
	near := []int{line, line + 1, line + 2, line - 1}
	if !strings.Contains(msg, "tab") {
		near = []int{line}
	}
	if strings.Contains(msg, "tab") || strings.Contains(msg, "cannot start any token") {
		if tl, tc, ok := d.findTab(near); ok {
			d.failAt(tl, tc, "", "bad YAML: a tab at %d:%d; YAML indents with spaces only; valid: indent with spaces", tl, tc)
			return
		}
	}
	d.failAt(line, 1, "", "bad YAML: %s; the study file must be a YAML mapping", strings.TrimSpace(msg))
}

// findTab finds the tab a YAML parser error is about on the lines given
// (1-based, in order of preference): one in the indentation (or after a
// "- ") first, else any. It gives the tab's line and column (columns count
// characters, from 1).
func (d *dec) findTab(lines []int) (tl, tc int, ok bool) {
	for _, indentOnly := range []bool{true, false} {
		for _, l := range lines {
			if l < 1 || l > len(d.lines) {
				continue
			}
			text := d.lines[l-1]
			at := strings.IndexByte(text, '\t')
			if at < 0 {
				continue
			}
			if lead := strings.TrimLeft(text[:at], " -"); indentOnly && lead != "" {
				continue
			}
			return l, utf8.RuneCountInString(text[:at]) + 1, true
		}
	}
	return 0, 0, false
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 10; i++ {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int":
			return "an integer (" + n.Value + ")"
		case "!!float":
			return "a number (" + n.Value + ")"
		case "!!bool":
			return "a boolean (" + n.Value + ")"
		case "!!null":
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "an unexpected node"
}

// mapNode is a YAML mapping with known keys.
type mapNode struct {
	d    *dec
	n    *yaml.Node
	path string
	vals map[string]*yaml.Node
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping checks that n is a mapping whose keys are all in allowed.
func (d *dec) mapping(n *yaml.Node, path string, allowed ...string) *mapNode {
	n = deref(n)
	m := &mapNode{d: d, n: n, path: path, vals: map[string]*yaml.Node{}}
	if n == nil {
		return m
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "got %s; valid: a mapping with keys %s", kindName(n), strings.Join(allowed, ", "))
		return m
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if !slices.Contains(allowed, key) {
			sorted := slices.Sorted(slices.Values(allowed))
			d.fail(k, join(path, key), "unknown field (did you mean %s?); valid: %s", engine.Nearest(key, allowed), strings.Join(sorted, ", "))
			continue
		}
		if _, dup := m.vals[key]; dup {
			d.fail(k, join(path, key), "given twice; valid: each field once")
			continue
		}
		m.vals[key] = v
	}
	return m
}

func (m *mapNode) has(key string) bool { _, ok := m.vals[key]; return ok }

func (m *mapNode) node(key string) *yaml.Node { return deref(m.vals[key]) }

// at returns the node to blame for key: its value, else the mapping.
func (m *mapNode) at(key string) *yaml.Node {
	if n := m.node(key); n != nil {
		return n
	}
	return m.n
}

func (m *mapNode) failKey(key, format string, args ...any) {
	m.d.fail(m.at(key), join(m.path, key), format, args...)
}

func scalarTag(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.ShortTag()
}

func (m *mapNode) str(key string, dst *string) bool {
	n := m.node(key)
	if n == nil {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		m.failKey(key, "got %s; valid: a string", kindName(n))
		return false
	}
	*dst = n.Value
	return true
}

func (d *dec) intOf(n *yaml.Node, path string) (int, bool) {
	if scalarTag(n) != "!!int" {
		d.fail(n, path, "got %s; valid: an integer", kindName(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil || v > math.MaxInt32 || v < math.MinInt32 {
		d.fail(n, path, "%s is out of range; valid: an integer within ±2147483647", n.Value)
		return 0, false
	}
	return int(v), true
}

func (m *mapNode) int(key string, dst *int) bool {
	n := m.node(key)
	if n == nil {
		return false
	}
	v, ok := m.d.intOf(n, join(m.path, key))
	if ok {
		*dst = v
	}
	return ok
}

func (d *dec) floatOf(n *yaml.Node, path string) (float64, bool) {
	t := scalarTag(n)
	if t != "!!int" && t != "!!float" {
		d.fail(n, path, "got %s; valid: a number", kindName(n))
		return 0, false
	}
	var v float64
	if err := n.Decode(&v); err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		d.fail(n, path, "%s is not a finite number; valid: a number", n.Value)
		return 0, false
	}
	return v, true
}

func (m *mapNode) float(key string, dst *float64) bool {
	n := m.node(key)
	if n == nil {
		return false
	}
	v, ok := m.d.floatOf(n, join(m.path, key))
	if ok {
		*dst = v
	}
	return ok
}

func (m *mapNode) bool(key string, dst *bool) bool {
	n := m.node(key)
	if n == nil {
		return false
	}
	if scalarTag(n) != "!!bool" {
		m.failKey(key, "got %s; valid: true or false", kindName(n))
		return false
	}
	var v bool
	_ = n.Decode(&v)
	*dst = v
	return true
}

func (m *mapNode) duration(key string, dst *time.Duration) bool {
	n := m.node(key)
	if n == nil {
		return false
	}
	if scalarTag(n) != "!!str" {
		m.failKey(key, "got %s; valid: a Go duration such as 90s, 3m or 1h30m", kindName(n))
		return false
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		m.failKey(key, "%q is not a duration; valid: a Go duration such as 90s, 3m or 1h30m", n.Value)
		return false
	case v < 0:
		m.failKey(key, "%s is negative; valid: a duration >= 0 such as 90s, 3m or 1h30m", n.Value)
		return false
	}
	*dst = v
	return true
}

func (m *mapNode) list(key string) []*yaml.Node {
	n := m.node(key)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		m.failKey(key, "got %s; valid: a list", kindName(n))
		return nil
	}
	return n.Content
}

func (m *mapNode) intList(key string, dst *[]int) bool {
	n := m.node(key)
	if n == nil {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		m.failKey(key, "got %s; valid: a list of integers, e.g. [1, 16, 64]", kindName(n))
		return false
	}
	out := make([]int, 0, len(n.Content))
	ok := true
	for i, c := range n.Content {
		v, good := m.d.intOf(deref(c), fmt.Sprintf("%s[%d]", join(m.path, key), i))
		ok = ok && good
		out = append(out, v)
	}
	if ok {
		*dst = out
	}
	return ok
}

// scalarString gives a scalar's text for choices and flag values.
func (d *dec) scalarString(n *yaml.Node, path string) (string, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		if n == nil {
			d.failAt(1, 1, path, "missing value; valid: a string, number or boolean")
		} else {
			d.fail(n, path, "got %s; valid: a string, number or boolean", kindName(n))
		}
		return "", false
	}
	if n.ShortTag() == "!!bool" {
		var b bool
		_ = n.Decode(&b)
		return strconv.FormatBool(b), true
	}
	return n.Value, true
}

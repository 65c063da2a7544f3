package engine

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// HelpFlag is one option row of an engine's --help text.
type HelpFlag struct {
	// Spellings are the option's names in the order the help lists them
	// (-m, --model), negations left out.
	Spellings []string
	// Negations are llama.cpp's spellings that turn a switch off, listed in
	// the same row (-nocb, --no-cont-batching).
	Negations []string
	// Metavar is the value placeholder without its nargs decoration (N,
	// MODEL_PATH, {a,b}); "" for a switch.
	Metavar string
	// Choices are the values a closed list allows ({a,b,c} in argparse,
	// on|off|auto in llama.cpp).
	Choices []string
	// Nargs is "+" when the option takes one or more values.
	Nargs string
	// Default is the default the help states, as written ("" when it
	// states none).
	Default string
	// Line is the 1-based line the row starts on.
	Line int
}

// HelpError is a --help text that cannot be read; Line is 1-based.
type HelpError struct {
	Line int
	Msg  string
}

func (e *HelpError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// ParseHelp reads the option rows of an engine's --help text: argparse's
// layout for SGLang and vLLM, llama-server's table for llama.cpp.
func ParseHelp(engineName string, help []byte) ([]HelpFlag, error) {
	if engineName == LlamaCpp.Name {
		return ParseLlamaHelp(help)
	}
	return ParseArgparseHelp(help)
}

// helpRow is an option row with its continuation lines joined.
type helpRow struct {
	line       int
	invocation string
	text       string
}

// spellingRE is one option spelling: -x, --long-name, --snake_case.
var spellingRE = regexp.MustCompile(`^(--[A-Za-z0-9]|-[A-Za-z])[A-Za-z0-9_.+-]*$`)

// helpLines splits a help text into lines without line ends.
func helpLines(help []byte) []string {
	text := strings.ToValidUTF8(strings.ReplaceAll(string(help), "\r\n", "\n"), "\uFFFD")
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// splitInvocation cuts a row at the first run of two or more spaces: the
// option's spellings and placeholder before, the help text after.
func splitInvocation(s string) (inv, text string) {
	if i := strings.Index(s, "  "); i >= 0 {
		return s[:i], strings.TrimSpace(s[i:])
	}
	return s, ""
}

// ParseArgparseHelp reads the options of a Python argparse help text
// (python3 -m sglang.launch_server --help, vllm serve --help=all): a row is
// a line indented by two spaces that starts with a dash; its help text
// follows after two spaces or on the deeper indented lines below. The usage
// block, section titles and positional arguments are skipped; -h/--help is
// left out. The default is read from a trailing "(default: X)".
func ParseArgparseHelp(help []byte) ([]HelpFlag, error) {
	var rows []helpRow
	var cur *helpRow
	inUsage := false
	for i, line := range helpLines(help) {
		n := i + 1
		switch {
		case strings.HasPrefix(line, "usage:"):
			inUsage, cur = true, nil
		case strings.TrimSpace(line) == "":
			inUsage, cur = false, nil
		case inUsage:
		case strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "   "):
			inv, text := splitInvocation(line[2:])
			rows = append(rows, helpRow{line: n, invocation: inv, text: text})
			cur = &rows[len(rows)-1]
		case cur != nil && strings.HasPrefix(line, "   "):
			cur.text = strings.TrimSpace(cur.text + " " + strings.TrimSpace(line))
		default:
			cur = nil // a section title or description
		}
	}
	var out []HelpFlag
	for _, r := range rows {
		f, err := argparseRow(r)
		if err != nil {
			return nil, err
		}
		if slices.Contains(f.Spellings, "--help") {
			continue
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, &HelpError{Line: 1, Msg: "no option rows (a line indented two spaces that starts with -); valid: the output of the engine's --help"}
	}
	return out, nil
}

// splitSpellings splits an invocation at the ", " between spellings,
// not at those inside a placeholder's brackets: vLLM's placeholder for a
// Literal field that also takes any string is the Python list of the
// values, "--model-impl ['auto', 'terratorch', 'transformers', 'vllm']".
func splitSpellings(inv string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(inv); i++ {
		switch inv[i] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case ',':
			if depth == 0 && strings.HasPrefix(inv[i:], ", ") {
				parts = append(parts, inv[start:i])
				start = i + 2
			}
		}
	}
	return append(parts, inv[start:])
}

// pyListRE is a Python list of strings as a placeholder: ['a', 'b'].
var pyListRE = regexp.MustCompile(`^\['[^']*'(, '[^']*')*\]$`)

// argparseRow reads one row's invocation: spellings joined by ", ", each
// followed by the same placeholder when the option takes a value.
func argparseRow(r helpRow) (HelpFlag, error) {
	f := HelpFlag{Line: r.line, Default: statedDefault(r.text, true)}
	for _, part := range splitSpellings(r.invocation) {
		name, metavar, _ := strings.Cut(part, " ")
		if !spellingRE.MatchString(name) {
			return f, &HelpError{Line: r.line, Msg: fmt.Sprintf("%q is not an option spelling (-x or --name) in %q", name, r.invocation)}
		}
		f.Spellings = append(f.Spellings, name)
		if f.Metavar == "" && metavar != "" {
			f.Metavar = metavar
		}
	}
	if err := f.readMetavar(); err != nil {
		return f, err
	}
	return f, nil
}

// readMetavar takes the nargs decoration off Metavar ("X [X ...]" is one
// or more values, "[X ...]" any number, "[X]" an optional one) and reads
// a {a,b,c} placeholder as choices.
func (f *HelpFlag) readMetavar() error {
	m := f.Metavar
	switch {
	case m == "":
		return nil
	case pyListRE.MatchString(m):
		// vLLM lists the usual values of an option that takes any string
		// (a Literal or str field): one value, not a closed list.
		return nil
	case strings.HasSuffix(m, " ...]"):
		f.Nargs = "+"
		if strings.HasPrefix(m, "[") {
			m = strings.TrimSuffix(strings.TrimPrefix(m, "["), " ...]")
		} else {
			m, _, _ = strings.Cut(m, " ")
		}
	case strings.HasPrefix(m, "[") && strings.HasSuffix(m, "]"):
		m = m[1 : len(m)-1]
	case strings.Contains(m, " "):
		// nargs=N: several values follow the flag.
		f.Nargs = "+"
		m, _, _ = strings.Cut(m, " ")
	}
	f.Metavar = m
	if strings.HasPrefix(m, "{") {
		if !strings.HasSuffix(m, "}") || len(m) < 3 {
			return &HelpError{Line: f.Line, Msg: fmt.Sprintf("%s: choices %q are not closed by }", f.Spellings[0], m)}
		}
		f.Choices = strings.Split(m[1:len(m)-1], ",")
	}
	return nil
}

// statedDefault returns the X of "(default: X)" in a help text ("" when
// there is none): the last one when last is set (argparse appends it),
// else the first (llama.cpp states it mid-text, before "(env: ...)").
// Parentheses inside X are kept balanced.
func statedDefault(text string, last bool) string {
	const key = "(default: "
	i := strings.Index(text, key)
	if last {
		i = strings.LastIndex(text, key)
	}
	if i < 0 {
		return ""
	}
	rest := text[i+len(key):]
	depth := 0
	for j, c := range rest {
		switch c {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				return strings.TrimSpace(rest[:j])
			}
			depth--
		}
	}
	return strings.TrimSpace(rest)
}

// llamaRowRE is a llama-server help row: spellings joined by ", " (padded
// with spaces after the comma), an optional placeholder, then the help text
// after two or more spaces.
var llamaRowRE = regexp.MustCompile(`^(-[^ ,]+(?:,\s+-[^ ,]+)*)(?: ([^ ].*?))?(?:\s{2,}(.*))?$`)

// ParseLlamaHelp reads llama-server's --help table: a row starts at column
// 0 with a dash ("-c,    --ctx-size N   size of the prompt context
// (default: 4096)"), its help text continues on indented lines, and
// "----- ... -----" lines are section titles. In a row that lists a
// switch's --no-NAME, that spelling and the ones after it are negations
// (-cb, --cont-batching, -nocb, --no-cont-batching). A placeholder like
// [on|off|auto] or {a,b} is a closed list; "(env: LLAMA_ARG_...)" notes are
// read past. -h/--help is left out.
func ParseLlamaHelp(help []byte) ([]HelpFlag, error) {
	var rows []helpRow
	var cur *helpRow
	for i, line := range helpLines(help) {
		n := i + 1
		switch {
		case strings.HasPrefix(line, "-----"), strings.TrimSpace(line) == "":
			cur = nil
		case strings.HasPrefix(line, "-"):
			rows = append(rows, helpRow{line: n, invocation: line})
			cur = &rows[len(rows)-1]
		case cur != nil && strings.HasPrefix(line, " "):
			cur.text = strings.TrimSpace(cur.text + " " + strings.TrimSpace(line))
		default:
			cur = nil
		}
	}
	var out []HelpFlag
	for _, r := range rows {
		m := llamaRowRE.FindStringSubmatch(r.invocation)
		if m == nil {
			return nil, &HelpError{Line: r.line, Msg: fmt.Sprintf("cannot read option row %q", r.invocation)}
		}
		text := strings.TrimSpace(m[3] + " " + r.text)
		f := HelpFlag{Line: r.line, Metavar: m[2], Default: statedDefault(text, false)}
		var names []string
		for _, s := range strings.Split(m[1], ",") {
			s = strings.TrimSpace(s)
			if !spellingRE.MatchString(s) {
				return nil, &HelpError{Line: r.line, Msg: fmt.Sprintf("%q is not an option spelling (-x or --name) in %q", s, m[1])}
			}
			names = append(names, s)
		}
		f.Spellings, f.Negations = splitNegations(names)
		if slices.Contains(f.Spellings, "--help") {
			continue
		}
		if len(f.Negations) > 0 && f.Metavar != "" {
			return nil, &HelpError{Line: r.line, Msg: fmt.Sprintf("%s has negations (%s) but takes a value (%s); valid: a switch", f.Spellings[len(f.Spellings)-1], strings.Join(f.Negations, ", "), f.Metavar)}
		}
		if err := f.readLlamaMetavar(); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, &HelpError{Line: 1, Msg: "no option rows (a line that starts with -); valid: the output of llama-server --help"}
	}
	return out, nil
}

// splitNegations splits llama.cpp's spellings of one switch into those that
// turn it on and those that turn it off: with both --NAME and --no-NAME in
// the row, every spelling after --NAME is a negation.
func splitNegations(names []string) (on, off []string) {
	for i, n := range names {
		if rest, ok := strings.CutPrefix(n, "--no-"); ok && i > 0 {
			if j := slices.Index(names[:i], "--"+rest); j >= 0 {
				return names[:j+1], names[j+1:]
			}
		}
	}
	return names, nil
}

// readLlamaMetavar reads a closed list from a placeholder like
// [on|off|auto], {on,off} or <a|b>; llama.cpp takes one value per flag.
func (f *HelpFlag) readLlamaMetavar() error {
	m := f.Metavar
	if len(m) < 3 {
		return nil
	}
	open, end := m[0], m[len(m)-1]
	if !(open == '[' && end == ']' || open == '{' && end == '}' || open == '<' && end == '>') {
		return nil
	}
	inner := m[1 : len(m)-1]
	sep := "|"
	if !strings.Contains(inner, sep) {
		sep = ","
	}
	if !strings.Contains(inner, sep) {
		return nil
	}
	for _, c := range strings.Split(inner, sep) {
		if c = strings.TrimSpace(c); c == "" || strings.ContainsAny(c, " []{}<>") {
			return &HelpError{Line: f.Line, Msg: fmt.Sprintf("%s: cannot read the values in %q", f.Spellings[0], m)}
		}
		f.Choices = append(f.Choices, strings.TrimSpace(c))
	}
	return nil
}

// SchemaFromHelp builds a flag schema for an engine from the option rows of
// its --help. The help gives each flag's spellings, whether it takes a
// value (no placeholder: a bool switch), a closed list of values, nargs and
// a stated default. What a help text does not show is taken from base, the
// bundled schema of the same engine, by flag name: the owner (flags sgtune
// sets itself: --host, --port, the model path), the canonical name where
// the help lists several spellings, the value type, fold and
// human_readable where the help shows a value but no closed list, and
// whether the engine reads --flag=value. Without a base flag, a value's
// type comes from its stated default (an integer: int, a decimal: float),
// else it is str, which refuses nothing. A vLLM switch pair (--NAME,
// --no-NAME) becomes two switches, as the bundled vLLM schema lists them;
// llama.cpp's negations stay on their switch. base may be nil.
func SchemaFromHelp(engineName, version string, rows []HelpFlag, base *FlagSchema) (*FlagSchema, error) {
	s := &FlagSchema{Engine: engineName, Version: version}
	if base != nil {
		s.InlineValues = base.InlineValues
	}
	seen := map[string]int{}
	claim := func(line int, names ...string) error {
		for _, n := range names {
			if first, dup := seen[n]; dup {
				return &HelpError{Line: line, Msg: fmt.Sprintf("%s is listed twice (first on line %d)", n, first)}
			}
			seen[n] = line
		}
		return nil
	}
	for _, r := range rows {
		if len(r.Spellings) == 0 {
			return nil, &HelpError{Line: r.Line, Msg: "an option row without a spelling"}
		}
		if err := claim(r.Line, slices.Concat(r.Spellings, r.Negations)...); err != nil {
			return nil, err
		}
		var bf *FlagSpec
		if base != nil {
			for _, n := range r.Spellings {
				if b, ok := base.Lookup(n); ok && !base.IsNegation(n) {
					bf = b
					break
				}
			}
		}
		spellings, pair := r.Spellings, ""
		if r.Metavar == "" && len(r.Negations) == 0 {
			// argparse.BooleanOptionalAction: --NAME, --no-NAME.
			for i, n := range spellings {
				if rest, ok := strings.CutPrefix(n, "--no-"); ok && slices.Contains(spellings, "--"+rest) {
					pair = n
					spellings = slices.Delete(slices.Clone(spellings), i, i+1)
					break
				}
			}
		}
		f := FlagSpec{Name: canonicalName(spellings, bf), Negations: r.Negations, Choices: r.Choices, Nargs: r.Nargs}
		for _, n := range spellings {
			if n != f.Name {
				f.Aliases = append(f.Aliases, n)
			}
		}
		if bf != nil {
			f.Owner = bf.Owner
		}
		f.Type, f.Default = helpType(r, bf)
		if bf != nil && len(f.Choices) > 0 && bf.Fold {
			f.Fold = true
		}
		if bf != nil && f.Type == "int" && bf.Type == "int" {
			f.HumanReadable = bf.HumanReadable
		}
		s.Flags = append(s.Flags, f)
		if pair != "" {
			s.Flags = append(s.Flags, FlagSpec{Name: pair, Type: "bool"})
		}
	}
	return s, nil
}

// canonicalName picks a flag's name among its spellings: the base schema's
// name when the help lists it, else the first long spelling, else the
// first.
func canonicalName(spellings []string, bf *FlagSpec) string {
	if bf != nil && slices.Contains(spellings, bf.Name) {
		return bf.Name
	}
	for _, n := range spellings {
		if strings.HasPrefix(n, "--") {
			return n
		}
	}
	return spellings[0]
}

var (
	intRE   = regexp.MustCompile(`^[+-]?\d+$`)
	floatRE = regexp.MustCompile(`^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$`)
)

// helpType returns a flag's type and its default as the schema states it.
func helpType(r HelpFlag, bf *FlagSpec) (typ, def string) {
	d := r.Default
	if r.Metavar == "" {
		switch strings.ToLower(d) {
		case "false", "disabled", "off":
			return "bool", "off"
		case "true", "enabled", "on":
			return "bool", "on"
		}
		return "bool", ""
	}
	if d == "None" || d == "null" || d == "''" || d == `""` {
		d = ""
	}
	switch {
	case len(r.Choices) > 0:
		return "str", d
	case bf != nil && bf.Type != "bool":
		return bf.Type, d
	case intRE.MatchString(d):
		return "int", d
	case floatRE.MatchString(d):
		return "float", d
	}
	return "str", d
}

// MarshalSchema writes a flag schema in the layout of the bundled
// engine/flags/*.yaml files: engine, version, inline_values when false,
// then one flow mapping per flag. header is written first as comment
// lines.
func MarshalSchema(s *FlagSchema, header string) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		if header == "" {
			break
		}
		b.WriteString(strings.TrimRight("# "+printable(l), " ") + "\n")
	}
	fmt.Fprintf(&b, "engine: %s\nversion: %s\n", yamlScalar(s.Engine), yamlScalar(s.Version))
	if !s.Inline() {
		b.WriteString("inline_values: false\n")
	}
	b.WriteString("flags:\n")
	for _, f := range s.Flags {
		kv := []string{"name: " + yamlScalar(f.Name)}
		if len(f.Aliases) > 0 {
			kv = append(kv, "aliases: "+yamlList(f.Aliases))
		}
		if len(f.Negations) > 0 {
			kv = append(kv, "negations: "+yamlList(f.Negations))
		}
		kv = append(kv, "type: "+f.Type)
		if len(f.Choices) > 0 {
			kv = append(kv, "choices: "+yamlList(f.Choices))
		}
		if f.Fold {
			kv = append(kv, "fold: true")
		}
		if f.Nargs != "" {
			kv = append(kv, "nargs: "+yamlScalar(f.Nargs))
		}
		if f.HumanReadable {
			kv = append(kv, "human_readable: true")
		}
		if f.Owner != "" {
			kv = append(kv, "owner: "+yamlScalar(f.Owner))
		}
		if f.Default != "" {
			kv = append(kv, "default: "+yamlScalar(f.Default))
		}
		b.WriteString("  - {" + strings.Join(kv, ", ") + "}\n")
	}
	return b.Bytes()
}

// printable replaces what a YAML comment cannot hold (control
// characters, invalid UTF-8) with '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, strings.ToValidUTF8(s, "?"))
}

func yamlList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = yamlScalar(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// plainRE is text YAML reads back as the same string when written plain,
// in a flow collection too.
var plainRE = regexp.MustCompile(`^(--?[A-Za-z]|[A-Za-z_/])[A-Za-z0-9_./+-]*$`)

// yamlWords are plain words YAML reads as something other than a string.
var yamlWords = map[string]bool{"true": true, "false": true, "yes": true, "no": true, "on": true, "off": true,
	"y": true, "n": true, "null": true, "~": true}

// yamlScalar writes a string so that YAML reads it back unchanged: plain
// where that is safe, else double-quoted.
func yamlScalar(v string) string {
	if plainRE.MatchString(v) && !yamlWords[strings.ToLower(v)] {
		return v
	}
	return strconv.Quote(v)
}

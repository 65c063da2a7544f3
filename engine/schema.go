package engine

import (
	"bytes"
	"embed"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// schemaFS holds the bundled flag schemas, one file per engine and version
// (flags/ENGINE-VERSION.yaml). The same files live in testdata/flags/
// (go:embed cannot reach above the package); a test keeps the two copies
// byte-identical.
//
//go:embed flags/*.yaml
var schemaFS embed.FS

// FlagSpec describes one engine flag.
type FlagSpec struct {
	Name          string   `yaml:"name"`
	Aliases       []string `yaml:"aliases"`
	Type          string   `yaml:"type"` // int | float | str | bool
	Choices       []string `yaml:"choices"`
	Fold          bool     `yaml:"fold"`  // choices compare upper-cased
	Known         []string `yaml:"known"` // open list of known values
	Min           *float64 `yaml:"min"`
	Max           *float64 `yaml:"max"`
	Nargs         string   `yaml:"nargs"`
	HumanReadable bool     `yaml:"human_readable"`
	Owner         string   `yaml:"owner"` // "", study, launcher
	Deprecated    string   `yaml:"deprecated"`
	// Negations are spellings that turn a bool flag off (llama.cpp's
	// --no-cont-batching, -nocb). Where the default is on, only a negation
	// can turn the flag off.
	Negations []string `yaml:"negations"`
	// Default is what the engine uses when the flag is absent, as text
	// ("on", "2048", "auto"); "" when the schema does not say.
	Default string `yaml:"default"`

	// offSwitch is the separate switch --no-NAME that turns this one off
	// where the schema lists both (vLLM's argparse.BooleanOptionalAction
	// flags, each written as two switches); onSwitch is, on that --no-NAME,
	// the --NAME it turns off.
	offSwitch, onSwitch string
}

// Setting names the engine setting the flag writes: the flag itself, or,
// for a --no-NAME switch listed beside its --NAME (vLLM's
// BooleanOptionalAction pairs), --NAME. Two flags with one setting set the
// same thing: argparse keeps whichever comes last.
func (f *FlagSpec) Setting() string {
	if f.onSwitch != "" {
		return f.onSwitch
	}
	return f.Name
}

// DefaultOn reports whether a bool flag is on when absent (its Default
// says "on", optionally followed by a remark).
func (f *FlagSpec) DefaultOn() bool { return defaultIs(f.Default, "on", "true") }

// DefaultOff reports whether a bool flag is off when absent (its Default
// says "off", optionally followed by a remark).
func (f *FlagSpec) DefaultOff() bool { return defaultIs(f.Default, "off", "false") }

func defaultIs(d string, words ...string) bool {
	d = strings.ToLower(strings.TrimSpace(d))
	for _, w := range words {
		if d == w || strings.HasPrefix(d, w+" ") {
			return true
		}
	}
	return false
}

// Negation is the spelling that turns a bool flag off: its first long
// negation, else its first negation, else its --no-NAME switch (see
// offSwitch); "" when it has none.
func (f *FlagSpec) Negation() string {
	for _, n := range f.Negations {
		if strings.HasPrefix(n, "--") {
			return n
		}
	}
	if len(f.Negations) > 0 {
		return f.Negations[0]
	}
	return f.offSwitch
}

// SwitchWords are the words that set a bool flag to on (or off) when it
// may differ from the engine's default: nothing for the stated default,
// the flag for on, its negation for off. Where the schema does not say the
// default, off is written too (vLLM's prefix caching defaults on or off by
// model and version: leaving the switch out would measure whichever the
// engine picked). A flag with no negation has no way to be written off:
// nothing.
func (f *FlagSpec) SwitchWords(on bool) []string {
	switch {
	case on && f.DefaultOn():
		return nil
	case on:
		return []string{f.Name}
	case !f.DefaultOff() && f.Negation() != "":
		return []string{f.Negation()}
	}
	return nil
}

// FlagSchema is a versioned set of engine flags.
type FlagSchema struct {
	Engine  string     `yaml:"engine"`
	Version string     `yaml:"version"`
	Flags   []FlagSpec `yaml:"flags"`
	// InlineValues says whether the engine reads --flag=value as the flag
	// and its value (argparse does; nil means yes). llama.cpp looks the
	// whole word up, so --port=8080 is an unknown argument there.
	InlineValues *bool `yaml:"inline_values"`

	// Source names where the schema came from (bundled file or path).
	Source  string `yaml:"-"`
	byName  map[string]*FlagSpec
	negated map[string]bool // spellings that are negations
}

// Inline reports whether the engine accepts --flag=value.
func (s *FlagSchema) Inline() bool { return s.InlineValues == nil || *s.InlineValues }

// IsNegation reports whether name is a spelling that turns a bool flag off.
func (s *FlagSchema) IsNegation(name string) bool { return s.negated[name] }

// ParseFlagSchema decodes a flag schema document.
func ParseFlagSchema(data []byte, source string) (*FlagSchema, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s FlagSchema
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("flag schema %s: %w", source, err)
	}
	s.Source = source
	s.byName = map[string]*FlagSpec{}
	s.negated = map[string]bool{}
	for i := range s.Flags {
		f := &s.Flags[i]
		switch f.Type {
		case "int", "float", "str", "bool":
		default:
			return nil, fmt.Errorf("flag schema %s: %s: type %q; valid: int, float, str, bool", source, f.Name, f.Type)
		}
		if len(f.Negations) > 0 && f.Type != "bool" {
			return nil, fmt.Errorf("flag schema %s: %s has negations but is a %s; valid: negations on bool flags only", source, f.Name, f.Type)
		}
		for _, n := range f.Negations {
			s.negated[n] = true
		}
		for _, n := range slices.Concat([]string{f.Name}, f.Aliases, f.Negations) {
			if !isFlagName(n) {
				return nil, fmt.Errorf("flag schema %s: %q is not a flag name (--name or -n)", source, n)
			}
			if _, dup := s.byName[n]; dup {
				return nil, fmt.Errorf("flag schema %s: %s listed twice", source, n)
			}
			s.byName[n] = f
		}
	}
	for i := range s.Flags {
		f := &s.Flags[i]
		if off, ok := s.byName["--no-"+strings.TrimPrefix(f.Name, "--")]; ok && f.Type == "bool" && len(f.Negations) == 0 &&
			strings.HasPrefix(f.Name, "--") && off.Type == "bool" && off.Name != f.Name {
			f.offSwitch = off.Name
			off.onSwitch = f.Name
		}
	}
	return &s, nil
}

// Schema returns the engine's bundled flag schema for a version ("v0.5.21",
// or any text holding one, such as an image tag); ok is false when that
// version has none and the default version's schema was returned instead.
func (e *Engine) Schema(version string) (s *FlagSchema, ok bool, err error) {
	v := e.DefaultVersion
	if m := versionRE.FindString(version); m != "" {
		v = "v" + strings.TrimPrefix(m, "v")
	}
	data, rerr := schemaFS.ReadFile("flags/" + e.Name + "-" + v + ".yaml")
	ok = rerr == nil
	if !ok {
		v = e.DefaultVersion
		if data, err = schemaFS.ReadFile("flags/" + e.Name + "-" + v + ".yaml"); err != nil {
			return nil, false, err
		}
	}
	s, err = ParseFlagSchema(data, "bundled "+e.Name+"-"+v)
	if err == nil && s.Engine != e.Name {
		err = fmt.Errorf("flag schema %s is for engine %q", s.Source, s.Engine)
	}
	return s, ok, err
}

// versionRE picks a version (v0.5.21, 0.11.2, b6980) out of a version
// string or image tag.
var versionRE = regexp.MustCompile(`v?\d+\.\d+\.\d+|\bb\d{3,}\b`)

// BundledFiles lists the bundled schema files (flags/NAME.yaml) with their
// contents, for tests that keep testdata/flags/ identical.
func BundledFiles() (map[string][]byte, error) {
	ents, err := schemaFS.ReadDir("flags")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, e := range ents {
		b, err := schemaFS.ReadFile("flags/" + e.Name())
		if err != nil {
			return nil, err
		}
		out[e.Name()] = b
	}
	return out, nil
}

// LoadSchemaFile reads a study's own flag schema file.
func LoadSchemaFile(path string) (*FlagSchema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseFlagSchema(data, path)
}

// Lookup finds a flag by name or alias.
func (s *FlagSchema) Lookup(name string) (*FlagSpec, bool) {
	f, ok := s.byName[name]
	return f, ok
}

// Closest returns the known flag name nearest to name (edit distance,
// preferring a flag name that name is a prefix of, as argparse would).
func (s *FlagSchema) Closest(name string) string {
	names := slices.Sorted(maps.Keys(s.byName))
	var prefixed []string
	for _, n := range names {
		if strings.HasPrefix(n, name) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) > 0 {
		sort.Slice(prefixed, func(i, j int) bool { return len(prefixed[i]) < len(prefixed[j]) })
		if s.negated[prefixed[0]] {
			return prefixed[0]
		}
		return s.byName[prefixed[0]].Name
	}
	return Nearest(name, names)
}

// Nearest returns, for "did you mean" hints, the candidate that holds s
// (three characters or more), else the one with the smallest edit
// distance to s.
func Nearest(s string, candidates []string) string {
	best, bestD, bestIn := "", math.MaxInt, false
	for _, c := range candidates {
		// A candidate that holds what was typed ("tok_s" in
		// "output_tok_s") is what was meant, however much longer.
		in := len(s) >= 3 && strings.Contains(c, s)
		if d := editDistance(s, c); (in && !bestIn) || (in == bestIn && d < bestD) {
			best, bestD, bestIn = c, d, in
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ValueError is a value a flag does not take: the flag is known and
// written right, the value is what is wrong (a study blames the value's
// place in the file, not the flag's).
type ValueError struct {
	Flag  string // canonical name
	Value string
	msg   string
}

func (e *ValueError) Error() string { return e.msg }

func (f *FlagSpec) valueError(v, format string, args ...any) error {
	return &ValueError{Flag: f.Name, Value: v, msg: fmt.Sprintf(format, args...)}
}

// ValidateValue checks one value of the flag; it returns what is wrong and
// what is valid, as a *ValueError.
func (f *FlagSpec) ValidateValue(v string) error {
	switch f.Type {
	case "bool":
		return f.valueError(v, "%s is a switch and takes no value (got %q)", f.Name, v)
	case "int":
		n, err := parseHumanInt(v, f.HumanReadable)
		if err != nil {
			valid := "an integer"
			if f.HumanReadable {
				valid += " (16k, 1Ki accepted)"
			}
			return f.valueError(v, "%s %q is not an integer; valid: %s", f.Name, v, valid)
		}
		return f.checkRange(v, float64(n))
	case "float":
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return f.valueError(v, "%s %q is not a number; valid: a decimal number", f.Name, v)
		}
		return f.checkRange(v, x)
	}
	if len(f.Choices) > 0 {
		for _, c := range f.Choices {
			if c == v || (f.Fold && strings.EqualFold(c, v)) {
				return nil
			}
		}
		return f.valueError(v, "%s %q is not a valid choice (did you mean %s?); valid: %s",
			f.Name, v, Nearest(v, f.Choices), strings.Join(f.Choices, ", "))
	}
	return nil
}

func (f *FlagSpec) checkRange(v string, x float64) error {
	if f.Min != nil && x < *f.Min {
		return f.valueError(v, "%s %v is below %v; valid: >= %v", f.Name, x, *f.Min, *f.Min)
	}
	if f.Max != nil && x > *f.Max {
		return f.valueError(v, "%s %v is above %v; valid: <= %v", f.Name, x, *f.Max, *f.Max)
	}
	return nil
}

// parseHumanInt parses an int, optionally with SGLang's human_readable_int
// suffixes (k, M, G decimal; Ki, Mi, Gi binary).
func parseHumanInt(v string, human bool) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	if !human {
		return 0, fmt.Errorf("not an integer")
	}
	mult := map[string]int64{"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
	for _, suf := range []string{"Ki", "Mi", "Gi", "k", "K", "M", "G"} {
		if num, ok := strings.CutSuffix(v, suf); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return 0, err
			}
			return n * mult[suf], nil
		}
	}
	return 0, fmt.Errorf("not an integer")
}

// FlagArg is one flag occurrence in an argv.
type FlagArg struct {
	Name    string // as written
	Spec    *FlagSpec
	Values  []string // nil for a switch
	Negated bool     // a negation spelling (--no-cont-batching): the switch is off
}

// ParseArgv splits engine flags into occurrences using the schema. Unknown
// flags and malformed values are returned as errors.
func (s *FlagSchema) ParseArgv(argv []string) ([]FlagArg, error) {
	var out []FlagArg
	for i := 0; i < len(argv); i++ {
		tok := argv[i]
		name, inline, hasInline := strings.Cut(tok, "=")
		if !isFlagName(name) {
			return nil, fmt.Errorf("%q is not a flag; engine flags start with - or --", tok)
		}
		spec, ok := s.Lookup(name)
		if hasInline && !s.Inline() {
			if ok && spec.Type != "bool" {
				return nil, fmt.Errorf("%s: %s takes no --flag=value form (it reads the whole word as an unknown argument); valid: %s %s, the value as the next word", tok, s.Engine, name, inline)
			}
			if ok {
				return nil, fmt.Errorf("%s: %s takes no --flag=value form and %s is a switch; valid: %s alone", tok, s.Engine, name, name)
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown flag %s (did you mean %s?)", name, s.Closest(name))
		}
		a := FlagArg{Name: name, Spec: spec, Negated: s.negated[name]}
		switch {
		case spec.Type == "bool":
			if hasInline {
				return nil, fmt.Errorf("%s is a switch and takes no value (got %q)", name, inline)
			}
			if i+1 < len(argv) && !s.isFlag(argv[i+1]) {
				return nil, fmt.Errorf("%q is not a flag: %s is a switch and takes no value; valid: %s", argv[i+1], name, s.switchForms(spec))
			}
		case hasInline:
			a.Values = []string{inline}
		default:
			for i+1 < len(argv) && !s.isFlag(argv[i+1]) {
				i++
				a.Values = append(a.Values, argv[i])
				if spec.Nargs != "+" {
					break
				}
			}
			if len(a.Values) == 0 {
				return nil, fmt.Errorf("%s needs a value", name)
			}
		}
		for _, v := range a.Values {
			if err := spec.ValidateValue(v); err != nil {
				return nil, err
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// switchForms says how a switch is written on and, when it can be, off.
func (s *FlagSchema) switchForms(f *FlagSpec) string {
	if n := f.Negation(); n != "" {
		return fmt.Sprintf("%s alone to turn it on, %s to turn it off", f.Name, n)
	}
	return f.Name + " alone to turn it on, or leave it out"
}

// isFlagName reports whether s looks like a flag: --name or -n (a dash and
// a letter; "-1" is a negative number, a value).
func isFlagName(s string) bool {
	if strings.HasPrefix(s, "--") {
		return len(s) > 2
	}
	return len(s) > 1 && s[0] == '-' && (s[1] >= 'a' && s[1] <= 'z' || s[1] >= 'A' && s[1] <= 'Z')
}

// isFlag reports whether an argv word starts a new flag rather than being a
// value: a long flag, or a short one the schema knows (so "-1" and "-"
// stay values).
func (s *FlagSchema) isFlag(word string) bool {
	name := word
	if s.Inline() {
		name, _, _ = strings.Cut(word, "=")
	}
	if strings.HasPrefix(name, "--") {
		return true
	}
	_, known := s.byName[name]
	return known
}

package report

import (
	"fmt"
	"strings"

	"github.com/sgtune/sgtune/space"
)

// FlagError says which exported flag the engine's flag schema rejects.
type FlagError struct {
	Flag    string // as written, e.g. --ep-sise
	Closest string // nearest valid flag for an unknown one, else ""
	Schema  string // where the schema came from
	Err     error  // what is wrong with the flag or its value
}

// Error implements error.
func (e *FlagError) Error() string {
	if e.Closest != "" {
		return fmt.Sprintf("flag %s is not in the flag schema (%s); closest valid flag: %s", e.Flag, e.Schema, e.Closest)
	}
	return fmt.Sprintf("flag %s: %v (flag schema %s)", e.Flag, e.Err, e.Schema)
}

// Unwrap returns the underlying problem.
func (e *FlagError) Unwrap() error { return e.Err }

// CheckFlags validates every flag and value of an exported command line
// against the engine's flag schema, the way the engine's argument parser
// would read them: names and aliases, --flag=value, switches without a
// value, nargs "+" lists, types, choices and bounds.
func CheckFlags(s *space.FlagSchema, flags []string) error {
	for i := 0; i < len(flags); i++ {
		tok := flags[i]
		name, inline, hasInline := strings.Cut(tok, "=")
		if !strings.HasPrefix(name, "--") {
			return &FlagError{Flag: tok, Schema: s.Source, Err: fmt.Errorf("%q is not a flag; engine flags start with --", tok)}
		}
		spec, ok := s.Lookup(name)
		if !ok {
			return &FlagError{Flag: name, Closest: s.Closest(name), Schema: s.Source, Err: fmt.Errorf("unknown flag %s", name)}
		}
		var values []string
		switch {
		case spec.Type == "bool":
			if hasInline {
				return &FlagError{Flag: name, Schema: s.Source, Err: fmt.Errorf("a switch takes no value (got %q)", inline)}
			}
		case hasInline:
			values = []string{inline}
		default:
			for i+1 < len(flags) && !strings.HasPrefix(flags[i+1], "--") {
				i++
				values = append(values, flags[i])
				if spec.Nargs != "+" {
					break
				}
			}
			if len(values) == 0 {
				return &FlagError{Flag: name, Schema: s.Source, Err: fmt.Errorf("needs a value (%s)", spec.Type)}
			}
		}
		for _, v := range values {
			if err := spec.ValidateValue(v); err != nil {
				return &FlagError{Flag: name, Schema: s.Source, Err: err}
			}
		}
	}
	return nil
}

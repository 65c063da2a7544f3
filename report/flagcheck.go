package report

import (
	"fmt"
	"strings"

	"github.com/sgtune/sgtune/engine"
)

// FlagError says which exported flag the engine's flag schema rejects.
type FlagError struct {
	Flag    string // the unknown flag as written, e.g. --ep-sise; "" for a bad value
	Closest string // nearest valid flag for an unknown one, else ""
	Schema  string // where the schema came from
	Err     error  // what the engine's argument parser would say
}

// Error implements error.
func (e *FlagError) Error() string {
	if e.Closest != "" {
		return fmt.Sprintf("flag %s is not in the flag schema (%s); closest valid flag: %s", e.Flag, e.Schema, e.Closest)
	}
	return fmt.Sprintf("%v (flag schema %s)", e.Err, e.Schema)
}

// Unwrap returns the underlying problem.
func (e *FlagError) Unwrap() error { return e.Err }

// CheckFlags validates every flag and value of an exported command line
// against the engine's flag schema, the way the engine's argument parser
// reads them (engine.FlagSchema.ParseArgv: names and aliases, --flag=value,
// switches, nargs lists, types, choices and bounds). An unknown flag comes
// back with the closest valid one.
func CheckFlags(s *engine.FlagSchema, flags []string) error {
	_, err := s.ParseArgv(flags)
	if err == nil {
		return nil
	}
	fe := &FlagError{Schema: s.Source, Err: err}
	for _, tok := range flags {
		name, _, _ := strings.Cut(tok, "=")
		if strings.HasPrefix(name, "--") && len(name) > 2 {
			if _, ok := s.Lookup(name); !ok {
				fe.Flag, fe.Closest = name, s.Closest(name)
				break
			}
		}
	}
	return fe
}

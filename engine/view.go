package engine

import (
	"strconv"
	"strings"
)

// View holds a config's engine flags by canonical name (aliases resolved
// through the schema); a switch maps to an empty, non-nil slice, a switch
// turned off by its negation (--no-cont-batching) to a nil one. The last
// occurrence of a flag wins. Flags the schema does not know are left out.
type View map[string][]string

// NewView parses flags with the schema.
func NewView(s *FlagSchema, flags []string) View {
	v := View{}
	for i := 0; i < len(flags); i++ {
		name, inline, hasInline := flags[i], "", false
		if s.Inline() {
			name, inline, hasInline = strings.Cut(flags[i], "=")
		}
		spec, ok := s.Lookup(name)
		if !ok {
			continue
		}
		vals := []string{}
		switch {
		case s.IsNegation(name):
			vals = nil
		case spec.Type == "bool":
		case hasInline:
			vals = append(vals, inline)
		default:
			for i+1 < len(flags) && !s.isFlag(flags[i+1]) {
				i++
				vals = append(vals, flags[i])
				if spec.Nargs != "+" {
					break
				}
			}
		}
		v[spec.Name] = vals
	}
	return v
}

// On reports whether the flag is present (and, for a switch, not turned
// off by its negation).
func (v View) On(name string) bool { vals, ok := v[name]; return ok && vals != nil }

// Switch reports whether a switch is on: def when it is absent.
func (v View) Switch(name string, def bool) bool {
	vals, ok := v[name]
	if !ok {
		return def
	}
	return vals != nil
}

// Str returns the flag's first value.
func (v View) Str(name string) (string, bool) {
	vals, ok := v[name]
	if !ok || len(vals) == 0 {
		return "", false
	}
	return vals[0], true
}

// Int returns the flag's value as an int (human-readable suffixes such as
// 16k accepted), or def when the flag is absent or not an integer.
func (v View) Int(name string, def int) (int, bool) {
	s, ok := v.Str(name)
	if !ok {
		return def, false
	}
	n, err := parseHumanInt(s, true)
	if err != nil {
		return def, false
	}
	return int(n), true
}

// Float returns the flag's value as a float, or def.
func (v View) Float(name string, def float64) (float64, bool) {
	s, ok := v.Str(name)
	if !ok {
		return def, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return def, false
	}
	return f, true
}

package objective

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
)

// Schema is the subset of JSON Schema the quality gates use: type,
// properties, required, additionalProperties (false only), enum, items,
// minimum/maximum, minLength/maxLength and minItems/maxItems.
type Schema struct {
	Type                 string             `json:"type,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
	Enum                 []any              `json:"enum,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	MinLength            *int               `json:"minLength,omitempty"`
	MaxLength            *int               `json:"maxLength,omitempty"`
	MinItems             *int               `json:"minItems,omitempty"`
	MaxItems             *int               `json:"maxItems,omitempty"`
	Description          string             `json:"description,omitempty"`
}

// ValidateJSON parses doc and checks it against s.
func (s *Schema) ValidateJSON(doc string) error {
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// Validate checks a decoded JSON value (encoding/json types) against s.
func (s *Schema) Validate(v any) error { return s.validate("$", v) }

func (s *Schema) validate(path string, v any) error {
	if s == nil {
		return nil
	}
	if len(s.Enum) > 0 {
		found := false
		for _, e := range s.Enum {
			if jsonEqual(e, v) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%s: %v not in enum %v", path, v, s.Enum)
		}
	}
	switch s.Type {
	case "":
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want object, got %s", path, jsonType(v))
		}
		for _, r := range s.Required {
			if _, ok := m[r]; !ok {
				return fmt.Errorf("%s: missing required %q", path, r)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			ps, ok := s.Properties[k]
			if !ok {
				if s.AdditionalProperties != nil && !*s.AdditionalProperties {
					return fmt.Errorf("%s: unexpected property %q", path, k)
				}
				continue
			}
			if err := ps.validate(path+"."+k, m[k]); err != nil {
				return err
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want array, got %s", path, jsonType(v))
		}
		if s.MinItems != nil && len(a) < *s.MinItems {
			return fmt.Errorf("%s: %d items < minItems %d", path, len(a), *s.MinItems)
		}
		if s.MaxItems != nil && len(a) > *s.MaxItems {
			return fmt.Errorf("%s: %d items > maxItems %d", path, len(a), *s.MaxItems)
		}
		for i, e := range a {
			if err := s.Items.validate(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s: want string, got %s", path, jsonType(v))
		}
		n := len([]rune(str))
		if s.MinLength != nil && n < *s.MinLength {
			return fmt.Errorf("%s: length %d < minLength %d", path, n, *s.MinLength)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			return fmt.Errorf("%s: length %d > maxLength %d", path, n, *s.MaxLength)
		}
	case "integer", "number":
		f, ok := v.(float64)
		if !ok {
			return fmt.Errorf("%s: want %s, got %s", path, s.Type, jsonType(v))
		}
		if s.Type == "integer" && f != math.Trunc(f) {
			return fmt.Errorf("%s: want integer, got %v", path, f)
		}
		if s.Minimum != nil && f < *s.Minimum {
			return fmt.Errorf("%s: %v < minimum %v", path, f, *s.Minimum)
		}
		if s.Maximum != nil && f > *s.Maximum {
			return fmt.Errorf("%s: %v > maximum %v", path, f, *s.Maximum)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want boolean, got %s", path, jsonType(v))
		}
	case "null":
		if v != nil {
			return fmt.Errorf("%s: want null, got %s", path, jsonType(v))
		}
	default:
		return fmt.Errorf("%s: unsupported schema type %q", path, s.Type)
	}
	return nil
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func jsonEqual(a, b any) bool {
	ab, err1 := json.Marshal(a)
	bb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ab) == string(bb)
}

package space

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/engine"
)

// Baseline is the engine's default config of a study (budget.baseline:
// default): the model and the fixed flags, every param at the value that
// passes the engine no flag, else at its default:, and a param with
// neither left to the engine, its flag absent.
type Baseline struct {
	// Config is what is launched. Its Params hold the values the study
	// knows the engine runs (a flagless value, or default:); Omitted
	// params are not among them. Its Flags are the model flag, the fixed
	// flags and the derived flags that the flagless values give (derived
	// flags read no default: value and no omitted param: the engine
	// derives its own).
	Config *Config
	// Omitted are the active params with neither a flagless value nor a
	// default:: what the engine runs for them is its own business, and
	// the config is no point of the space.
	Omitted []string
}

// InSpace reports whether every active param has a value: Config.Params
// is then a point of the space, which models may learn from like any
// other measured config.
func (b *Baseline) InSpace() bool { return len(b.Omitted) == 0 }

// Describe says what the baseline sets, for progress lines and check:
// "radix_cache=true speculative=none; ep, mem_fraction left to the engine".
func (b *Baseline) Describe() string {
	var parts []string
	if len(b.Config.Params) > 0 {
		parts = append(parts, b.Config.Params.String())
	}
	if len(b.Omitted) > 0 {
		parts = append(parts, strings.Join(b.Omitted, ", ")+" left to the engine")
	}
	if len(parts) == 0 {
		return "no params"
	}
	return strings.Join(parts, "; ")
}

// Baseline resolves the study's engine-default config, with what l learned
// from earlier trials (nil: the rules and the memory hint alone). It does
// not depend on budget.baseline: the caller decides whether to launch it.
func (s *Study) Baseline(l engine.Learned) (*Baseline, error) {
	b := &Baseline{Config: &Config{Params: Params{}, Env: maps.Clone(s.Engine.Env)}}
	kind := s.Engine.Kind
	words := []string{kind.ModelFlag, s.Model}
	if s.ServedModelName != "" {
		words = append(words, kind.ServedNameFlag, s.ServedModelName)
	}
	words = append(words, s.fixedArgv...)
	// flagless holds the params at a value that passes no flag: derived
	// flags read those, as they would in any config of the space.
	flagless := Params{}
	for i := range s.Params {
		par := &s.Params[i]
		on, err := s.active(par, b.Config.Params)
		if err != nil {
			return nil, err
		}
		if !on {
			continue
		}
		text, silent := par.flagless()
		if !silent {
			text = par.Default
		}
		if text == "" {
			b.Omitted = append(b.Omitted, par.Name)
			continue
		}
		v, err := par.normalize(text)
		if err != nil {
			return nil, fmt.Errorf("params[%s]: engine default %s: %w", par.Name, text, err)
		}
		b.Config.Params[par.Name] = v
		if silent {
			flagless[par.Name] = v
		}
	}
	for _, dv := range s.Derived {
		w, err := s.derive(dv, flagless)
		if err != nil {
			return nil, err
		}
		words = append(words, w...)
	}
	b.Config.Flags = words
	b.Config.Predicted = kind.Rules.Predict(s.View(b.Config), s.Setup(), l)
	return b, nil
}

// flagless returns the first value of the param, in its domain's order,
// whose flag text is empty: the engine runs its own default for it (a
// bool's true with only false: mapped, a choice mapped to ""); ok is
// false when every value passes a flag.
func (par *Param) flagless() (string, bool) {
	var cands []string
	switch par.Type {
	case "int", "float":
		// values: entries can be silent; a flag writes every other value
		// (and without a flag every value is silent: low stands for them).
		for _, k := range slices.Sorted(maps.Keys(par.Values)) {
			if v, err := par.normalize(k); err == nil {
				cands = append(cands, par.text(v))
			}
		}
		cands = append(cands, par.text(lowValue(par)))
	default:
		cands = par.Choices
	}
	for _, c := range cands {
		if par.Silent(c) {
			return c, true
		}
	}
	return "", false
}

// domainText describes the param's values for messages: "1, 4",
// "0.7..0.9 step 0.01", "true or false".
func (par *Param) domainText() string {
	switch par.Type {
	case "int", "float":
		r := formatGrid(par.Low, par.Low, par.Step) + ".." + formatGrid(par.High, par.Low, par.Step)
		if par.Step > 0 && !par.Log && !(par.Type == "int" && par.Step == 1) {
			r += " step " + strconv.FormatFloat(par.Step, 'g', -1, 64)
		}
		return r
	case "bool":
		return "true or false"
	}
	return strings.Join(par.Choices, ", ")
}

// lowValue is the param's low end as its Go type (int or float64).
func lowValue(par *Param) any {
	if par.Type == "int" {
		return int(par.Low)
	}
	return par.Low
}

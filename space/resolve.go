package space

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
)

// Suggest samples every active parameter through sg, in file order, skipping
// a parameter whose when: is false. Values are int, float64, string
// (categorical) or bool.
func (s *Study) Suggest(sg Suggester) (Params, error) {
	p := Params{}
	for i := range s.Params {
		par := &s.Params[i]
		on, err := s.active(par, p)
		if err != nil {
			return nil, err
		}
		if !on {
			continue
		}
		v, err := par.suggest(sg)
		if err != nil {
			return nil, fmt.Errorf("suggest %s: %w", par.Name, err)
		}
		p[par.Name] = v
	}
	return p, nil
}

func (s *Study) active(par *Param, p Params) (bool, error) {
	if par.when == nil {
		return true, nil
	}
	on, err := par.when.EvalBool(s.env(p, nil))
	if errors.Is(err, errUnset) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("params[%s].when %q: %w", par.Name, par.When, err)
	}
	return on, nil
}

func (par *Param) suggest(sg Suggester) (any, error) {
	switch par.Type {
	case "int":
		if par.Log {
			x, err := sg.SuggestLogFloat(par.Name, par.Low, par.High)
			return int(math.Round(x)), err
		}
		return sg.SuggestStepInt(par.Name, int(par.Low), int(par.High), int(par.Step))
	case "float":
		switch {
		case par.Log:
			return sg.SuggestLogFloat(par.Name, par.Low, par.High)
		case par.Step > 0:
			x, err := sg.SuggestDiscreteFloat(par.Name, par.Low, par.High, par.Step)
			return roundToStep(x, par.Low, par.Step), err
		}
		return sg.SuggestFloat(par.Name, par.Low, par.High)
	case "bool":
		v, err := sg.SuggestCategorical(par.Name, []string{"true", "false"})
		return v == "true", err
	}
	return sg.SuggestCategorical(par.Name, par.Choices)
}

// roundToStep snaps x to low + k*step and trims float noise.
func roundToStep(x, low, step float64) float64 {
	k := math.Round((x - low) / step)
	v, _ := strconv.ParseFloat(formatGrid(low+k*step, low, step), 64)
	return v
}

// StepAtOrAbove is the least value of the param's grid (Low, Low+Step,
// ...) at or above t, equal to the value a config at that step holds; t
// itself for a param without a step or a t at or below Low.
func (p *Param) StepAtOrAbove(t float64) float64 {
	if p.Step <= 0 || t <= p.Low {
		return t
	}
	// The tolerance keeps a t that is a grid value up to float noise on
	// that value, not the next.
	k := math.Ceil((t-p.Low)/p.Step - 1e-9)
	v, _ := strconv.ParseFloat(formatGrid(p.Low+k*p.Step, p.Low, p.Step), 64)
	return v
}

// formatGrid prints x, a value of the grid from low by step, with as many
// decimals as low or step has, whichever has more: low 0.05 by 0.1 gives
// 0.05, 0.15, ..., not 0.1 (0.05 rounded to the step's one decimal), 0.2
// twice and 1 above a high of 0.95.
func formatGrid(x, low, step float64) string {
	if step <= 0 {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return formatDecimals(x, max(decimals(step), decimals(low)))
}

// decimals is how many decimals x has, at most 10: the fewest after which
// x is a whole number (of at least 1 unless x is 0, so that a step of 1e-9
// has 9, not 0).
func decimals(x float64) int {
	for dec := 0; dec < 10; dec++ {
		s := x * math.Pow10(dec)
		r := math.Round(s)
		if (r != 0 || x == 0) && math.Abs(s-r) <= 1e-9*math.Max(1, math.Abs(r)) {
			return dec
		}
	}
	return 10
}

// formatDecimals prints x with dec decimals, trailing zeros dropped.
func formatDecimals(x float64, dec int) string {
	out := strconv.FormatFloat(x, 'f', dec, 64)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out
}

// normalize converts a sampled or user-given value to the param's Go type
// (int, float64, string, bool) and checks it against the domain.
func (par *Param) normalize(v any) (any, error) {
	bad := func(valid string) error {
		return fmt.Errorf("param %s: %v (%T) is not valid; valid: %s", par.Name, v, v, valid)
	}
	switch par.Type {
	case "int":
		var n int
		switch x := v.(type) {
		case int:
			n = x
		case int64:
			n = int(x)
		case float64:
			if x != math.Trunc(x) {
				return nil, bad("an integer")
			}
			n = int(x)
		case string:
			i, err := strconv.Atoi(x)
			if err != nil {
				return nil, bad("an integer")
			}
			n = i
		default:
			return nil, bad("an integer")
		}
		if float64(n) < par.Low || float64(n) > par.High || (!par.Log && (n-int(par.Low))%int(par.Step) != 0) {
			return nil, bad(fmt.Sprintf("%v..%v step %v", par.Low, par.High, par.Step))
		}
		return n, nil
	case "float":
		var x float64
		switch y := v.(type) {
		case float64:
			x = y
		case int:
			x = float64(y)
		case int64:
			x = float64(y)
		case string:
			f, err := strconv.ParseFloat(y, 64)
			if err != nil {
				return nil, bad("a number")
			}
			x = f
		default:
			return nil, bad("a number")
		}
		if par.Step > 0 {
			r := roundToStep(x, par.Low, par.Step)
			if math.Abs(r-x) > par.Step*1e-6 {
				return nil, bad(fmt.Sprintf("a multiple of %v from %v", par.Step, par.Low))
			}
			x = r
		}
		if x < par.Low-1e-12 || x > par.High+1e-12 {
			return nil, bad(fmt.Sprintf("%v..%v", par.Low, par.High))
		}
		return x, nil
	case "bool":
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			if x == "true" || x == "false" {
				return x == "true", nil
			}
		}
		return nil, bad("true or false")
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case int, int64, bool:
		s = fmt.Sprint(x)
	case float64:
		s = strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return nil, bad(strings.Join(par.Choices, ", "))
	}
	if !slices.Contains(par.Choices, s) {
		return nil, bad(strings.Join(par.Choices, ", "))
	}
	return s, nil
}

// text renders a normalized value for a flag.
func (par *Param) text(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case float64:
		return formatGrid(x, par.Low, par.Step)
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

// env builds the names an expression sees: params (categorical choices that
// look like numbers become numbers), gpus_per_trial and predictions.
func (s *Study) env(p Params, pred *engine.Prediction) map[string]any {
	env := map[string]any{"gpus_per_trial": int64(s.GPUsPerTrial)}
	for k, v := range p {
		switch x := v.(type) {
		case int:
			env[k] = int64(x)
		case int64, float64, bool:
			env[k] = x
		case string:
			env[k] = ChoiceValue(x)
		}
	}
	if pred != nil {
		// Zero means unknown: leave the name unset so constraints skip.
		for name, v := range map[string]int{
			"predicted.requested_max_running_requests": pred.RequestedMaxRunningRequests,
			"predicted.max_running_requests":           pred.MaxRunningRequests,
			"predicted.state_slots":                    pred.StateSlots,
			"predicted.state_ratio":                    pred.StateRatio,
			"predicted.kv_tokens":                      pred.KVTokens,
			"predicted.kv_tokens_needed":               pred.KVTokensNeeded,
		} {
			if v != 0 {
				env[name] = int64(v)
			}
		}
	}
	return env
}

// ChoiceValue is a categorical choice as expressions see it: a number when
// it reads as one (ep == 4), else the text. The search reads a choice as a
// number the same way in its crash rules (chunked_prefill >= 8192).
func ChoiceValue(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f
	}
	return s
}

// domainOf is what static checks of expressions know of a name: a param's
// values or its range; nil for other names and for a param whose own
// definition is broken (its errors are reported already).
func (s *Study) domainOf(name string) *domain {
	i := slices.IndexFunc(s.Params, func(p Param) bool { return p.Name == name })
	if i < 0 || s.Params[i].unchecked {
		return nil
	}
	p := &s.Params[i]
	d := &domain{name: name}
	switch p.Type {
	case "int", "float":
		d.what = fmt.Sprintf("%s is an %s param", name, p.Type)
		if p.Type == "float" {
			d.what = fmt.Sprintf("%s is a float param", name)
		}
		d.rangeText = formatGrid(p.Low, p.Low, p.Step) + ".." + formatGrid(p.High, p.Low, p.Step)
		if p.Step > 0 && !p.Log && !(p.Type == "int" && p.Step == 1) {
			d.rangeText += " step " + formatGrid(p.Step, p.Low, p.Step)
		}
		return d
	case "bool":
		d.what = name + " is a bool param"
		d.values = []any{true, false}
		return d
	}
	kinds := map[string]bool{}
	for _, c := range p.Choices {
		v := ChoiceValue(c)
		d.values = append(d.values, v)
		kinds[kindOf(v)] = true
	}
	switch {
	case len(kinds) > 1:
		d.what = "the choices of " + name + " are strings and numbers"
	case kinds["number"]:
		d.what = "the choices of " + name + " are numbers"
	default:
		d.what = "the choices of " + name + " are strings"
	}
	return d
}

// Resolve turns sampled params into a Config: engine flags (the model flag
// first, then fixed flags, params and derived flags; never --host/--port),
// the engine environment, and the engine rules' predictions, with what l
// learned from earlier trials (nil: the rules and the memory hint alone).
// Params that are inactive under their when: are dropped; an active one
// that is missing or out of its domain is an error. The study itself never
// changes: the same params and the same l give the same config.
func (s *Study) Resolve(p Params, l engine.Learned) (*Config, error) {
	cfg := &Config{Params: Params{}, Env: maps.Clone(s.Engine.Env)}
	kind := s.Engine.Kind
	words := []string{kind.ModelFlag, s.Model}
	if s.ServedModelName != "" {
		words = append(words, kind.ServedNameFlag, s.ServedModelName)
	}
	words = append(words, s.fixedArgv...)
	for i := range s.Params {
		par := &s.Params[i]
		on, err := s.active(par, cfg.Params)
		if err != nil {
			return nil, err
		}
		if !on {
			continue
		}
		raw, ok := p[par.Name]
		if !ok {
			return nil, fmt.Errorf("param %s is active but has no value", par.Name)
		}
		v, err := par.normalize(raw)
		if err != nil {
			return nil, err
		}
		cfg.Params[par.Name] = v
		w, err := par.emit(par.text(v))
		if err != nil {
			return nil, fmt.Errorf("param %s: %w", par.Name, err)
		}
		words = append(words, w...)
	}
	for _, dv := range s.Derived {
		w, err := s.derive(dv, cfg.Params)
		if err != nil {
			return nil, err
		}
		words = append(words, w...)
	}
	cfg.Flags = words
	cfg.Predicted = kind.Rules.Predict(s.View(cfg), s.Setup(), l)
	return cfg, nil
}

// View is a config's flags by canonical name.
func (s *Study) View(c *Config) engine.View { return engine.NewView(s.Schema, c.Flags) }

// Setup is what the engine rules need to know of the study beyond a
// config's flags.
func (s *Study) Setup() engine.Setup {
	set := engine.Setup{GPUsPerTrial: s.GPUsPerTrial, CPUsPerTrial: s.CPUsPerTrial, Hybrid: s.Hybrid, MoE: s.MoE,
		AcceptReduced: s.OnLimitsReduced == "accept",
		Memory:        s.Memory}
	w := s.Workload
	switch w.Kind {
	case "matrix":
		set.Demand.Matrix = true
		if len(w.Matrix.Concurrency) > 0 {
			set.Demand.Concurrency = slices.Max(w.Matrix.Concurrency)
		}
		if len(w.Matrix.Contexts) > 0 {
			set.Demand.MinContext = slices.Min(w.Matrix.Contexts)
		}
		set.Demand.MaxOutput = w.Matrix.MaxOutput
	default:
		if len(w.Chat.Concurrency) > 0 {
			set.Demand.Concurrency = slices.Max(w.Chat.Concurrency)
		}
		set.Demand.PromptTokens = w.Chat.PromptTokens
		if set.Demand.PromptTokens == 0 {
			set.Demand.PromptTokens = objective.DefaultPromptTokens
		}
		set.Demand.MaxTokens = w.Chat.MaxTokens
	}
	return set
}

// Observe turns a launched config's startup facts into what a Learned
// keeps (see engine.Rules.Observe).
func (s *Study) Observe(c *Config, f engine.Facts) (engine.Observation, bool) {
	return s.Engine.Kind.Rules.Observe(s.View(c), s.Setup(), c.Predicted, f)
}

func (s *Study) derive(dv Derived, p Params) ([]string, error) {
	env := s.env(p, nil)
	if dv.when != nil {
		on, err := dv.when.EvalBool(env)
		if errors.Is(err, errUnset) || (err == nil && !on) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%sderived[%s].when %q: %w", s.at(dv), dv.Flag, dv.When, err)
		}
	}
	v, err := dv.value.Eval(env)
	if errors.Is(err, errUnset) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%sderived[%s].value %q: %w", s.at(dv), dv.Flag, dv.Value, err)
	}
	return dv.words(v), nil
}

// at is where a derived entry's value is in the study file, as a message's
// prefix: "study.yaml:68:12: "; "" when not known.
func (s *Study) at(dv Derived) string {
	if dv.line == 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d: ", s.Path, dv.line, dv.col)
}

// derivedRejections are the derived flags of c that the flag schema
// refuses, each naming the derived entry and where it is: a config's
// flags that do not parse are most often a derived value's doing, and the
// schema's own message would not say which entry to fix.
func (s *Study) derivedRejections(c *Config) []engine.Rejection {
	var out []engine.Rejection
	for _, dv := range s.Derived {
		w, err := s.derive(dv, c.Params)
		if err != nil || len(w) == 0 {
			continue
		}
		if _, err := s.Schema.ParseArgv(w); err != nil {
			out = append(out, engine.Rejection{Rule: "flag_value",
				Message: fmt.Sprintf("%sderived[%s].value %q: %v", s.at(dv), dv.Flag, dv.Value, err)})
		}
	}
	return out
}

// words are what the derived flag passes the engine for value v: the flag
// alone for true, nothing for false or null, else the flag and the value.
func (dv *Derived) words(v any) []string {
	switch x := v.(type) {
	case bool:
		if x {
			return []string{dv.Flag}
		}
		return nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return []string{dv.Flag, strconv.FormatInt(int64(x), 10)}
		}
		return []string{dv.Flag, strconv.FormatFloat(x, 'f', -1, 64)}
	case nil:
		return nil
	}
	return []string{dv.Flag, describeRaw(v)}
}

func describeRaw(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return describe(v)
}

// Check returns every rule the config breaks; none means launchable. It
// checks the emitted flags against the schema, the engine's rules (each
// citing its source) with the config's prediction, and the study's
// constraints.
func (s *Study) Check(c *Config) []engine.Rejection {
	var out []engine.Rejection
	args, err := s.Schema.ParseArgv(c.Flags)
	if err != nil {
		if rej := s.derivedRejections(c); len(rej) > 0 {
			return rej
		}
		return []engine.Rejection{{Rule: "flag_value", Message: err.Error()}}
	}
	seen := map[string]bool{}
	for _, a := range args {
		if seen[a.Spec.Name] {
			out = append(out, engine.Rejection{Rule: "duplicate_flag", Message: fmt.Sprintf("%s is emitted twice", a.Spec.Name)})
		}
		seen[a.Spec.Name] = true
	}
	out = append(out, s.Engine.Kind.Rules.Check(s.View(c), s.Setup(), c.Predicted)...)
	env := s.env(c.Params, &c.Predicted)
	for i, e := range s.constraints {
		ok, err := e.EvalBool(env)
		if errors.Is(err, errUnset) {
			continue
		}
		switch {
		case err != nil:
			out = append(out, engine.Rejection{Rule: "constraint", Message: fmt.Sprintf("constraint %q cannot be evaluated: %v", s.Constraints[i], err)})
		case !ok:
			out = append(out, engine.Rejection{Rule: "constraint", Message: fmt.Sprintf("constraint %q is false with %s", s.Constraints[i], bindings(e, env))})
		}
	}
	return out
}

// bindings prints the values of the names an expression uses.
func bindings(e *Expr, env map[string]any) string {
	var parts []string
	for _, n := range e.Names() {
		parts = append(parts, n+"="+describe(env[n]))
	}
	return strings.Join(parts, ", ")
}

package space

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"

	"github.com/sgtune/sgtune/engine"
)

// values lists a param's finite domain; nil when it is continuous.
func (par *Param) values() []any {
	switch par.Type {
	case "int":
		var out []any
		for v := int(par.Low); v <= int(par.High); v += int(par.Step) {
			out = append(out, v)
		}
		return out
	case "float":
		n, finite := par.count()
		if !finite {
			return nil
		}
		out := make([]any, 0, int(n))
		for k := range int(n) {
			out = append(out, roundToStep(par.Low+float64(k)*par.Step, par.Low, par.Step))
		}
		return out
	case "bool":
		return []any{true, false}
	}
	out := make([]any, len(par.Choices))
	for i, c := range par.Choices {
		out[i] = c
	}
	return out
}

// count is the number of values in a param's finite domain, reckoned
// without listing them: a float with a fine step has millions, and the
// count is what decides whether they may be listed. finite is false when
// the param is continuous; a range with high below low counts 0.
func (par *Param) count() (n float64, finite bool) {
	switch par.Type {
	case "int":
		return max(0, math.Floor((par.High-par.Low)/par.Step)+1), true
	case "float":
		if par.Step <= 0 || par.Log {
			return 0, false
		}
		return max(0, math.Round((par.High-par.Low)/par.Step)+1), true
	case "bool":
		return 2, true
	}
	return float64(len(par.Choices)), true
}

// Bound is an upper bound on the number of configs, ignoring when:
// conditions (an inactive param counts as one more value), computed from
// the params' value counts before anything is enumerated; ok is false when
// a param is continuous.
func (s *Study) Bound() (n float64, ok bool) {
	n = 1
	for i := range s.Params {
		k, finite := s.Params[i].count()
		if !finite {
			return math.Inf(1), false
		}
		if s.Params[i].when != nil {
			k++
		}
		n *= k
	}
	return n, true
}

// Over reports whether a finite space has more than limit configs, and
// its Bound. Bound overstates a space with when: params (a param off
// counts one more value, and branches that exclude each other multiply):
// where it is over the limit and some param has when:, the configs are
// counted as Enumerate walks them, stopping one past limit (at most
// limit+1 visits), and no param with more than limit values is listed.
func (s *Study) Over(limit int) (bound float64, over bool) {
	bound, finite := s.Bound()
	if !finite || bound <= float64(limit) {
		return bound, false
	}
	if !slices.ContainsFunc(s.Params, func(p Param) bool { return p.when != nil }) {
		return bound, true
	}
	n := 0
	return bound, !s.walk(limit, func(Params) bool { n++; return n <= limit })
}

// Enumerate calls fn with every config of a finite space, honouring when:,
// in a fixed order, until fn returns false. Continuous params are skipped
// (use Sample).
func (s *Study) Enumerate(fn func(Params) bool) {
	s.walk(0, func(p Params) bool { return fn(maps.Clone(p)) })
}

// walk is Enumerate's walk: it calls leaf with each config as it is built
// (not a copy) until leaf returns false, and reports whether it went
// through. With maxValues > 0 it also stops, unlisted, at an active param
// with more values than that.
func (s *Study) walk(maxValues int, leaf func(Params) bool) bool {
	var rec func(i int, p Params) bool
	rec = func(i int, p Params) bool {
		if i == len(s.Params) {
			return leaf(p)
		}
		par := &s.Params[i]
		on, err := s.active(par, p)
		if err != nil || !on {
			return rec(i+1, p)
		}
		if k, _ := par.count(); maxValues > 0 && k > float64(maxValues) {
			return false
		}
		for _, v := range par.values() {
			p[par.Name] = v
			if !rec(i+1, p) {
				delete(p, par.Name)
				return false
			}
		}
		delete(p, par.Name)
		return true
	}
	return rec(0, Params{})
}

// RandomSuggester draws uniformly and deterministically from a seed; it is
// what `sgtune check` samples large spaces with.
type RandomSuggester struct{ r *rand.Rand }

// NewRandomSuggester returns a suggester seeded with seed.
func NewRandomSuggester(seed int64) *RandomSuggester {
	return &RandomSuggester{r: rand.New(rand.NewPCG(uint64(seed), 0x5e7e))}
}

// SuggestStepInt draws from low, low+step, ..., high (both ends included).
func (g *RandomSuggester) SuggestStepInt(_ string, low, high, step int) (int, error) {
	return low + step*g.r.IntN((high-low)/step+1), nil
}

// SuggestFloat draws uniformly from [low, high].
func (g *RandomSuggester) SuggestFloat(_ string, low, high float64) (float64, error) {
	return low + g.r.Float64()*(high-low), nil
}

// SuggestLogFloat draws log-uniformly from [low, high].
func (g *RandomSuggester) SuggestLogFloat(_ string, low, high float64) (float64, error) {
	return math.Exp(math.Log(low) + g.r.Float64()*(math.Log(high)-math.Log(low))), nil
}

// SuggestDiscreteFloat draws from low, low+q, ..., high.
func (g *RandomSuggester) SuggestDiscreteFloat(_ string, low, high, q float64) (float64, error) {
	return low + q*float64(g.r.IntN(int(math.Round((high-low)/q))+1)), nil
}

// SuggestCategorical draws one choice.
func (g *RandomSuggester) SuggestCategorical(_ string, choices []string) (string, error) {
	return choices[g.r.IntN(len(choices))], nil
}

// RejectionCount is one distinct rejection and how many configs it hit.
type RejectionCount struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Count   int    `json:"count"`
	Example Params `json:"example"`
}

// Survey is what `sgtune check` reports about a study's space.
type Survey struct {
	Study      string           `json:"study"`
	Path       string           `json:"path"`
	Schema     string           `json:"flag_schema"`
	Params     []string         `json:"params"`
	Size       int              `json:"size"`        // exact number of configs; 0 when not enumerated
	Bound      float64          `json:"upper_bound"` // product of domain sizes; 0 when continuous
	Continuous bool             `json:"continuous"`  // some param is continuous
	Enumerated bool             `json:"enumerated"`  // every config was checked
	Checked    int              `json:"checked"`
	Feasible   int              `json:"feasible"`
	Infeasible int              `json:"infeasible"`
	Errors     []string         `json:"errors,omitempty"` // distinct reasons configs did not resolve, each with its count: "... (24 configs)"
	Rejections []RejectionCount `json:"rejections"`
	Example    *Config          `json:"example_feasible,omitempty"`
	// Carrying counts the feasible configs that emit each flag of
	// SurveyLimits.Track.
	Carrying map[string]int `json:"carrying,omitempty"`
	// Baseline is the engine-default config a run launches first
	// (budget.baseline: default); nil with budget.baseline: none.
	Baseline *SurveyBaseline `json:"baseline,omitempty"`
}

// SurveyBaseline is the engine-default config as check reports it.
type SurveyBaseline struct {
	Argv    []string `json:"argv"`
	Params  Params   `json:"params"`
	Omitted []string `json:"omitted,omitempty"`
	// Rejections are the rules and constraints that reject it before
	// launch (the run stores it infeasible with them).
	Rejections []engine.Rejection `json:"rejections,omitempty"`
	// Error says why it could not be resolved ("" when it was).
	Error string `json:"error,omitempty"`
}

// surveyBaseline resolves and checks the engine-default config.
func (s *Study) surveyBaseline() *SurveyBaseline {
	b, err := s.Baseline(nil)
	if err != nil {
		return &SurveyBaseline{Error: err.Error()}
	}
	return &SurveyBaseline{Argv: s.Argv(b.Config), Params: b.Config.Params, Omitted: b.Omitted, Rejections: s.Check(b.Config)}
}

// SurveyLimits bound a survey.
type SurveyLimits struct {
	MaxEnumerate int   // enumerate when the space has at most this many configs
	Samples      int   // otherwise check this many sampled configs
	Seed         int64 // sampling seed
	// Track names engine flags (canonical) whose feasible carriers are
	// counted in Survey.Carrying.
	Track []string
}

// maxSurveyErrors bounds the distinct resolve errors a survey lists.
const maxSurveyErrors = 10

// DefaultSurveyLimits are what `sgtune check` uses.
var DefaultSurveyLimits = SurveyLimits{MaxEnumerate: 200000, Samples: 5000, Seed: 1}

// Survey checks the space: every config when it is small enough, else a
// deterministic sample; it counts feasible and infeasible configs and
// groups the rejections by message. It launches nothing.
func (s *Study) Survey(lim SurveyLimits) Survey {
	out := Survey{Study: s.Name, Path: s.Path, Schema: s.Schema.Source}
	if len(lim.Track) > 0 {
		out.Carrying = map[string]int{}
	}
	for _, p := range s.Params {
		out.Params = append(out.Params, p.Name)
	}
	counts := map[string]*RejectionCount{}
	// One reason fails every config that reaches it: count it, do not list
	// it once per config.
	var errs []*RejectionCount
	errCount := map[string]*RejectionCount{}
	addErr := func(err error) {
		msg := err.Error()
		if e, ok := errCount[msg]; ok {
			e.Count++
			return
		}
		errCount[msg] = &RejectionCount{Message: msg, Count: 1}
		errs = append(errs, errCount[msg])
	}
	check := func(p Params) bool {
		out.Checked++
		cfg, err := s.Resolve(p, nil)
		if err != nil {
			addErr(err)
			out.Infeasible++
			return true
		}
		rej := s.Check(cfg)
		if len(rej) == 0 {
			out.Feasible++
			if out.Example == nil {
				out.Example = cfg
			}
			if len(lim.Track) > 0 {
				v := s.View(cfg)
				for _, f := range lim.Track {
					if v.On(f) {
						out.Carrying[f]++
					}
				}
			}
			return true
		}
		out.Infeasible++
		for _, r := range rej {
			key := r.Rule + "\x00" + r.Message
			if rc, ok := counts[key]; ok {
				rc.Count++
			} else {
				counts[key] = &RejectionCount{Rule: r.Rule, Message: r.Message, Count: 1, Example: cfg.Params}
			}
		}
		return true
	}
	bound, finite := s.Bound()
	if finite {
		out.Bound = bound
	} else {
		out.Continuous = true
	}
	if finite && bound <= float64(lim.MaxEnumerate) {
		out.Enumerated = true
		s.Enumerate(check)
		out.Size = out.Checked
	} else {
		g := NewRandomSuggester(lim.Seed)
		for range lim.Samples {
			p, err := s.Suggest(g)
			if err != nil {
				addErr(err)
				break
			}
			check(p)
		}
	}
	if s.Budget.Baseline == BaselineDefault {
		out.Baseline = s.surveyBaseline()
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Count > errs[j].Count })
	for _, e := range errs[:min(len(errs), maxSurveyErrors)] {
		unit := "configs"
		if e.Count == 1 {
			unit = "config"
		}
		out.Errors = append(out.Errors, fmt.Sprintf("%s (%d %s)", e.Message, e.Count, unit))
	}
	for _, rc := range counts {
		out.Rejections = append(out.Rejections, *rc)
	}
	sort.Slice(out.Rejections, func(i, j int) bool {
		a, b := out.Rejections[i], out.Rejections[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Message < b.Message
	})
	return out
}

// RuleCounts sums rejections by rule.
func (v *Survey) RuleCounts() map[string]int {
	out := map[string]int{}
	for _, r := range v.Rejections {
		out[r.Rule] += r.Count
	}
	return out
}

// ParamList is the names, for printing.
func (v *Survey) ParamList() string {
	names := slices.Clone(v.Params)
	if len(names) == 0 {
		return "(none)"
	}
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out + " (" + strconv.Itoa(len(names)) + ")"
}

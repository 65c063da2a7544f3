package search

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/space"
)

// Local moves: every other proposal of a model sampler, once a config has
// been measured, is the best measured config with one param changed, as
// an engineer tunes by hand (the seed study changed one flag at a time from
// its best run). TPE models the space from the few trials it holds and,
// with crashes told as the worst, keeps away from a value that crashed in
// one combination (radix off with ep=1) even where it is the best (radix
// off with ep=4); a neighbour of the leader tests it right where it
// matters. It is SMAC's interleaving of model proposals and local search
// around the incumbent (Hutter, Hoos and Leyton-Brown, "Sequential
// Model-Based Optimization for General Algorithm Configuration", LION
// 2011), without its random forest.
//
// A neighbour is never a
// config the study already knows (measured, running, failed or rejected),
// one the engine's rules reject, or one in a crash region. Among the rest
// it first takes a value of a discrete param that no config near the top
// has (the least known change where it matters), else a change of the
// param the study has changed least from the leader (a sweep over the
// params, as coordinate descent, before any is changed twice); the param,
// then the value, are drawn from a source seeded by the study seed and the
// trial number (a resumed study proposes what it would have).

// local hands odd-numbered trials to a neighbour of the incumbent when
// there is one, and the rest to the model.
type local struct {
	model goptuna.Sampler
	// next returns a neighbour of the incumbent in goptuna's internal
	// form for the trial (nil: none, the model proposes).
	next func(trial goptuna.FrozenTrial) (map[string]float64, error)

	// all hands every trial to next, not only the odd ones.
	all bool

	mu     sync.Mutex
	chosen map[int]map[string]float64 // by trial ID; nil value: the model's
}

// Sample implements goptuna.Sampler.
func (l *local) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	if l.skip(trial.Number) {
		return l.model.Sample(study, trial, name, dist)
	}
	l.mu.Lock()
	pt, asked := l.chosen[trial.ID]
	l.mu.Unlock()
	if !asked {
		var err error
		if pt, err = l.next(trial); err != nil {
			return 0, fmt.Errorf("trial %d: local move: %w", trial.Number, err)
		}
		l.mu.Lock()
		if l.chosen == nil {
			l.chosen = map[int]map[string]float64{}
		}
		l.chosen[trial.ID] = pt
		l.mu.Unlock()
	}
	if v, ok := pt[name]; ok {
		return v, nil
	}
	return l.model.Sample(study, trial, name, dist)
}

// skip reports whether trial number n goes to the model: the even ones
// (none with all).
func (l *local) skip(n int) bool { return !l.all && n%2 == 0 }

// neighbour returns a neighbour of the best measured config for trial number n
// in goptuna's internal form (nil when nothing is measured yet or every
// neighbour is known or ruled out). The best measurement, not the best
// estimate (Leader): a leader shrunk toward its few neighbours early in a
// study held the search back (bench-search: 29 launches to 97% against
// 11).
func (r *runner) neighbour(n int) (map[string]float64, error) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return nil, err
	}
	recs = inSpace(recs) // an engine default outside the space has no params to move
	lead, ok := Best(recs)
	if !ok {
		return nil, nil
	}
	rng := rand.New(rand.NewPCG(uint64(r.st.Budget.Seed), uint64(n)))
	return neighbourOf(r.st, lead.Params, recs, rng, r.proposable(recs))
}

// proposable returns whether a config may be proposed now: the study does not
// know it (measured, running, failed or rejected), the engine's rules with
// what the study learned accept it, and it lies in no crash region.
func (r *runner) proposable(recs []Record) func(space.Params) bool {
	known := map[string]bool{}
	for _, rec := range recs {
		if rec.ConfigKey != "" {
			known[rec.ConfigKey] = true
		}
	}
	regions := crashRegions(r.st, recs)
	return func(p space.Params) bool {
		cfg, err := r.st.Resolve(p, r.learned)
		if err != nil || known[configKey(cfg)] || len(r.st.Check(cfg)) > 0 {
			return false
		}
		for _, reg := range regions {
			if matches(p, reg.lits) {
				return false
			}
		}
		return true
	}
}

// thompson returns the Thompson-sampling proposal for trial number n (see
// tsSpace), enumerating the space on first use.
func (r *runner) thompson(n int) (map[string]float64, error) {
	r.tsOnce.Do(func() { r.ts, r.tsErr = newTSSpace(r.st) })
	if r.tsErr != nil {
		return nil, r.tsErr
	}
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return nil, err
	}
	recs = inSpace(recs) // the model reads points of the space only
	return r.ts.thompson(r.st, recs, r.st.Budget.Seed, n, r.proposable(recs))
}

// neighbourOf returns, in goptuna's internal form, a config that differs
// from params in one param and that open accepts, drawn by rng as the
// local moves say (a novel discrete value near the top first, else the
// param changed least). A param a change makes active (spec_steps when
// speculative turns on) is drawn uniformly. nil when no change is
// accepted.
func neighbourOf(st *space.Study, params map[string]any, recs []Record, rng *rand.Rand, open func(space.Params) bool) (map[string]float64, error) {
	base := &pinned{params: params, rng: rng}
	if _, err := st.Suggest(base); err != nil {
		return nil, fmt.Errorf("incumbent: %w", err)
	}
	tried := map[string]int{}
	for _, rec := range recs {
		if name, ok := oneChange(params, rec.Params); ok {
			tried[name]++
		}
	}
	near := nearTopValues(st, recs)
	discrete := map[string]bool{}
	for _, par := range st.Params {
		discrete[par.Name] = regionParam(par)
	}
	var options, novel [][]map[string]float64
	least := math.MaxInt
	for _, d := range base.domains {
		var ok, nv []map[string]float64
		for _, v := range d.moves() {
			s := &pinned{internal: clone(base.got), rng: rng}
			s.internal[d.name] = v
			p, err := st.Suggest(s)
			if err != nil {
				return nil, fmt.Errorf("neighbour %s: %w", d.name, err)
			}
			if !open(p) {
				continue
			}
			ok = append(ok, s.got)
			if discrete[d.name] && !near[literal{d.name, fmt.Sprint(p[d.name])}] {
				nv = append(nv, s.got)
			}
		}
		if len(nv) > 0 {
			novel = append(novel, nv)
		}
		switch n := tried[d.name]; {
		case len(ok) == 0 || n > least:
		case n < least:
			least, options = n, [][]map[string]float64{ok}
		default:
			options = append(options, ok)
		}
	}
	if len(novel) > 0 {
		options = novel
	}
	if len(options) == 0 {
		return nil, nil
	}
	ok := options[rng.IntN(len(options))]
	return ok[rng.IntN(len(ok))], nil
}

// nearTopFraction: configs measured within this fraction of the best are
// near the top.
const nearTopFraction = 0.85

// nearTopValues returns the param values of the configs measured near the
// top.
func nearTopValues(st *space.Study, recs []Record) map[literal]bool {
	best := 0.0
	for _, rec := range recs {
		if rec.State == StateComplete && rec.ScoreOK && rec.Score != nil {
			best = math.Max(best, *rec.Score)
		}
	}
	out := map[literal]bool{}
	for _, rec := range recs {
		if rec.State == StateComplete && rec.ScoreOK && rec.Score != nil && *rec.Score >= nearTopFraction*best {
			for k, v := range rec.Params {
				out[literal{k, fmt.Sprint(v)}] = true
			}
		}
	}
	return out
}

// oneChange returns the param whose value alone tells b from a, ignoring
// params only one of them has (a conditional param a change turned on or
// off); false when they differ in none or in more than one.
func oneChange(a, b map[string]any) (string, bool) {
	name := ""
	for k, va := range a {
		vb, ok := b[k]
		if !ok || fmt.Sprint(va) == fmt.Sprint(vb) {
			continue
		}
		if name != "" {
			return "", false
		}
		name = k
	}
	return name, name != ""
}

func clone(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// domain is one active param's values, as the space suggests it, and the
// current value in goptuna's internal form.
type domain struct {
	name         string
	categorical  int // number of choices; 0 for a number
	low, high, q float64
	log, integer bool
	current      float64
}

// fewValues is the most values of a discrete number param whose every
// other value is a neighbour; wider ones move by one step, a quarter and
// a half of their range.
const fewValues = 8

// moves returns the values a neighbour may take instead of the current.
func (d domain) moves() []float64 {
	if d.categorical > 0 {
		var out []float64
		for i := 0; i < d.categorical; i++ {
			if float64(i) != d.current {
				out = append(out, float64(i))
			}
		}
		return out
	}
	lo, hi, x := d.low, d.high, d.current
	if d.log {
		lo, hi, x = math.Log(lo), math.Log(hi), math.Log(x)
	}
	if d.q > 0 && !d.log {
		if n := math.Round((hi-lo)/d.q) + 1; n <= fewValues {
			var out []float64
			for k := 0.0; k < n; k++ {
				if v := lo + k*d.q; math.Abs(v-x) > d.q/2 {
					out = append(out, v)
				}
			}
			return out
		}
	}
	span := hi - lo
	offsets := []float64{span / 4, span / 2}
	if d.q > 0 && !d.log {
		offsets = append([]float64{d.q}, offsets...)
	}
	var out []float64
	seen := map[float64]bool{x: true}
	for _, o := range offsets {
		for _, v := range []float64{x - o, x + o} {
			if eps := 1e-9 * span; v < lo-eps || v > hi+eps {
				continue
			}
			v = math.Min(math.Max(v, lo), hi)
			if d.q > 0 && !d.log {
				v = lo + math.Round((v-lo)/d.q)*d.q
			}
			if d.log {
				v = math.Exp(v)
			}
			if d.integer {
				v = math.Round(v)
			}
			if !seen[v] && v != d.current {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// pinned is a space.Suggester that gives known values: params (values as
// a study writes them) or internal (goptuna's internal form), and for a
// param in neither a uniform draw from rng. It records every value in
// internal form (got) and every param's domain.
type pinned struct {
	params   map[string]any
	internal map[string]float64
	rng      *rand.Rand
	got      map[string]float64
	domains  []domain
}

func (p *pinned) value(d domain, draw func() float64) float64 {
	v, ok := p.internal[d.name]
	if !ok && d.categorical == 0 {
		if w, has := p.params[d.name]; has {
			if f, isNum := space.Number(w); isNum {
				v, ok = f, true
			}
		}
	}
	if !ok {
		v = draw()
	}
	d.current = v
	if p.got == nil {
		p.got = map[string]float64{}
	}
	p.got[d.name] = v
	p.domains = append(p.domains, d)
	return v
}

// SuggestStepInt implements space.Suggester.
func (p *pinned) SuggestStepInt(name string, low, high, step int) (int, error) {
	d := domain{name: name, low: float64(low), high: float64(high), q: float64(step), integer: true}
	v := p.value(d, func() float64 { return float64(low + step*p.rng.IntN((high-low)/step+1)) })
	return int(v), nil
}

// SuggestFloat implements space.Suggester.
func (p *pinned) SuggestFloat(name string, low, high float64) (float64, error) {
	d := domain{name: name, low: low, high: high}
	return p.value(d, func() float64 { return low + p.rng.Float64()*(high-low) }), nil
}

// SuggestLogFloat implements space.Suggester.
func (p *pinned) SuggestLogFloat(name string, low, high float64) (float64, error) {
	d := domain{name: name, low: low, high: high, log: true}
	return p.value(d, func() float64 { return math.Exp(math.Log(low) + p.rng.Float64()*(math.Log(high)-math.Log(low))) }), nil
}

// SuggestDiscreteFloat implements space.Suggester.
func (p *pinned) SuggestDiscreteFloat(name string, low, high, q float64) (float64, error) {
	d := domain{name: name, low: low, high: high, q: q}
	return p.value(d, func() float64 { return low + q*float64(p.rng.IntN(int(math.Round((high-low)/q))+1)) }), nil
}

// SuggestCategorical implements space.Suggester.
func (p *pinned) SuggestCategorical(name string, choices []string) (string, error) {
	d := domain{name: name, categorical: len(choices)}
	if _, ok := p.internal[name]; !ok {
		if w, has := p.params[name]; has {
			s := fmt.Sprint(w)
			for i, c := range choices {
				if c == s {
					p.setInternal(name, float64(i))
				}
			}
		}
	}
	i := int(p.value(d, func() float64 { return float64(p.rng.IntN(len(choices))) }))
	if i < 0 || i >= len(choices) {
		return "", fmt.Errorf("param %s: choice %d of %d", name, i, len(choices))
	}
	return choices[i], nil
}

func (p *pinned) setInternal(name string, v float64) {
	if p.internal == nil {
		p.internal = map[string]float64{}
	}
	p.internal[name] = v
}

package search

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/search/sampler"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// newSampler builds the sampler a study names (budget.sampler), seeded by
// budget.seed, and returns the grid's points for the grid (else nil):
// points, when not nil, are the study's GridPoints already built (by the
// preflight), so a run lists its space once. The model ("bayes") chooses
// its proposals before a trial samples (see runner.propose) and hands them
// over as the trial's fixed params; where it has none, the trial draws at
// random.
func newSampler(st *space.Study, points []map[string]float64, repeated func() bool) (goptuna.Sampler, []map[string]float64, error) {
	opts := []sampler.Option{sampler.WithClassifier(classify)}
	if st.Budget.Sampler != "grid" {
		points = nil
	} else if points == nil {
		var err error
		if points, err = GridPoints(st); err != nil {
			return nil, nil, err
		}
	}
	if points != nil {
		// Re-runs of interrupted trials and the engine default take their
		// own params; they do not move the grid forward.
		opts = append(opts, sampler.WithGridPoints(points), sampler.WithGridCounts(func(t goptuna.FrozenTrial) bool {
			_, retry := t.SystemAttrs[storage.AttrRetryOf]
			_, baseline := t.SystemAttrs[storage.AttrBaseline]
			return !retry && !baseline
		}))
	}
	name := st.Budget.Sampler
	if name == "bayes" {
		name = "random" // where the model has no proposal
	}
	s, err := sampler.New(name, st.Budget.Seed, opts...)
	if err != nil {
		return nil, nil, err
	}
	if name == "tpe" {
		s = escape{model: s, random: sampler.NewRandom(st.Budget.Seed), repeated: repeated}
	}
	return fixedFirst{s}, points, nil
}

// escape hands TPE's next trial to the random sampler when its last
// proposal repeated a known config: a duplicate teaches TPE nothing, and
// over a small discrete space its argmax stays where it was until the
// study gives up.
type escape struct {
	model, random goptuna.Sampler
	repeated      func() bool
}

// Sample implements goptuna.Sampler.
func (e escape) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	if e.repeated != nil && e.repeated() {
		return e.random.Sample(study, trial, name, dist)
	}
	return e.model.Sample(study, trial, name, dist)
}

// classify tells the baseline samplers how sgtune's trials teach: a
// measured config with its value; failed, crashed, infeasible and pruned
// configs as the worst; running ones as pending; duplicates (their original is
// already observed), an engine default outside the space (see
// Record.InSpace), interrupted and queued trials not at all.
func classify(t goptuna.FrozenTrial) (float64, sampler.ObsKind) {
	if t.UserAttrs[storage.AttrState] == StateDuplicate {
		return 0, sampler.ObsIgnore
	}
	if _, baseline := t.SystemAttrs[storage.AttrBaseline]; baseline && len(t.InternalParams) == 0 {
		// An engine default outside the space: no point to learn from.
		return 0, sampler.ObsIgnore
	}
	return sampler.DefaultClassifier(t)
}

// GridPoints enumerates a finite space in goptuna's internal form, in the
// space's own order (the grid baseline: the seed's manual sweep style). A
// space of more than space.MaxGridConfigs is refused before anything is
// listed (the loader refuses it too; this keeps callers that skip it from
// running out of memory).
func GridPoints(st *space.Study) ([]map[string]float64, error) {
	if _, finite := st.Bound(); !finite {
		return nil, errors.New(`sampler "grid" needs a finite space (every float param needs a step)`)
	}
	if n, over := st.Over(space.MaxGridConfigs); over {
		return nil, fmt.Errorf(`sampler "grid" lists every config, and the space has more than %d (up to %.0f)`, space.MaxGridConfigs, n)
	}
	var points []map[string]float64
	var err error
	st.Enumerate(func(p space.Params) bool {
		rec := &recorder{params: p, internal: map[string]float64{}}
		if _, err = st.Suggest(rec); err != nil {
			return false
		}
		points = append(points, rec.internal)
		return true
	})
	return points, err
}

// recorder suggests the values of a known point and records each in
// goptuna's internal form (a categorical is its index).
type recorder struct {
	params   space.Params
	internal map[string]float64
}

func (r *recorder) value(name string) (any, error) {
	v, ok := r.params[name]
	if !ok {
		return nil, fmt.Errorf("grid: param %s has no value", name)
	}
	return v, nil
}

// SuggestStepInt implements space.Suggester.
func (r *recorder) SuggestStepInt(name string, _, _, _ int) (int, error) {
	v, err := r.value(name)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int)
	if !ok {
		return 0, fmt.Errorf("grid: param %s = %v is not an int", name, v)
	}
	r.internal[name] = float64(n)
	return n, nil
}

func (r *recorder) float(name string) (float64, error) {
	v, err := r.value(name)
	if err != nil {
		return 0, err
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("grid: param %s = %v is not a number", name, v)
	}
	r.internal[name] = f
	return f, nil
}

// SuggestFloat implements space.Suggester.
func (r *recorder) SuggestFloat(name string, _, _ float64) (float64, error) { return r.float(name) }

// SuggestLogFloat implements space.Suggester.
func (r *recorder) SuggestLogFloat(name string, _, _ float64) (float64, error) { return r.float(name) }

// SuggestDiscreteFloat implements space.Suggester.
func (r *recorder) SuggestDiscreteFloat(name string, _, _, _ float64) (float64, error) {
	return r.float(name)
}

// SuggestCategorical implements space.Suggester.
func (r *recorder) SuggestCategorical(name string, choices []string) (string, error) {
	v, err := r.value(name)
	if err != nil {
		return "", err
	}
	s := fmt.Sprint(v)
	if b, ok := v.(bool); ok {
		s = strconv.FormatBool(b)
	}
	for i, c := range choices {
		if c == s {
			r.internal[name] = float64(i)
			return c, nil
		}
	}
	return "", fmt.Errorf("grid: param %s = %v is not one of %v", name, v, choices)
}

// fixedFirst hands a queued re-run its stored parameters. goptuna's own
// fixed_params lookup drops a value its distribution's Contains refuses,
// and StepIntUniformDistribution.Contains refuses the upper bound
// (reference/go-libraries.md §1): the re-run of a config at the top of a
// step-int range would silently get another value.
type fixedFirst struct{ next goptuna.Sampler }

// Sample implements goptuna.Sampler.
func (f fixedFirst) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	if js, ok := trial.SystemAttrs[storage.AttrFixedParams]; ok {
		var fixed map[string]float64
		if err := json.Unmarshal([]byte(js), &fixed); err != nil {
			return 0, fmt.Errorf("trial %d: stored params: %w", trial.Number, err)
		}
		if v, ok := fixed[name]; ok {
			return v, nil
		}
	}
	return f.next.Sample(study, trial, name, dist)
}

// propose asks the model (sampler "bayes") for trial t's config, stored as
// the trial's fixed params for the sampler to hand over. Other samplers
// propose through goptuna.
func (r *runner) propose(t *trialRun) error {
	if r.st.Budget.Sampler != "bayes" {
		return nil
	}
	r.modelOnce.Do(func() { r.model, r.modelErr = newModel(r.st, true) })
	if r.modelErr != nil {
		return fmt.Errorf("sampler bayes: %w", r.modelErr)
	}
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, rec := range recs {
		if rec.ConfigKey != "" && rec.Number != t.number {
			known[rec.ConfigKey] = true
		}
	}
	open := func(p space.Params) bool {
		cfg, err := r.st.Resolve(p, r.learned)
		return err == nil && !known[configKey(cfg)] && len(r.st.Check(cfg)) == 0
	}
	pr, err := r.model.propose(recs, r.st.Budget.Seed, t.number, known, open)
	if err != nil {
		return err
	}
	if pr.params == nil {
		return nil // nothing left to the model: a random draw
	}
	js, err := json.Marshal(pr.params)
	if err != nil {
		return err
	}
	if err := r.store.SetTrialSystemAttr(t.id, storage.AttrFixedParams, string(js)); err != nil {
		return fmt.Errorf("store the proposal: %w", err)
	}
	return nil
}

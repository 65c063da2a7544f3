package sampler

import (
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"sync"

	"github.com/c-bata/goptuna"
)

// TPE is a Tree-structured Parzen Estimator (Bergstra, Bardenet, Bengio and
// Kégl, "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011),
// following Optuna's TPESampler and _ParzenEstimator (Optuna 3.x/4.x):
//
//   - the finished observations are split: the best gamma(n) =
//     min(ceil(0.1 n), 25) by value fit l(x), the others fit g(x);
//   - each group is a Parzen estimator: one truncated Gaussian per
//     observation (a discretised one for ints, steps and discrete floats,
//     in log space for log floats) plus a prior kernel (centre of the range,
//     width of the range, weight 1); observation weights are Optuna's
//     default_weights (flat up to 25, a ramp down for older ones); kernel
//     widths are the larger gap to the neighbouring centres, clipped by the
//     magic clip to [range/min(100, 1+kernels), range], the range's ends not
//     counted as neighbours (consider_endpoints=false);
//   - categoricals use Optuna's categorical estimator: each observation's
//     row is 1 on its choice plus priorWeight/kernels on every choice,
//     normalised, and a uniform prior row;
//   - 24 candidates are drawn from l(x) and the one maximising
//     log l(x) - log g(x) is proposed.
//
// Differences from Optuna, for sgtune:
//
//   - Observations come from a Classifier (DefaultClassifier: COMPLETE with
//     its value, PRUNED as worst, RUNNING as pending, FAIL and WAITING
//     ignored). Worst and pending observations always fit g(x), never l(x)
//     (Optuna may rank PRUNED trials into l(x) by their last step). Pending
//     trials are Optuna's constant liar, always on; they do not count in n.
//   - Univariate mode fits each param on the trials that have it
//     (conditional params: Optuna 2's per-param observation pairs); gamma
//     applies to that param's finished observations. Multivariate mode
//     (WithMultivariate, Optuna's multivariate=True without group) models
//     the params shared by all finished observations jointly, with Optuna's
//     multivariate widths 0.2 n^(-1/(d+4)) range; the rest stays univariate.
//   - Duplicate avoidance (WithAvoidDuplicates, on): a candidate that would
//     make the trial's config equal to an observed one is not proposed while
//     another value is possible. In univariate mode a config is complete when
//     the observed trial has exactly the trial's params so far plus this one
//     with the same values (params are suggested in the same order every
//     trial, so the rest would match as well); in multivariate mode whole
//     candidates are compared, and a joint value that would complete an
//     observed config is replaced by a univariate one.
//   - Until WithStartup finished observations exist (DefaultStartup), values
//     are drawn uniformly with inclusive upper bounds: Random's draws for
//     the same seed, except where duplicate avoidance moves one.
//
// Randomness: every draw uses a source derived from (seed, trial number,
// param name), see drawRNG: the same seed and stored trials give the same
// proposal in any process, and TPE holds no random state. It is safe for
// concurrent use.
type TPE struct {
	seed int64
	cfg  config

	mu    sync.Mutex
	joint map[[2]int]jointDraw // multivariate proposals by (study, trial) ID
}

// jointDraw is one trial's multivariate proposal, kept so that every param
// of the trial comes from the same joint draw even if other trials finish
// between its suggests.
type jointDraw struct {
	dists  map[string]interface{}
	values map[string]float64
}

var (
	_ goptuna.Sampler         = (*TPE)(nil)
	_ goptuna.RelativeSampler = (*TPE)(nil)
)

// NewTPE returns a TPE sampler.
func NewTPE(seed int64, opts ...Option) (*TPE, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &TPE{seed: seed, cfg: cfg, joint: map[[2]int]jointDraw{}}, nil
}

// Sample implements goptuna.Sampler.
func (s *TPE) Sample(study *goptuna.Study, trial goptuna.FrozenTrial, name string, dist interface{}) (float64, error) {
	p, err := newParam(name, dist)
	if err != nil {
		return 0, err
	}
	if p.single() {
		return p.low, nil
	}
	obs, trials, err := observe(study, trial, s.cfg.classify)
	if err != nil {
		return 0, err
	}
	if countFinished(obs) < s.cfg.startup {
		return s.uniform(trial, p, obs), nil
	}
	if s.cfg.multivariate {
		v, ok, err := s.fromJoint(trial, p, obs, trials)
		if err != nil || ok {
			return v, err
		}
	}
	return s.univariate(trial, p, obs)
}

// SampleRelative implements goptuna.RelativeSampler: a joint proposal over
// the given space (goptuna passes the intersection of the COMPLETE trials'
// params); params it leaves out are sampled by Sample. It returns nothing
// during start-up.
func (s *TPE) SampleRelative(study *goptuna.Study, trial goptuna.FrozenTrial, space map[string]interface{}) (map[string]float64, error) {
	obs, _, err := observe(study, trial, s.cfg.classify)
	if err != nil {
		return nil, err
	}
	if countFinished(obs) < s.cfg.startup {
		return map[string]float64{}, nil
	}
	var params []param
	for name, d := range space {
		p, err := newParam(name, d)
		if err != nil || p.single() {
			continue
		}
		params = append(params, p)
	}
	sort.Slice(params, func(i, j int) bool { return params[i].name < params[j].name })
	return s.jointSample(trial, params, obs)
}

// uniform draws a start-up value, avoiding duplicates when asked.
func (s *TPE) uniform(trial goptuna.FrozenTrial, p param, obs []observation) float64 {
	rng := drawRNG(s.seed, trial.Number, p.name, "random")
	var taken []float64
	if s.cfg.avoidDup {
		taken = forbidden(trial, p, obs)
	}
	return uniformAvoiding(rng, p, taken)
}

// uniformAvoiding draws uniformly, among the values not taken when any is
// left (discrete params) or by a few redraws (continuous ones).
func uniformAvoiding(rng *rand.Rand, p param, taken []float64) float64 {
	if len(taken) == 0 {
		return uniformValue(rng, p)
	}
	if p.discrete() && p.count() <= maxEnumerate {
		var free []float64
		for k := 0; k < p.count(); k++ {
			if v := p.value(k); !isTaken(p, v, taken) {
				free = append(free, v)
			}
		}
		if len(free) == 0 {
			return uniformValue(rng, p)
		}
		return free[rng.IntN(len(free))]
	}
	v := uniformValue(rng, p)
	for i := 0; i < 64 && isTaken(p, v, taken); i++ {
		v = uniformValue(rng, p)
	}
	return v
}

// maxEnumerate bounds the discrete values scanned when every candidate was
// a duplicate.
const maxEnumerate = 4096

// uniformValue draws one value uniformly over the param's values, upper
// bound included for discrete params; log floats are uniform in log space.
func uniformValue(rng *rand.Rand, p param) float64 {
	if p.discrete() {
		return p.value(rng.IntN(p.count()))
	}
	return p.untransform(p.lo + rng.Float64()*(p.hi-p.lo))
}

// isTaken reports whether v equals a taken value.
func isTaken(p param, v float64, taken []float64) bool {
	for _, t := range taken {
		if p.same(v, t) {
			return true
		}
	}
	return false
}

// forbidden lists the values of p that would complete the trial into a
// config already observed: an observed trial whose params are exactly the
// trial's params so far plus p, with equal values.
func forbidden(trial goptuna.FrozenTrial, p param, obs []observation) []float64 {
	mine := make(map[string]param, len(trial.InternalParams))
	for k, d := range trial.Distributions {
		if _, ok := trial.InternalParams[k]; !ok {
			continue
		}
		q, err := newParam(k, d)
		if err != nil {
			return nil // an unknown distribution: compare nothing
		}
		mine[k] = q
	}
	var out []float64
next:
	for _, o := range obs {
		r := o.t.InternalParams
		if len(r) != len(trial.InternalParams)+1 {
			continue
		}
		v, ok := r[p.name]
		if !ok {
			continue
		}
		for k, q := range mine {
			rv, ok := r[k]
			if !ok || !q.same(rv, trial.InternalParams[k]) {
				continue next
			}
		}
		out = append(out, v)
	}
	return out
}

// paramObs keeps the observations that have param p with a usable value,
// the value stored in x.
func paramObs(p param, obs []observation) []observation {
	var out []observation
	for _, o := range obs {
		v, ok := o.t.InternalParams[p.name]
		if !ok || !p.compatible(o.t.Distributions[p.name]) || !p.contains(v) {
			continue
		}
		o.x = []float64{p.snap(v)}
		out = append(out, o)
	}
	return out
}

// xs collects the observations' values.
func xs(obs []observation) [][]float64 {
	out := make([][]float64, len(obs))
	for i, o := range obs {
		out[i] = o.x
	}
	return out
}

// univariate proposes a value for one param from its own observations.
func (s *TPE) univariate(trial goptuna.FrozenTrial, p param, obs []observation) (float64, error) {
	pobs := paramObs(p, obs)
	if len(pobs) == 0 {
		return s.uniform(trial, p, obs), nil
	}
	below, above := split(pobs, s.cfg.gamma)
	cfg := s.cfg.parzen
	cfg.multivariate = false
	l, err := newMixture([]param{p}, xs(below), cfg)
	if err != nil {
		return 0, err
	}
	g, err := newMixture([]param{p}, xs(above), cfg)
	if err != nil {
		return 0, err
	}
	var taken []float64
	if s.cfg.avoidDup {
		taken = forbidden(trial, p, obs)
	}
	rng := drawRNG(s.seed, trial.Number, p.name, "tpe")
	best, bestScore, found := 0.0, math.Inf(-1), false
	var fallback []float64 // best candidate even if taken
	fallbackScore := math.Inf(-1)
	for i := 0; i < s.cfg.candidates; i++ {
		x := l.sample(rng)
		sc := acquisition(l, g, x)
		if fallback == nil || sc > fallbackScore {
			fallback, fallbackScore = x, sc
		}
		if isTaken(p, x[0], taken) {
			continue
		}
		if !found || sc > bestScore {
			best, bestScore, found = x[0], sc, true
		}
	}
	if found {
		return best, nil
	}
	// Every candidate would repeat an observed config: take the best free
	// value of a discrete param, scanning them all.
	if p.discrete() && p.count() <= maxEnumerate {
		for k := 0; k < p.count(); k++ {
			v := p.value(k)
			if isTaken(p, v, taken) {
				continue
			}
			if sc := acquisition(l, g, []float64{v}); !found || sc > bestScore {
				best, bestScore, found = v, sc, true
			}
		}
		if found {
			return best, nil
		}
	}
	return fallback[0], nil
}

// acquisition is log l(x) - log g(x), Optuna's ranking of candidates
// (equivalent to expected improvement under TPE's model). It is never NaN:
// a point impossible under l ranks last, one impossible under g first.
func acquisition(l, g *mixture, x []float64) float64 {
	ll := l.logPDF(x)
	if math.IsInf(ll, -1) || math.IsNaN(ll) {
		return math.Inf(-1)
	}
	lg := g.logPDF(x)
	if math.IsInf(lg, -1) || math.IsNaN(lg) {
		return math.Inf(1)
	}
	return ll - lg
}

// fromJoint answers a param from the trial's multivariate proposal, drawn
// at its first suggest; ok is false when the param is not in the joint
// space (then it is sampled univariately).
func (s *TPE) fromJoint(trial goptuna.FrozenTrial, p param, obs []observation, trials []goptuna.FrozenTrial) (float64, bool, error) {
	key := [2]int{trial.StudyID, trial.ID}
	s.mu.Lock()
	jd, ok := s.joint[key]
	s.mu.Unlock()
	if !ok {
		params := jointSpace(obs)
		values, err := s.jointSample(trial, params, obs)
		if err != nil {
			return 0, false, err
		}
		jd = jointDraw{dists: map[string]interface{}{}, values: values}
		for _, q := range params {
			jd.dists[q.name] = q.dist
		}
		s.mu.Lock()
		s.joint[key] = jd
		for _, t := range trials { // forget trials that are over
			if t.State.IsFinished() {
				delete(s.joint, [2]int{t.StudyID, t.ID})
			}
		}
		s.mu.Unlock()
	}
	v, ok := jd.values[p.name]
	if !ok || !reflect.DeepEqual(jd.dists[p.name], p.dist) {
		return 0, false, nil
	}
	if s.cfg.avoidDup && isTaken(p, v, forbidden(trial, p, obs)) {
		// The joint draw would complete an observed config (the joint
		// params plus conditional ones): this param goes univariate,
		// which picks a free value.
		return 0, false, nil
	}
	return v, true, nil
}

// jointSpace is the params every finished observation has, with the same
// distribution everywhere (Optuna's IntersectionSearchSpace with pruned
// trials included), sorted by name; single-valued params are left out.
func jointSpace(obs []observation) []param {
	var space map[string]interface{}
	for _, o := range obs {
		if !o.finished() {
			continue
		}
		if space == nil {
			space = make(map[string]interface{}, len(o.t.Distributions))
			for k, d := range o.t.Distributions {
				space[k] = d
			}
			continue
		}
		for k, d := range space {
			if od, ok := o.t.Distributions[k]; !ok || !reflect.DeepEqual(od, d) {
				delete(space, k)
			}
		}
	}
	var params []param
	for k, d := range space {
		p, err := newParam(k, d)
		if err != nil || p.single() {
			continue
		}
		params = append(params, p)
	}
	sort.Slice(params, func(i, j int) bool { return params[i].name < params[j].name })
	return params
}

// jointSample draws a multivariate proposal over params.
func (s *TPE) jointSample(trial goptuna.FrozenTrial, params []param, obs []observation) (map[string]float64, error) {
	out := map[string]float64{}
	if len(params) == 0 {
		return out, nil
	}
	var jobs []observation
next:
	for _, o := range obs {
		x := make([]float64, len(params))
		for d, p := range params {
			v, ok := o.t.InternalParams[p.name]
			if !ok || !p.compatible(o.t.Distributions[p.name]) || !p.contains(v) {
				continue next
			}
			x[d] = p.snap(v)
		}
		o.x = x
		jobs = append(jobs, o)
	}
	if countFinished(jobs) == 0 {
		return out, nil
	}
	below, above := split(jobs, s.cfg.gamma)
	cfg := s.cfg.parzen
	cfg.multivariate = true
	l, err := newMixture(params, xs(below), cfg)
	if err != nil {
		return nil, err
	}
	g, err := newMixture(params, xs(above), cfg)
	if err != nil {
		return nil, err
	}
	// Configs already observed over exactly these params (only comparable
	// while the trial has no params of its own yet).
	var taken [][]float64
	if s.cfg.avoidDup && len(trial.InternalParams) == 0 {
		for _, o := range jobs {
			if len(o.t.InternalParams) == len(params) {
				taken = append(taken, o.x)
			}
		}
	}
	isDup := func(x []float64) bool {
		for _, t := range taken {
			same := true
			for d, p := range params {
				if !p.same(x[d], t[d]) {
					same = false
					break
				}
			}
			if same {
				return true
			}
		}
		return false
	}
	rng := drawRNG(s.seed, trial.Number, "", "joint")
	var best, fallback []float64
	bestScore, fallbackScore := math.Inf(-1), math.Inf(-1)
	// Candidates from l(x); when all repeat observed configs, more rounds
	// from l(x), then from the uniform prior.
	for round := 0; round < 20 && best == nil; round++ {
		for i := 0; i < s.cfg.candidates; i++ {
			var x []float64
			if round < 10 {
				x = l.sample(rng)
			} else {
				x = make([]float64, len(params))
				for d, p := range params {
					x[d] = uniformValue(rng, p)
				}
			}
			sc := acquisition(l, g, x)
			if fallback == nil || sc > fallbackScore {
				fallback, fallbackScore = x, sc
			}
			if isDup(x) {
				continue
			}
			if best == nil || sc > bestScore {
				best, bestScore = x, sc
			}
		}
		if len(taken) == 0 {
			break
		}
	}
	if best == nil {
		best = fallback
	}
	for d, p := range params {
		out[p.name] = best[d]
	}
	return out, nil
}

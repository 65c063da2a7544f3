package search

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"

	"github.com/sgtune/sgtune/space"
)

// Thompson sampling over a finite space (budget.sampler "bayes"): a
// Bayesian linear model of log score with one-hot main effects and every
// pairwise product of two params' values, each coefficient with a Gaussian
// prior (main effects wide, products narrow: a product is believed only
// when the data ask for it), fitted to the measured trials. A proposal
// draws one coefficient vector from the posterior and takes the best
// config under it that the study does not know and the engine's rules and
// the crash regions allow (Russo et al., "A Tutorial on Thompson
// Sampling", 2018, §7 for linear models). The products matter: with CUDA
// graphs off the speculative settings behave otherwise than with them on,
// and main effects alone put a mediocre family first.
//
// The draw is tempered: its spread about the posterior mean is tsTemper of
// the posterior's. Over some 14,000 candidates the argmax of a full-width
// draw lands on whichever combination the data know least (CUDA graphs off
// with every speculative setting, say), and the study keeps exploring
// families its data have already put far below the best.
//
// Measured side by side with bench-search on the GLM study (150 seeds, the
// same noise draws): full-width draws with one crash cover per proposal
// first launched a config within 3% of the best after a median of 13
// launches, with 6.4 crash and 4.1 pruned launches per study, and 38
// studies never declared one in 30; tempered draws with crashDraws covers
// and crashSilentPrior: 11 launches, 4.4 crash and 1.2 pruned launches, 30
// never. The median launch that declared such a winner was 15 for both
// (14 since estimates never lift a config above its runs, 13 since crash
// regions wait until they are a failure's one explanation left): the 94-96%
// families sit within one launch's noise of the winners.
//
// Every candidate is enumerated, so the space must be finite (every float
// param with a step); the statically rejected configs are dropped once.

// Prior standard deviations of the coefficients (log-score units) and the
// noise of one measurement.
const (
	tsMainSD  = 0.7
	tsPairSD  = 0.2
	tsNumSD   = 1.0
	tsNoiseSD = 0.1
	// tsTemper scales a draw's deviation from the posterior mean.
	tsTemper = 0.35
)

// tsSpace is the enumerated space with each config's features.
type tsSpace struct {
	cands []tsCand
	// values maps a region param's value to its one-hot feature; pairs a
	// product of two one-hot features to its feature.
	values map[literal]int
	// silent are the values that pass the engine no flag: its defaults.
	silent map[literal]bool
	pairs  map[[2]int]int
	// numeric params (not one-hot): their feature (x, then x² next to it)
	// and range.
	numeric []tsNumeric
	nfeat   int
	// main counts the one-hot and numeric features; the pairs come after.
	main int
}

type tsNumeric struct {
	name      string
	low, high float64
	feat      int
}

// tsCand is one statically feasible config.
type tsCand struct {
	params   space.Params
	lits     []literal // values of the region params
	internal map[string]float64
	feats    []int
	nums     []float64 // values of the numeric features, in numeric's order
}

// newTSSpace enumerates st's space.
func newTSSpace(st *space.Study) (*tsSpace, error) {
	if _, finite := st.Bound(); !finite {
		return nil, errors.New(`sampler "bayes" needs a finite space (every float param needs a step)`)
	}
	s := &tsSpace{values: map[literal]int{}, pairs: map[[2]int]int{}, silent: map[literal]bool{}}
	for _, par := range st.Params {
		if !regionParam(par) {
			s.numeric = append(s.numeric, tsNumeric{name: par.Name, low: par.Low, high: par.High})
		}
	}
	var err error
	st.Enumerate(func(p space.Params) bool {
		cfg, rerr := st.Resolve(p, nil)
		if rerr != nil || len(st.Check(cfg)) > 0 {
			return true
		}
		rec := &recorder{params: p, internal: map[string]float64{}}
		if _, err = st.Suggest(rec); err != nil {
			return false
		}
		s.cands = append(s.cands, tsCand{params: p, internal: rec.internal})
		return true
	})
	if err != nil {
		return nil, err
	}
	if len(s.cands) == 0 {
		return nil, errors.New(`sampler "bayes": every config of the space is rejected by the engine's rules`)
	}
	// Features: one-hot values first, then numeric, then the products.
	names := regionNames(st)
	for _, c := range s.cands {
		for _, l := range literalsOf(c.params, names) {
			if _, ok := s.values[l]; !ok {
				s.values[l] = s.nfeat
				s.nfeat++
			}
		}
	}
	params := map[string]*space.Param{}
	for i := range st.Params {
		params[st.Params[i].Name] = &st.Params[i]
	}
	for l := range s.values {
		if params[l.name].Silent(l.value) {
			s.silent[l] = true
		}
	}
	for i := range s.numeric {
		s.numeric[i].feat = s.nfeat
		s.nfeat += 2
	}
	s.main = s.nfeat
	for i := range s.cands {
		s.cands[i].feats, s.cands[i].nums = s.features(s.cands[i].params, names, true)
		s.cands[i].lits = literalsOf(s.cands[i].params, names)
	}
	return s, nil
}

// features returns a config's active one-hot and product features and its
// numeric values (scaled to [-1, 1]); grow adds unseen products.
func (s *tsSpace) features(p map[string]any, names []string, grow bool) ([]int, []float64) {
	var one []int
	for _, l := range literalsOf(p, names) {
		if f, ok := s.values[l]; ok {
			one = append(one, f)
		}
	}
	slices.Sort(one)
	feats := slices.Clone(one)
	for i := range one {
		for j := i + 1; j < len(one); j++ {
			k := [2]int{one[i], one[j]}
			f, ok := s.pairs[k]
			if !ok {
				if !grow {
					continue
				}
				f = s.nfeat
				s.pairs[k] = f
				s.nfeat++
			}
			feats = append(feats, f)
		}
	}
	nums := make([]float64, len(s.numeric))
	for i, n := range s.numeric {
		if v, ok := space.Number(p[n.name]); ok && n.high > n.low {
			nums[i] = 2*(v-n.low)/(n.high-n.low) - 1
		}
	}
	return feats, nums
}

// value is a config's predicted log score under coefficients theta (the
// intercept last).
func (s *tsSpace) value(feats []int, nums []float64, theta []float64) float64 {
	v := theta[len(theta)-1]
	for _, f := range feats {
		v += theta[f]
	}
	for i, n := range s.numeric {
		v += theta[n.feat]*nums[i] + theta[n.feat+1]*nums[i]*nums[i]
	}
	return v
}

// row is a config's full feature row (the intercept last).
func (s *tsSpace) row(feats []int, nums []float64) []float64 {
	x := make([]float64, s.nfeat+1)
	for _, f := range feats {
		x[f] = 1
	}
	for i, n := range s.numeric {
		x[n.feat], x[n.feat+1] = nums[i], nums[i]*nums[i]
	}
	x[s.nfeat] = 1
	return x
}

// priorSD is the prior standard deviation of feature f.
func (s *tsSpace) priorSD(f int) float64 {
	switch {
	case f >= s.nfeat:
		return 10 // the intercept: centred on the mean log score
	case f >= s.main:
		return tsPairSD
	}
	for _, n := range s.numeric {
		if f == n.feat || f == n.feat+1 {
			return tsNumSD
		}
	}
	return tsMainSD
}

// draw returns one coefficient vector from the posterior given the
// measured configs' feature rows xs and log scores ys.
func (s *tsSpace) draw(xs [][]float64, ys []float64, rng *rand.Rand) ([]float64, error) {
	p := s.nfeat + 1
	mean := 0.0
	for _, y := range ys {
		mean += y / float64(len(ys))
	}
	prec := mat.NewSymDense(p, nil)
	b := make([]float64, p)
	for f := 0; f < p; f++ {
		sd := s.priorSD(f)
		prec.SetSym(f, f, 1/(sd*sd))
	}
	b[p-1] = mean / 100
	w := 1 / (tsNoiseSD * tsNoiseSD)
	for k, x := range xs {
		var nz []int
		for f, v := range x {
			if v != 0 {
				nz = append(nz, f)
			}
		}
		for _, i := range nz {
			b[i] += w * x[i] * ys[k]
			for _, j := range nz {
				if j >= i {
					prec.SetSym(i, j, prec.At(i, j)+w*x[i]*x[j])
				}
			}
		}
	}
	var chol mat.Cholesky
	if !chol.Factorize(prec) {
		return nil, errors.New("bayes: posterior precision is not positive definite")
	}
	m := mat.NewVecDense(p, nil)
	if err := chol.SolveVecTo(m, mat.NewVecDense(p, b)); err != nil {
		return nil, fmt.Errorf("bayes: posterior mean: %w", err)
	}
	// theta = m + L^-T z, with precision = L L^T: its covariance is the
	// posterior's.
	z := make([]float64, p)
	for i := range z {
		z[i] = rng.NormFloat64()
	}
	var l mat.TriDense
	chol.LTo(&l)
	u := mat.NewVecDense(p, nil)
	if err := u.SolveVec(l.T(), mat.NewVecDense(p, z)); err != nil {
		return nil, fmt.Errorf("bayes: posterior draw: %w", err)
	}
	theta := make([]float64, p)
	for i := range theta {
		theta[i] = m.AtVec(i) + tsTemper*u.AtVec(i)
	}
	return theta, nil
}

// thompson proposes for trial number n: the config that open accepts with
// the best value under one posterior draw, weighed by its chance to run
// (see crashDraws), in goptuna's internal form (nil when open accepts
// none).
func (s *tsSpace) thompson(st *space.Study, recs []Record, seed int64, n int, open func(space.Params) bool) (map[string]float64, error) {
	names := regionNames(st)
	xs, ys := s.observations(recs, names)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)^0x7468_6f6d_7073_6f6e))
	theta, err := s.draw(xs, ys, rng)
	if err != nil {
		return nil, err
	}
	rules := crashRuleCandidates(recs, names, s.silent)
	covers := make([]crashCover, crashDraws)
	for k := range covers {
		covers[k] = rules.draw(rng)
	}
	order := make([]int, len(s.cands))
	vals := make([]float64, len(s.cands))
	for i, c := range s.cands {
		order[i] = i
		runs := 0
		for _, cc := range covers {
			if cc.runs(c.lits) {
				runs++
			}
		}
		// Expected log value: a crash is worth nothing.
		vals[i] = s.value(c.feats, c.nums, theta) + math.Log((float64(runs)+crashFloor)/(crashDraws+crashFloor))
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmpFloat(vals[b], vals[a]) })
	for _, i := range order {
		if open(s.cands[i].params) {
			return s.cands[i].internal, nil
		}
	}
	return nil, nil
}

// observations returns the feature rows and log scores of the measured
// trials: complete ones meeting the SLO, and pruned ones with the score
// their last level predicts.
func (s *tsSpace) observations(recs []Record, names []string) ([][]float64, []float64) {
	type obs struct {
		feats []int
		nums  []float64
		y     float64
	}
	var got []obs
	var ratios map[int][]float64 // read on the first pruned trial
	for _, r := range recs {
		y, ok := 0.0, false
		switch {
		case r.State == StateComplete && r.ScoreOK && r.Score != nil && *r.Score > 0:
			y, ok = math.Log(*r.Score), true
		case r.State == StatePruned:
			if ratios == nil {
				ratios = scorePerTokS(recs)
			}
			y, ok = prunedScore(r, ratios)
		}
		if ok {
			feats, nums := s.features(r.Params, names, false)
			got = append(got, obs{feats, nums, y})
		}
	}
	xs, ys := make([][]float64, len(got)), make([]float64, len(got))
	for i, o := range got {
		xs[i], ys[i] = s.row(o.feats, o.nums), o.y
	}
	return xs, ys
}

// regionNames are the study's one-hot params (see regionParam).
func regionNames(st *space.Study) []string {
	var names []string
	for _, par := range st.Params {
		if regionParam(par) {
			names = append(names, par.Name)
		}
	}
	return names
}

// scorePerTokS returns, for each level, the sorted ratios of score to
// median tok/s there of the complete trials that meet the SLO.
func scorePerTokS(recs []Record) map[int][]float64 {
	out := map[int][]float64{}
	for _, o := range recs {
		if o.State != StateComplete || !o.ScoreOK || o.Score == nil || *o.Score <= 0 {
			continue
		}
		for c, m := range o.Medians() {
			if m.OutputTokS > 0 {
				out[c] = append(out[c], *o.Score/m.OutputTokS)
			}
		}
	}
	for _, rs := range out {
		slices.Sort(rs)
	}
	return out
}

// prunedScore is the log score a pruned trial predicts from the highest
// level it measured: its tok/s there times the median of ratios at that
// level (see scorePerTokS; false when no complete trial measured it).
func prunedScore(r Record, ratios map[int][]float64) (float64, bool) {
	top, tokS := 0, 0.0
	for c, m := range r.Medians() {
		if c > top && m.OutputTokS > 0 {
			top, tokS = c, m.OutputTokS
		}
	}
	rs := ratios[top]
	if top == 0 || len(rs) == 0 {
		return 0, false
	}
	return math.Log(tokS * rs[len(rs)/2]), true
}

// Crash rules: a config crashes when it has every value of a rule, a
// conjunction of one to three param values. The rules a study's failures
// establish are drawn as a weighted set cover: each failed config must
// match a rule, no config that ran may match one, and a rule costs -log of
// its prior (longer rules are rarer), jittered per draw; rules are taken
// greedily by cost per failure newly explained (Occam: one value shared by
// three crashes explains them better than three pairs). A proposal draws
// crashDraws covers and weighs each candidate by the share of them it
// escapes. A single cover blames a value at random among those a crash
// had, and the next proposal repeats the crash with another.
var crashRulePrior = [...]float64{1: 0.1, 2: 0.01, 3: 0.003}

// crashSilentPrior is the prior of a rule of one value that passes the
// engine no flag (CUDA graphs on, radix cache on): what every deployment
// runs rarely crashes by itself. Without it two early crashes that shared
// such a value shut it, and with it the whole fast family (bench-search
// seeds stuck 30 launches with CUDA graphs off).
const crashSilentPrior = 0.002

// crashDraws is how many crash covers a proposal draws; crashFloor keeps a
// config that every draw blames possible, at about 1/28 of its value, so
// that an early explanation can still be tested when nothing else is
// worth more. Fewer covers (1, 2, 3 or 4, 150 bench-search seeds paired
// with 8) moved the declaring launch by -0.8, -0.1, -1.1 and -0.1 with a
// standard error of about 0.8 each, and cost up to 2 more crash launches
// per study: no trend beyond the noise, so 8 stays.
const (
	crashDraws = 8
	crashFloor = 0.3
)

// crashJitter is the log-normal jitter of a rule's cost per draw.
const crashJitter = 0.3

type crashCover struct {
	rules [][]literal
}

// crashRules are the rules that could explain a study's failures, with
// the failures each explains; the part of a cover every draw shares.
type crashRules struct {
	cands  []crashRule
	failed int // failures to explain
}

type crashRule struct {
	rule    []literal
	cost    float64 // -log prior, before jitter
	explain []int   // the failures it matches
}

// crashRuleCandidates lists the conjunctions of the failed configs' values
// that no config that ran has; silent values get crashSilentPrior as a
// rule of their own.
func crashRuleCandidates(recs []Record, names []string, silent map[literal]bool) crashRules {
	okRules := successRules(recs, names)
	var failed [][]literal
	for _, r := range recs {
		if r.State == StateFailed && deterministicClasses[r.FailureClass] {
			failed = append(failed, literalsOf(r.Params, names))
		}
	}
	cr := crashRules{failed: len(failed)}
	byKey := map[string]int{}
	for i, lits := range failed {
		for _, rule := range subsets(lits) {
			k := fmt.Sprint(rule)
			if okRules[k] {
				continue
			}
			j, has := byKey[k]
			if !has {
				prior := crashRulePrior[len(rule)]
				if len(rule) == 1 && silent[rule[0]] {
					prior = crashSilentPrior
				}
				j = len(cr.cands)
				byKey[k] = j
				cr.cands = append(cr.cands, crashRule{rule: rule, cost: -math.Log(prior)})
			}
			cr.cands[j].explain = append(cr.cands[j].explain, i)
		}
	}
	return cr
}

// draw draws one cover: every rule's cost jittered, then rules taken
// greedily by jittered cost per failure newly explained.
func (cr crashRules) draw(rng *rand.Rand) crashCover {
	// Jitter in a fixed order, so a draw depends only on rng.
	cost := make([]float64, len(cr.cands))
	for j, c := range cr.cands {
		cost[j] = c.cost * math.Exp(crashJitter*rng.NormFloat64())
	}
	var cc crashCover
	explained := make([]bool, cr.failed)
	for {
		best, bestRate := -1, math.Inf(1)
		for j, c := range cr.cands {
			n := 0
			for _, i := range c.explain {
				if !explained[i] {
					n++
				}
			}
			if n > 0 && cost[j]/float64(n) < bestRate {
				best, bestRate = j, cost[j]/float64(n)
			}
		}
		if best < 0 {
			return cc
		}
		for _, i := range cr.cands[best].explain {
			explained[i] = true
		}
		cc.rules = append(cc.rules, cr.cands[best].rule)
	}
}

// runs reports whether a config with values lits escapes the drawn rules.
func (cc crashCover) runs(lits []literal) bool {
	for _, rule := range cc.rules {
		if containsAll(lits, rule) {
			return false
		}
	}
	return true
}

// containsAll reports whether lits has every value of rule.
func containsAll(lits, rule []literal) bool {
	for _, r := range rule {
		if !slices.Contains(lits, r) {
			return false
		}
	}
	return true
}

// subsets returns the conjunctions of one to three of lits, in order.
func subsets(lits []literal) [][]literal {
	var out [][]literal
	for i := range lits {
		out = append(out, []literal{lits[i]})
		for j := i + 1; j < len(lits); j++ {
			out = append(out, []literal{lits[i], lits[j]})
			for k := j + 1; k < len(lits); k++ {
				out = append(out, []literal{lits[i], lits[j], lits[k]})
			}
		}
	}
	return out
}

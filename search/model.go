package search

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"gonum.org/v1/gonum/mat"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
)

// The search's one model (budget.sampler "bayes", the default). It both
// proposes and declares:
//
//   - Score: a Bayesian linear model of a run's log score (with an SLO,
//     its log tok/s whether it met the SLO or not): one-hot main
//     effects of the discrete params' values, every pairwise product of two
//     values (with CUDA graphs off, speculative settings behave otherwise
//     than with them on, and main effects alone put a mediocre family
//     first), a quadratic in each number, and an effect of each measured
//     config of its own (what its params do not explain), plus per-run
//     noise. The noise of a run is the larger of its repeats' spread and
//     the spread between runs of one config the study has measured: on a
//     real machine launches disagree more than repeats inside one launch.
//   - Feasibility: the crash covers of feasible.go, one weight per config.
//   - The SLO: where the score has one, the same model fitted a second
//     time, to every complete run's SLO slack (fitSlack), those that met
//     the SLO and those that missed it; a proposal keeps to the configs
//     whose drawn slack meets it (slackDraw).
//   - The incumbent: the measured config with the highest posterior mean
//     (with an SLO, plus the log of its chance to meet it: logMeets),
//     among those a run of which met the SLO. It is what the study
//     declares at any moment, whatever its budget.
//   - Priors: each group of coefficients (main effects, pairs, numbers,
//     configs' own effects) has a prior spread whose scale the study's own
//     runs choose (evidenceScales): how much configs differ, and how much
//     of it their values explain, differs between engines, models and
//     workloads.
//   - Proposals: Thompson sampling (Russo et al., "A Tutorial on Thompson
//     Sampling", 2018, §7): one draw of the coefficients, each config the
//     study does not know scored by its drawn log score plus the log of its
//     chance to run. The draw is tempered (tsTemper of the posterior's
//     spread): over thousands of candidates the argmax of a full-width draw
//     lands on whichever combination the data know least, and a narrower
//     one stays with the family it found first (docs/study-file.md has
//     both measured).
//   - No racing: every launch of the budget measures a config the study
//     does not know. Running a challenger again against the incumbent
//     inside the budget cost launches on the suite (docs/study-file.md);
//     the per-config effect keeps one lucky run from leading alone.
//
// A finite space of up to maxListed configs is listed once (the engine's
// static rules drop what they reject); a larger one draws poolSize configs
// per proposal.

// inactive is the value of a conditional param its condition leaves out.
// It has an effect of its own, so every config has one value effect per
// param: a family with a param more (speculative decoding and its steps)
// does not get a larger prior spread, which would make it the argmax of
// most draws however it measured.
const inactive = "-"

// Prior standard deviations (log-score units) at scale 1, the centre of
// the scales the evidence chooses among.
const (
	tsMainSD   = 0.7
	tsPairSD   = 0.2
	tsNumSD    = 1.0
	tsConfigSD = 0.1
	tsTemper   = 0.6
	maxListed  = 200000
	poolSize   = 4096
)

// model is the study's space with each value's feature.
type model struct {
	st    *space.Study
	names []string // the one-hot params (see regionParam)
	nums  []tsNumeric
	// feature ids: one-hot values, numbers (x, then x² next to it), pairs.
	values map[literal]int
	silent map[literal]bool
	pairs  map[[2]int]int
	nfeat  int
	cands  []tsCand // the listed space; nil: drawn per proposal

	mu sync.Mutex // pairs grow as configs are seen
}

type tsNumeric struct {
	name      string
	low, high float64
	log       bool
	feat      int
	more      bool // a larger value never scores less while it runs
}

// moreSlope is the least slope a draw gives a monotone number (log score
// per half its range): among configs alike but for it, the largest value
// the feasibility model lets run is proposed, and the crashes above the
// engine's edge teach where that is.
const moreSlope = 0.02

// moreMemory reports whether par is a number on the engine's memory
// fraction flag: a larger KV pool never slows an engine that still starts
// and serves, so the model gives it a slope of at least moreSlope and no
// quadratic.
func moreMemory(st *space.Study, par space.Param) bool {
	k := st.Engine.Kind
	return k != nil && k.MemoryFractionFlag != "" && par.Flag == k.MemoryFractionFlag
}

// tsCand is one config the model scores.
type tsCand struct {
	params   space.Params
	internal map[string]float64
	key      string
	feats    []int
	xs       []float64
}

// newModel builds st's model; with list, it lists the space when it is
// small enough (proposals need it; fitting does not).
func newModel(st *space.Study, list bool) (*model, error) {
	m := &model{st: st, values: map[literal]int{}, silent: map[literal]bool{}, pairs: map[[2]int]int{}}
	for i := range st.Params {
		par := &st.Params[i]
		if !regionParam(*par) {
			m.nums = append(m.nums, tsNumeric{name: par.Name, low: par.Low, high: par.High, log: par.Log, more: moreMemory(st, *par)})
			continue
		}
		m.names = append(m.names, par.Name)
		vals := domainValues(*par)
		if par.When != "" {
			vals = append(vals, inactive)
		}
		for _, v := range vals {
			l := literal{name: par.Name, value: v}
			m.values[l] = m.nfeat
			m.nfeat++
			if par.Silent(v) {
				m.silent[l] = true
			}
		}
	}
	for i := range m.nums {
		m.nums[i].feat = m.nfeat
		m.nfeat += 2
	}
	if _, finite := st.Bound(); !finite || !list {
		return m, nil
	}
	if _, over := st.Over(maxListed); over {
		return m, nil
	}
	var err error
	st.Enumerate(func(p space.Params) bool {
		var c tsCand
		var ok bool
		if c, ok, err = m.cand(p); ok {
			m.cands = append(m.cands, c)
		}
		return err == nil
	})
	if err == nil && len(m.cands) == 0 {
		err = errors.New("every config of the space is rejected by the engine's rules")
	}
	return m, err
}

// domainValues lists a one-hot param's values as text.
func domainValues(par space.Param) []string {
	switch par.Type {
	case "bool":
		return []string{"true", "false"}
	case "int":
		var out []string
		for v := par.Low; v <= par.High; v += par.Step {
			out = append(out, fmt.Sprint(int(v)))
		}
		return out
	}
	return par.Choices
}

// cand makes a candidate of p; ok is false when the engine's static rules
// reject it.
func (m *model) cand(p space.Params) (tsCand, bool, error) {
	cfg, err := m.st.Resolve(p, nil)
	if err != nil || len(m.st.Check(cfg)) > 0 {
		return tsCand{}, false, nil
	}
	rec := &recorder{params: p, internal: map[string]float64{}}
	if _, err := m.st.Suggest(rec); err != nil {
		return tsCand{}, false, err
	}
	c := tsCand{params: p, internal: rec.internal, key: configKey(cfg)}
	c.feats, c.xs = m.row(p)
	return c, true, nil
}

// row returns a config's features and their values (the one-hot and pair
// features at 1), adding the pairs it is the first to have.
func (m *model) row(p map[string]any) ([]int, []float64) {
	var one []int
	for _, n := range m.names {
		l := literal{name: n, value: inactive}
		if v, ok := p[n]; ok {
			l.value = fmt.Sprint(v)
		}
		if f, ok := m.values[l]; ok {
			one = append(one, f)
		}
	}
	slices.Sort(one)
	feats := slices.Clone(one)
	xs := make([]float64, len(one))
	for i := range xs {
		xs[i] = 1
	}
	m.mu.Lock()
	for i := range one {
		for j := i + 1; j < len(one); j++ {
			k := [2]int{one[i], one[j]}
			f, ok := m.pairs[k]
			if !ok {
				f = m.nfeat
				m.pairs[k] = f
				m.nfeat++
			}
			feats, xs = append(feats, f), append(xs, 1)
		}
	}
	m.mu.Unlock()
	for _, n := range m.nums {
		v, ok := space.Number(p[n.name])
		if !ok || n.high <= n.low {
			continue
		}
		lo, hi := n.low, n.high
		if n.log && lo > 0 && v > 0 {
			lo, hi, v = math.Log(lo), math.Log(hi), math.Log(v)
		}
		x := 2*(v-lo)/(hi-lo) - 1
		if n.more {
			feats, xs = append(feats, n.feat), append(xs, x)
			continue
		}
		feats, xs = append(feats, n.feat, n.feat+1), append(xs, x, x*x)
	}
	return feats, xs
}

// The prior groups of the coefficients: each has its own scale, chosen
// by the study's evidence (see evidenceScales).
const (
	groupMain = iota
	groupPair
	groupNum
	groupConfig
	groups
)

// group is feature f's prior group.
func (m *model) group(f int) int {
	for _, n := range m.nums {
		if f == n.feat || f == n.feat+1 {
			return groupNum
		}
	}
	if f < len(m.values) {
		return groupMain
	}
	return groupPair
}

// groupSD is the prior standard deviation of a group at scale 1.
var groupSD = [groups]float64{groupMain: tsMainSD, groupPair: tsPairSD, groupNum: tsNumSD, groupConfig: tsConfigSD}

// sd is feature f's prior standard deviation at the fitted scales.
func (ps *posterior) sd(f int) float64 {
	g := ps.m.group(f)
	return groupSD[g] * ps.scale[g]
}

// posterior is the model fitted to a study's runs. Its coefficients are
// those of the features some run has, one per measured config, and the
// intercept (last); a feature no run has keeps its prior.
type posterior struct {
	m     *model
	slack bool           // the values are SLO slacks (fitSlack), not log scores
	index map[int]int    // feature -> coefficient
	conf  map[string]int // config key -> coefficient of its own effect
	mean  *mat.VecDense
	chol  mat.Cholesky
	// measured configs: first complete trial, runs, and params.
	configs map[string]*measuredConfig
	prior   map[int]float64 // the last draw of the features no run has
	scale   [groups]float64 // each prior group's scale (see evidenceScales)
}

type measuredConfig struct {
	// pruned: stopped after a cheap level; its score is the one that
	// level predicts (see prunedScore), and it is never the incumbent.
	pruned bool
	// met: some complete run met the SLO and gates; only such a config
	// can be the incumbent.
	met    bool
	key    string
	first  Record
	runs   int
	feats  []int
	xs     []float64
	scores []float64 // log scores of its runs
}

// fit fits the model to recs' runs that met the SLO, and, where the
// slack model judges the SLO (objective.ScoreSpec.HasSlack), to the tok/s
// of those that missed it (nil when no run measured a score). The score of output tok/s under
// an SLO is the tok/s where the SLO holds: a run that misses it still
// measured its config's tok/s, and the slack model says where it holds.
func (m *model) fit(recs []Record) (*posterior, error) {
	var ratios map[int][]float64 // read on the first pruned trial
	slo := m.st.Score.HasSlack()
	return m.fitTo(recs, false, func(r Record) (y, v float64, ok bool) {
		switch {
		case r.State == StateComplete && r.ScoreOK && r.Score != nil && *r.Score > 0:
			return math.Log(*r.Score), noiseVar(m.st, r), true
		case slo && r.State == StateComplete && r.Score != nil && *r.Score > 0:
			// A run that missed the SLO keeps its tok/s as its score
			// (objective.Score); one that failed a gate scores 0.
			if s, ok := objective.SLOSlack(m.st.Score, r.Medians()); ok && s > 0 {
				return math.Log(*r.Score), noiseVar(m.st, r), true
			}
		case r.State == StatePruned:
			if ratios == nil {
				ratios = scorePerTokS(recs)
			}
			y, ok = prunedScore(r, ratios)
			return y, noiseVar(m.st, r), ok
		}
		return 0, 0, false
	})
}

// fitSlack fits the model to the SLO slack of recs' complete runs, those
// that met the SLO and those that missed it (objective.SLOSlack: at most
// 0 where every SLO held). It is nil when the score has no SLO of its own
// to judge or no run measured one. A run that misses the SLO says nothing
// about the score model, but it says how far its config is from the
// bound, and so which configs like it will meet it.
func (m *model) fitSlack(recs []Record) (*posterior, error) {
	spec := m.st.Score
	if !spec.HasSlack() {
		return nil, nil
	}
	floor := math.Log1p(minNoiseCV * minNoiseCV)
	return m.fitTo(recs, true, func(r Record) (y, v float64, ok bool) {
		if r.State != StateComplete {
			return 0, 0, false
		}
		y, ok = objective.SLOSlack(spec, r.Medians())
		return y, floor, ok
	})
}

// fitTo fits the model to the runs obsOf reads a value y from, with
// noise variance v (nil when it reads none); slack says the values are
// SLO slacks, not log scores.
func (m *model) fitTo(recs []Record, slack bool, obsOf func(Record) (y, v float64, ok bool)) (*posterior, error) {
	ps := &posterior{m: m, slack: slack, index: map[int]int{}, conf: map[string]int{}, configs: map[string]*measuredConfig{}}
	type obs struct {
		c *measuredConfig
		y float64
		v float64
	}
	var runs []obs
	var keys []string
	for _, r := range recs {
		if r.ConfigKey == "" || !r.InSpace() {
			continue
		}
		pruned := r.State == StatePruned
		y, nv, ok := obsOf(r)
		if !ok {
			continue
		}
		c := ps.configs[r.ConfigKey]
		if c == nil {
			c = &measuredConfig{key: r.ConfigKey, first: r, pruned: pruned}
			c.feats, c.xs = m.row(r.Params)
			ps.configs[r.ConfigKey] = c
			keys = append(keys, r.ConfigKey)
		}
		if r.Number < c.first.Number {
			c.first = r
		}
		c.runs++
		c.met = c.met || (r.State == StateComplete && r.ScoreOK)
		if !pruned {
			c.scores = append(c.scores, y)
		}
		runs = append(runs, obs{c, y, nv})
	}
	if len(runs) == 0 {
		return nil, nil
	}
	within := withinVar(ps.configs)
	for _, k := range keys {
		for _, f := range ps.configs[k].feats {
			if _, ok := ps.index[f]; !ok {
				ps.index[f] = len(ps.index)
			}
		}
	}
	for _, k := range keys {
		ps.conf[k] = len(ps.index) + len(ps.conf)
	}
	p := len(ps.index) + len(ps.conf) + 1
	mean := 0.0
	for _, o := range runs {
		mean += o.y / float64(len(runs))
	}
	// Each run's coefficients (the intercept last) and noise, read once
	// by the evidence and by the fit.
	type cols struct {
		idx []int
		xs  []float64
	}
	runCols := make([]cols, len(runs))
	rows := make([]evidenceRow, len(runs))
	for r, o := range runs {
		idx, xs := ps.cols(o.c)
		runCols[r] = cols{idx, xs}
		rows[r] = evidenceRow{idx: idx[:len(idx)-1], xs: xs[:len(xs)-1], y: o.y - mean, noise: math.Max(o.v, within)}
	}
	group := make([]int, p-1)
	for f, i := range ps.index {
		group[i] = m.group(f)
	}
	for _, i := range ps.conf {
		group[i] = groupConfig
	}
	ps.scale = evidenceScales(rows, group)
	prec := mat.NewSymDense(p, nil)
	b := make([]float64, p)
	for i, g := range group {
		sd := groupSD[g] * ps.scale[g]
		prec.SetSym(i, i, 1/(sd*sd))
	}
	prec.SetSym(p-1, p-1, 1/interceptVar)
	b[p-1] = mean / interceptVar
	for r, o := range runs {
		w := 1 / rows[r].noise
		idx, xs := runCols[r].idx, runCols[r].xs
		for a, i := range idx {
			b[i] += w * xs[a] * o.y
			for c, j := range idx {
				if j >= i {
					prec.SetSym(i, j, prec.At(i, j)+w*xs[a]*xs[c])
				}
			}
		}
	}
	if !ps.chol.Factorize(prec) {
		return nil, errors.New("bayes: posterior precision is not positive definite")
	}
	ps.mean = mat.NewVecDense(p, nil)
	if err := ps.chol.SolveVecTo(ps.mean, mat.NewVecDense(p, b)); err != nil {
		return nil, fmt.Errorf("bayes: posterior mean: %w", err)
	}
	return ps, nil
}

// withinVar is the variance of one run's log score about its config's
// mean, pooled over the configs measured more than once (0 with fewer
// than two degrees of freedom).
func withinVar(configs map[string]*measuredConfig) float64 {
	ss, df := 0.0, 0
	for _, c := range configs {
		if len(c.scores) < 2 {
			continue
		}
		mu := 0.0
		for _, y := range c.scores {
			mu += y / float64(len(c.scores))
		}
		for _, y := range c.scores {
			ss += (y - mu) * (y - mu)
		}
		df += len(c.scores) - 1
	}
	if df < 2 {
		return 0
	}
	return ss / float64(df)
}

// cols returns a measured config's coefficients and their values: its
// features, its own effect and the intercept.
func (ps *posterior) cols(c *measuredConfig) ([]int, []float64) {
	idx := make([]int, 0, len(c.feats)+2)
	xs := make([]float64, 0, len(c.feats)+2)
	for a, f := range c.feats {
		idx, xs = append(idx, ps.index[f]), append(xs, c.xs[a])
	}
	idx = append(idx, ps.conf[c.key], len(ps.index)+len(ps.conf))
	return idx, append(xs, 1, 1)
}

// estimate is a measured config's posterior mean log score.
func (ps *posterior) estimate(c *measuredConfig) float64 {
	idx, xs := ps.cols(c)
	v := 0.0
	for a, i := range idx {
		v += xs[a] * ps.mean.AtVec(i)
	}
	return v
}

// variance is the posterior variance of a measured config's mean (see
// estimate).
func (ps *posterior) variance(c *measuredConfig) float64 {
	idx, xs := ps.cols(c)
	x := mat.NewVecDense(ps.mean.Len(), nil)
	for a, i := range idx {
		x.SetVec(i, x.AtVec(i)+xs[a])
	}
	var u mat.VecDense
	if err := ps.chol.SolveVecTo(&u, x); err != nil {
		return math.Inf(1)
	}
	return mat.Dot(x, &u)
}

// ranked returns the measured configs by posterior mean, best first:
// the first is the incumbent.
func (ps *posterior) ranked() []*measuredConfig {
	out := make([]*measuredConfig, 0, len(ps.configs))
	est := map[string]float64{}
	for k, c := range ps.configs {
		if c.pruned || !c.met {
			continue
		}
		out = append(out, c)
		est[k] = ps.estimate(c)
	}
	slices.SortFunc(out, func(a, b *measuredConfig) int {
		if est[a.key] != est[b.key] {
			return cmpFloat(est[b.key], est[a.key])
		}
		return a.first.Number - b.first.Number
	})
	return out
}

// draw returns one tempered coefficient draw; the features no run has are
// drawn from their priors into ps.prior.
func (ps *posterior) draw(rng *rand.Rand) ([]float64, error) {
	p := ps.mean.Len()
	z := make([]float64, p)
	for i := range z {
		z[i] = rng.NormFloat64()
	}
	// theta = mean + temper L^-T z, with precision = L L^T: its covariance
	// is the posterior's.
	var l mat.TriDense
	ps.chol.LTo(&l)
	u := mat.NewVecDense(p, nil)
	if err := u.SolveVec(l.T(), mat.NewVecDense(p, z)); err != nil {
		return nil, fmt.Errorf("bayes: posterior draw: %w", err)
	}
	theta := make([]float64, p)
	for i := range theta {
		theta[i] = ps.mean.AtVec(i) + tsTemper*u.AtVec(i)
	}
	ps.m.mu.Lock()
	n := ps.m.nfeat
	ps.m.mu.Unlock()
	ps.prior = map[int]float64{}
	for f := range n {
		if _, ok := ps.index[f]; !ok {
			ps.prior[f] = tsTemper * ps.sd(f) * rng.NormFloat64()
		}
	}
	// A monotone number's slope on the score, measured or not, is at
	// least moreSlope.
	for _, num := range ps.m.nums {
		if !num.more || ps.slack {
			continue
		}
		if i, ok := ps.index[num.feat]; ok {
			theta[i] = max(theta[i], moreSlope)
		} else {
			ps.prior[num.feat] = max(ps.prior[num.feat], moreSlope)
		}
	}
	return theta, nil
}

// value is an unmeasured config's log score under draw theta (its own
// effect at its prior mean, 0).
func (ps *posterior) value(theta []float64, feats []int, xs []float64) float64 {
	v := theta[len(theta)-1]
	for a, f := range feats {
		if i, ok := ps.index[f]; ok {
			v += xs[a] * theta[i]
		} else {
			v += xs[a] * ps.prior[f]
		}
	}
	return v
}

// proposal is what the model asks for next: a new config's params, in
// goptuna's internal form (nil: nothing left to propose).
type proposal struct {
	params map[string]float64
}

// propose returns trial number n's proposal. known are the config keys the
// study holds (measured, failed, running or rejected: none is proposed
// again); open says whether the engine's rules, with what the study
// learned, accept a config. A zero proposal: nothing is left to propose.
func (m *model) propose(recs []Record, seed int64, n int, known map[string]bool, open func(space.Params) bool) (proposal, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)^0x7468_6f6d_7073_6f6e))
	cands := m.cands
	if cands == nil {
		var err error
		if cands, err = m.pool(rng); err != nil {
			return proposal{}, err
		}
	}
	live := slices.DeleteFunc(slices.Clone(cands), func(c tsCand) bool { return known[c.key] })
	closed := make([]bool, len(live))
	// pick returns the open config with the highest value (-1: none).
	pick := func(value func(i int) float64) (int, float64) {
		vals := make([]float64, len(live))
		for i := range live {
			vals[i] = value(i)
		}
		for {
			best := -1
			for i, v := range vals {
				if !closed[i] && (best < 0 || v > vals[best]) {
					best = i
				}
			}
			if best < 0 {
				return -1, math.Inf(-1)
			}
			if open(live[best].params) {
				return best, vals[best]
			}
			closed[best] = true
		}
	}
	ps, err := m.fit(recs)
	if err != nil {
		return proposal{}, err
	}
	cover := newFeasibility(m.st, recs, m.names, m.silent, rng)
	weight := make([]float64, len(live))
	for i, c := range live {
		weight[i] = cover.logRuns(c.params)
	}
	slack, err := m.slackDraw(recs, seed, n, live)
	if err != nil {
		return proposal{}, err
	}
	if ps == nil {
		// No run measured a score yet: among the configs most likely to
		// run, one at random; where runs missed the SLO, the one its
		// drawn slack puts furthest under the bound.
		i, _ := pick(func(i int) float64 {
			if slack != nil {
				return weight[i] - slack[i]
			}
			return weight[i] + 1e-6*rng.Float64()
		})
		return at(live, i), nil
	}
	theta, err := ps.draw(rng)
	if err != nil {
		return proposal{}, err
	}
	i, _ := pick(func(i int) float64 {
		if slack != nil && slack[i] > 0 {
			return missRank - slack[i]
		}
		return ps.value(theta, live[i].feats, live[i].xs) + weight[i]
	})
	return at(live, i), nil
}

// slackDraw draws the SLO slack model's coefficients once (fitSlack; from
// a stream of its own, so the score's draws stay those of a study without
// an SLO) and returns each live config's drawn slack (nil without an SLO
// to judge). A proposal takes the best drawn score among the configs the
// draw says meet the SLO, else the least drawn violation: constrained
// Thompson sampling (Eriksson and Poloczek, "Scalable Constrained Bayesian
// Optimization", AISTATS 2021).
func (m *model) slackDraw(recs []Record, seed int64, n int, live []tsCand) ([]float64, error) {
	ps, err := m.fitSlack(recs)
	if err != nil || ps == nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(n)^0x736c_6163_6b5f_736c))
	theta, err := ps.draw(rng)
	if err != nil {
		return nil, err
	}
	slack := make([]float64, len(live))
	for i, c := range live {
		slack[i] = ps.value(theta, c.feats, c.xs)
	}
	return slack, nil
}

// missRank ranks a config whose drawn slack misses the SLO below every
// value a config that meets it can have.
const missRank = -1e9

// at is the proposal of live[i] (none for -1).
func at(live []tsCand, i int) proposal {
	if i < 0 {
		return proposal{}
	}
	return proposal{params: live[i].internal}
}

// pool draws poolSize configs of a space too large to list.
func (m *model) pool(rng *rand.Rand) ([]tsCand, error) {
	var out []tsCand
	for range poolSize {
		p, err := m.st.Suggest(drawer{rng})
		if err != nil {
			return nil, err
		}
		c, ok, err := m.cand(p)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// drawer is a space.Suggester drawing each value uniformly (a log param
// uniformly in its log).
type drawer struct{ rng *rand.Rand }

// SuggestStepInt implements space.Suggester.
func (d drawer) SuggestStepInt(_ string, low, high, step int) (int, error) {
	return low + step*d.rng.IntN((high-low)/step+1), nil
}

// SuggestFloat implements space.Suggester.
func (d drawer) SuggestFloat(_ string, low, high float64) (float64, error) {
	return low + (high-low)*d.rng.Float64(), nil
}

// SuggestLogFloat implements space.Suggester.
func (d drawer) SuggestLogFloat(_ string, low, high float64) (float64, error) {
	return math.Exp(math.Log(low) + (math.Log(high)-math.Log(low))*d.rng.Float64()), nil
}

// SuggestDiscreteFloat implements space.Suggester.
func (d drawer) SuggestDiscreteFloat(_ string, low, high, q float64) (float64, error) {
	return low + q*float64(d.rng.IntN(int(math.Floor((high-low)/q+1e-9))+1)), nil
}

// SuggestCategorical implements space.Suggester.
func (d drawer) SuggestCategorical(_ string, choices []string) (string, error) {
	return choices[d.rng.IntN(len(choices))], nil
}

// minNoiseCV floors a run's noise: repeats within one launch agree more
// closely than launches do.
const minNoiseCV = 0.10

// noiseVar is the variance of a run's log score: that of the mean of its
// repeats at the scored level, from their spread, floored at minNoiseCV.
func noiseVar(st *space.Study, rec Record) float64 {
	floor := math.Log1p(minNoiseCV * minNoiseCV)
	meds := rec.Medians()
	conc := st.Score.Concurrency
	if conc <= 0 { // the score is the highest level measured
		for c := range meds {
			conc = max(conc, c)
		}
	}
	m := meds[conc]
	if m.Repeats < 2 {
		return floor
	}
	return math.Max(m.LogVarOutputTokS/float64(m.Repeats), floor)
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

// logMeets is the log of the chance that the measured config with key
// meets the SLO, by a slack posterior (fitSlack): that its mean slack is
// at most 0, its estimate against the estimate's spread. A run's own noise
// is left out: a user needs the config to meet the SLO, and one run over
// the bound in five at a 10% margin says more about the run than the
// config. A config the posterior has no run of gets 0 (chance 1).
func (ps *posterior) logMeets(key string) float64 {
	c, ok := ps.configs[key]
	if !ok {
		return 0
	}
	sd := math.Sqrt(ps.variance(c))
	p := 0.5 * math.Erfc(ps.estimate(c)/(sd*math.Sqrt2))
	return math.Log(math.Max(p, 1e-300))
}

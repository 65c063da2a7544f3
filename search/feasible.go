package search

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/space"
)

// Feasibility: the search's one model of which configs start and survive
// the workload. A config crashes when it has every literal of a rule, a
// conjunction of one to three literals: a discrete param's value (ep=1,
// radix_cache=false), or a number at or above a value (mem_fraction >=
// 0.93: memory runs out above an edge, so a config that crashed there
// blames the values above it, not those below). The rules a study's
// failures establish are drawn as a weighted set cover: each failure that
// recurs (deterministicClasses) must match a rule, no config that ran may
// match one, and a rule costs -log of its prior (longer rules are rarer),
// jittered per draw; rules are taken greedily by cost per failure newly
// explained (Occam: one value shared by three crashes explains them better
// than three pairs). A proposal draws crashDraws covers and weighs each
// config by the share of them it escapes: a single cover blames one value
// at random among those a crash had, and the next proposal would repeat
// the crash with another. Nothing is ruled out for good: a config every
// cover blames keeps crashFloor of a chance, so an early explanation can
// still be tested when nothing else is worth more. An out-of-memory
// failure is first the memory fraction's (see oomElsewhere), and blames a
// workspace flag's larger values with its own (see conditions); the
// shortfall its message states blames the fractions that far below its
// own (see shortRules), and a KV cache or state pool too small blames the
// smaller fractions instead of the larger (see poolTooSmall).
var crashRulePrior = [...]float64{1: 0.1, 2: 0.01, 3: 0.003}

// crashSilentPrior is the prior of a rule of one value that passes the
// engine no flag (CUDA graphs on, radix cache on): what every deployment
// runs rarely crashes by itself.
const crashSilentPrior = 0.002

// oomElsewhere divides the prior of a rule that explains an out-of-memory
// failure without the engine's memory fraction (moreMemory). The fraction
// is the static pools' share of the GPU; what it leaves is all that
// activations, CUDA graphs and prefill chunks get, so an engineer lowers
// it first. The other values stay possible causes, a step behind: a 32K
// prefill chunk can run out at every fraction in range. Measured against
// no such rule and against 10, 100 seeds each (docs/study-file.md).
const oomElsewhere = 3

const (
	crashDraws  = 8
	crashFloor  = 0.3
	crashJitter = 0.3
	// maxRegionValues: an int param with more values is a number to the
	// models (a quadratic, thresholds), not one-hot values.
	maxRegionValues = 16
)

// literal is one condition on a param: its value is value, or, with
// atLeast or atMost, a number at least or at most value.
type literal struct {
	name            string
	value           string
	atLeast, atMost bool
}

// in reports whether params meet the literal.
func (l literal) in(params map[string]any) bool {
	v, ok := params[l.name]
	if !ok {
		return false
	}
	if !l.atLeast && !l.atMost {
		return fmt.Sprint(v) == l.value
	}
	x, ok := number(v)
	t, err := strconv.ParseFloat(l.value, 64)
	return ok && err == nil && (l.atLeast && x >= t || l.atMost && x <= t)
}

// number is v as a number: a number, or a categorical choice that reads
// as one ("8192"), as expressions read it.
func number(v any) (float64, bool) {
	if s, ok := v.(string); ok {
		v = space.ChoiceValue(s)
	}
	return space.Number(v)
}

// literalsOf returns a config's values of the named params, in their order.
func literalsOf(params map[string]any, names []string) []literal {
	var out []literal
	for _, n := range names {
		if v, ok := params[n]; ok {
			out = append(out, literal{name: n, value: fmt.Sprint(v)})
		}
	}
	return out
}

// regionParam reports whether a param is one-hot to the models: a
// categorical, a bool, or an int with few values.
func regionParam(par space.Param) bool {
	switch par.Type {
	case "categorical", "bool":
		return true
	case "int":
		return par.Step > 0 && (par.High-par.Low)/par.Step+1 <= maxRegionValues
	}
	return false
}

// feasibility is a proposal's crash covers.
type feasibility struct {
	covers [][][]literal
}

type crashRule struct {
	rule    []literal
	cost    float64 // -log prior, before jitter
	explain []int   // the failures it matches
}

// newFeasibility draws crashDraws covers of recs' failures; names are the
// one-hot params, silent their values that pass no flag.
func newFeasibility(st *space.Study, recs []Record, names []string, silent map[literal]bool, rng *rand.Rand) feasibility {
	mem := memoryParam(st)
	var ran []Record
	var failed [][]literal
	var oom []bool          // of failed
	var short [][][]literal // of failed: the rules its shortfall adds (see shortRules)
	for _, r := range recs {
		switch {
		case r.State == StateComplete || r.State == StatePruned:
			ran = append(ran, r)
		case r.State == StateFailed && deterministicClasses[r.FailureClass] && r.InSpace():
			isOOM := r.FailureClass == engine.ClassOOM
			lits := conditions(st, r.Params, names, isOOM)
			if k := st.Engine.Kind; isOOM && k != nil && k.PoolTooSmallIn(r.Reason) {
				lits = poolTooSmall(lits, mem)
			}
			var more [][]literal
			if s, ok := engine.OOMShortfall(r.Reason); isOOM && ok {
				more = shortRules(st, mem, lits, r.Params, s)
			}
			failed, oom, short = append(failed, lits), append(oom, isOOM), append(short, more)
		}
	}
	var cands []crashRule
	byKey := map[string]int{}
	add := func(i int, rule []literal, prior float64) {
		k := fmt.Sprint(rule)
		j, seen := byKey[k]
		if !seen {
			j = -1
			if !refuted(rule, ran) {
				j = len(cands)
				cands = append(cands, crashRule{rule: rule, cost: -math.Log(prior)})
			}
			byKey[k] = j
		}
		if j >= 0 {
			cands[j].explain = append(cands[j].explain, i)
		}
	}
	for i, lits := range failed {
		for _, rule := range subsets(lits) {
			prior := crashRulePrior[len(rule)]
			if len(rule) == 1 && silent[rule[0]] {
				prior = crashSilentPrior
			}
			add(i, rule, prior)
		}
		for _, rule := range short[i] {
			add(i, rule, crashRulePrior[1])
		}
	}
	if mem != "" {
		for j, c := range cands {
			if oomBlamedElsewhere(c, oom, mem) {
				cands[j].cost += math.Log(oomElsewhere)
			}
		}
	}
	var f feasibility
	for range crashDraws {
		f.covers = append(f.covers, drawCover(cands, len(failed), rng))
	}
	return f
}

// memoryParam is the name of the param on the engine's memory fraction
// flag, "" when the study searches none.
func memoryParam(st *space.Study) string {
	for _, par := range st.Params {
		if moreMemory(st, par) {
			return par.Name
		}
	}
	return ""
}

// oomBlamedElsewhere reports whether rule c explains an out-of-memory
// failure without a literal on the memory fraction param mem.
func oomBlamedElsewhere(c crashRule, oom []bool, mem string) bool {
	for _, l := range c.rule {
		if l.name == mem {
			return false
		}
	}
	for _, i := range c.explain {
		if oom[i] {
			return true
		}
	}
	return false
}

// conditions are the literals a failed config offers as causes: its
// discrete values, and each number at or above its value. A config that
// ran out of memory (oom) offers its value of a param on one of the
// engine's workspace flags as that value or more, like a number: a larger
// prefill chunk or CUDA graph batch needs more of what the fraction leaves.
func conditions(st *space.Study, params map[string]any, names []string, oom bool) []literal {
	out := literalsOf(params, names)
	for i, l := range out {
		if _, ok := number(params[l.name]); ok && oom && workspace(st, l.name) {
			out[i].atLeast = true
		}
	}
	for _, par := range st.Params {
		if regionParam(par) {
			continue
		}
		if x, ok := space.Number(params[par.Name]); ok {
			out = append(out, literal{name: par.Name, value: strconv.FormatFloat(x, 'g', -1, 64), atLeast: true})
		}
	}
	return out
}

// poolTooSmall turns around the literal on mem, the memory fraction, of a
// config whose KV cache or state pool got too little
// (engine.Engine.PoolTooSmall): a smaller fraction reserves less, so it
// fails too, and a larger one is the fix its message names.
func poolTooSmall(lits []literal, mem string) []literal {
	for i, l := range lits {
		if l.name == mem {
			lits[i].atLeast, lits[i].atMost = false, true
		}
	}
	return lits
}

// shortRules are the rules an out-of-memory failure adds when its message
// says how short its allocation fell: short, a share of the GPU
// (engine.OOMShortfall); mem names the memory fraction's param. The same
// config at any fraction from x - short up (x its own; the bound rounded
// up to the param's step) leaves less than that allocation needs, so an
// engineer reading the message lowers the fraction that far at once, not a
// step per crash. The shortfall
// holds for the config's prefill chunk and CUDA graph batch (its
// workspace values, or more); a smaller chunk needs less. So it adds two
// rules, each as likely as a single value: every fraction from the bound
// up with the config's workspace values or more, and every fraction from
// the bound up whatever the rest (the first alone when the config has no
// workspace value). Its own fraction's rule, mem_fraction >= x, stays
// among the explanations; a bound that reaches no step below x adds
// nothing, since repeating that rule would only weigh the fraction more.
func shortRules(st *space.Study, mem string, lits []literal, params map[string]any, short float64) [][]literal {
	var low *literal
	var conj []literal
	for _, l := range lits {
		x, ok := number(params[l.name])
		switch {
		case ok && l.name == mem && !l.atMost && short > 0:
			t, ok := onStep(st, mem, x-short)
			if !ok || t >= x {
				return nil
			}
			lowered := literal{name: l.name, value: strconv.FormatFloat(t, 'g', -1, 64), atLeast: true}
			low = &lowered
			conj = append(conj, lowered)
		case l.atLeast && workspace(st, l.name):
			conj = append(conj, l)
		}
	}
	switch {
	case low == nil:
		return nil
	case len(conj) == 1:
		return [][]literal{conj}
	}
	return [][]literal{conj, {*low}}
}

// onStep is the least value of the named param's steps at or above t
// (see space.Param.StepAtOrAbove); false for no such param.
func onStep(st *space.Study, name string, t float64) (float64, bool) {
	for i := range st.Params {
		if st.Params[i].Name == name {
			return st.Params[i].StepAtOrAbove(t), true
		}
	}
	return 0, false
}

// workspace reports whether the param named name is on one of the
// engine's WorkspaceFlags.
func workspace(st *space.Study, name string) bool {
	k := st.Engine.Kind
	if k == nil {
		return false
	}
	for _, par := range st.Params {
		if par.Name == name {
			return slices.Contains(k.WorkspaceFlags, par.Flag)
		}
	}
	return false
}

// refuted reports whether a config that ran meets every literal of rule.
func refuted(rule []literal, ran []Record) bool {
	for _, r := range ran {
		if matches(r.Params, rule) {
			return true
		}
	}
	return false
}

// drawCover draws one cover: every rule's cost jittered, then rules taken
// greedily by jittered cost per failure newly explained.
func drawCover(cands []crashRule, failures int, rng *rand.Rand) [][]literal {
	cost := make([]float64, len(cands))
	for j, c := range cands {
		cost[j] = c.cost * math.Exp(crashJitter*rng.NormFloat64())
	}
	var rules [][]literal
	explained := make([]bool, failures)
	for {
		best, bestRate := -1, math.Inf(1)
		for j, c := range cands {
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
			return rules
		}
		for _, i := range cands[best].explain {
			explained[i] = true
		}
		rules = append(rules, cands[best].rule)
	}
}

// logRuns is the log of a config's chance to run: the share of the covers
// none of whose rules it meets, floored by crashFloor.
func (f feasibility) logRuns(params map[string]any) float64 {
	runs := 0
	for _, rules := range f.covers {
		hit := false
		for _, rule := range rules {
			if matches(params, rule) {
				hit = true
				break
			}
		}
		if !hit {
			runs++
		}
	}
	return math.Log((float64(runs) + crashFloor) / (crashDraws + crashFloor))
}

// matches reports whether params meet every literal of ls.
func matches(params map[string]any, ls []literal) bool {
	for _, l := range ls {
		if !l.in(params) {
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

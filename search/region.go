package search

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sgtune/sgtune/space"
)

// Crash regions: where every launched config failed in a way that recurs,
// a new config of the region is not launched. A region is one or two
// param values (ep=1, radix_cache=false): with two, minPairCrashes launched
// failures and no success sharing both; with one, minSingleCrashes and no
// success. Continuous and fine-grained params (more than maxRegionValues
// values, e.g. a memory fraction) never define a region.
//
// A region is ruled out before launch only where the evidence singles it
// out (see soleCause): for one of its failures, every other explanation of
// one or two values has been refuted by a success. A hard region is never
// launched again, so nothing could refute one taken on thinner evidence;
// the sampler's soft crash covers (thompson.go) steer away from the
// unproven ones instead.
//
// Regions explain failures, each failure one region: candidates are taken
// greedily by how many failures no region taken before explains, a single
// value before a pair at equal count, then the values that fail most
// often. A single value is a candidate only when its failures differ in
// every other region param; else a pair explains them as well, and the
// single value would rule out configs nothing has shown to fail (three
// crashes without the radix cache, all with ep=1, do not rule out radix
// off with ep=4). Explaining each failure once keeps the failures of two
// causes from also establishing a region that merely shares their values.
const (
	minPairCrashes   = 2
	minSingleCrashes = 3
	maxRegionValues  = 16
)

// literal is one param value of a region.
type literal struct {
	name  string
	value string
}

// region is a set of param values where every launched config failed.
type region struct {
	lits   []literal
	failed []Record
	// plausibility orders regions of equal support: the summed failure rate
	// of the launched configs sharing each of its values.
	plausibility float64
}

// crashRegion returns why a proposal lies in a crash region ("" when it
// does not), naming the region, the failed trials and their classes.
func crashRegion(st *space.Study, recs []Record, p space.Params) string {
	for _, r := range crashRegions(st, recs) {
		if matches(p, r.lits) {
			return r.reason()
		}
	}
	return ""
}

// crashRegions returns the regions the study's failures establish, best
// supported first, each failure explained by one region only.
func crashRegions(st *space.Study, recs []Record) []region {
	return cover(regionCandidates(st, recs))
}

// regionCandidates returns the single values (whose failures differ in
// every other param, see diverse) and pairs of values of failed configs
// that no success shares and that are the sole cause left of one of their
// failures (see soleCause).
func regionCandidates(st *space.Study, recs []Record) []region {
	names := regionNames(st)
	var launched []Record
	for _, rec := range recs {
		if rec.State == StateComplete || rec.State == StatePruned ||
			(rec.State == StateFailed && deterministicClasses[rec.FailureClass]) {
			launched = append(launched, rec)
		}
	}
	failRate := failureRates(launched, names)
	refuted := successRules(launched, names)
	// open holds, per failed trial, the rules of one or two of its values
	// that no success refutes: its explanations left.
	open := map[int][][]literal{}
	for _, rec := range launched {
		if rec.State != StateFailed {
			continue
		}
		for _, rule := range subsets(literalsOf(rec.Params, names)) {
			if len(rule) <= 2 && !refuted[fmt.Sprint(rule)] {
				open[rec.Number] = append(open[rec.Number], rule)
			}
		}
	}
	seen := map[string]bool{}
	var cands []region
	add := func(ls []literal) {
		key := fmt.Sprint(ls)
		if seen[key] {
			return
		}
		seen[key] = true
		r := region{lits: ls}
		for _, rec := range launched {
			if !matches(rec.Params, ls) {
				continue
			}
			if rec.State != StateFailed {
				return // a success in the region: it is not one
			}
			r.failed = append(r.failed, rec)
		}
		for _, l := range ls {
			r.plausibility += failRate[l]
		}
		if len(ls) == 1 && !diverse(r.failed, ls[0].name, names) {
			return
		}
		if !soleCause(r, open) {
			return
		}
		cands = append(cands, r)
	}
	for _, rec := range launched {
		for _, rule := range open[rec.Number] {
			add(rule) // a refuted rule would have a success in its region
		}
	}
	return cands
}

// successRules returns the rules (conjunctions of one to three values,
// see subsets) some complete or pruned trial has, keyed by fmt.Sprint: no
// failure can be explained by one of them.
func successRules(recs []Record, names []string) map[string]bool {
	out := map[string]bool{}
	for _, rec := range recs {
		if rec.State != StateComplete && rec.State != StatePruned {
			continue
		}
		for _, r := range subsets(literalsOf(rec.Params, names)) {
			out[fmt.Sprint(r)] = true
		}
	}
	return out
}

// soleCause reports whether the region is the only explanation left for
// at least one of its failures: every rule of that failure that no success
// refutes contains the region's values. Two failures sharing values say
// little by themselves: a failure with overlap off and one with ep=1 and
// radix off may both run CUDA graphs with EAGLE, and ruling that pair out
// would close the best configs of bench-search's GLM study, where no launch
// could ever refute it. Where another explanation remains, the sampler's
// soft crash covers steer away instead (thompson.go). open holds each
// failed trial's explanations left, by trial number.
func soleCause(r region, open map[int][][]literal) bool {
	for _, rec := range r.failed {
		sole := true
		for _, rule := range open[rec.Number] {
			if !containsAll(rule, r.lits) {
				sole = false
				break
			}
		}
		if sole {
			return true
		}
	}
	return false
}

// failureRates returns, for each value of the named params, the failure
// rate of the launched configs with it.
func failureRates(launched []Record, names []string) map[literal]float64 {
	count := map[literal][2]int{} // failed, launched
	for _, rec := range launched {
		for _, l := range literalsOf(rec.Params, names) {
			c := count[l]
			if rec.State == StateFailed {
				c[0]++
			}
			c[1]++
			count[l] = c
		}
	}
	out := make(map[literal]float64, len(count))
	for l, c := range count {
		out[l] = float64(c[0]) / float64(c[1])
	}
	return out
}

// cover takes candidate regions greedily (see better) while one explains
// enough failures no region taken before explains: minSingleCrashes for a
// single value, minPairCrashes for a pair.
func cover(cands []region) []region {
	explained := map[int]bool{}
	support := func(r region) int {
		n := 0
		for _, rec := range r.failed {
			if !explained[rec.Number] {
				n++
			}
		}
		return n
	}
	var out []region
	for {
		bi, bs := -1, 0
		for i, r := range cands {
			need := minPairCrashes
			if len(r.lits) == 1 {
				need = minSingleCrashes
			}
			s := support(r)
			if s < need {
				continue
			}
			if bi < 0 || better(r, s, cands[bi], bs) {
				bi, bs = i, s
			}
		}
		if bi < 0 {
			return out
		}
		r := cands[bi]
		for _, rec := range r.failed {
			explained[rec.Number] = true
		}
		out = append(out, r)
		cands = slices.Delete(cands, bi, bi+1)
	}
}

// better orders candidate regions: more unexplained failures, then one
// value before two (a single value is a candidate only when its failures
// differ in every other param, see diverse), then the more plausible
// values; the order is total, so the choice does not depend on map order.
func better(a region, as int, b region, bs int) bool {
	switch {
	case as != bs:
		return as > bs
	case len(a.lits) != len(b.lits):
		return len(a.lits) < len(b.lits)
	case a.plausibility != b.plausibility:
		return a.plausibility > b.plausibility
	}
	return fmt.Sprint(a.lits) < fmt.Sprint(b.lits)
}

// diverse reports whether failures that share the value of param name
// differ in every other region param: otherwise a pair (the value and the
// one they share) explains them as well, and the single value would rule
// out configs nothing has shown to fail.
func diverse(failed []Record, name string, names []string) bool {
	for _, n := range names {
		if n == name {
			continue
		}
		first, same := "", true
		for i, rec := range failed {
			v := fmt.Sprint(rec.Params[n])
			if i == 0 {
				first = v
			} else if v != first {
				same = false
				break
			}
		}
		if same {
			return false
		}
	}
	return true
}

// reason says why a config of the region is not launched.
func (r region) reason() string {
	var where, trials []string
	classes := map[string]bool{}
	for _, l := range r.lits {
		where = append(where, l.name+"="+l.value)
	}
	for _, rec := range r.failed {
		trials = append(trials, fmt.Sprint(rec.Number))
		classes[rec.FailureClass] = true
	}
	cs := make([]string, 0, len(classes))
	for c := range classes {
		cs = append(cs, c)
	}
	slices.Sort(cs)
	return fmt.Sprintf("crash region: every launched config with %s failed (trials %s: %s) and none succeeded",
		strings.Join(where, ", "), strings.Join(trials, ", "), strings.Join(cs, ", "))
}

// literalsOf returns a config's values of the named params, in their order.
func literalsOf(params map[string]any, names []string) []literal {
	var out []literal
	for _, n := range names {
		if v, ok := params[n]; ok {
			out = append(out, literal{n, fmt.Sprint(v)})
		}
	}
	return out
}

// regionParam reports whether a param can define a crash region: a
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

func matches(params map[string]any, ls []literal) bool {
	for _, l := range ls {
		v, ok := params[l.name]
		if !ok || fmt.Sprint(v) != l.value {
			return false
		}
	}
	return true
}

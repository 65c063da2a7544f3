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

// crashRegion returns why a proposal lies in a crash region ("" when it
// does not), naming the region, the failed trials and their classes.
func crashRegion(st *space.Study, recs []Record, p space.Params) string {
	var lits []literal
	for _, par := range st.Params {
		v, ok := p[par.Name]
		if !ok || !regionParam(par) {
			continue
		}
		lits = append(lits, literal{par.Name, fmt.Sprint(v)})
	}
	type region struct {
		lits   []literal
		failed []Record
	}
	var best *region
	consider := func(ls []literal, need int) {
		var failed []Record
		for _, rec := range recs {
			if !matches(rec.Params, ls) {
				continue
			}
			switch {
			case rec.State == StateComplete || rec.State == StatePruned:
				return // a success in the region: it is not one
			case rec.State == StateFailed && deterministicClasses[rec.FailureClass]:
				failed = append(failed, rec)
			}
		}
		if len(failed) >= need && (best == nil || len(failed) > len(best.failed)) {
			best = &region{ls, failed}
		}
	}
	for i := range lits {
		for j := i + 1; j < len(lits); j++ {
			consider([]literal{lits[i], lits[j]}, minPairCrashes)
		}
	}
	for i := range lits {
		consider(lits[i:i+1], minSingleCrashes)
	}
	if best == nil {
		return ""
	}
	var where, trials []string
	classes := map[string]bool{}
	for _, l := range best.lits {
		where = append(where, l.name+"="+l.value)
	}
	for _, rec := range best.failed {
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

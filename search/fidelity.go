package search

import (
	"fmt"
	"slices"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/space"
)

// pruneReach is how far below the scored level a level still predicts it:
// a trial is pruned only after a level whose concurrency is at least the
// scored level's / pruneReach. C1 measures latency-bound decoding, where
// speculative decoding doubles throughput and says little of C64: on the
// GLM study, configs without EAGLE read under half the best C1 while
// reaching 91% of the best C64 (bench-search pruned them at C1).
const pruneReach = 4

// prunesAt reports whether a trial may be pruned after level conc.
func prunesAt(st *space.Study, conc int) bool {
	target := st.Score.Concurrency
	if target <= 0 {
		for _, c := range st.Workload.Chat.Concurrency {
			target = max(target, c)
		}
	}
	return conc*pruneReach >= target
}

// levelRef is a complete trial's median output tok/s at one level.
type levelRef struct {
	number int
	tokS   float64
}

// pruneReason decides whether a trial stops after a cheap level (multi-
// fidelity): its median tok/s at the level against the complete trials'
// at the same level. "" lets it go on. The fraction rule prunes below a
// fraction of the best; the median rule (successive halving's) below the
// median. Nothing is pruned before rule.MinComplete trials measured the
// level.
func pruneReason(rule space.Prune, conc int, mine float64, refs []levelRef) string {
	if rule.Rule == "off" || len(refs) < max(rule.MinComplete, 1) {
		return ""
	}
	switch rule.Rule {
	case "median":
		vals := make([]float64, len(refs))
		for i, r := range refs {
			vals[i] = r.tokS
		}
		slices.Sort(vals)
		med := vals[len(vals)/2]
		if len(vals)%2 == 0 {
			med = (vals[len(vals)/2-1] + vals[len(vals)/2]) / 2
		}
		if mine < med {
			return fmt.Sprintf("C%d: %.1f tok/s < the median %.1f of %d complete trials at that level (budget.prune: median)",
				conc, mine, med, len(refs))
		}
	default:
		best := refs[0]
		for _, r := range refs[1:] {
			if r.tokS > best.tokS {
				best = r
			}
		}
		if mine < rule.Fraction*best.tokS {
			return fmt.Sprintf("C%d: %.1f tok/s < %.2f x %.1f, trial %d's at that level (budget.prune: fraction %.2f)",
				conc, mine, rule.Fraction, best.tokS, best.number, rule.Fraction)
		}
	}
	return ""
}

// levelPrune decides whether a trial stops after level conc from the
// level's measured points: pruneReason on the median tok/s of the points
// that are not flagged (objective.Point.Outlier: far from their sibling
// repeats, or far below their own warm-up or a lower level). A flagged
// point is not the config's throughput (make demo: a single C16 repeat that
// paid the first-time cost its warm-up did not read 3,715 tok/s against
// about 19,000, and pruned its trial): when the level has no other point,
// the trial goes on, and kept says what the flagged points would have
// decided.
func levelPrune(rule space.Prune, conc int, pts []objective.Point, refs []levelRef) (why, kept string) {
	var ok, flagged []objective.Point
	for _, p := range pts {
		if p.Outlier != "" {
			flagged = append(flagged, p)
		} else {
			ok = append(ok, p)
		}
	}
	if len(ok) > 0 {
		return pruneReason(rule, conc, levelTokS(ok), refs), ""
	}
	if len(flagged) == 0 {
		return "", ""
	}
	would := pruneReason(rule, conc, levelTokS(flagged), refs)
	if would == "" {
		return "", ""
	}
	return "", fmt.Sprintf("not pruned on flagged points (%s): %s", flagged[0].Outlier, would)
}

// levelRefs are the complete trials (meeting the SLO) that measured level
// conc, with their median tok/s there.
func levelRefs(recs []Record, conc int) []levelRef {
	var out []levelRef
	for _, rec := range recs {
		if rec.State != StateComplete || !rec.ScoreOK {
			continue
		}
		if m, ok := rec.Medians()[conc]; ok && m.OutputTokS > 0 {
			out = append(out, levelRef{rec.Number, m.OutputTokS})
		}
	}
	return out
}

// levelTokS is the median output tok/s of a level's points.
func levelTokS(pts []objective.Point) float64 {
	m := objective.Medians(pts)
	for _, v := range m {
		return v.OutputTokS
	}
	return 0
}

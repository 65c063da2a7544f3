package search

import (
	"math/rand/v2"
	"testing"
)

// evidenceRows makes n runs of distinct configs of three two-valued
// params: main effects (coefficients 0-5), the pairs of the values each
// has (6-17) and an effect of its own per config (18 on); its log score is
// effect times +1 or -1 by the first param's value, plus noise of
// standard deviation 0.1.
func evidenceRows(n int, effect float64, seed uint64) ([]evidenceRow, []int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var group []int
	for range 6 {
		group = append(group, groupMain)
	}
	for range 12 {
		group = append(group, groupPair)
	}
	rows := make([]evidenceRow, n)
	for r := range rows {
		var idx []int
		var v [3]int
		for p := range v {
			v[p] = rng.IntN(2)
			idx = append(idx, 2*p+v[p])
		}
		// the pairs (p, q) with p < q: 4 coefficients each.
		pair := 0
		for p := range 3 {
			for q := p + 1; q < 3; q++ {
				idx = append(idx, 6+4*pair+2*v[p]+v[q])
				pair++
			}
		}
		idx = append(idx, len(group))
		group = append(group, groupConfig)
		xs := make([]float64, len(idx))
		for a := range xs {
			xs[a] = 1
		}
		sign := float64(2*v[0] - 1)
		rows[r] = evidenceRow{idx: idx, xs: xs, y: sign*effect + 0.1*rng.NormFloat64(), noise: 0.01}
	}
	return rows, group
}

func TestEvidenceScales(t *testing.T) {
	for _, tc := range []struct {
		name     string
		runs     int
		effect   float64
		min, max [groups]float64
	}{
		// Runs that differ by their noise alone: every prior the data
		// touch shrinks.
		{name: "noise only", runs: 30, effect: 0, min: [groups]float64{0.125, 0.125, 1, 0.125}, max: [groups]float64{0.5, 0.5, 1, 0.5}},
		// A value that moves the score by a factor of 9 keeps the main
		// effects' prior at least at its scale-1 spread (0.7), though the
		// two other params do nothing.
		{name: "strong main effect", runs: 30, effect: 1.1, min: [groups]float64{1, 0.25, 1, 0.25}, max: [groups]float64{2, 1, 1, 1}},
		// One run: nothing to choose by, the prior's scales.
		{name: "one run", runs: 1, effect: 1.1, min: [groups]float64{1, 1, 1, 1}, max: [groups]float64{1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, group := evidenceRows(tc.runs, tc.effect, 7)
			got := evidenceScales(rows, group)
			for g := range groups {
				if got[g] < tc.min[g] || got[g] > tc.max[g] {
					t.Errorf("scales %v: group %d outside [%g, %g]", got, g, tc.min[g], tc.max[g])
				}
			}
		})
	}
}

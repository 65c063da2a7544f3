package search

import (
	"math"

	"gonum.org/v1/gonum/mat"
)

// evidenceRow is one run as the evidence sees it: its coefficients
// (without the intercept) and their values, its log score less the mean
// of all runs, and its noise variance.
type evidenceRow struct {
	idx   []int
	xs    []float64
	y     float64
	noise float64
}

// scaleGrid are the scales evidenceScales tries for each prior group.
var scaleGrid = []float64{0.125, 0.25, 0.5, 1, 2}

// scaleSpread is the standard deviation of the log of a group's scale
// under its hyperprior: each group's prior spread is known to a factor of
// two before the study measures anything.
const scaleSpread = math.Ln2

// interceptVar is the prior variance of the intercept about the runs' mean.
const interceptVar = 100.0

// evidenceScales chooses each prior group's scale (a factor on groupSD)
// by the study's own runs: the combination of scaleGrid with the highest
// marginal likelihood of the runs' log scores (the model's coefficients
// integrated out) times a log-normal hyperprior centred on 1. How much
// configs differ, and how much of it their values explain, differ between
// engines, models and workloads; a prior fixed on one landscape is too
// wide or too narrow on the next. With few runs the hyperprior keeps the
// scales near 1. group is each coefficient's prior group.
func evidenceScales(rows []evidenceRow, group []int) [groups]float64 {
	best := [groups]float64{1, 1, 1, 1}
	n := len(rows)
	if n < 2 {
		return best
	}
	// base[g] is the runs' covariance through group g's coefficients at
	// scale 1.
	var base [groups]*mat.SymDense
	for g := range base {
		base[g] = mat.NewSymDense(n, nil)
	}
	at := make([]map[int]float64, n) // a row's value of each coefficient
	for i, r := range rows {
		at[i] = make(map[int]float64, len(r.idx))
		for a, k := range r.idx {
			at[i][k] = r.xs[a]
		}
	}
	// Summed in row i's order, not a map's: the same runs give the same
	// scales, and a study the same proposals.
	for i, r := range rows {
		for j := i; j < n; j++ {
			for a, k := range r.idx {
				xi := r.xs[a]
				if xj, ok := at[j][k]; ok {
					g := group[k]
					sd := groupSD[g]
					base[g].SetSym(i, j, base[g].At(i, j)+xi*xj*sd*sd)
				}
			}
		}
	}
	// A group no run has a coefficient of keeps scale 1: the runs say
	// nothing about it.
	var used [groups]bool
	for g := range base {
		for i := range n {
			used[g] = used[g] || base[g].At(i, i) > 0
		}
	}
	y := mat.NewVecDense(n, nil)
	for i, r := range rows {
		y.SetVec(i, r.y)
	}
	k := mat.NewSymDense(n, nil)
	alpha := mat.NewVecDense(n, nil)
	var chol mat.Cholesky
	bestLog := math.Inf(-1)
	var s [groups]float64
	var try func(g int)
	try = func(g int) {
		if g < groups && !used[g] {
			s[g] = 1
			try(g + 1)
			return
		}
		if g < groups {
			for _, v := range scaleGrid {
				s[g] = v
				try(g + 1)
			}
			return
		}
		for i := range n {
			for j := i; j < n; j++ {
				v := interceptVar
				for h := range groups {
					v += s[h] * s[h] * base[h].At(i, j)
				}
				if i == j {
					v += rows[i].noise
				}
				k.SetSym(i, j, v)
			}
		}
		if !chol.Factorize(k) {
			return
		}
		if err := chol.SolveVecTo(alpha, y); err != nil {
			return
		}
		l := -0.5*mat.Dot(y, alpha) - 0.5*chol.LogDet()
		for h := range groups {
			z := math.Log(s[h]) / scaleSpread
			l -= 0.5 * z * z
		}
		if l > bestLog {
			bestLog, best = l, s
		}
	}
	try(0)
	return best
}

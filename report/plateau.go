package report

import (
	"fmt"
	"math"

	"github.com/sgtune/sgtune/objective"
)

// Plateau says whether the declared winner is on the measured plateau: its
// score lies within the measured spread of the best score any trial of the
// study reached. Scores a config gets from run to run differ by the noise of
// the machine; a winner below the best single score by less than that noise
// is as good as the best, one below by more was declared against the
// evidence.
type Plateau struct {
	// Winner is the declared winner; WinnerScore its score pooled over its
	// confirmation runs when it was confirmed, else its own.
	Winner      int     `json:"winner"`
	WinnerScore float64 `json:"winner_score"`
	// Best is the trial with the highest score that met the SLO and gates
	// (confirmation runs included); BestScore that score.
	Best      int     `json:"best"`
	BestScore float64 `json:"best_score"`
	// Gap is BestScore - WinnerScore.
	Gap float64 `json:"gap"`
	// Spread is the measured noise the gap is judged against: the larger
	// of the best trial's repeat range at the scored level (max - min of
	// its repeats' output tok/s) and the winner's confirmation spread.
	Spread float64 `json:"spread"`
	// SpreadFrom says which measurement gave Spread.
	SpreadFrom string `json:"spread_from"`
	// On: Gap <= Spread.
	On bool `json:"on"`
}

// PlateauOf judges the study's declared winner (Study.Best) against the best
// score the study saw; ok is false without a winner.
func PlateauOf(st Study) (p Plateau, ok bool) {
	if st.Best == nil || st.Best.Score == nil {
		return Plateau{}, false
	}
	p.Winner, p.WinnerScore = st.Best.Number, *st.Best.Score
	confSpread := -1.0
	for _, c := range st.Confirmations {
		if c.Trial == p.Winner {
			p.WinnerScore, confSpread = c.Pooled, c.Spread
		}
	}
	var best *Trial
	for i := range st.Trials {
		t := &st.Trials[i]
		if t.State != "complete" || !t.ScoreOK || t.Score == nil {
			continue
		}
		if best == nil || *t.Score > *best.Score {
			best = t
		}
	}
	if best == nil {
		// The winner's own record says it met the SLO; nothing else did.
		best = st.Best
	}
	p.Best, p.BestScore = best.Number, *best.Score
	p.Gap = math.Max(p.BestScore-p.WinnerScore, 0)
	lo, hi, n, conc := repeatRange(best.Points, st.ScoreConcurrency)
	if n > 0 {
		p.Spread = hi - lo
		p.SpreadFrom = fmt.Sprintf("trial %d's %d repeats at c=%d: %s to %s output tok/s", best.Number, n, conc, formatScore(lo), formatScore(hi))
	}
	if confSpread > p.Spread || p.SpreadFrom == "" {
		p.Spread = math.Max(confSpread, 0)
		p.SpreadFrom = fmt.Sprintf("the winner's confirmation runs, pooled %s", formatScore(p.WinnerScore))
	}
	p.On = p.Gap <= p.Spread+1e-9
	return p, true
}

// repeatRange is the range of a trial's measured chat repeats' output tok/s
// at concurrency conc (0: its highest measured level), the number of
// repeats and the level read.
func repeatRange(points []objective.Point, conc int) (lo, hi float64, n, level int) {
	if conc == 0 {
		for _, pt := range points {
			if pt.Phase == "" {
				conc = max(conc, pt.Concurrency)
			}
		}
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, pt := range points {
		if pt.Phase != "" || pt.Concurrency != conc {
			continue
		}
		lo, hi, n = math.Min(lo, pt.OutputTokS), math.Max(hi, pt.OutputTokS), n+1
	}
	return lo, hi, n, conc
}

// Text is the report's sentence about the plateau.
func (p Plateau) Text() string {
	verdict, rel := "On the measured plateau", "within"
	if !p.On {
		verdict, rel = "Not on the measured plateau", "more than"
	}
	best := fmt.Sprintf("the best score the study saw (trial %d, %s)", p.Best, formatScore(p.BestScore))
	if p.Best == p.Winner {
		best = fmt.Sprintf("its own score %s, the best the study saw", formatScore(p.BestScore))
	}
	return fmt.Sprintf("%s: the winner, trial %d (%s), is %s below %s, %s the measured spread %s (from %s).",
		verdict, p.Winner, formatScore(p.WinnerScore), formatScore(p.Gap), best, rel, formatScore(p.Spread), p.SpreadFrom)
}

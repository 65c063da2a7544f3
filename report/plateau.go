package report

import (
	"fmt"
	"math"
	"slices"

	"github.com/sgtune/sgtune/objective"
)

// Plateau says whether the declared winner is on the measured plateau: its
// score lies within the measured spread of the best score the study saw.
// Scores a config gets from run to run differ by the noise of the machine;
// a winner below the best by less than that noise is as good as the best,
// one below by more was declared against the evidence. A config measured
// more than once (confirmed) counts with its pooled score on both sides:
// its luckiest run alone is no better evidence than its unluckiest.
type Plateau struct {
	// Winner is the declared winner; WinnerScore its score pooled over its
	// confirmation runs when it was confirmed, else its own, and WinnerRuns
	// how many runs that pools.
	Winner      int     `json:"winner"`
	WinnerScore float64 `json:"winner_score"`
	WinnerRuns  int     `json:"winner_runs"`
	// Best is the trial of the search (not a confirmation run) whose
	// config scored highest, having met the SLO and gates: pooled over its
	// runs when confirmed, else its own score; BestScore that score and
	// BestRuns how many runs it pools (1 when not confirmed).
	Best      int     `json:"best"`
	BestScore float64 `json:"best_score"`
	BestRuns  int     `json:"best_runs"`
	// Gap is BestScore - WinnerScore.
	Gap float64 `json:"gap"`
	// Spread is the measured noise the gap is judged against: the largest
	// of the best trial's repeat range at the scored level (max - min of
	// its repeats' output tok/s), its confirmation spread and the winner's.
	Spread float64 `json:"spread"`
	// SpreadFrom says which measurement gave Spread.
	SpreadFrom string `json:"spread_from"`
	// On: Gap <= Spread.
	On bool `json:"on"`
	// Pooled says some config was confirmed (its runs pooled): the best
	// is then the best config's score, each config's runs pooled, which
	// a single run of a confirmed config may exceed.
	Pooled bool `json:"pooled"`
}

// PlateauOf judges the study's declared winner (Study.Best) against the best
// score the study saw; ok is false without a winner.
func PlateauOf(st Study) (p Plateau, ok bool) {
	if st.Best == nil || st.Best.Score == nil {
		return Plateau{}, false
	}
	confirmed := map[int]Confirmation{}
	for _, c := range st.Confirmations {
		confirmed[c.Trial] = c
		p.Pooled = p.Pooled || len(c.Scores) > 1
	}
	score := func(t *Trial) (float64, int) {
		if c, ok := confirmed[t.Number]; ok && len(c.Scores) > 0 {
			return c.Pooled, len(c.Scores)
		}
		return *t.Score, 1
	}
	p.Winner = st.Best.Number
	p.WinnerScore, p.WinnerRuns = score(st.Best)
	best := st.Best // the winner's own record met the SLO, whatever else did
	p.BestScore, p.BestRuns = score(best)
	for i := range st.Trials {
		t := &st.Trials[i]
		if t.State != "complete" || !t.ScoreOK || t.Score == nil || t.ConfirmOf != nil {
			continue
		}
		if s, n := score(t); s > p.BestScore {
			best, p.BestScore, p.BestRuns = t, s, n
		}
	}
	p.Best = best.Number
	p.Gap = math.Max(p.BestScore-p.WinnerScore, 0)
	p.Spread = -1
	widen := func(spread float64, from string) {
		if spread > p.Spread {
			p.Spread, p.SpreadFrom = spread, from
		}
	}
	// One repeat, or one run, measures no spread.
	if lo, hi, n, conc := repeatRange(best.Points, st.ScoreConcurrency); n > 1 {
		widen(hi-lo, fmt.Sprintf("trial %d's %d repeats at c=%d: %s to %s output tok/s", best.Number, n, conc, formatScore(lo), formatScore(hi)))
	}
	// A run that missed the SLO measured no score to spread.
	runs := func(who string, c Confirmation) string {
		m, met := c.measured(), ""
		if len(m) < len(c.Scores) {
			met = " that met the SLO"
		}
		return fmt.Sprintf("%s %d runs%s: %s to %s", who, len(m), met, formatScore(slices.Min(m)), formatScore(slices.Max(m)))
	}
	if c, ok := confirmed[best.Number]; ok && best.Number != p.Winner && len(c.measured()) > 1 {
		widen(c.Spread, runs(fmt.Sprintf("trial %d's", best.Number), c))
	}
	if c, ok := confirmed[p.Winner]; ok && len(c.measured()) > 1 {
		widen(c.Spread, runs("the winner's", c))
	}
	if p.Spread < 0 {
		p.Spread, p.SpreadFrom = 0, ""
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

// Text is the report's sentence about the plateau. It says what the
// winner is compared with: when some config was confirmed, the best score
// with each config's runs pooled (a confirmed config's single run may be
// higher), a config measured once counting its one run.
func (p Plateau) Text() string {
	verdict, rel := "On the measured plateau", "within"
	if !p.On {
		verdict, rel = "Not on the measured plateau", "more than"
	}
	pooled := func(score float64, runs int) string {
		switch {
		case runs > 1:
			return fmt.Sprintf("pooled %s over %d runs", formatScore(score), runs)
		case p.Pooled:
			return formatScore(score) + " from one run"
		}
		return formatScore(score)
	}
	winner, score := pooled(p.WinnerScore, p.WinnerRuns), pooled(p.BestScore, p.BestRuns)
	seen := "the best score the study saw"
	if p.Pooled {
		seen += ", each config's runs pooled"
	}
	if p.SpreadFrom == "" {
		// Nothing was measured twice: there is no spread to compare with.
		if p.Best == p.Winner {
			return fmt.Sprintf("The winner, trial %d (%s), has %s; no spread was measured (one run of one repeat), so how much of its lead is noise is unknown.", p.Winner, winner, seen)
		}
		return fmt.Sprintf("The winner, trial %d (%s), is %s below %s (trial %d, %s); no spread was measured (one run of one repeat).", p.Winner, winner, formatScore(p.Gap), seen, p.Best, score)
	}
	if p.Best == p.Winner {
		return fmt.Sprintf("%s: the winner, trial %d (%s), has %s; the measured spread is %s (from %s).",
			verdict, p.Winner, winner, seen, formatScore(p.Spread), p.SpreadFrom)
	}
	return fmt.Sprintf("%s: the winner, trial %d (%s), is %s below %s (trial %d, %s), %s the measured spread %s (from %s).",
		verdict, p.Winner, winner, formatScore(p.Gap), seen, p.Best, score, rel, formatScore(p.Spread), p.SpreadFrom)
}

package report

import (
	"strings"
	"testing"

	"github.com/sgtune/sgtune/objective"
)

func TestPlateauOf(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	reps := func(conc int, toks ...float64) []objective.Point {
		var out []objective.Point
		for i, x := range toks {
			out = append(out, objective.Point{Concurrency: conc, Repeat: i + 1, OutputTokS: x})
		}
		return out
	}
	trials := func(best float64, bestPts []objective.Point) []Trial {
		return []Trial{
			{Number: 0, State: "complete", ScoreOK: true, Score: f(100), Points: reps(8, 96, 104)},
			{Number: 1, State: "complete", ScoreOK: true, Score: f(best), Points: bestPts},
			{Number: 2, State: "complete", ScoreOK: false, Score: f(500)}, // SLO missed: not the best
			{Number: 3, State: "failed"},
		}
	}
	tests := []struct {
		name       string
		st         Study
		wantOK     bool
		wantOn     bool
		wantBest   int
		wantGap    float64
		wantSpread float64
		wantText   string
	}{
		{"no winner", Study{Trials: trials(120, nil)}, false, false, 0, 0, 0, ""},
		{"best within its repeat spread", func() Study {
			ts := trials(110, reps(8, 100, 120))
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8}
		}(), true, true, 1, 10, 20, "On the measured plateau: the winner, trial 0 (100), is 10 below the best score the study saw (trial 1, 110), within the measured spread 20 (from trial 1's 2 repeats at c=8: 100 to 120 output tok/s)."},
		{"best beyond its repeat spread", func() Study {
			ts := trials(130, reps(8, 128, 132))
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8}
		}(), true, false, 1, 30, 4, "Not on the measured plateau"},
		{"confirmation spread is the larger noise", func() Study {
			ts := trials(130, reps(8, 128, 132))
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8,
				Confirmations: []Confirmation{{Trial: 0, Scores: []float64{100, 140}, Pooled: 120, Spread: 40}}}
		}(), true, true, 1, 10, 40, "from the winner's 2 runs: 100 to 140"},
		{"highest level when the score's is unknown", func() Study {
			ts := trials(110, append(reps(1, 10, 90), reps(8, 109, 111)...))
			return Study{Trials: ts, Best: &ts[0]}
		}(), true, false, 1, 10, 2, "at c=8"},
		{"the winner is the best", func() Study {
			ts := trials(110, reps(8, 100, 120))
			return Study{Trials: ts, Best: &ts[1], ScoreConcurrency: 8}
		}(), true, true, 1, 0, 20, "the winner, trial 1 (110), has the best score the study saw; the measured spread is 20"},
		// The CI run this case is cut from declared trial 1 (pooled 262.1
		// over 3 runs) and judged it against trial 17's single 319.0.
		{"a confirmed config counts with its pooled score", func() Study {
			ts := trials(140, reps(8, 138, 142))
			one := 1
			ts = append(ts, Trial{Number: 4, State: "complete", ScoreOK: true, Score: f(200), ConfirmOf: &one})
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8, Confirmations: []Confirmation{
				{Trial: 0, Scores: []float64{100, 110, 120}, Pooled: 110, Spread: 20},
				{Trial: 1, Scores: []float64{140, 100}, Pooled: 120, Spread: 40},
			}}
		}(), true, true, 1, 10, 40, "the winner, trial 0 (pooled 110 over 3 runs), is 10 below the best score the study saw, each config's runs pooled (trial 1, pooled 120 over 2 runs), within the measured spread 40 (from trial 1's 2 runs: 100 to 140)."},
		{"an unconfirmed single score above the pooled winner", func() Study {
			ts := trials(140, reps(8, 138, 142))
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8, Confirmations: []Confirmation{
				{Trial: 0, Scores: []float64{100, 110, 120}, Pooled: 110, Spread: 20},
			}}
		}(), true, false, 1, 30, 20, "is 30 below the best score the study saw, each config's runs pooled (trial 1, 140 from one run), more than the measured spread 20"},
		// Neither the winner nor the best was confirmed, but trial 0 was:
		// its first run, 120, is above the winner's 110 and pooled below.
		{"the winner measured once beside a config pooled below it", func() Study {
			ts := trials(110, reps(8, 100, 120))
			ts[0].Score = f(120)
			return Study{Trials: ts, Best: &ts[1], ScoreConcurrency: 8, Confirmations: []Confirmation{
				{Trial: 0, Scores: []float64{120, 80}, Pooled: 100, Spread: 40},
			}}
		}(), true, true, 1, 0, 20, "the winner, trial 1 (110 from one run), has the best score the study saw, each config's runs pooled; the measured spread is 20"},
		// A run that missed counts 0 in the pool but measured no score:
		// the spread is that of the runs that met.
		{"a run that missed measures no spread", func() Study {
			ts := trials(110, reps(8, 100, 120))
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8, Confirmations: []Confirmation{
				{Trial: 0, Scores: []float64{100, 140, 0}, Met: []bool{true, true, false}, Pooled: 80, Spread: 40},
			}}
		}(), true, true, 1, 30, 40, "within the measured spread 40 (from the winner's 2 runs that met the SLO: 100 to 140)."},
		{"one run met: the winner's runs measure no spread", func() Study {
			ts := trials(110, reps(8, 110))
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8, Confirmations: []Confirmation{
				{Trial: 0, Scores: []float64{100, 0}, Met: []bool{true, false}, Pooled: 50, Spread: 0},
			}}
		}(), true, false, 1, 60, 0, "no spread was measured"},
		// One repeat of one run measures no spread: it is not "a spread of 0".
		{"nothing measured twice", func() Study {
			ts := []Trial{{Number: 0, State: "complete", ScoreOK: true, Score: f(100), Points: reps(8, 100)}}
			return Study{Trials: ts, Best: &ts[0], ScoreConcurrency: 8}
		}(), true, true, 0, 0, 0, "The winner, trial 0 (100), has the best score the study saw; no spread was measured (one run of one repeat)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := PlateauOf(tt.st)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				return
			}
			if p.On != tt.wantOn || p.Best != tt.wantBest || p.Gap != tt.wantGap || p.Spread != tt.wantSpread {
				t.Errorf("got %+v", p)
			}
			if !strings.Contains(p.Text(), tt.wantText) {
				t.Errorf("text %q lacks %q", p.Text(), tt.wantText)
			}
		})
	}
}

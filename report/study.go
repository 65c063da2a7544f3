package report

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/sgtune/sgtune/space"
)

// Trial is one stored trial as the study report sees it.
type Trial struct {
	Number  int
	State   string // complete, failed, infeasible, duplicate, interrupted, ...
	Score   *float64
	ScoreOK bool
	Class   string // failure class or rejection rule
	Reason  string
	Params  map[string]interface{}
	Flags   []string
	Levels  []Level // medians per concurrency, ascending
	Seconds float64 // wall time the trial took
}

// Level is the median measurement at one concurrency.
type Level struct {
	Concurrency int
	Repeats     int
	OutputTokS  float64
	TTFTP50     float64
	TTFTP99     float64
	LatencyP99  float64
}

// Study is what the report covers.
type Study struct {
	Name    string
	Storage string
	Trials  []Trial
	Best    *Trial
}

// WriteReport writes report.md and its SVG plots into dir.
func WriteReport(dir string, st Study) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ranked := rankComplete(st.Trials)
	plots := []struct {
		file string
		draw func() (*plot.Plot, error)
	}{
		{"progress.svg", func() (*plot.Plot, error) { return progressPlot(st.Trials) }},
		{"throughput.svg", func() (*plot.Plot, error) {
			return levelPlot(ranked, "Output tok/s by concurrency (top trials)", "output tok/s", func(l Level) float64 { return l.OutputTokS })
		}},
		{"ttft-p99.svg", func() (*plot.Plot, error) {
			return levelPlot(ranked, "TTFT p99 by concurrency (top trials)", "TTFT p99 (s)", func(l Level) float64 { return l.TTFTP99 })
		}},
	}
	var drawn []string
	for _, p := range plots {
		pl, err := p.draw()
		if err != nil {
			return fmt.Errorf("plot %s: %w", p.file, err)
		}
		if pl == nil {
			continue
		}
		if err := pl.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(dir, p.file)); err != nil {
			return fmt.Errorf("save %s: %w", p.file, err)
		}
		drawn = append(drawn, p.file)
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	defer f.Close()
	writeMarkdown(f, st, ranked, drawn)
	return f.Close()
}

// rankComplete returns the complete trials meeting their SLO, best first.
func rankComplete(trials []Trial) []Trial {
	var out []Trial
	for _, t := range trials {
		if t.State == "complete" && t.ScoreOK && t.Score != nil {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return *out[i].Score > *out[j].Score })
	return out
}

func writeMarkdown(w io.Writer, st Study, ranked []Trial, plots []string) {
	fmt.Fprintf(w, "# Study %s\n\n", st.Name)
	counts := map[string]int{}
	var seconds float64
	for _, t := range st.Trials {
		counts[t.State]++
		seconds += t.Seconds
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	fmt.Fprintf(w, "%d trials (%s), %.0f s of launch and measurement time. Storage: `%s`.\n\n",
		len(st.Trials), strings.Join(parts, ", "), seconds, st.Storage)

	if st.Best == nil {
		fmt.Fprintln(w, "No trial met the score's SLO and quality gates.")
	} else {
		b := st.Best
		fmt.Fprintf(w, "## Best: trial %d, score %.2f\n\n", b.Number, *b.Score)
		fmt.Fprintf(w, "```\n%s\n```\n\n", strings.Join(b.Flags, " "))
		levelTable(w, b.Levels)
	}
	for _, p := range plots {
		fmt.Fprintf(w, "![%s](%s)\n\n", strings.TrimSuffix(p, ".svg"), p)
	}
	if len(ranked) > 0 {
		fmt.Fprintln(w, "## Ranking")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| rank | trial | score | params |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for i, t := range ranked {
			if i == 10 {
				break
			}
			fmt.Fprintf(w, "| %d | %d | %.2f | %s |\n", i+1, t.Number, *t.Score, space.Params(t.Params).String())
		}
		fmt.Fprintln(w)
	}
	why := map[string][]Trial{}
	for _, t := range st.Trials {
		if t.State == "failed" || t.State == "infeasible" {
			why[t.State+": "+t.Class] = append(why[t.State+": "+t.Class], t)
		}
	}
	if len(why) > 0 {
		fmt.Fprintln(w, "## Failures and rejections")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| kind | trials | example |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, k := range slices.Sorted(maps.Keys(why)) {
			ts := why[k]
			nums := make([]string, len(ts))
			for i, t := range ts {
				nums[i] = fmt.Sprint(t.Number)
			}
			fmt.Fprintf(w, "| %s | %s | %s |\n", k, strings.Join(nums, ", "), mdEscape(ts[0].Reason))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "## All trials")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| trial | state | score | detail | params |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, t := range st.Trials {
		score := "-"
		if t.Score != nil {
			score = fmt.Sprintf("%.2f", *t.Score)
			if !t.ScoreOK {
				score += " (SLO miss)"
			}
		}
		detail := t.Class
		if t.Reason != "" {
			detail = strings.TrimPrefix(detail+": "+t.Reason, ": ")
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s |\n", t.Number, t.State, score, mdEscape(detail), space.Params(t.Params).String())
	}
}

func levelTable(w io.Writer, levels []Level) {
	if len(levels) == 0 {
		return
	}
	fmt.Fprintln(w, "| concurrency | repeats | output tok/s | TTFT p50 (s) | TTFT p99 (s) | latency p99 (s) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, l := range levels {
		fmt.Fprintf(w, "| %d | %d | %.1f | %.3f | %.3f | %.2f |\n", l.Concurrency, l.Repeats, l.OutputTokS, l.TTFTP50, l.TTFTP99, l.LatencyP99)
	}
	fmt.Fprintln(w)
}

// progressPlot shows each measured trial's score and the best so far.
func progressPlot(trials []Trial) (*plot.Plot, error) {
	var pts, best plotter.XYs
	run := math.Inf(-1)
	for _, t := range trials {
		if t.State != "complete" || t.Score == nil {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(t.Number), Y: *t.Score})
		if t.ScoreOK && *t.Score > run {
			run = *t.Score
		}
		if !math.IsInf(run, -1) {
			best = append(best, plotter.XY{X: float64(t.Number), Y: run})
		}
	}
	if len(pts) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Score by trial"
	p.X.Label.Text = "trial"
	p.Y.Label.Text = "score"
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, err
	}
	p.Add(sc)
	p.Legend.Add("trial score", sc)
	if len(best) > 0 {
		l, err := plotter.NewLine(best)
		if err != nil {
			return nil, err
		}
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add("best so far", l)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}

// levelPlot draws one metric against concurrency (log2 axis) for up to five trials.
func levelPlot(ranked []Trial, title, ylabel string, metric func(Level) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "concurrency"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	seen := map[int]bool{}
	var ticks []plot.Tick
	n := 0
	for _, t := range ranked {
		var xy plotter.XYs
		for _, l := range t.Levels {
			if l.Concurrency > 0 {
				xy = append(xy, plotter.XY{X: float64(l.Concurrency), Y: metric(l)})
				if !seen[l.Concurrency] {
					seen[l.Concurrency] = true
					ticks = append(ticks, plot.Tick{Value: float64(l.Concurrency), Label: fmt.Sprint(l.Concurrency)})
				}
			}
		}
		if len(xy) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		line.Color = palette[n%len(palette)]
		points.Color = line.Color
		p.Add(line, points)
		p.Legend.Add(fmt.Sprintf("trial %d", t.Number), line, points)
		if n++; n == 5 {
			break
		}
	}
	if n == 0 {
		return nil, nil
	}
	// Ticks at the measured levels read better than decades.
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}

func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

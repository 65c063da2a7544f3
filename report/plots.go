package report

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/sgtune/sgtune/objective"
)

// Colours beyond the line palette: verdicts in the scatter plots.
var (
	colMeets  = palette[0]                                 // blue: complete, meets the SLO
	colMisses = palette[1]                                 // vermillion: complete, misses the SLO
	colFailed = color.RGBA{R: 200, G: 30, B: 30, A: 255}   // red: failed or infeasible
	colPruned = color.RGBA{R: 120, G: 120, B: 120, A: 255} // grey: stopped early by the pruning rule
	colFront  = color.RGBA{R: 30, G: 30, B: 30, A: 255}
	colGrid   = color.RGBA{R: 225, G: 225, B: 225, A: 255}
)

// plotFont is sans-serif: it reads better at the small sizes of a grid of
// plots than gonum's default serif.
var plotFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

// chart is a plot whose legend saveSVG draws in rows below the axes:
// gonum draws a plot's own legend inside the data area, where it covers
// points (and needed the y axis raised to make room). The plot's Legend
// stays empty; its TextStyle and ThumbnailWidth style the entries.
type chart struct {
	*plot.Plot
	legend []legendEntry
}

// legendEntry is one legend line: its text and the thumbnails drawn
// before it.
type legendEntry struct {
	text   string
	thumbs []plot.Thumbnailer
}

// addLegend adds an entry to the chart's legend.
func (ch *chart) addLegend(text string, thumbs ...plot.Thumbnailer) {
	ch.legend = append(ch.legend, legendEntry{text: text, thumbs: thumbs})
}

// Legend layout below the axes, in points.
const (
	legendGap    = 12 // between two entries of a row
	legendMargin = 6  // left and right of a row, and under the last one
	legendAbove  = 6  // between the x axis label and the first row
)

// draw draws the plot with its legend below the axes: entries side by
// side, centred under the data area, wrapped into more rows when one row
// is wider than the canvas.
func (ch *chart) draw(c draw.Canvas) {
	if len(ch.legend) == 0 {
		ch.Plot.Draw(c)
		return
	}
	sty := ch.Legend.TextStyle
	thumb := ch.Legend.ThumbnailWidth
	em := sty.Width(" ")
	width := func(e legendEntry) vg.Length { return thumb + em + sty.Width(e.text) }
	avail := c.Size().X - 2*legendMargin
	var rows [][]legendEntry
	var rowW []vg.Length
	for _, e := range ch.legend {
		w := width(e)
		if n := len(rows); n > 0 && rowW[n-1]+legendGap+w <= avail {
			rows[n-1] = append(rows[n-1], e)
			rowW[n-1] += legendGap + w
			continue
		}
		rows, rowW = append(rows, []legendEntry{e}), append(rowW, w)
	}
	rowH := sty.FontExtents().Height
	block := legendAbove + vg.Length(len(rows))*rowH + legendMargin

	// The plot's background covers only its own canvas.
	c.SetColor(ch.BackgroundColor)
	c.Fill(c.Rectangle.Path())
	pc := draw.Crop(c, 0, 0, block, 0)
	ch.Plot.Draw(pc)
	dc := ch.DataCanvas(pc)
	centre := dc.Center().X
	top := c.Min.Y + block - legendAbove
	for i, row := range rows {
		x := min(max(centre-rowW[i]/2, c.Min.X+legendMargin), c.Max.X-legendMargin-rowW[i])
		for _, e := range row {
			l := plot.NewLegend()
			l.TextStyle, l.ThumbnailWidth = sty, thumb
			l.Top, l.Left = true, true
			l.Add(e.text, e.thumbs...)
			w := width(e)
			l.Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
				Min: vg.Point{X: x, Y: top - rowH}, Max: vg.Point{X: x + w, Y: top}}})
			x += w + legendGap
		}
		top -= rowH
	}
}

// newPlot returns a chart with the report's fonts and a light grid.
func newPlot(title, xlabel, ylabel string) *chart {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(plotFont, 12)
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font = font.From(plotFont, 10)
		a.Tick.Label.Font = font.From(plotFont, 9)
	}
	p.Legend.TextStyle.Font = font.From(plotFont, 9)
	p.X.Tick.Marker, p.Y.Tick.Marker = readableTicks, readableTicks
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = colGrid, colGrid
	p.Add(g)
	return &chart{Plot: p}
}

// readableTicks are gonum's default ticks labelled like the page's numbers
// (35,000 rather than 35000.00).
var readableTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = tickLabel(ts[i].Value)
		}
	}
	return ts
})

// tickLabel prints v with thousands separators and no trailing zeros.
func tickLabel(v float64) string {
	if math.Abs(v) >= 1000 {
		return group(strconv.FormatFloat(math.Round(v), 'f', 0, 64))
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// saveSVG writes ch as SVG, its legend below the axes. The SVG names
// gonum's Liberation fonts; Arial and Helvetica have the same metrics, so
// the text fits where they are installed instead, and the page loads no
// font from anywhere.
func saveSVG(ch *chart, w, h vg.Length, path string) error {
	vc, err := draw.NewFormattedCanvas(w, h, "svg")
	if err != nil {
		return err
	}
	ch.draw(draw.New(vc))
	var buf bytes.Buffer
	if _, err := vc.WriteTo(&buf); err != nil {
		return err
	}
	b := bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;"))
	return writeFileAtomic(path, b)
}

// progressPlot shows each measured trial's score and the best so far.
func progressPlot(trials []Trial, ylabel string) (*chart, error) {
	var ok, miss, best plotter.XYs
	run := math.Inf(-1)
	for _, t := range trials {
		if t.State != "complete" || t.Score == nil {
			continue
		}
		pt := plotter.XY{X: float64(t.Number), Y: *t.Score}
		if t.ScoreOK {
			ok = append(ok, pt)
			run = math.Max(run, *t.Score)
		} else {
			miss = append(miss, pt)
		}
		if !math.IsInf(run, -1) {
			best = append(best, plotter.XY{X: float64(t.Number), Y: run})
		}
	}
	if len(ok)+len(miss) == 0 {
		return nil, nil
	}
	p := newPlot("Score by trial", "trial", ylabel)
	if len(best) > 0 {
		l, err := plotter.NewLine(best)
		if err != nil {
			return nil, err
		}
		l.Width = vg.Points(1.5)
		l.Color = colFront
		l.StepStyle = plotter.PostStep
		p.Add(l)
		p.addLegend("best so far", l)
	}
	if err := addScatter(p, ok, colMeets, draw.CircleGlyph{}, "meets SLO"); err != nil {
		return nil, err
	}
	if err := addScatter(p, miss, colMisses, draw.RingGlyph{}, "misses SLO"); err != nil {
		return nil, err
	}
	// Half a trial either side, so no point sits on the frame.
	p.X.Min, p.X.Max = p.X.Min-0.5, p.X.Max+0.5
	p.X.Tick.Marker = integerTicks
	pad(&p.Y, 0.05) // no point on the top or bottom frame either
	return p, nil
}

// addScatter adds xy (when not empty) with a legend entry.
func addScatter(p *chart, xy plotter.XYs, c color.Color, shape draw.GlyphDrawer, legend string) error {
	if len(xy) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(xy)
	if err != nil {
		return err
	}
	s.Color = c
	s.Shape = shape
	s.Radius = vg.Points(3.5)
	p.Add(s)
	if legend != "" {
		p.addLegend(legend, s)
	}
	return nil
}

// levelPlot draws one metric against concurrency (log2 axis) for up to five trials.
func levelPlot(ranked []Trial, title, ylabel string, metric func(Level) float64) (*chart, error) {
	p := newPlot(title, "concurrency (log scale)", ylabel)
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
					ticks = append(ticks, plot.Tick{Value: float64(l.Concurrency), Label: strconv.Itoa(l.Concurrency)})
				}
			}
		}
		if len(xy) == 0 {
			continue
		}
		if err := addTrialLine(p, xy, n, t.Number); err != nil {
			return nil, err
		}
		if n++; n == 5 {
			break
		}
	}
	if n == 0 {
		return nil, nil
	}
	// Ticks at the measured levels read better than decades.
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	pad(&p.Y, 0.05) // no point on the top or bottom frame
	return p, nil
}

// paretoPoint is one complete trial at its scored level.
type paretoPoint struct {
	Trial      int
	OutputTokS float64
	TTFTP99    float64
	OK         bool
	Front      bool
}

// paretoFront marks the points no other point beats on both throughput
// (higher) and TTFT p99 (lower).
func paretoFront(pts []paretoPoint) {
	for i := range pts {
		pts[i].Front = true
		for j := range pts {
			a, b := pts[j], pts[i]
			if i != j && a.OutputTokS >= b.OutputTokS && a.TTFTP99 <= b.TTFTP99 &&
				(a.OutputTokS > b.OutputTokS || a.TTFTP99 < b.TTFTP99) {
				pts[i].Front = false
				break
			}
		}
	}
}

// paretoPlot draws TTFT p99 against throughput with the front joined.
func paretoPlot(pts []paretoPoint, level string) (*chart, error) {
	if len(pts) == 0 {
		return nil, nil
	}
	p := newPlot("TTFT p99 vs throughput"+level, "output tok/s", "TTFT p99 (s)")
	var front, ok, miss plotter.XYs
	var labels []string
	var all plotter.XYs
	for _, q := range pts {
		xy := plotter.XY{X: q.OutputTokS, Y: q.TTFTP99}
		all = append(all, xy)
		labels = append(labels, "#"+strconv.Itoa(q.Trial))
		if q.Front {
			front = append(front, xy)
		}
		if q.OK {
			ok = append(ok, xy)
		} else {
			miss = append(miss, xy)
		}
	}
	sort.Slice(front, func(i, j int) bool { return front[i].X < front[j].X })
	if len(front) > 1 {
		l, err := plotter.NewLine(front)
		if err != nil {
			return nil, err
		}
		l.Color = colFront
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
	}
	if len(front) > 0 {
		// The front's rings are drawn larger, around the verdict dots.
		rs, err := plotter.NewScatter(front)
		if err != nil {
			return nil, err
		}
		rs.Shape, rs.Color, rs.Radius = draw.RingGlyph{}, colFront, vg.Points(6)
		p.Add(rs)
		p.addLegend("Pareto front", rs)
	}
	if err := addScatter(p, ok, colMeets, draw.CircleGlyph{}, "meets SLO"); err != nil {
		return nil, err
	}
	if err := addScatter(p, miss, colMisses, draw.CircleGlyph{}, "misses SLO"); err != nil {
		return nil, err
	}
	lab, err := plotter.NewLabels(plotter.XYLabels{XYs: all, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font = font.From(plotFont, 8)
		lab.TextStyle[i].Color = color.RGBA{R: 80, G: 80, B: 80, A: 255}
	}
	lab.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(3)}
	p.Add(lab)
	pad(&p.X, 0.08)
	pad(&p.Y, 0.1)
	return p, nil
}

// scoreLabel is the score axis's label, with its unit when known.
func scoreLabel(unit string) string {
	if unit == "" {
		return "score"
	}
	return "score (" + unit + ")"
}

// pad widens an axis by frac of its range on both sides (labels need room),
// never below 0 for data that is not (a TTFT or a throughput below zero
// read as a measurement).
func pad(a *plot.Axis, frac float64) {
	r := a.Max - a.Min
	if r <= 0 {
		r = math.Max(math.Abs(a.Max), 1)
	}
	nonNegative := a.Min >= 0
	a.Min -= r * frac
	a.Max += r * frac
	if nonNegative && a.Min < 0 {
		a.Min = 0
	}
}

// integerTicks label whole numbers only (trial numbers): 0, 0.5, 1 read as
// trials that do not exist.
var integerTicks = plot.TickerFunc(func(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range readableTicks.Ticks(min, max) {
		if t.Value == math.Trunc(t.Value) {
			out = append(out, t)
		} else {
			out = append(out, plot.Tick{Value: t.Value}) // a minor tick
		}
	}
	return out
})

// effectPlot draws the score of every trial by the value of one parameter;
// failed and infeasible trials (red crosses) and pruned ones (grey
// triangles) sit in a band below the lowest score.
func effectPlot(name string, trials []Trial, ylabel string) (*chart, error) {
	values := paramValues(name, trials)
	if len(values) < 2 {
		return nil, nil
	}
	pos := map[string]int{}
	ticks := make([]plot.Tick, len(values))
	for i, v := range values {
		pos[v] = i
		ticks[i] = plot.Tick{Value: float64(i), Label: v}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, t := range trials {
		if t.State == "complete" && t.Score != nil {
			lo, hi = math.Min(lo, *t.Score), math.Max(hi, *t.Score)
		}
	}
	failY := 0.0
	if !math.IsInf(lo, 1) {
		failY = lo - 0.15*math.Max(hi-lo, math.Abs(lo)*0.1)
	}
	var ok, miss, failed, pruned plotter.XYs
	for _, t := range trials {
		if len(t.Params) == 0 {
			continue
		}
		v := paramText(t.Params, name)
		x := float64(pos[v]) + jitter(t.Number)
		switch {
		case t.State == "complete" && t.Score != nil && t.ScoreOK:
			ok = append(ok, plotter.XY{X: x, Y: *t.Score})
		case t.State == "complete" && t.Score != nil:
			miss = append(miss, plotter.XY{X: x, Y: *t.Score})
		case t.State == "failed" || t.State == "infeasible":
			failed = append(failed, plotter.XY{X: x, Y: failY})
		case t.State == "pruned":
			// Stopped below the best at a cheap level: in the band too,
			// as evidence against its values, apart from the failures.
			pruned = append(pruned, plotter.XY{X: x, Y: failY})
		}
	}
	if len(ok)+len(miss)+len(failed)+len(pruned) == 0 {
		return nil, nil
	}
	p := newPlot("Score by "+name, name, ylabel)
	if err := addScatter(p, ok, colMeets, draw.CircleGlyph{}, "meets SLO"); err != nil {
		return nil, err
	}
	if err := addScatter(p, miss, colMisses, draw.RingGlyph{}, "misses SLO"); err != nil {
		return nil, err
	}
	if err := addScatter(p, failed, colFailed, draw.CrossGlyph{}, "failed / infeasible"); err != nil {
		return nil, err
	}
	if err := addScatter(p, pruned, colPruned, draw.TriangleGlyph{}, "pruned"); err != nil {
		return nil, err
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Min, p.X.Max = -0.5, float64(len(values))-0.5
	pad(&p.Y, 0.08)
	return p, nil
}

// jitter spreads trials with the same value apart, deterministically.
func jitter(n int) float64 {
	return (float64((n*37)%11)/10 - 0.5) * 0.3
}

// paramValues lists the distinct values a parameter took, numbers in
// numeric order, "(unset)" last for trials whose config left it out.
func paramValues(name string, trials []Trial) []string {
	seen := map[string]bool{}
	var vals []string
	for _, t := range trials {
		if len(t.Params) == 0 { // a queued re-run has no config yet
			continue
		}
		v := paramText(t.Params, name)
		if !seen[v] {
			seen[v] = true
			vals = append(vals, v)
		}
	}
	sort.Slice(vals, func(i, j int) bool {
		a, b := vals[i], vals[j]
		if (a == unset) != (b == unset) {
			return b == unset
		}
		x, errA := strconv.ParseFloat(a, 64)
		y, errB := strconv.ParseFloat(b, 64)
		switch {
		case errA == nil && errB == nil:
			return x < y
		case (errA == nil) != (errB == nil):
			return errA == nil
		}
		return a < b
	})
	return vals
}

const unset = "(unset)"

// paramText renders a parameter value for tables and axes.
func paramText(params map[string]interface{}, name string) string {
	v, ok := params[name]
	if !ok || v == nil {
		return unset
	}
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// addTrialLine draws the n-th top trial's line with its points, in the
// n-th palette colour, and its legend entry.
func addTrialLine(p *chart, xy plotter.XYs, n, trial int) error {
	line, points, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	line.Color = palette[n%len(palette)]
	line.Width = vg.Points(1.5)
	points.Color = line.Color
	points.Shape = draw.CircleGlyph{}
	p.Add(line, points)
	p.addLegend(fmt.Sprintf("trial %d", trial), line, points)
	return nil
}

// hasRateProbes reports whether any trial measured open-loop rate probes
// (workload.chat.rate_search).
func hasRateProbes(trials []Trial) bool {
	for _, t := range trials {
		for _, p := range t.Points {
			if p.Phase == objective.PhaseRate {
				return true
			}
		}
	}
	return false
}

// rateSLO is the SLO bound the rate plot draws: the first on TTFT or
// latency, with its statistic's reader; ok is false without one.
func rateSLO(slo []objective.SLO) (o objective.SLO, get func(objective.Point) float64, ok bool) {
	for _, o := range slo {
		pick := func(p objective.Point) objective.Stats { return p.TTFT }
		switch o.Metric {
		case "ttft":
		case "latency":
			pick = func(p objective.Point) objective.Stats { return p.Latency }
		default:
			continue
		}
		return o, func(p objective.Point) float64 { v, _ := pick(p).Get(o.Percentile); return v }, true
	}
	return objective.SLO{Metric: "ttft", Percentile: "p99"}, func(p objective.Point) float64 { return p.TTFT.P99 }, false
}

// ratePlot draws, for the top trials, the SLO's statistic (TTFT p99 by
// default) of each rate probe against its offered rate, the SLO bound as a
// line, and below each probe's achieved rate as a hollow mark on the same
// x: a server that kept up has it on the dashed diagonal.
func ratePlot(ranked []Trial, slo []objective.SLO) (*chart, error) {
	o, get, withSLO := rateSLO(slo)
	p := newPlot("Latency against offered rate (top trials)", "offered rate (requests/s)", fmt.Sprintf("%s %s (s)", strings.ToUpper(o.Metric), o.Percentile))
	n := 0
	maxX := 0.0
	for _, t := range ranked {
		var probes []objective.Point
		for _, pt := range t.Points {
			if pt.Phase == objective.PhaseRate && pt.OfferedRateS > 0 {
				probes = append(probes, pt)
			}
		}
		if len(probes) == 0 {
			continue
		}
		slices.SortFunc(probes, func(a, b objective.Point) int { return cmp.Compare(a.OfferedRateS, b.OfferedRateS) })
		var xy plotter.XYs
		for _, pt := range probes {
			xy = append(xy, plotter.XY{X: pt.OfferedRateS, Y: get(pt)})
			maxX = max(maxX, pt.OfferedRateS)
		}
		if err := addTrialLine(p, xy, n, t.Number); err != nil {
			return nil, err
		}
		if n++; n == 5 {
			break
		}
	}
	if n == 0 {
		return nil, nil
	}
	if withSLO {
		bound, err := plotter.NewLine(plotter.XYs{{X: 0, Y: o.Max}, {X: maxX * 1.05, Y: o.Max}})
		if err != nil {
			return nil, err
		}
		bound.Color = color.RGBA{R: 200, A: 255}
		bound.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(bound)
		p.addLegend(fmt.Sprintf("SLO: %s %s <= %g s", o.Metric, o.Percentile, o.Max), bound)
	}
	p.X.Min = 0
	pad(&p.Y, 0.05)
	return p, nil
}

// achievedPlot draws each top trial's achieved rate against the offered
// one for its rate probes, with the diagonal a server that keeps up lies
// on.
func achievedPlot(ranked []Trial) (*chart, error) {
	p := newPlot("Achieved against offered rate (top trials)", "offered rate (requests/s)", "achieved rate (requests/s)")
	n := 0
	maxX := 0.0
	for _, t := range ranked {
		var xy plotter.XYs
		for _, pt := range t.Points {
			if pt.Phase == objective.PhaseRate && pt.OfferedRateS > 0 {
				xy = append(xy, plotter.XY{X: pt.OfferedRateS, Y: pt.AchievedRateS})
				maxX = max(maxX, pt.OfferedRateS, pt.AchievedRateS)
			}
		}
		if len(xy) == 0 {
			continue
		}
		if err := addScatter(p, xy, palette[n%len(palette)], draw.CircleGlyph{}, fmt.Sprintf("trial %d", t.Number)); err != nil {
			return nil, err
		}
		if n++; n == 5 {
			break
		}
	}
	if n == 0 {
		return nil, nil
	}
	diag, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: maxX * 1.05, Y: maxX * 1.05}})
	if err != nil {
		return nil, err
	}
	diag.Color = color.Gray{Y: 120}
	diag.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(diag)
	p.addLegend("kept up (achieved = offered)", diag)
	p.X.Min, p.Y.Min = 0, 0
	return p, nil
}

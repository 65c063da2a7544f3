package report

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/sgtune/sgtune/objective"
)

// view is the study digested once for both the page and the markdown.
type view struct {
	St       Study
	Counts   string // "8 complete, 2 failed, ..."
	Launched int
	// Reruns counts the confirmation runs that ran (outside the budget).
	Reruns     int
	Wall       string // first start to last end
	Measured   string // sum of the trials' own durations
	Ranked     []Trial
	ParamNames []string
	Rows       []trialRow
	Confirm    []confirmRow
	// WinnerConfirm is the declared winner's row of Confirm (nil when it
	// was not confirmed): the confirmation card shows its spread.
	WinnerConfirm *confirmRow
	Tie           string // "tie within the measured spread: ..." or ""
	Plateau       string // whether the winner is on the measured plateau; "" without a winner
	// WinnerScore is the winner's score as the cards show it: pooled over
	// its runs when it was confirmed ("36,603 pooled over 3 runs").
	WinnerScore string
	// DefaultValue is the engine-default card's figure: the winner's
	// gain over the default ("1.84×"), "the default" when the default
	// is the winner, else what became of it; "" without a default.
	DefaultValue string
	// DefaultNote is Study.VersusDefault as a sentence ("" without it).
	DefaultNote string
	Failures    []failure
	// LogNotes are the trials outside Failures whose server log is
	// incomplete (Trial.LogError); a failure says it on its own line.
	LogNotes    []logNote
	Matrix      *matrixTable
	Generated   string
	Plots       []plotRef // drawn, in page order
	pareto      []paretoPoint
	paretoLevel string
}

// trialRow is one row of the trials table.
type trialRow struct {
	Number      int
	State       string
	Class       string
	Params      []string
	Score       string
	ScoreV      string // sort key; "" sorts last
	Verdict     string
	VerdictKind string // meets | misses | none
	Seconds     string
	SecondsV    string
	Best        bool
	// RerunOf is the trial a confirmation run measured again (-1: none).
	RerunOf int
	// Baseline: the engine's default config (a trial of it, or a rerun).
	Baseline bool
}

// confirmRow is one confirmed config.
type confirmRow struct {
	Trial  int
	Runs   int
	Scores string
	Pooled string
	Spread string
	Rel    string // spread as a share of the pooled score
	// Baseline: the config is the engine default.
	Baseline bool
}

// failure is a failed or infeasible trial with its decisive log lines.
type failure struct {
	Number   int
	State    string
	Class    string
	Reason   string
	ExitCode string
	Excerpt  string
	LogPath  string
	LogError string // why the log at LogPath is incomplete, "" when whole
	Params   string
}

// logNote is a trial whose server log is incomplete.
type logNote struct {
	Number   int
	State    string
	LogPath  string
	LogError string
}

// plotRef is a drawn plot and where the page shows it.
type plotRef struct {
	File, Alt, Group string // Group: main | more | effect
}

// plotSpec is a plot to try drawing.
type plotSpec struct {
	file, alt, group string
	w, h             vg.Length
	draw             func() (*chart, error)
}

func buildView(st Study) *view {
	// Matrix trials have no chat medians: their levels are the decode
	// cells of the scored context.
	st.Trials = append([]Trial(nil), st.Trials...)
	for i := range st.Trials {
		if len(st.Trials[i].Levels) == 0 {
			st.Trials[i].Levels = matrixLevels(st.Trials[i].Points, st.ScoreContext)
		}
	}
	if st.Best != nil {
		b := *st.Best
		if len(b.Levels) == 0 {
			b.Levels = matrixLevels(b.Points, st.ScoreContext)
		}
		st.Best = &b
	}
	v := &view{St: st}
	counts := map[string]int{}
	var first, last time.Time
	var measured float64
	for _, t := range st.Trials {
		counts[t.State]++
		measured += t.Seconds
		if t.Launched {
			v.Launched++
		}
		if t.ConfirmOf != nil && (t.State == "complete" || t.State == "failed" || t.State == "pruned") {
			v.Reruns++
		}
		if !t.Start.IsZero() && (first.IsZero() || t.Start.Before(first)) {
			first = t.Start
		}
		end := t.End
		if end.IsZero() {
			end = t.Start
		}
		if end.After(last) {
			last = end
		}
	}
	var parts []string
	for _, s := range stateOrder(counts) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	v.Counts = strings.Join(parts, ", ")
	if !first.IsZero() && last.After(first) {
		v.Wall = duration(last.Sub(first).Seconds())
	}
	v.Measured = duration(measured)
	if !st.Generated.IsZero() {
		v.Generated = st.Generated.UTC().Format("2006-01-02 15:04 UTC")
	}
	best := -1
	if st.Best != nil {
		best = st.Best.Number
	}
	v.Ranked = rankComplete(st.Trials, st.Confirmations, best)
	v.ParamNames = paramNames(st.Trials)
	for _, t := range st.Trials {
		v.Rows = append(v.Rows, v.row(t))
	}
	v.confirmations()
	if p, ok := PlateauOf(st); ok {
		v.Plateau = p.Text()
		v.WinnerScore = formatScore(p.WinnerScore)
		if p.WinnerRuns > 1 {
			v.WinnerScore += fmt.Sprintf(" pooled over %d runs", p.WinnerRuns)
		}
	}
	for _, t := range st.Trials {
		if t.State != "failed" && t.State != "infeasible" {
			if t.LogError != "" {
				v.LogNotes = append(v.LogNotes, logNote{Number: t.Number, State: t.State, LogPath: t.LogPath, LogError: t.LogError})
			}
			continue
		}
		f := failure{Number: t.Number, State: t.State, Class: t.Class, Reason: t.Reason,
			Excerpt: strings.TrimRight(t.LogExcerpt, "\n"), LogPath: t.LogPath, LogError: t.LogError, Params: paramString(t.Params)}
		if t.ExitCode != nil {
			f.ExitCode = strconv.Itoa(*t.ExitCode)
		}
		v.Failures = append(v.Failures, f)
	}
	v.DefaultValue = defaultValue(st)
	if s := st.VersusDefault; s != "" {
		v.DefaultNote = strings.ToUpper(s[:1]) + s[1:] + "."
	}
	v.Matrix = buildMatrix(st)
	for _, t := range v.Ranked {
		v.pareto = append(v.pareto, v.paretoOf(t))
	}
	for _, t := range st.Trials {
		if t.State == "complete" && !t.ScoreOK && t.Score != nil {
			if q := v.paretoOf(t); q.OutputTokS > 0 {
				v.pareto = append(v.pareto, q)
			}
		}
	}
	// Trials without a level at the scored concurrency are left out.
	kept := v.pareto[:0]
	for _, q := range v.pareto {
		if q.OutputTokS > 0 {
			kept = append(kept, q)
		}
	}
	v.pareto = kept
	paretoFront(v.pareto)
	if st.ScoreConcurrency > 0 {
		v.paretoLevel = fmt.Sprintf(" at c=%d", st.ScoreConcurrency)
	}
	return v
}

// defaultValue is the engine-default card's figure (see view.DefaultValue).
func defaultValue(st Study) string {
	var base *Trial
	for i := range st.Trials {
		if t := &st.Trials[i]; t.Baseline && t.ConfirmOf == nil {
			base = t // the last: a retry replaces the trial it re-runs
		}
	}
	switch {
	case st.VersusDefault == "" || base == nil:
		return ""
	case st.DefaultGain > 0:
		return strconv.FormatFloat(st.DefaultGain, 'f', 2, 64) + "×"
	case st.Best != nil && st.Best.Number == base.Number:
		return "the default wins"
	case base.State == "complete" && st.Best != nil:
		return "not confirmed"
	}
	return base.State
}

// stateOrder lists states in the order a reader expects, then any others.
func stateOrder(counts map[string]int) []string {
	order := []string{"complete", "running", "waiting", "pruned", "failed", "infeasible", "duplicate", "unlaunched", "interrupted"}
	var out []string
	for _, s := range order {
		if counts[s] > 0 {
			out = append(out, s)
		}
	}
	var rest []string
	for s := range counts {
		if !contains(order, s) {
			rest = append(rest, s)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// rankComplete returns the complete trials meeting their SLO, best first:
// the declared winner (trial number winner, -1 for none), then a confirmed
// config by its pooled score, as the study declares (see rankScore), any
// other by its one run. The winner can score below a config it tied with:
// a tie goes to the config with fewer flags changed within 1% of the best.
func rankComplete(trials []Trial, confirmed []Confirmation, winner int) []Trial {
	var out []Trial
	for _, t := range trials {
		// A confirmation rerun measures a config the ranking already
		// holds; the confirmation table shows its runs together.
		if t.State == "complete" && t.ScoreOK && t.Score != nil && t.ConfirmOf == nil {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, _ := rankScore(out[i], confirmed)
		b, _ := rankScore(out[j], confirmed)
		return a > b
	})
	if i := slices.IndexFunc(out, func(t Trial) bool { return t.Number == winner }); i > 0 {
		w := out[i]
		copy(out[1:i+1], out[:i])
		out[0] = w
	}
	return out
}

// rankScore is a trial's pooled score when its config was confirmed
// (pooled true), else its own.
func rankScore(t Trial, confirmed []Confirmation) (score float64, pooled bool) {
	for _, c := range confirmed {
		if c.Trial == t.Number {
			return c.Pooled, true
		}
	}
	return *t.Score, false
}

// paramNames lists every parameter any trial set, sorted.
func paramNames(trials []Trial) []string {
	seen := map[string]bool{}
	for _, t := range trials {
		for k := range t.Params {
			seen[k] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func (v *view) row(t Trial) trialRow {
	r := trialRow{Number: t.Number, State: t.State, Class: t.Class, Score: "–", VerdictKind: "none", Verdict: "–", RerunOf: -1, Baseline: t.Baseline}
	if t.ConfirmOf != nil {
		r.RerunOf = *t.ConfirmOf
	}
	for _, n := range v.ParamNames {
		if len(t.Params) == 0 {
			r.Params = append(r.Params, "")
			continue
		}
		r.Params = append(r.Params, paramText(t.Params, n))
	}
	if t.Score != nil {
		r.Score = formatScore(*t.Score)
		r.ScoreV = strconv.FormatFloat(*t.Score, 'f', 3, 64)
	}
	switch {
	case t.State == "complete" && t.Score != nil:
		if t.ScoreOK {
			r.Verdict, r.VerdictKind = "meets", "meets"
		} else {
			r.Verdict, r.VerdictKind = "misses: "+t.Reason, "misses"
		}
	case t.State == "pruned" && t.Reason != "":
		// Why the cheap levels stopped it: the rule and the figures.
		r.Verdict, r.VerdictKind = "pruned: "+t.Reason, "misses"
	case t.RetryOf != nil:
		r.Verdict = fmt.Sprintf("retry of trial %d", *t.RetryOf)
	}
	if t.Seconds > 0 {
		r.Seconds = duration(t.Seconds)
		r.SecondsV = strconv.FormatFloat(t.Seconds, 'f', 1, 64)
	}
	r.Best = v.St.Best != nil && v.St.Best.Number == t.Number
	return r
}

// scoredLevel is the level the score reads for t: the study's scored
// concurrency when stored and measured, else t's highest level.
func (v *view) scoredLevel(t Trial) (Level, bool) {
	if len(t.Levels) == 0 {
		return Level{}, false
	}
	if c := v.St.ScoreConcurrency; c > 0 {
		for _, l := range t.Levels {
			if l.Concurrency == c {
				return l, true
			}
		}
		return Level{}, false
	}
	return t.Levels[len(t.Levels)-1], true
}

func (v *view) paretoOf(t Trial) paretoPoint {
	l, ok := v.scoredLevel(t)
	if !ok {
		return paretoPoint{Trial: t.Number}
	}
	return paretoPoint{Trial: t.Number, OutputTokS: l.OutputTokS, TTFTP99: l.TTFTP99, OK: t.ScoreOK}
}

// confirmations fills the confirmation rows and the tie verdict: as the
// study declares its winner (search.declare), a config whose pooled score
// is below the best by less than the larger of the two spreads ties with
// the best.
func (v *view) confirmations() {
	cs := append([]Confirmation(nil), v.St.Confirmations...)
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].Pooled > cs[j].Pooled })
	for _, c := range cs {
		scores := make([]string, len(c.Scores))
		for i, s := range c.Scores {
			scores[i] = formatScore(s)
			if c.Met != nil && i < len(c.Met) && !c.Met[i] {
				scores[i] = "missed"
			}
		}
		r := confirmRow{Trial: c.Trial, Runs: len(c.Scores), Scores: strings.Join(scores, " / "), Pooled: formatScore(c.Pooled), Spread: formatScore(c.Spread),
			Baseline: slices.ContainsFunc(v.St.Trials, func(t Trial) bool { return t.Number == c.Trial && t.Baseline })}
		if c.Pooled != 0 {
			r.Rel = fmt.Sprintf("%.1f%%", 100*c.Spread/math.Abs(c.Pooled))
		}
		v.Confirm = append(v.Confirm, r)
	}
	for i := range v.Confirm {
		if v.St.Best != nil && v.Confirm[i].Trial == v.St.Best.Number {
			v.WinnerConfirm = &v.Confirm[i]
		}
	}
	if len(cs) < 2 {
		return
	}
	top := cs[0]
	var tied []string
	spread := 0.0
	for _, c := range cs[1:] {
		if s := math.Max(top.Spread, c.Spread); top.Pooled-c.Pooled < s {
			tied = append(tied, fmt.Sprintf("trial %d (%s)", c.Trial, formatScore(c.Pooled)))
			spread = math.Max(spread, s)
		}
	}
	if len(tied) == 0 {
		return
	}
	v.Tie = fmt.Sprintf("Tie within the measured spread: %s %s below the best pooled score, trial %d's %s, by less than the spread (up to %s); no measured difference between them.",
		joinAnd(tied), map[bool]string{true: "lies", false: "lie"}[len(tied) == 1], top.Trial, formatScore(top.Pooled), formatScore(spread))
}

// joinAnd joins "a", "a and b", "a, b and c".
func joinAnd(xs []string) string {
	if len(xs) <= 1 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

func (v *view) plotSpecs() []plotSpec {
	st := v.St
	specs := []plotSpec{
		{file: plotThroughput, alt: "Output tok/s by concurrency for the top trials", group: "main", w: 5.2 * vg.Inch, h: 3.1 * vg.Inch,
			draw: func() (*chart, error) {
				return levelPlot(v.Ranked, "Output tok/s by concurrency (top trials)", "output tok/s", func(l Level) float64 { return l.OutputTokS })
			}},
		{file: plotPareto, alt: "TTFT p99 against output tok/s with the Pareto front", group: "main", w: 5.2 * vg.Inch, h: 3.1 * vg.Inch,
			draw: func() (*chart, error) { return paretoPlot(v.pareto, v.paretoLevel) }},
		{file: plotProgress, alt: "Score by trial and best so far", group: "more", w: 5.2 * vg.Inch, h: 3.1 * vg.Inch,
			draw: func() (*chart, error) { return progressPlot(st.Trials, scoreLabel(st.ScoreUnit)) }},
		{file: plotTTFT, alt: "TTFT p99 by concurrency for the top trials", group: "more", w: 5.2 * vg.Inch, h: 3.1 * vg.Inch,
			draw: func() (*chart, error) {
				return levelPlot(v.Ranked, "TTFT p99 by concurrency (top trials)", "TTFT p99 (s)", func(l Level) float64 { return l.TTFTP99 })
			}},
	}
	if hasRateProbes(st.Trials) {
		specs = append([]plotSpec{{file: plotRate, alt: "Latency against offered request rate, with the SLO and the achieved rate", group: "main",
			w: 5.2 * vg.Inch, h: 3.4 * vg.Inch, draw: func() (*chart, error) { return ratePlot(v.Ranked, st.SLO) }},
			{file: plotAchieved, alt: "Achieved against offered request rate", group: "main",
				w: 5.2 * vg.Inch, h: 3.4 * vg.Inch, draw: func() (*chart, error) { return achievedPlot(v.Ranked) }}}, specs...)
	}
	for _, n := range v.ParamNames {
		n := n
		specs = append(specs, plotSpec{file: "effect-" + fileSafe(n) + ".svg", alt: "Score by " + n, group: "effect",
			w: 4.2 * vg.Inch, h: 2.8 * vg.Inch, draw: func() (*chart, error) { return effectPlot(n, st.Trials, scoreLabel(st.ScoreUnit)) }})
	}
	return specs
}

func (v *view) addPlot(_ int, p plotSpec) {
	v.Plots = append(v.Plots, plotRef{File: p.file, Alt: p.alt, Group: p.group})
}

// PlotsIn returns the drawn plots of one group (for the template).
func (v *view) PlotsIn(group string) []plotRef {
	var out []plotRef
	for _, p := range v.Plots {
		if p.Group == group {
			out = append(out, p)
		}
	}
	return out
}

var unsafeFile = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// fileSafe makes a parameter name usable in a file name.
func fileSafe(s string) string { return unsafeFile.ReplaceAllString(s, "_") }

// paramString renders params as "k=v k=v" with sorted names.
func paramString(p map[string]interface{}) string {
	keys := slices.Sorted(maps.Keys(p))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + paramText(p, k)
	}
	return strings.Join(parts, " ")
}

// formatScore prints a score with thousands separators and one decimal
// below 1000 (tok/s are large; capacity scores are small integers).
func formatScore(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return fmt.Sprint(x)
	}
	if math.Abs(x) >= 1000 {
		return group(strconv.FormatFloat(x, 'f', 0, 64))
	}
	if x == math.Trunc(x) {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

// Thousands prints v rounded to an integer with thousands separators
// (35,755).
func Thousands(v float64) string { return group(strconv.FormatFloat(math.Round(v), 'f', 0, 64)) }

// group inserts thousands separators into an integer string.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// duration renders seconds as "42 s", "3 min 05 s" or "2 h 07 min".
func duration(s float64) string {
	switch {
	case s < 60:
		return fmt.Sprintf("%.0f s", s)
	case s < 3600:
		return fmt.Sprintf("%d min %02d s", int(s)/60, int(s)%60)
	}
	return fmt.Sprintf("%d h %02d min", int(s)/3600, (int(s)%3600)/60)
}

// secs renders a latency: ms below 1 s.
func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

// matrixTable is seed 004's decode table: rows contexts, columns
// simultaneous requests, cells total tok/s and TTFT or a status.
type matrixTable struct {
	Trial    int
	Columns  []int
	Rows     []matrixRow
	Prefill  []matrixCell // one per context
	Contexts []int
}

type matrixRow struct {
	Context string
	Cells   []matrixCell
}

type matrixCell struct {
	Text   string // "1,345.8 tok/s"
	Detail string // "954 ms TTFT"
	Kind   string // valid | queued | over | notrun | missing
}

// buildMatrix returns the decode table of the best trial (or, without a
// winner, of the first trial that has decode cells); nil for chat studies.
func buildMatrix(st Study) *matrixTable {
	var src *Trial
	if st.Best != nil && hasDecode(st.Best.Points) {
		src = st.Best
	} else {
		for i := range st.Trials {
			if hasDecode(st.Trials[i].Points) {
				src = &st.Trials[i]
				break
			}
		}
	}
	if src == nil {
		return nil
	}
	m := &matrixTable{Trial: src.Number}
	cells := map[[2]int]objective.Point{}
	ctxSeen, concSeen := map[int]bool{}, map[int]bool{}
	prefill := map[int]objective.Point{}
	for _, p := range src.Points {
		switch p.Phase {
		case objective.PhaseDecode:
			k := [2]int{p.Context, p.Concurrency}
			// Repeats of one cell: keep the first measured one.
			if old, dup := cells[k]; !dup || (old.Status != objective.StatusValid && p.Status == objective.StatusValid) {
				cells[k] = p
			}
			ctxSeen[p.Context], concSeen[p.Concurrency] = true, true
		case objective.PhasePrefill:
			prefill[p.Context] = p
			ctxSeen[p.Context] = true
		}
	}
	m.Contexts = sortedInts(ctxSeen)
	m.Columns = sortedInts(concSeen)
	for _, ctx := range m.Contexts {
		row := matrixRow{Context: tokensLabel(ctx)}
		for _, c := range m.Columns {
			row.Cells = append(row.Cells, cellOf(cells, ctx, c))
		}
		m.Rows = append(m.Rows, row)
		if p, ok := prefill[ctx]; ok {
			pc := matrixCell{Kind: "valid", Text: group(strconv.FormatFloat(p.PromptTokS, 'f', 0, 64)) + " prompt tok/s", Detail: secs(p.TTFT.P50) + " TTFT"}
			if p.Status != objective.StatusValid && p.Status != "" {
				pc = matrixCell{Kind: statusKind(p.Status), Text: p.Status}
			}
			m.Prefill = append(m.Prefill, pc)
		} else {
			m.Prefill = append(m.Prefill, matrixCell{Kind: "missing", Text: "–"})
		}
	}
	return m
}

func cellOf(cells map[[2]int]objective.Point, ctx, c int) matrixCell {
	p, ok := cells[[2]int{ctx, c}]
	if !ok {
		return matrixCell{Kind: "missing", Text: "–"}
	}
	switch p.Status {
	case objective.StatusValid, objective.StatusQueued:
		cell := matrixCell{Kind: statusKind(p.Status), Text: toks(p.OutputTokS) + " tok/s",
			Detail: secs(p.TTFT.P50) + " TTFT"}
		if p.Status == objective.StatusQueued {
			cell.Detail = "Requests queued · " + cell.Detail
		}
		return cell
	}
	return matrixCell{Kind: statusKind(p.Status), Text: p.Status}
}

func statusKind(s string) string {
	switch s {
	case objective.StatusValid, "":
		return "valid"
	case objective.StatusQueued:
		return "queued"
	case objective.StatusOverCapacity:
		return "over"
	case objective.StatusNotRun:
		return "notrun"
	}
	return "missing"
}

func hasDecode(pts []objective.Point) bool {
	for _, p := range pts {
		if p.Phase == objective.PhaseDecode {
			return true
		}
	}
	return false
}

func sortedInts(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// tokensLabel writes a context length as seed 004 does: 8K, 1019K.
func tokensLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return strconv.Itoa(n/1024) + "K"
	}
	if n >= 1000 {
		return strconv.Itoa((n+512)/1024) + "K"
	}
	return strconv.Itoa(n)
}

// matrixLevels turns the decode cells of one context (0: the smallest with
// a measured cell) into levels, medians over repeats; cells not run or over
// capacity are left out.
func matrixLevels(pts []objective.Point, ctx int) []Level {
	measured := func(p objective.Point) bool {
		return p.Phase == objective.PhaseDecode && (p.Status == objective.StatusValid || p.Status == objective.StatusQueued)
	}
	if ctx == 0 {
		for _, p := range pts {
			if measured(p) && (ctx == 0 || p.Context < ctx) {
				ctx = p.Context
			}
		}
	}
	by := map[int][]objective.Point{}
	for _, p := range pts {
		if measured(p) && p.Context == ctx {
			by[p.Concurrency] = append(by[p.Concurrency], p)
		}
	}
	med := func(ps []objective.Point, f func(objective.Point) float64) float64 {
		xs := make([]float64, len(ps))
		for i, p := range ps {
			xs[i] = f(p)
		}
		sort.Float64s(xs)
		return objective.Percentile(xs, 50)
	}
	var out []Level
	for c, ps := range by {
		out = append(out, Level{Concurrency: c, Repeats: len(ps),
			OutputTokS: med(ps, func(p objective.Point) float64 { return p.OutputTokS }),
			TTFTP50:    med(ps, func(p objective.Point) float64 { return p.TTFT.P50 }),
			TTFTP99:    med(ps, func(p objective.Point) float64 { return p.TTFT.P99 }),
			LatencyP99: med(ps, func(p objective.Point) float64 { return p.Latency.P99 })})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Concurrency < out[j].Concurrency })
	return out
}

// toks prints a throughput with thousands separators and one decimal.
func toks(x float64) string {
	s := strconv.FormatFloat(x, 'f', 1, 64)
	i := strings.IndexByte(s, '.')
	return group(s[:i]) + s[i:]
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/shell"
	"github.com/sgtune/sgtune/storage"
)

// Study user attributes the reading commands use when the run stored them;
// each is optional and the output leaves out what it cannot show.
const (
	attrScoreSpec   = storage.AttrScoreSpec
	attrBudget      = storage.AttrBudgetTrials
	attrFlagsSchema = storage.AttrFlagsSchema
)

// studyData is one study as the reading commands see it. The caller closes store.
type studyData struct {
	store *storage.Store
	name  string
	id    int
	recs  []search.Record
	attrs map[string]string // study user attributes
	// launched is how many trials count against the study's budget, as
	// the storage counts them (interrupted ones gave their launch back;
	// confirmation reruns are outside the budget).
	launched int
	// winner is the study's declared winner, nil until it declared one (or
	// while a resumed search goes on after it); winnerErr says why a stored
	// winner could not be read.
	winner    *search.Winner
	winnerErr error
}

// open reads the chosen study. It never creates a database.
func (sf *studyFlags) open() (*studyData, error) {
	store, err := openExisting(sf.storage)
	if err != nil {
		return nil, err
	}
	d, err := readStudy(store, sf.study)
	if err != nil {
		store.Close()
		return nil, err
	}
	return d, nil
}

func readStudy(store *storage.Store, want string) (*studyData, error) {
	name, err := pickStudy(store, want)
	if err != nil {
		return nil, err
	}
	recs, err := search.Records(store, name)
	if errors.Is(err, search.ErrNoStudy) {
		return nil, badInput(err)
	}
	if err != nil {
		return nil, err
	}
	id, err := store.GetStudyIDFromName(name)
	if err != nil {
		return nil, fmt.Errorf("find study %q: %w", name, err)
	}
	attrs, err := store.GetStudyUserAttrs(id)
	if err != nil {
		return nil, fmt.Errorf("read attributes of study %q: %w", name, err)
	}
	launched, err := store.LaunchedCount(context.Background(), id)
	if err != nil {
		return nil, fmt.Errorf("count launched trials of %q: %w", name, err)
	}
	d := &studyData{store: store, name: name, id: id, recs: recs, attrs: attrs, launched: launched}
	// An unreadable winner does not keep status, best or export from the
	// trials; the report, which shows the confirmation, fails on it.
	w, ok, err := search.ReadWinner(store, name)
	switch {
	case err != nil:
		d.winnerErr = err
	case ok && w.Holds(recs):
		d.winner = &w
	}
	return d, nil
}

// scoreSpec returns the study's stored score spec, if the run stored it.
func (d *studyData) scoreSpec() (objective.ScoreSpec, bool) {
	var s objective.ScoreSpec
	raw := d.attrs[attrScoreSpec]
	if raw == "" || json.Unmarshal([]byte(raw), &s) != nil {
		return objective.ScoreSpec{}, false
	}
	return s, true
}

var scoredAtRE = regexp.MustCompile(`at c=(\d+)`)

// scoredConcurrency is the level the study's score reads: the stored spec's,
// else the level the score reasons name most often ("... at c=64"), else 0.
func (d *studyData) scoredConcurrency() int {
	if s, ok := d.scoreSpec(); ok && s.Concurrency > 0 {
		return s.Concurrency
	}
	votes := map[int]int{}
	for _, r := range d.recs {
		if m := scoredAtRE.FindStringSubmatch(r.ScoreReason); m != nil && r.ScoreOK {
			c, _ := strconv.Atoi(m[1])
			votes[c]++
		}
	}
	best, n := 0, 0
	for c, v := range votes {
		if v > n || (v == n && c > best) {
			best, n = c, v
		}
	}
	return best
}

// specText describes the stored score spec for a reader.
func specText(s objective.ScoreSpec) string {
	metric := map[string]string{"": "output tok/s", objective.MetricOutputTokS: "output tok/s",
		objective.MetricGoodput: "goodput tok/s", objective.MetricCapacity: "highest concurrency",
		objective.MetricMaxRate: "highest request rate"}[s.Metric]
	if metric == "" {
		metric = s.Metric
	}
	switch {
	case s.Metric == objective.MetricCapacity, s.Metric == objective.MetricMaxRate:
	case s.Concurrency > 0:
		metric += fmt.Sprintf(" at c=%d", s.Concurrency)
	default:
		metric += " at the highest level"
	}
	if len(s.SLO) > 0 {
		metric += " with " + sloList(s.SLO)
	}
	return metric
}

// scoreUnit is the unit of the stored score spec's metric.
func scoreUnit(s objective.ScoreSpec) string {
	switch s.Metric {
	case "", objective.MetricOutputTokS:
		return "output tok/s"
	case objective.MetricGoodput:
		return "goodput tok/s"
	case objective.MetricCapacity:
		return "concurrent requests"
	case objective.MetricMaxRate:
		return "requests/s"
	}
	return ""
}

// sloList renders SLOs as "ttft p99 < 1s, latency p50 < 10s".
func sloList(slos []objective.SLO) string {
	parts := make([]string, len(slos))
	for i, o := range slos {
		parts[i] = fmt.Sprintf("%s %s < %ss", o.Metric, o.Percentile, strconv.FormatFloat(o.Max, 'g', -1, 64))
	}
	return strings.Join(parts, ", ")
}

// budget returns the stored launch budget (0 when not stored).
func (d *studyData) budget() int {
	n, err := strconv.Atoi(d.attrs[attrBudget])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// confirmations returns the confirmation reruns of the study's declared
// winner and runners-up, best pooled first (nil when none were run), and
// how the winner was chosen.
func (d *studyData) confirmations() ([]report.Confirmation, string) {
	if d.winner == nil {
		return nil, ""
	}
	out := make([]report.Confirmation, len(d.winner.Candidates))
	for i, c := range d.winner.Candidates {
		out[i] = report.Confirmation{Trial: c.Trial, Pooled: c.Pooled, Spread: c.Spread}
		for _, m := range c.Runs {
			out[i].Scores = append(out[i].Scores, m.Score)
			out[i].Met = append(out[i].Met, m.OK)
		}
	}
	return out, d.winner.Reason
}

// best is the trial the study declares best: its confirmed winner, else
// the best complete trial meeting the SLO and gates.
func (d *studyData) best() (search.Record, bool) {
	return search.Declared(d.winner, d.recs)
}

// confirmation returns the study's declared winner when rec is its trial
// (nil otherwise: no winner that holds, or another trial).
func (d *studyData) confirmation(rec search.Record) *search.Winner {
	if w := d.winner; w != nil && w.Trial == rec.Number {
		return w
	}
	return nil
}

// bestLine is the one-line summary of the declared best trial, as `status`
// prints it.
func (d *studyData) bestLine() string {
	b, ok := d.best()
	var line string
	switch {
	case !ok:
		line = "none yet (no complete trial meets the SLO and gates)"
	case d.confirmation(b) != nil:
		line = fmt.Sprintf("trial %d (%s)", b.Number, d.winner.Confirmed())
	default:
		line = fmt.Sprintf("trial %d (score %.2f)", b.Number, *b.Score)
	}
	if d.winnerErr != nil {
		line += fmt.Sprintf("; the stored winner is unreadable: %v", d.winnerErr)
	}
	return line
}

// versusDefault states the declared best against the study's engine
// default (search.VersusDefault); "" without one.
func (d *studyData) versusDefault() string {
	var best *search.Record
	if b, ok := d.best(); ok {
		best = &b
	}
	return search.VersusDefault(d.winner, best, d.recs)
}

// modelRevision returns the model revision a trial served: its own
// attribute, else the study's, else "".
func (d *studyData) modelRevision(r search.Record) string {
	if r.ModelRev != "" {
		return r.ModelRev
	}
	return d.attrs[storage.AttrModelRevision]
}

// levels returns a record's stored medians as report levels, ascending.
func levels(r search.Record) []report.Level {
	var out []report.Level
	for c, m := range r.Medians() {
		out = append(out, report.Level{
			Concurrency: c, Repeats: m.Repeats, OutputTokS: m.OutputTokS,
			TTFTP50: m.TTFTP50, TTFTP99: m.TTFTP99, LatencyP99: m.LatencyP99,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Concurrency < out[j].Concurrency })
	return out
}

// figuresAt returns a trial's key figures at the scored level (its highest
// level when conc is 0); nil when it has no measurement there.
func figuresAt(r search.Record, conc int) *report.Figures {
	ls := levels(r)
	if len(ls) == 0 {
		return nil
	}
	l := ls[len(ls)-1]
	if conc > 0 {
		found := false
		for _, x := range ls {
			if x.Concurrency == conc {
				l, found = x, true
			}
		}
		if !found {
			return nil
		}
	}
	return &report.Figures{Concurrency: l.Concurrency, OutputTokS: l.OutputTokS, TTFTP99: l.TTFTP99}
}

// commandLine is the command that starts a trial's config, as one line a
// shell runs unchanged: the engine's command, a positional model where
// the engine takes one (vllm serve MODEL), then the flags, each word
// quoted where a shell needs it (a JSON value, a space). An unknown
// engine is written in SGLang's form, as the export does.
func commandLine(r search.Record) string {
	e := recordEngine(r)
	if e == nil {
		e = engine.SGLang
	}
	return shell.Join(e.CommandLine(r.Engine, r.Flags()))
}

// recordEngine is the engine a trial ran: its stored name, SGLang for
// records from before engines were named, or an unknown name's nil (the
// export then writes SGLang's forms; the flag check has already failed).
func recordEngine(r search.Record) *engine.Engine {
	name := r.EngineName
	if name == "" {
		name = engine.SGLang.Name
	}
	e, err := engine.Lookup(name)
	if err != nil {
		return nil
	}
	return e
}

// flagSchema returns the schema an export is checked against: file when
// given, else the study's own schema file when the run stored its path,
// else the bundled schema of the trial's engine and version (or the
// engine's default version, with a note on warn).
func (d *studyData) flagSchema(r search.Record, file string, warn io.Writer) (*engine.FlagSchema, error) {
	if file == "" {
		file = d.attrs[attrFlagsSchema]
	}
	if file != "" {
		s, err := engine.LoadSchemaFile(file)
		if err != nil {
			return nil, badInput(fmt.Errorf("--flags-schema: %w", err))
		}
		return s, nil
	}
	name := r.EngineName
	if name == "" {
		name = engine.SGLang.Name
	}
	e, err := engine.Lookup(name)
	if err != nil {
		return nil, badInput(fmt.Errorf("trial %d: %w; pass --flags-schema FILE", r.Number, err))
	}
	s, ok, err := e.Schema(r.Version)
	if err != nil {
		return nil, fmt.Errorf("flag schema: %w", err)
	}
	if !ok {
		fmt.Fprintf(warn, "note: no bundled flag schema for %s version %q; checking flags against %s\n", e.Name, r.Version, s.Source)
	}
	return s, nil
}

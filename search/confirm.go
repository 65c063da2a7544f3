package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// Winner is the config a study declares best, once its top configs were
// measured again (interleaved) and compared on their pooled measurements.
type Winner struct {
	// Trial is the config's first trial (its number names it).
	Trial int `json:"trial"`
	// Pooled is the mean score over the config's runs; Spread the range
	// (max - min) of the runs that met the SLO and gates (see Pool).
	Pooled float64 `json:"pooled"`
	Spread float64 `json:"spread"`
	// Runs are the trials that measured the config, with their scores (0
	// for a run that failed or missed the SLO).
	Runs []Measurement `json:"runs"`
	// TiedWith lists the other confirmed configs whose pooled score is
	// within the spread of the winner's: no measured difference.
	TiedWith []int `json:"tied_with,omitempty"`
	// Flags is how many flags the config sets beyond the study's fixed
	// ones: among tied configs, the simpler one wins.
	Flags int `json:"flags"`
	// Candidates are every confirmed config, best pooled first (the
	// engine default among them when it was confirmed).
	Candidates []Candidate `json:"candidates"`
	// Reason says how the winner was chosen.
	Reason string `json:"reason"`
	// Baseline is the engine default's confirmed runs (budget.baseline:
	// default; nil when it was not confirmed: it failed, missed the SLO,
	// or the study has none). The winner is held against it (see
	// DeclareAgainst).
	Baseline *Candidate `json:"baseline,omitempty"`
	// DefaultAsGood: the best config the search found (Searched) does
	// not beat the engine default by more than the measured spread, so
	// the default is the winner (Trial is its trial).
	DefaultAsGood bool       `json:"default_as_good,omitempty"`
	Searched      *Candidate `json:"searched,omitempty"`
	// Gain is the winner's pooled score over the engine default's, when
	// the winner beat it (0 otherwise).
	Gain float64 `json:"gain,omitempty"`
	// Through is the last trial the declaration read: a search trial after
	// it means the study searched on (see Holds).
	Through int `json:"through,omitempty"`
}

// Confirmed says how the winner measured, as the commands print it:
// "confirmed: pooled P over K runs, spread S".
func (w Winner) Confirmed() string {
	return fmt.Sprintf("confirmed: pooled %.2f over %s, spread %.2f", w.Pooled, runs(len(w.Runs)), w.Spread)
}

// Measurement is one measurement of a confirmed config.
type Measurement struct {
	Trial int     `json:"trial"`
	Score float64 `json:"score"`
	OK    bool    `json:"ok"`
}

// Candidate is one confirmed config with its pooled measurements.
type Candidate struct {
	Trial  int           `json:"trial"`
	Pooled float64       `json:"pooled"`
	Spread float64       `json:"spread"`
	Flags  int           `json:"flags"`
	Runs   []Measurement `json:"runs"`
}

// Declare picks the winner among confirmed configs: the best pooled score.
// Configs whose pooled score lies within the measured spread of the best
// are a tie (no measured difference), and within a tie a config with fewer
// flags changed from the engine's defaults wins when its pooled score is
// within simplerWithin of the best (vLLM's staged tuner prefers the
// simpler config within 1% too). It is the one rule a study declares its
// winner by; rescore declares with it too. ok is false without candidates.
func Declare(cands []Candidate) (w Winner, ok bool) {
	if len(cands) == 0 {
		return Winner{}, false
	}
	cands = slices.Clone(cands)
	slices.SortStableFunc(cands, bestPooledFirst)
	top := cands[0]
	tied := []Candidate{top}
	for _, c := range cands[1:] {
		if top.Pooled-c.Pooled < math.Max(top.Spread, c.Spread) {
			tied = append(tied, c)
		}
	}
	win := tied[0]
	for _, c := range tied[1:] {
		if c.Flags < win.Flags && top.Pooled-c.Pooled <= simplerWithin*math.Abs(top.Pooled) {
			win = c
		}
	}
	w = Winner{Trial: win.Trial, Pooled: win.Pooled, Spread: win.Spread, Runs: win.Runs, Flags: win.Flags, Candidates: cands}
	for _, c := range tied {
		if c.Trial != win.Trial {
			w.TiedWith = append(w.TiedWith, c.Trial)
		}
	}
	switch {
	case len(tied) == 1 && len(cands) == 1:
		w.Reason = fmt.Sprintf("the only confirmed config: pooled %.1f over %s (spread %.1f)", win.Pooled, runs(len(win.Runs)), win.Spread)
	case len(tied) == 1:
		w.Reason = fmt.Sprintf("best pooled score %.1f over %s; the next, trial %d's %.1f, is %.1f lower, more than either spread (%.1f, %.1f)",
			win.Pooled, runs(len(win.Runs)), cands[1].Trial, cands[1].Pooled, win.Pooled-cands[1].Pooled, win.Spread, cands[1].Spread)
	case win.Trial == top.Trial:
		w.Reason = fmt.Sprintf("tie within the measured spread with trial(s) %s; trial %d has the best pooled score %.1f (%d flags) and no simpler config is within %.0f%% of it",
			joinInts(w.TiedWith), win.Trial, win.Pooled, win.Flags, 100*simplerWithin)
	default:
		w.Reason = fmt.Sprintf("tie within the measured spread: trial %d's pooled %.1f vs trial %d's %.1f (spread %.1f), within %.0f%%; the simpler config wins (%d flags vs %d)",
			top.Trial, top.Pooled, win.Trial, win.Pooled, math.Max(top.Spread, win.Spread), 100*simplerWithin, win.Flags, top.Flags)
	}
	return w, true
}

// simplerWithin is how far below the best pooled score a simpler tied
// config may be and still win. A spread is the range of a few runs: with
// two runs at 10-12% noise it is about 11% of the score, so "inside the
// spread" alone handed wins to configs 3-9% below the best (on the real
// llama-server, 188.5 over 203.7 with a spread of 47.2; on the GLM
// landscape a config without EAGLE at 91.6% of the best over the 100%
// ones). The pooled mean is the best estimate a study has: a simpler
// config may cost at most this much of it.
const simplerWithin = 0.01

// DeclareAgainst declares the winner among the search's confirmed configs
// (Declare) and holds it against the engine default's confirmed runs base
// (nil: none confirmed). A winner whose pooled score does not exceed the
// default's by more than the measured spread (the larger of the two, as
// Declare judges ties) is not declared over it: the default wins, and the
// Winner says so (DefaultAsGood, Searched). A winner that beats it
// carries the ratio of the pooled scores (Gain). With only the default
// confirmed, the default wins. ok is false with no candidate at all.
func DeclareAgainst(cands []Candidate, base *Candidate) (w Winner, ok bool) {
	w, ok = Declare(cands)
	return holdAgainst(w, ok, base)
}

// holdAgainst holds a declared winner (ok false: none) against the engine
// default's runs base, as DeclareAgainst says; a winner that beats it
// keeps its reason, with the margin appended.
func holdAgainst(w Winner, ok bool, base *Candidate) (Winner, bool) {
	if base == nil {
		return w, ok
	}
	b := *base
	if !ok {
		return Winner{Trial: b.Trial, Pooled: b.Pooled, Spread: b.Spread, Runs: b.Runs, Flags: b.Flags,
			Candidates: []Candidate{b}, Baseline: &b, DefaultAsGood: true,
			Reason: fmt.Sprintf("the engine default is the only confirmed config: pooled %.1f over %s (spread %.1f)", b.Pooled, runs(len(b.Runs)), b.Spread)}, true
	}
	all := append(slices.Clone(w.Candidates), b)
	slices.SortStableFunc(all, bestPooledFirst)
	w.Candidates, w.Baseline = all, &b
	spread := math.Max(w.Spread, b.Spread)
	if w.Pooled-b.Pooled > spread {
		if b.Pooled > 0 {
			w.Gain = w.Pooled / b.Pooled
		}
		w.Reason += fmt.Sprintf("; it beats the engine default (trial %d, pooled %.1f over %s) by %.1f%s",
			b.Trial, b.Pooled, runs(len(b.Runs)), w.Pooled-b.Pooled, spreadText(", more than the spread", spread, len(w.Runs), len(b.Runs)))
		return w, true
	}
	searched := Candidate{Trial: w.Trial, Pooled: w.Pooled, Spread: w.Spread, Flags: w.Flags, Runs: w.Runs}
	return Winner{Trial: b.Trial, Pooled: b.Pooled, Spread: b.Spread, Runs: b.Runs, Flags: b.Flags,
		Candidates: all, Baseline: &b, DefaultAsGood: true, Searched: &searched,
		Reason: fmt.Sprintf("the engine default is as good as anything found: the search's best, trial %d, pooled %.1f over %s, does not beat the default's %.1f over %s%s",
			searched.Trial, searched.Pooled, runs(len(searched.Runs)), b.Pooled, runs(len(b.Runs)), spreadText(" by more than the measured spread", spread, len(searched.Runs), len(b.Runs)))}, true
}

// runs prints a run count: "1 run", "3 runs".
func runs(n int) string {
	if n == 1 {
		return "1 run"
	}
	return fmt.Sprintf("%d runs", n)
}

// spreadText is how a difference compares with the measured spread
// (what, then the spread: ", more than the spread 10.0"). With one run of
// each config (na and nb runs) there is no spread to compare with, and it
// says so.
func spreadText(what string, spread float64, na, nb int) string {
	if na <= 1 && nb <= 1 {
		return " (one run of each: no spread measured)"
	}
	return fmt.Sprintf("%s %.1f", what, spread)
}

// bestPooledFirst orders candidates by pooled score, highest first; a tie
// goes to the earlier trial.
func bestPooledFirst(a, b Candidate) int {
	if a.Pooled != b.Pooled {
		return cmpFloat(b.Pooled, a.Pooled)
	}
	return a.Trial - b.Trial
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// runScore is what a run contributes to its config's pooled score: its
// score when it met the SLO and gates, else 0 (a failed or missed rerun is
// evidence against the config).
func runScore(rec Record) Measurement {
	r := Measurement{Trial: rec.Number}
	if rec.State == StateComplete && rec.ScoreOK && rec.Score != nil {
		r.Score, r.OK = *rec.Score, true
	}
	return r
}

// Pool returns the mean score of a config's runs, a run that failed or
// missed the SLO counting 0 (its Score: evidence against the config), and
// the range of the scores of the runs that met it (0 with fewer than two),
// as a winner is declared on them. The spread is the measurement noise a
// tie is judged by: a run that missed measured no score, and counting its
// 0 there would make the spread the whole score, a config that crashed
// once tying with every other.
func Pool(runs []Measurement) (pooled, spread float64) {
	lo, hi, sum, met := math.Inf(1), math.Inf(-1), 0.0, 0
	for _, run := range runs {
		sum += run.Score
		if run.OK {
			lo, hi, met = math.Min(lo, run.Score), math.Max(hi, run.Score), met+1
		}
	}
	if met > 1 {
		spread = hi - lo
	}
	return sum / float64(len(runs)), spread
}

// topConfigs are the first trials of the n measured configs the model
// ranks highest (see model): a config measured once, far above what
// similar configs measured, ranks below one whose family agrees. The
// config with the best single measurement is always among them when n >=
// 2 (it takes the last place if the model left it out): it heads the
// trial table, and only measuring it again says whether it was luck. The
// engine default is none of them: it is confirmed on its own, and a
// winner is held against it.
func topConfigs(st *space.Study, recs []Record, n int) ([]Record, error) {
	ps, ranked, _, err := rankRecords(st, recs)
	if err != nil || ps == nil {
		return nil, err
	}
	var out []Record
	for _, c := range ranked {
		if len(out) == n {
			break
		}
		if !c.first.Baseline {
			out = append(out, c.first)
		}
	}
	searched := slices.DeleteFunc(searchTrials(recs), func(r Record) bool { return r.Baseline })
	if b, ok := Best(searched); ok && n >= 2 && !slices.ContainsFunc(out, func(r Record) bool { return r.ConfigKey == b.ConfigKey }) {
		if len(out) == n {
			out = out[:n-1]
		}
		out = append(out, b)
	}
	return out, nil
}

// rankRecords fits the model to a study's records (nil when no run
// measured a score) and ranks the measured configs a run of which met the
// SLO by it, best first (see ranked).
// Where the score has an SLO, a config ranks by its estimated score times
// its chance to meet the SLO (see fitSlack and logMeets):
// a score counts only where the SLO holds, so a config on the SLO's edge,
// which met it once among like configs that missed it, is worth about
// half its score. meets holds the log of each ranked config's chance
// (nil without an SLO to judge).
func rankRecords(st *space.Study, recs []Record) (ps *posterior, ranked []*measuredConfig, meets map[string]float64, err error) {
	m, err := newModel(st, false)
	if err != nil {
		return nil, nil, nil, err
	}
	if ps, err = m.fit(recs); err != nil || ps == nil {
		return nil, nil, nil, err
	}
	ranked = ps.ranked()
	slack, err := m.fitSlack(recs)
	if err != nil || slack == nil {
		return ps, ranked, nil, err
	}
	meets = map[string]float64{}
	value := map[string]float64{}
	for _, c := range ranked {
		meets[c.key] = slack.logMeets(c.key)
		value[c.key] = ps.estimate(c) + meets[c.key]
	}
	slices.SortStableFunc(ranked, func(a, b *measuredConfig) int { return cmpFloat(value[b.key], value[a.key]) })
	return ps, ranked, meets, nil
}

// flagCount is how many engine flags a trial's config sets beyond the
// study's fixed ones and the model's: the settings it changes from the
// engine's defaults.
func flagCount(st *space.Study, rec Record) int {
	n := 0
	for _, f := range rec.Flags() {
		if strings.HasPrefix(f, "-") && (len(f) < 2 || f[1] < '0' || f[1] > '9') {
			n++
		}
	}
	base := len(st.Fixed) + 1 // the fixed flags and the model flag
	if st.ServedModelName != "" {
		base++
	}
	return max(n-base, 0)
}

// confirm measures the top configs again, interleaved, and declares the
// winner on the pooled measurements. It queues what is still missing (a
// resumed study completes an interrupted confirmation) and runs the queue
// on the run's GPU groups; confirmation runs do not use the budget.
func (r *runner) confirm(ctx context.Context, groups [][]int) error {
	k, rounds := r.st.Budget.Confirm, max(r.st.Budget.ConfirmRounds, 1)
	// The top configs are known once no search trial runs: a process whose
	// workers found nothing to do (another holds the GPU group) leaves the
	// confirmation to the processes still measuring.
	busy, recs, err := r.unfinished(func(rec Record) bool { return rec.ConfirmOf == nil })
	if err != nil || busy > 0 {
		if err == nil {
			r.note("%d search trial(s) still run or wait in other processes; the last of them to finish confirms the top configs and declares the winner", busy)
		}
		return err
	}
	top, err := topConfigs(r.st, recs, k)
	if err != nil {
		return err
	}
	if base, ok := BaselineOf(recs); ok && base.State == StateComplete && base.ScoreOK {
		// The engine default is measured again beside them: the winner
		// is held against its pooled runs.
		top = append(top, base)
	}
	if len(top) == 0 {
		return nil
	}
	// Many processes may finish a study at once: one of them, holding the
	// study's confirmation lease, queues what is missing; all of them run
	// the queue.
	res := "confirm@" + r.uid
	held, err := r.store.AcquireLease(ctx, r.study.ID, res, r.owner, r.staleWindow())
	if cancelled(ctx, err) {
		return nil // interrupted: not a storage failure
	}
	if err != nil {
		return fmt.Errorf("take the confirmation lease: %w", err)
	}
	if held {
		if err := r.queueConfirmations(top, rounds); err != nil {
			return errors.Join(err, r.store.ReleaseLease(context.Background(), res, r.owner))
		}
		if err := r.store.ReleaseLease(context.Background(), res, r.owner); err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			return fmt.Errorf("release the confirmation lease: %w", err)
		}
	}
	if err := r.announceConfirmations(top); err != nil {
		return err
	}
	r.confirming = true
	if err := r.workers(ctx, groups); err != nil || ctx.Err() != nil {
		return err
	}
	// Another process may still run a confirmation (or wait for a GPU
	// group to run one): the last to finish declares, on every run.
	if busy, _, err := r.unfinished(func(Record) bool { return true }); err != nil || busy > 0 {
		if err == nil {
			r.note("%d confirmation run(s) still run or wait in other processes; the last of them to finish declares the winner", busy)
		}
		return err
	}
	among := map[string]bool{}
	for _, rec := range top {
		among[rec.ConfigKey] = true
	}
	return r.declare(among)
}

// unfinished counts the trials matching of that still run or wait to run,
// after taking over those whose process died; recs are the study's
// trials as it read them.
func (r *runner) unfinished(of func(Record) bool) (n int, recs []Record, err error) {
	if recs, err = r.reap(); err != nil {
		return 0, nil, err
	}
	for _, rec := range recs {
		if (rec.State == StateRunning || rec.State == StateWaiting) && of(rec) {
			n++
		}
	}
	return n, recs, nil
}

// queueConfirmations queues, interleaved, the confirmation runs the top
// configs still lack (a resumed or shared study completes what another
// run queued or ran).
func (r *runner) queueConfirmations(top []Record, rounds int) error {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return err
	}
	have := map[int]int{} // original trial number -> confirmation runs done or queued
	for _, rec := range recs {
		if rec.ConfirmOf != nil && rec.State != StateInterrupted {
			have[*rec.ConfirmOf]++
		}
	}
	for round := 1; round <= rounds; round++ {
		for _, rec := range top {
			if have[rec.Number] >= round {
				continue
			}
			attrs := map[string]string{storage.AttrConfirmOf: strconv.Itoa(rec.Number)}
			if rec.Baseline {
				attrs[storage.AttrBaseline] = markBaseline(rec.Omitted)
			}
			if _, err := r.store.QueueCopy(rec.ID, attrs); err != nil {
				return fmt.Errorf("queue a confirmation run of trial %d: %w", rec.Number, err)
			}
			have[rec.Number]++
		}
	}
	return nil
}

// announceConfirmations emits the confirming event with every confirmation
// run waiting to start: those just queued, and those an interrupted run or
// another process queued before (a resumed confirmation queues none, and
// the live line's time left counted none of them).
func (r *runner) announceConfirmations(top []Record) error {
	if r.opt.Events == nil {
		return nil // no listener: spare the read
	}
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return fmt.Errorf("count the queued confirmation runs: %w", err)
	}
	waiting := 0
	for _, rec := range recs {
		if rec.ConfirmOf != nil && rec.State == StateWaiting {
			waiting++
		}
	}
	if waiting == 0 {
		return nil
	}
	var nums []int
	base := ""
	for _, rec := range top {
		if rec.Baseline {
			base = fmt.Sprintf(" and the engine default (trial %d)", rec.Number)
			continue
		}
		nums = append(nums, rec.Number)
	}
	what := fmt.Sprintf("the top %d config(s) (trials %s)%s", len(nums), joinInts(nums), base)
	if len(nums) == 0 {
		what = strings.TrimPrefix(base, " and ")
	}
	r.emit(Event{Kind: EventConfirming, Trial: -1, Phase: "confirming", Queued: waiting,
		Text: fmt.Sprintf("confirming %s: %d more run(s), interleaved", what, waiting)})
	return nil
}

// declareOnce declares the winner once no trial of the study runs or
// waits in another process: the last process to finish declares, on every
// run.
func (r *runner) declareOnce() error {
	busy, _, err := r.unfinished(func(Record) bool { return true })
	if err != nil || busy > 0 {
		return err
	}
	return r.declare(nil)
}

// declare stores the winner DeclareFrom names over the study's records;
// among, when not nil, holds the config keys it may name (the confirmed
// ones).
func (r *runner) declare(among map[string]bool) error {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return err
	}
	w, ok, err := declareAmong(r.st, recs, among)
	if err != nil || !ok {
		return err
	}
	if err := r.setStudyJSON(storage.AttrWinner, "the winner", w); err != nil {
		return err
	}
	r.emit(Event{Kind: EventNote, Trial: -1, Text: fmt.Sprintf("winner: trial %d: %s", w.Trial, w.Reason)})
	return nil
}

// DeclareFrom declares a study's winner from its records: the model's
// incumbent (the measured config with the highest posterior mean), with
// every run of it pooled, held against the engine default's runs (see
// DeclareAgainst). It is a function of the records alone, so what a study
// declares after any number of launches is what a study with that budget
// declares. ok is false when no config met the SLO.
func DeclareFrom(st *space.Study, recs []Record) (w Winner, ok bool, err error) {
	return declareAmong(st, recs, nil)
}

// declareAmong is DeclareFrom with the incumbent taken among the config
// keys in among (nil: all).
func declareAmong(st *space.Study, recs []Record, among map[string]bool) (w Winner, ok bool, err error) {
	ps, ranked, meets, err := rankRecords(st, recs)
	if err != nil {
		return Winner{}, false, err
	}
	var base *Candidate
	b, hasBase := BaselineOf(recs)
	if hasBase && b.State == StateComplete && b.ScoreOK {
		c := candidateOf(st, b.ConfigKey, recs)
		base = &c
	}
	var cands []Candidate
	lead := ""
	if among != nil {
		ranked = slices.DeleteFunc(ranked, func(c *measuredConfig) bool { return !among[c.key] })
	}
	if len(ranked) > 0 {
		inc := ranked[0]
		if base == nil || inc.key != b.ConfigKey {
			c := candidateOf(st, inc.key, recs)
			cands = append(cands, c)
			// chance says, with an SLO, how likely a config meets it:
			// the ranking weighs the score by it.
			chance := func(c *measuredConfig) string {
				if meets == nil {
					return ""
				}
				return fmt.Sprintf(", %.0f%% likely to meet the SLO", 100*math.Exp(meets[c.key]))
			}
			what := "highest estimated score"
			if meets != nil {
				what += " where the SLO holds"
			}
			// The estimate reads every measured config's runs, those
			// that missed the SLO included.
			lead = fmt.Sprintf("%s: pooled %.1f over %s, estimated %.1f from them and %d similar config(s)%s",
				what, c.Pooled, runs(len(c.Runs)), math.Exp(ps.estimate(inc)), len(ps.configs)-1, chance(inc))
			if len(ranked) > 1 {
				lead += fmt.Sprintf("; the next, trial %d, estimated %.1f%s", ranked[1].first.Number, math.Exp(ps.estimate(ranked[1])), chance(ranked[1]))
			}
		}
	}
	w, ok = Declare(cands)
	if ok && lead != "" {
		w.Reason = lead
	}
	w, ok = holdAgainst(w, ok, base)
	if ok {
		w.Candidates = append(w.Candidates, measuredAgain(st, recs, among, w.Candidates)...)
		slices.SortStableFunc(w.Candidates, bestPooledFirst)
	}
	for _, rec := range recs {
		w.Through = max(w.Through, rec.Number)
	}
	return w, ok, nil
}

// measuredAgain pools the runs of every config the study measured again
// (the keys in among when not nil: the confirmed ones; else every config
// that ran more than once), leaving out those have lists. The winner lists
// them all, so the report and rescore pool every confirmed config's runs,
// not its first run alone.
func measuredAgain(st *space.Study, recs []Record, among map[string]bool, have []Candidate) []Candidate {
	listed := map[int]bool{}
	for _, c := range have {
		listed[c.Trial] = true
	}
	least := 2 // runs a config needs to be listed
	if among != nil {
		least = 1
	}
	var out []Candidate
	seen := map[string]bool{}
	for _, rec := range recs {
		k := rec.ConfigKey
		if k == "" || seen[k] || (among != nil && !among[k]) {
			continue
		}
		seen[k] = true
		if c := candidateOf(st, k, recs); len(c.Runs) >= least && !listed[c.Trial] {
			out = append(out, c)
		}
	}
	return out
}

// candidateOf pools every run of the config with key.
func candidateOf(st *space.Study, key string, recs []Record) Candidate {
	c := Candidate{Trial: -1, Runs: candidateRuns(key, recs)}
	for _, rec := range recs {
		if rec.ConfigKey == key && RanToEnd(rec.State) && c.Trial < 0 {
			c.Trial, c.Flags = rec.Number, flagCount(st, rec)
		}
	}
	c.Pooled, c.Spread = Pool(c.Runs)
	return c
}

// candidateRuns are the runs of the config with key that ran to the end.
func candidateRuns(key string, recs []Record) []Measurement {
	var runs []Measurement
	for _, rec := range recs {
		if rec.ConfigKey == key && RanToEnd(rec.State) {
			runs = append(runs, runScore(rec))
		}
	}
	return runs
}

// ReadWinner returns the winner a study declared (ok false when it has not
// declared one yet).
func ReadWinner(st StudyStore, study string) (Winner, bool, error) {
	id, err := st.GetStudyIDFromName(study)
	if errors.Is(err, storage.ErrStudyNotFound) {
		return Winner{}, false, fmt.Errorf("%w %q", ErrNoStudy, study)
	}
	if err != nil {
		return Winner{}, false, err
	}
	attrs, err := st.GetStudySystemAttrs(id)
	if err != nil {
		return Winner{}, false, err
	}
	js, ok := attrs[storage.AttrWinner]
	if !ok {
		return Winner{}, false, nil
	}
	var w Winner
	if err := json.Unmarshal([]byte(js), &w); err != nil {
		return Winner{}, false, fmt.Errorf("study %q: stored winner: %w", study, err)
	}
	// Spreads stored before Pool left out the runs that missed counted
	// them as 0; each run carries whether it met, so read them as Pool
	// does now.
	if len(w.Runs) > 0 {
		_, w.Spread = Pool(w.Runs)
	}
	for i := range w.Candidates {
		if c := &w.Candidates[i]; len(c.Runs) > 0 {
			_, c.Spread = Pool(c.Runs)
		}
	}
	for _, c := range []*Candidate{w.Baseline, w.Searched} {
		if c != nil && len(c.Runs) > 0 {
			_, c.Spread = Pool(c.Runs)
		}
	}
	return w, true, nil
}

// Holds reports whether a declared winner still stands for recs: its trial
// is among them and no trial of the search came after the declaration (a
// study resumed with a larger budget searches on and declares again; until
// then the best trial stands, as before the first declaration).
func (w Winner) Holds(recs []Record) bool {
	last := max(w.Trial, w.Through)
	for _, c := range append([]Candidate{{Runs: w.Runs}}, w.Candidates...) {
		for _, m := range c.Runs {
			last = max(last, m.Trial)
		}
	}
	found := false
	for _, r := range recs {
		if r.ConfirmOf == nil && r.Number > last {
			return false
		}
		found = found || r.Number == w.Trial
	}
	return found
}

// Declared returns the trial a study declares best: the winner when the
// study declared one (w not nil) and it still holds, else the best complete
// trial of the search meeting the SLO and gates (a confirmation run is
// named by its config's first trial, through the pooled winner). ok is
// false when there is neither.
func Declared(w *Winner, recs []Record) (Record, bool) {
	if w != nil && w.Holds(recs) {
		for _, r := range recs {
			if r.Number == w.Trial {
				return r, true
			}
		}
	}
	return Best(searchTrials(recs))
}

// searchTrials returns the trials the search proposed: recs without the
// confirmation runs.
func searchTrials(recs []Record) []Record {
	return slices.DeleteFunc(slices.Clone(recs), func(r Record) bool { return r.ConfirmOf != nil })
}

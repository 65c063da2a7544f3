package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// rescored is one config ranked again: a trial, pooled with the
// confirmation runs that measured its config again.
type rescored struct {
	Trial  int                    `json:"trial"`
	Params map[string]interface{} `json:"params"`
	// Confirmed says the study measured the config again before declaring
	// its winner: the new winner is declared among the confirmed configs.
	Confirmed bool `json:"confirmed,omitempty"`
	// Runs are the trials pooled in the scores, the trial first, when the
	// config was confirmed.
	Runs     []int    `json:"runs,omitempty"`
	OldRank  int      `json:"old_rank,omitempty"` // 0: did not count
	OldScore *float64 `json:"old_score"`
	OldOK    bool     `json:"old_ok"`
	NewRank  int      `json:"new_rank,omitempty"`
	// NewScore is the config's new score: with runs, their mean, a run
	// that misses the new SLO or gates counting 0 (as a confirmation
	// pools them).
	NewScore float64 `json:"new_score"`
	// Spread is the range of the new scores of the runs that meet the new
	// SLO and gates (with runs; see search.Pool), and Met how many do.
	Spread   float64 `json:"spread,omitempty"`
	Met      int     `json:"met,omitempty"`
	NewOK    bool    `json:"new_ok"`
	Reason   string  `json:"reason"`
	Requests int     `json:"requests"` // stored request records read
}

func (a *app) rescoreCmd() *cobra.Command {
	var sf studyFlags
	var (
		slos        []string
		concurrency int
		metric      string
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "rescore --slo 'ttft p99 < 1s' [--slo ...] [--concurrency N]",
		Short: "Rank the stored trials again with other SLOs, without relaunching",
		Long: `Rescore ranks a study's complete trials again from what the storage holds:
their measured points and per-request records. It uses the same scoring as a
run (objective.Score): output_tok_s checks the SLO on each point's
percentiles (computed from that point's requests) at the scored concurrency;
goodput counts only the tokens of requests that met every bound themselves.

The new score starts from the study's stored score spec when the run stored
it (else output_tok_s at the highest measured level) and replaces what the
flags give: --slo (repeatable; 'none' drops every SLO), --concurrency and
--metric. It prints the new ranking beside the old one and changes nothing.

The new winner is declared as the study declared its own: among the configs
it confirmed (measured again before declaring), on the mean of each one's
runs, a run that misses the new SLO counting 0; configs within the measured
spread of the best are a tie, won by the config with fewer flags changed when
it is within 1% of the best. A
config measured once ranks by its one run but is not declared over a
confirmed one; only when no confirmed config meets the new score (or the
study confirmed none) does the best single run win. The old winner is the
one the study declared.`,
		Example: `  sgtune rescore --slo 'ttft p99 < 1s'
  sgtune rescore --slo 'ttft p99 < 500ms' --slo 'latency p99 < 20s' --concurrency 16
  sgtune rescore --metric goodput --slo 'ttft p90 < 0.8s' --json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("slo") && !cmd.Flags().Changed("concurrency") && !cmd.Flags().Changed("metric") {
				return badInput(fmt.Errorf("say what to change: --slo (%s), --concurrency N or --metric", sloSyntax))
			}
			parsed, err := parseSLOs(slos)
			if err != nil {
				return badInput(err)
			}
			d, err := sf.open()
			if err != nil {
				return err
			}
			defer d.store.Close()
			old, stored := d.scoreSpec()
			spec := old
			if !stored {
				// The level the run's score reasons name ("... at c=64").
				spec = objective.ScoreSpec{Metric: objective.MetricOutputTokS, Concurrency: d.scoredConcurrency()}
			}
			if cmd.Flags().Changed("slo") {
				spec.SLO = parsed
			}
			if cmd.Flags().Changed("concurrency") {
				if concurrency < 0 {
					return badInput(fmt.Errorf("--concurrency %d: want a measured level, or 0 for the highest", concurrency))
				}
				if levels := measuredLevels(d.recs); concurrency > 0 && !slices.Contains(levels, concurrency) {
					return badInput(fmt.Errorf("--concurrency %d: not a measured level; valid: one of %v, or 0 for the highest", concurrency, levels))
				}
				spec.Concurrency = concurrency
			}
			if cmd.Flags().Changed("metric") {
				spec.Metric = metric
			}
			if err := spec.Validate(); err != nil {
				return badInput(err)
			}
			if spec.Metric == objective.MetricGoodput {
				for _, o := range spec.SLO {
					if o.Metric == "itl" {
						// storage.RequestRecord holds no per-request ITL yet.
						return badInput(fmt.Errorf("--slo %s %s with --metric goodput needs each request's inter-token latency, which the storage does not record; use ttft or latency, or --metric output_tok_s", o.Metric, o.Percentile))
					}
				}
			}
			res, err := rescore(d, spec)
			if err != nil {
				return err
			}
			if asJSON {
				var winner *int
				if res.Winner >= 0 {
					winner = &res.Winner
				}
				return writeJSON(a.stdout, struct {
					Study        string              `json:"study"`
					Score        objective.ScoreSpec `json:"score"`
					Winner       *int                `json:"winner"`
					WinnerReason string              `json:"winner_reason,omitempty"`
					Trials       []rescored          `json:"trials"`
				}{d.name, spec, winner, res.Reason, res.Rows})
			}
			was := ""
			if stored {
				was = " (the run scored " + specText(old) + ")"
			}
			declared := -1
			if b, ok := d.best(); ok {
				declared = b.Number
			}
			printRescore(a.stdout, d.name, specText(spec)+was, res, len(d.recs), declared)
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&slos, "slo", nil, "SLO to hold, e.g. 'ttft p99 < 1s' (repeatable; replaces the study's SLOs; 'none' for none)")
	f.IntVar(&concurrency, "concurrency", 0, "concurrency level the score reads (0: the highest measured)")
	f.StringVar(&metric, "metric", "", "score metric: output_tok_s, goodput, capacity or max_rate (max_rate reads a study's stored rate probes) (default: the study's)")
	f.BoolVar(&asJSON, "json", false, "print the rankings as JSON")
	return cmd
}

// rescoring is a study ranked again under a new score.
type rescoring struct {
	Rows []rescored
	// Winner is the trial the new score declares (-1: none) and Reason
	// how it was chosen.
	Winner int
	Reason string
	// Above are the configs measured once (not confirmed) whose single
	// run scores above the winner's pooled score: a study does not
	// declare them without measuring them again.
	Above []rescored
}

// rescore scores every complete trial of d with spec and ranks old and
// new. The new winner is declared as the study declared its own
// (search.DeclareAgainst): among the configs it confirmed, on their runs
// pooled, a tie within the measured spread going to the config with fewer
// flags, and no winner declared over the engine default it confirmed
// without beating it by more than the spread. The old ranking starts with the trial the study declares (d.best).
func rescore(d *studyData, spec objective.ScoreSpec) (rescoring, error) {
	// The configs the study confirmed, with their flag counts: their runs
	// pool into one row. Without a declared winner that holds, the study
	// names its best single trial (search.Declared) and rescore does the
	// same: confirmation runs are left out.
	confirmed := map[int]int{}
	if d.winner != nil {
		for _, c := range d.winner.Candidates {
			confirmed[c.Trial] = c.Flags
		}
	}
	type run struct {
		rec      search.Record
		requests int
		new      float64
		newOK    bool
		why      string
	}
	var runs []run
	for _, r := range d.recs {
		if r.ConfirmOf != nil {
			if _, ok := confirmed[*r.ConfirmOf]; !ok {
				continue
			}
			if r.State == search.StateFailed || r.State == search.StatePruned {
				// A confirmation run that failed counts 0 in its config's
				// pool, as the study pooled it.
				why := "the run failed: " + r.FailureClass
				if r.State == search.StatePruned {
					why = "the run was pruned"
				}
				runs = append(runs, run{rec: r, why: why})
				continue
			}
		}
		if r.State != search.StateComplete {
			continue
		}
		res, n, err := storedResult(d.store, r)
		if err != nil {
			return rescoring{}, err
		}
		v, ok, why := objective.Score(spec, res)
		runs = append(runs, run{rec: r, requests: n, new: v, newOK: ok, why: why})
	}
	// A confirmation run joins the row of the trial whose config it
	// measured again.
	var rows []rescored
	pooled := map[int][]run{}
	for _, x := range runs {
		first := x.rec.Number
		if c := x.rec.ConfirmOf; c != nil {
			first = *c
		} else {
			_, conf := confirmed[first]
			rows = append(rows, rescored{Trial: first, Params: x.rec.ConfigParams(), Confirmed: conf})
		}
		pooled[first] = append(pooled[first], x)
	}
	var cands []search.Candidate
	// The engine default, when the study confirmed it, is the one every
	// winner is held against (search.DeclareAgainst), as the study held
	// its own.
	var base *search.Candidate
	baseTrial := -1
	if d.winner != nil && d.winner.Baseline != nil {
		baseTrial = d.winner.Baseline.Trial
	}
	for i := range rows {
		rs := pooled[rows[i].Trial]
		r := &rows[i]
		if !r.Confirmed {
			x := rs[0]
			r.OldScore, r.OldOK = x.rec.Score, x.rec.ScoreOK && x.rec.Score != nil
			r.NewScore, r.NewOK, r.Reason, r.Requests = x.new, x.newOK, x.why, x.requests
			continue
		}
		// Pooled as the study pooled them (search.Pool): a run that
		// missed counts 0.
		var olds, news []search.Measurement
		missed := 0
		for _, x := range rs {
			r.Runs = append(r.Runs, x.rec.Number)
			r.Requests += x.requests
			old, nw := search.Measurement{Trial: x.rec.Number}, search.Measurement{Trial: x.rec.Number}
			if x.rec.State == search.StateComplete && x.rec.ScoreOK && x.rec.Score != nil {
				old.Score, old.OK = *x.rec.Score, true
			}
			if x.newOK {
				nw.Score, nw.OK = x.new, true
				r.Met++
			} else {
				missed++
				if r.Reason == "" {
					r.Reason = x.why
				}
			}
			olds, news = append(olds, old), append(news, nw)
			r.OldOK, r.NewOK = r.OldOK || old.OK, r.NewOK || nw.OK
		}
		oldPooled, _ := search.Pool(olds)
		r.OldScore = &oldPooled
		r.NewScore, r.Spread = search.Pool(news)
		if missed > 0 && r.NewOK {
			r.Reason = fmt.Sprintf("%d of %d runs miss, counted as 0: %s", missed, len(rs), r.Reason)
		}
		if r.NewOK {
			c := search.Candidate{Trial: r.Trial, Pooled: r.NewScore, Spread: r.Spread,
				Flags: confirmed[r.Trial], Runs: news}
			if r.Trial == baseTrial {
				base = &c
				continue
			}
			cands = append(cands, c)
		}
	}
	out := rescoring{Rows: rows, Winner: -1}
	if w, ok := search.DeclareAgainst(cands, base); ok {
		out.Winner, out.Reason = w.Trial, w.Reason
	} else {
		// No confirmed config counts: the best single run, as the study
		// names its best trial without a winner.
		best := -1
		for i, r := range rows {
			if r.NewOK && (best < 0 || r.NewScore > rows[best].NewScore) {
				best = i
			}
		}
		if best >= 0 {
			out.Winner = rows[best].Trial
			if len(confirmed) > 0 {
				out.Reason = "no config the study confirmed meets the new score: the best single run"
			}
		}
	}
	declared := -1
	if b, ok := d.best(); ok {
		declared = b.Number
	}
	rank(out.Rows, declared, func(x rescored) (float64, bool) {
		if x.OldScore == nil {
			return 0, false
		}
		return *x.OldScore, x.OldOK
	}, func(x *rescored, k int) { x.OldRank = k })
	rank(out.Rows, out.Winner, func(x rescored) (float64, bool) { return x.NewScore, x.NewOK },
		func(x *rescored, k int) { x.NewRank = k })
	sort.SliceStable(out.Rows, func(i, j int) bool {
		a, b := out.Rows[i], out.Rows[j]
		switch {
		case a.NewRank > 0 && b.NewRank > 0:
			return a.NewRank < b.NewRank
		case (a.NewRank > 0) != (b.NewRank > 0):
			return a.NewRank > 0
		}
		return a.NewScore > b.NewScore
	})
	if i := slices.IndexFunc(out.Rows, func(x rescored) bool { return x.Trial == out.Winner }); i >= 0 && out.Rows[i].Confirmed {
		for _, r := range out.Rows {
			if r.NewOK && !r.Confirmed && r.NewScore > out.Rows[i].NewScore {
				out.Above = append(out.Above, r)
			}
		}
	}
	return out, nil
}

// rank numbers the rows that count, best first: the winner (a trial
// number; -1 for none) first, as the study declares it, then the others
// by score (ties keep trial order).
func rank(rows []rescored, winner int, key func(rescored) (float64, bool), set func(*rescored, int)) {
	idx := make([]int, 0, len(rows))
	for i, r := range rows {
		if _, ok := key(r); ok {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		if wa, wb := rows[idx[a]].Trial == winner, rows[idx[b]].Trial == winner; wa != wb {
			return wa
		}
		x, _ := key(rows[idx[a]])
		y, _ := key(rows[idx[b]])
		return x > y
	})
	for k, i := range idx {
		set(&rows[i], k+1)
	}
}

// storedResult rebuilds what objective.Score reads from the storage: the
// trial's points, its per-request records and its quality gates.
func storedResult(st *storage.Store, r search.Record) (*objective.Result, int, error) {
	pts, err := st.Points(r.ID)
	if err != nil {
		return nil, 0, fmt.Errorf("read points of trial %d: %w", r.Number, err)
	}
	reqs, err := st.Requests(r.ID)
	if err != nil {
		return nil, 0, fmt.Errorf("read requests of trial %d: %w", r.Number, err)
	}
	res := &objective.Result{Points: pts}
	for _, q := range reqs {
		res.Requests = append(res.Requests, objective.RequestRecord{
			Phase: q.Phase, Concurrency: q.Concurrency, Repeat: q.Repeat, Context: q.Context,
			OK: q.OK, Error: q.Error, TTFT: q.TTFT, Latency: q.Latency, OutputTokens: q.OutputTokens,
		})
	}
	if len(r.Result) > 0 {
		var stored struct {
			Quality *objective.Quality `json:"quality"`
		}
		if err := json.Unmarshal(r.Result, &stored); err != nil {
			return nil, 0, fmt.Errorf("trial %d: stored result: %w", r.Number, err)
		}
		res.Quality = stored.Quality
	}
	return res, len(reqs), nil
}

// printRescore prints the new ranking beside the old one; declared is the
// trial the study declared best (-1: none).
func printRescore(w io.Writer, study, spec string, res rescoring, total, declared int) {
	rows := res.Rows
	reqs := 0
	for _, r := range rows {
		reqs += r.Requests
	}
	n := 0
	for _, r := range rows {
		n += max(1, len(r.Runs))
	}
	fmt.Fprintf(w, "study %s: %d configs (%d trials) rescored from stored points and %d request records (%d other trials left out)\n",
		study, len(rows), n, reqs, total-n)
	fmt.Fprintf(w, "new score: %s\n", spec)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NEW\tOLD\tTRIAL\tRUNS\tNEW SCORE\tVERDICT\tOLD SCORE\tPARAMS")
	for _, r := range rows {
		verdict := "meets"
		if r.NewOK && r.Met < len(r.Runs) {
			verdict = fmt.Sprintf("%d of %d runs meet", r.Met, len(r.Runs))
		}
		if !r.NewOK {
			verdict = "misses: " + r.Reason
			if len(verdict) > 70 {
				verdict = verdict[:67] + "..."
			}
		}
		old := "-"
		if r.OldScore != nil {
			old = fmt.Sprintf("%.1f", *r.OldScore)
			if !r.OldOK {
				old += " (missed)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f\t%s\t%s\t%s\n", rankText(r.NewRank), rankText(r.OldRank), r.Trial, max(1, len(r.Runs)), r.NewScore, verdict, old,
			space.Params(r.Params).String())
	}
	tw.Flush()
	how := ""
	if res.Reason != "" {
		how = ": " + res.Reason
	}
	switch {
	case res.Winner < 0:
		fmt.Fprintln(w, "winner: none; no trial meets the new score's SLOs and gates")
	case res.Winner == declared:
		fmt.Fprintf(w, "winner unchanged: trial %d%s\n", res.Winner, how)
	case declared >= 0:
		fmt.Fprintf(w, "winner: trial %d (the study declared trial %d)%s\n", res.Winner, declared, how)
	default:
		fmt.Fprintf(w, "winner: trial %d (no trial counted before)%s\n", res.Winner, how)
	}
	if len(res.Above) > 0 {
		above := make([]string, len(res.Above))
		for i, r := range res.Above {
			above[i] = fmt.Sprintf("trial %d (%.1f)", r.Trial, r.NewScore)
		}
		fmt.Fprintf(w, "not declared: %s, above the winner in one run, measured once: the study declares among the configs it measured again\n",
			strings.Join(above, ", "))
	}
	if n > len(rows) {
		fmt.Fprintln(w, "a confirmed config (RUNS > 1) ranks on the mean of its runs, a run that misses counting 0 (and measuring no spread); the winner is declared among them as the study declares: within the measured spread and 1% of the best, the config with fewer flags changed")
	}
}

func rankText(k int) string {
	if k == 0 {
		return "-"
	}
	return fmt.Sprint(k)
}

// measuredLevels lists the concurrency levels the study's trials measured,
// ascending.
func measuredLevels(recs []search.Record) []int {
	var out []int
	for _, r := range recs {
		for c := range r.Medians() {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
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
	// Runs are the trials pooled in the scores, the trial first, when the
	// config was measured more than once (confirmation runs).
	Runs     []int    `json:"runs,omitempty"`
	OldRank  int      `json:"old_rank,omitempty"` // 0: did not count
	OldScore *float64 `json:"old_score"`
	OldOK    bool     `json:"old_ok"`
	NewRank  int      `json:"new_rank,omitempty"`
	// NewScore is the config's new score: with runs, their mean, a run
	// that misses the new SLO or gates counting 0 (as a confirmation
	// pools them).
	NewScore float64 `json:"new_score"`
	// Spread is the range of the runs' new scores (with runs).
	Spread   float64 `json:"spread,omitempty"`
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
--metric. It prints the new ranking beside the old one and changes nothing. A config the
study confirmed (measured again before declaring its winner) ranks on the mean
of its runs, a run that misses the new SLO counting 0, as the winner was
declared; the old winner is the one the study declared.`,
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
			rows, err := rescore(d, spec)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, struct {
					Study  string              `json:"study"`
					Score  objective.ScoreSpec `json:"score"`
					Trials []rescored          `json:"trials"`
				}{d.name, spec, rows})
			}
			was := ""
			if stored {
				was = " (the run scored " + specText(old) + ")"
			}
			declared := -1
			if b, ok := d.best(); ok {
				declared = b.Number
			}
			printRescore(a.stdout, d.name, specText(spec)+was, rows, len(d.recs), declared)
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&slos, "slo", nil, "SLO to hold, e.g. 'ttft p99 < 1s' (repeatable; replaces the study's SLOs; 'none' for none)")
	f.IntVar(&concurrency, "concurrency", 0, "concurrency level the score reads (0: the highest measured)")
	f.StringVar(&metric, "metric", "", "score metric: output_tok_s, goodput or capacity (default: the study's)")
	f.BoolVar(&asJSON, "json", false, "print the rankings as JSON")
	return cmd
}

// rescore scores every complete trial of d with spec and ranks old and new.
func rescore(d *studyData, spec objective.ScoreSpec) ([]rescored, error) {
	type run struct {
		rec      search.Record
		requests int
		new      float64
		newOK    bool
		why      string
	}
	var runs []run
	complete := map[int]bool{}
	for _, r := range d.recs {
		if r.State == search.StateFailed && r.ConfirmOf != nil {
			// A confirmation run that failed counts 0 in its config's pool.
			runs = append(runs, run{rec: r, why: "the run failed: " + r.FailureClass})
			continue
		}
		if r.State != search.StateComplete {
			continue
		}
		res, n, err := storedResult(d.store, r)
		if err != nil {
			return nil, err
		}
		v, ok, why := objective.Score(spec, res)
		runs = append(runs, run{rec: r, requests: n, new: v, newOK: ok, why: why})
		complete[r.Number] = true
	}
	// A confirmation run joins the row of the trial whose config it
	// measured again.
	var rows []rescored
	pooled := map[int][]run{}
	for _, x := range runs {
		first := x.rec.Number
		switch c := x.rec.ConfirmOf; {
		case c != nil && complete[*c]:
			first = *c
		case x.rec.State != search.StateComplete:
			continue // a failed run of a config that has no row
		default:
			rows = append(rows, rescored{Trial: first, Params: x.rec.Params})
		}
		pooled[first] = append(pooled[first], x)
	}
	for i := range rows {
		rs := pooled[rows[i].Trial]
		r := &rows[i]
		if len(rs) == 1 {
			x := rs[0]
			r.OldScore, r.OldOK = x.rec.Score, x.rec.ScoreOK && x.rec.Score != nil
			r.NewScore, r.NewOK, r.Reason, r.Requests = x.new, x.newOK, x.why, x.requests
			continue
		}
		// Pooled as a confirmation pools (search.Pool): a run that missed
		// counts 0.
		var olds, news []search.Measurement
		missed := 0
		for _, x := range rs {
			r.Runs = append(r.Runs, x.rec.Number)
			r.Requests += x.requests
			old, nw := search.Measurement{Trial: x.rec.Number}, search.Measurement{Trial: x.rec.Number}
			if x.rec.ScoreOK && x.rec.Score != nil {
				old.Score, old.OK = *x.rec.Score, true
			}
			if x.newOK {
				nw.Score, nw.OK = x.new, true
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
	}
	rank(rows, func(x rescored) (float64, bool) {
		if x.OldScore == nil {
			return 0, false
		}
		return *x.OldScore, x.OldOK
	}, func(x *rescored, k int) { x.OldRank = k })
	rank(rows, func(x rescored) (float64, bool) { return x.NewScore, x.NewOK },
		func(x *rescored, k int) { x.NewRank = k })
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		switch {
		case a.NewRank > 0 && b.NewRank > 0:
			return a.NewRank < b.NewRank
		case (a.NewRank > 0) != (b.NewRank > 0):
			return a.NewRank > 0
		}
		return a.NewScore > b.NewScore
	})
	return rows, nil
}

// rank numbers the rows that count by score, best first (ties keep trial order).
func rank(rows []rescored, key func(rescored) (float64, bool), set func(*rescored, int)) {
	idx := make([]int, 0, len(rows))
	for i, r := range rows {
		if _, ok := key(r); ok {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
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
func printRescore(w io.Writer, study, spec string, rows []rescored, total, declared int) {
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
	var newBest, was *rescored
	for i := range rows {
		if rows[i].NewRank == 1 {
			newBest = &rows[i]
		}
		if rows[i].Trial == declared {
			was = &rows[i]
		}
	}
	switch {
	case newBest == nil:
		fmt.Fprintln(w, "winner: none; no trial meets the new score's SLOs and gates")
	case newBest.Trial == declared:
		fmt.Fprintf(w, "winner unchanged: trial %d\n", newBest.Trial)
	case was != nil && was.NewOK && newBest.NewScore-was.NewScore < math.Max(newBest.Spread, was.Spread):
		fmt.Fprintf(w, "winner: trial %d, %.1f above the study's declared trial %d: within the measured spread %.1f, no measured difference\n",
			newBest.Trial, newBest.NewScore-was.NewScore, declared, math.Max(newBest.Spread, was.Spread))
	case declared >= 0:
		fmt.Fprintf(w, "winner: trial %d (the study declared trial %d)\n", newBest.Trial, declared)
	default:
		fmt.Fprintf(w, "winner: trial %d (no trial counted before)\n", newBest.Trial)
	}
	if n > len(rows) {
		fmt.Fprintln(w, "a config measured more than once (RUNS > 1: confirmation runs) ranks on the mean of its runs, a run that misses counting 0")
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

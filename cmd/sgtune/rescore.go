package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// rescored is one trial ranked again.
type rescored struct {
	Trial    int                    `json:"trial"`
	Params   map[string]interface{} `json:"params"`
	OldRank  int                    `json:"old_rank,omitempty"` // 0: did not count
	OldScore *float64               `json:"old_score"`
	OldOK    bool                   `json:"old_ok"`
	NewRank  int                    `json:"new_rank,omitempty"`
	NewScore float64                `json:"new_score"`
	NewOK    bool                   `json:"new_ok"`
	Reason   string                 `json:"reason"`
	Requests int                    `json:"requests"` // stored request records read
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
--metric. It prints the new ranking beside the old one and changes nothing.`,
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
			printRescore(a.stdout, d.name, specText(spec)+was, rows, len(d.recs))
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
	var rows []rescored
	for _, r := range d.recs {
		if r.State != search.StateComplete {
			continue
		}
		res, n, err := storedResult(d.store, r)
		if err != nil {
			return nil, err
		}
		v, ok, why := objective.Score(spec, res)
		rows = append(rows, rescored{Trial: r.Number, Params: r.Params, OldScore: r.Score, OldOK: r.ScoreOK && r.Score != nil,
			NewScore: v, NewOK: ok, Reason: why, Requests: n})
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

func printRescore(w io.Writer, study, spec string, rows []rescored, total int) {
	reqs := 0
	for _, r := range rows {
		reqs += r.Requests
	}
	fmt.Fprintf(w, "study %s: %d complete trials rescored from stored points and %d request records (%d other trials left out)\n",
		study, len(rows), reqs, total-len(rows))
	fmt.Fprintf(w, "new score: %s\n", spec)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NEW\tOLD\tTRIAL\tNEW SCORE\tVERDICT\tOLD SCORE\tPARAMS")
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%s\t%s\t%s\n", rankText(r.NewRank), rankText(r.OldRank), r.Trial, r.NewScore, verdict, old,
			space.Params(r.Params).String())
	}
	tw.Flush()
	var oldBest, newBest *rescored
	for i := range rows {
		if rows[i].OldRank == 1 {
			oldBest = &rows[i]
		}
		if rows[i].NewRank == 1 {
			newBest = &rows[i]
		}
	}
	switch {
	case newBest == nil:
		fmt.Fprintln(w, "winner: none; no trial meets the new score's SLOs and gates")
	case oldBest != nil && oldBest.Trial == newBest.Trial:
		fmt.Fprintf(w, "winner unchanged: trial %d\n", newBest.Trial)
	case oldBest != nil:
		fmt.Fprintf(w, "winner: trial %d (was trial %d)\n", newBest.Trial, oldBest.Trial)
	default:
		fmt.Fprintf(w, "winner: trial %d (no trial counted before)\n", newBest.Trial)
	}
}

func rankText(k int) string {
	if k == 0 {
		return "-"
	}
	return fmt.Sprint(k)
}

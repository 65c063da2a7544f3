package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
)

func (a *app) reportCmd() *cobra.Command {
	var sf studyFlags
	var out string
	cmd := &cobra.Command{
		Use:   "report -o DIR",
		Short: "Write a study report (markdown and SVG plots) into DIR",
		Long: `Report writes DIR/report.md with the best trial, its measurements per
concurrency, a ranking, every failure and rejection with its reason, and every
trial; and SVG plots of the score by trial and of throughput and TTFT p99 by
concurrency for the top trials. It reads the storage only.`,
		Example: `  sgtune report -o report/
  sgtune report --storage glm.db --study glm-5.3-flash-h200x4 -o glm-report`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return badInput(errors.New("-o DIR is required"))
			}
			name, recs, err := sf.records()
			if err != nil {
				return err
			}
			st := report.Study{Name: name, Storage: sf.storage}
			for _, r := range recs {
				st.Trials = append(st.Trials, reportTrial(r))
			}
			if b, ok := search.Best(recs); ok {
				bt := reportTrial(b)
				st.Best = &bt
			}
			if err := report.WriteReport(out, st); err != nil {
				return fmt.Errorf("report: %w", err)
			}
			fmt.Fprintf(a.stdout, "wrote %s\n", filepath.Join(out, "report.md"))
			return nil
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "directory to write the report into (created if missing)")
	return cmd
}

func reportTrial(r search.Record) report.Trial {
	t := report.Trial{
		Number: r.Number, State: r.State, Score: r.Score, ScoreOK: r.ScoreOK,
		Class: r.FailureClass, Reason: r.Reason, Params: r.Params, Flags: r.Flags(), Seconds: r.DurationS,
	}
	if r.State == search.StateComplete && !r.ScoreOK {
		t.Reason = r.ScoreReason
	}
	for c, m := range r.Medians() {
		t.Levels = append(t.Levels, report.Level{
			Concurrency: c, Repeats: m.Repeats, OutputTokS: m.OutputTokS,
			TTFTP50: m.TTFTP50, TTFTP99: m.TTFTP99, LatencyP99: m.LatencyP99,
		})
	}
	sort.Slice(t.Levels, func(i, j int) bool { return t.Levels[i].Concurrency < t.Levels[j].Concurrency })
	return t
}

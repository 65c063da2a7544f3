package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
)

func (a *app) reportCmd() *cobra.Command {
	var sf studyFlags
	var out string
	cmd := &cobra.Command{
		Use:   "report -o DIR",
		Short: "Write a study report (index.html, report.md and SVG plots) into DIR",
		Long: `Report writes DIR/index.html and DIR/report.md: the study's summary (trials,
launches used, wall time, the winner with its flags, confirmation reruns and
their spread when the run made them), a sortable table of every trial (state,
failure class, params, score, SLO verdict), plots as SVG files beside the page
(throughput by concurrency for the top trials, TTFT p99 against throughput with
the Pareto front, the score by trial, one effect plot per parameter), every
failure with its decisive log lines, and for matrix workloads the context x
concurrency table. The page works offline: no network, no remote fonts or
scripts. Report reads the storage only. An index.html, report.md or plot in DIR
is replaced only when an earlier report wrote it: otherwise report exits 2 and
writes nothing.`,
		Example: `  sgtune report -o report/
  sgtune report --storage glm.db --study glm-5.3-flash-h200x4 -o glm-report`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return badInput(errors.New("-o DIR is required"))
			}
			if fi, err := os.Stat(out); err == nil && !fi.IsDir() {
				return badInput(fmt.Errorf("-o %s is a file: give a directory for index.html, report.md and the plots", out))
			}
			// Like export -o: only what an earlier report wrote is replaced.
			foreign, err := report.Foreign(out)
			if err != nil {
				return badInput(fmt.Errorf("-o %s: %w; valid: a directory sgtune can read and write; nothing written", out, err))
			}
			if len(foreign) > 0 {
				return badInput(fmt.Errorf("-o %s: %s not written by sgtune report and would be replaced; nothing written: give a new or empty directory, or remove them first",
					out, strings.Join(foreign, ", ")))
			}
			d, err := sf.open()
			if err != nil {
				return err
			}
			defer d.store.Close()
			st, err := d.reportStudy(sf.storage)
			if err != nil {
				return err
			}
			st.Generated = now(a.getenv)
			if err := writableDir(out); err != nil {
				return badInput(fmt.Errorf("-o %s: the report cannot be written there: %w; valid: a directory sgtune can create and write; nothing written", out, err))
			}
			if err := report.WriteReport(out, st); err != nil {
				return fmt.Errorf("report -o %s: %w", out, err)
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s\n", filepath.Join(out, "index.html"), filepath.Join(out, "report.md"))
			return nil
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "directory to write the report into (created if missing; its index.html, report.md and plots are replaced only when an earlier report wrote them)")
	return cmd
}

// reportStudy gathers what the report shows from the storage.
func (d *studyData) reportStudy(storagePath string) (report.Study, error) {
	st := report.Study{Name: d.name, Storage: storagePath, Budget: d.budget(),
		ScoreConcurrency: d.scoredConcurrency()}
	if d.winnerErr != nil {
		return st, d.winnerErr
	}
	st.Confirmations, st.Verdict = d.confirmations()
	st.VersusDefault = d.versusDefault()
	if d.winner != nil {
		st.DefaultGain = d.winner.Gain
	}
	if s, ok := d.scoreSpec(); ok {
		st.Score, st.ScoreUnit = specText(s), scoreUnit(s)
		st.ScoreContext = s.Context
		st.SLO = s.SLO
	}
	points, err := d.store.StudyPoints(d.id)
	if err != nil {
		return st, fmt.Errorf("read points of study %q: %w", d.name, err)
	}
	for _, r := range d.recs {
		t := reportTrial(r)
		t.Points = points[r.ID]
		st.Trials = append(st.Trials, t)
	}
	if b, ok := d.best(); ok {
		for i := range st.Trials {
			if st.Trials[i].Number == b.Number {
				bt := st.Trials[i]
				st.Best = &bt
			}
		}
	}
	return st, nil
}

func reportTrial(r search.Record) report.Trial {
	var score *float64
	if s, ok := r.Scored(); ok {
		score = &s
	}
	t := report.Trial{
		Number: r.Number, State: r.State, Score: score, ScoreOK: r.ScoreOK,
		Class: r.FailureClass, Reason: r.Reason, Params: r.ConfigParams(), Flags: r.Flags(), Seconds: r.DurationS,
		Start: r.Start, ExitCode: r.ExitCode, LogExcerpt: r.LogExcerpt, LogPath: r.LogPath, LogError: r.LogError,
		Levels: levels(r), ConfirmOf: r.ConfirmOf, RetryOf: r.RetryOf, Baseline: r.Baseline,
		// A trial that has a log or startup facts started a server.
		Launched: r.State != search.StateInterrupted && r.ConfirmOf == nil &&
			(r.LogPath != "" || len(r.Facts) > 0 || r.State == search.StateComplete),
	}
	if r.End != nil {
		t.End = *r.End
	}
	if r.State == search.StateComplete && !r.ScoreOK {
		t.Reason = r.ScoreReason
	}
	if t.LogExcerpt == "" && r.State == search.StateFailed {
		t.LogExcerpt = r.LogTail
	}
	return t
}

// now is the time written into outputs: SOURCE_DATE_EPOCH when set (for
// reproducible builds of reports and scripts), else the clock.
func now(getenv func(string) string) time.Time {
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscanf(s, "%d", &sec); err == nil {
			return time.Unix(sec, 0).UTC()
		}
	}
	return time.Now().UTC()
}

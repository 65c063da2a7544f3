package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// studyFlags are the flags every reading command shares.
type studyFlags struct {
	storage string
	study   string
}

func (sf *studyFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&sf.storage, "storage", "sgtune.db", storageHelp)
	cmd.Flags().StringVar(&sf.study, "study", "", "study name (default: the only study in the storage)")
}

// records opens the storage and reads the chosen study's trials.
func (sf *studyFlags) records() (string, []search.Record, error) {
	store, err := openExisting(sf.storage)
	if err != nil {
		return "", nil, err
	}
	defer store.Close()
	name, err := pickStudy(store, sf.study)
	if err != nil {
		return "", nil, err
	}
	recs, err := search.Records(store, name)
	if errors.Is(err, search.ErrNoStudy) {
		return "", nil, badInput(err)
	}
	return name, recs, err
}

func pickStudy(store *storage.Store, want string) (string, error) {
	sums, err := store.GetAllStudySummaries()
	if err != nil {
		return "", fmt.Errorf("list studies: %w", err)
	}
	names := make([]string, len(sums))
	for i, s := range sums {
		names[i] = s.Name
	}
	sort.Strings(names)
	if want != "" {
		for _, n := range names {
			if n == want {
				return n, nil
			}
		}
		return "", badInput(fmt.Errorf("no study %q in the storage (it holds: %s)", want, strings.Join(names, ", ")))
	}
	switch len(names) {
	case 0:
		return "", badInput(errors.New("the storage holds no study yet"))
	case 1:
		return names[0], nil
	}
	return "", badInput(fmt.Errorf("the storage holds several studies; pick one with --study (%s)", strings.Join(names, ", ")))
}

func (a *app) statusCmd() *cobra.Command {
	var sf studyFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List every trial of a study: state, score, failure reason and params",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, recs, err := sf.records()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.stdout, struct {
					Study  string          `json:"study"`
					Trials []search.Record `json:"trials"`
				}{name, recs})
			}
			fmt.Fprintf(a.stdout, "study %s: %d trials\n", name, len(recs))
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "#\tSTATE\tSCORE\tHOST\tJOB\tDETAIL\tPARAMS")
			for _, r := range recs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Number, r.State, scoreText(r), orDash(r.Host), orDash(r.SlurmJob),
					detail(r), space.Params(r.Params).String())
			}
			tw.Flush()
			if b, ok := search.Best(recs); ok {
				fmt.Fprintf(a.stdout, "best: trial %d (score %.2f)\n", b.Number, *b.Score)
			}
			return nil
		},
	}
	sf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the trials as JSON")
	return cmd
}

func (a *app) bestCmd() *cobra.Command {
	var sf studyFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "best",
		Short: "Show the best trial of a study: score, params and launch flags",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, recs, err := sf.records()
			if err != nil {
				return err
			}
			b, ok := search.Best(recs)
			if !ok {
				return fmt.Errorf("study %s has no complete trial that meets its SLO and gates yet (%d trials; see `sgtune status`)", name, len(recs))
			}
			if asJSON {
				return writeJSON(a.stdout, b)
			}
			fmt.Fprintf(a.stdout, "study %s: best trial %d, score %.2f\n", name, b.Number, *b.Score)
			fmt.Fprintf(a.stdout, "params: %s\n", space.Params(b.Params).String())
			fmt.Fprintf(a.stdout, "command: %s %s\n", strings.Join(b.Engine, " "), strings.Join(b.Flags(), " "))
			med := b.Medians()
			levels := make([]int, 0, len(med))
			for c := range med {
				levels = append(levels, c)
			}
			sort.Ints(levels)
			if len(levels) > 0 {
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "CONCURRENCY\tREPEATS\tOUTPUT TOK/S\tTTFT P50 S\tTTFT P99 S\tLATENCY P99 S")
				for _, c := range levels {
					m := med[c]
					fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.3f\t%.3f\t%.2f\n", c, m.Repeats, m.OutputTokS, m.TTFTP50, m.TTFTP99, m.LatencyP99)
				}
				tw.Flush()
			}
			return nil
		},
	}
	sf.register(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the best trial as JSON")
	return cmd
}

func (a *app) exportCmd() *cobra.Command {
	var sf studyFlags
	var (
		trial   int
		format  string
		out     string
		command string
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write a trial (default: the best) as a launch script or JSON",
		Long: `Export writes the winning configuration as a bash launch script, a docker run
script, or JSON. The script starts the engine with the study's engine command
(engine.launch_command when set, or --command) and the trial's flags; extra arguments given to the script, such
as --host, --port or --api-key, are passed through to the engine.`,
		Example: `  sgtune export --format bash -o best-launch.sh
  sgtune export --trial 7 --format json
  sgtune export --command "sglang serve" -o launch.sh`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !contains(report.Formats, format) {
				return badInput(fmt.Errorf("--format %q: valid formats are %s", format, strings.Join(report.Formats, ", ")))
			}
			name, recs, err := sf.records()
			if err != nil {
				return err
			}
			var rec search.Record
			if cmd.Flags().Changed("trial") {
				found := false
				for _, r := range recs {
					if r.Number == trial {
						rec, found = r, true
					}
				}
				if !found {
					return badInput(fmt.Errorf("--trial %d: study %s has no such trial (0..%d)", trial, name, len(recs)-1))
				}
				if len(rec.Flags()) == 0 {
					return badInput(fmt.Errorf("--trial %d was %s before it had a config; nothing to export", trial, rec.State))
				}
			} else {
				b, ok := search.Best(recs)
				if !ok {
					return fmt.Errorf("study %s has no complete trial that meets its SLO and gates; pick one with --trial", name)
				}
				rec = b
			}
			l := report.Launch{
				Study: name, Trial: rec.Number, Command: rec.Engine, Flags: rec.Flags(),
				Env: rec.Env(), GPUs: rec.GPUs, Params: rec.Params, Version: rec.Version,
			}
			if rec.Score != nil {
				l.Score = *rec.Score
			}
			switch {
			case command != "":
				l.Command = strings.Fields(command)
			case len(rec.LaunchCmd) > 0:
				l.Command = rec.LaunchCmd
			}
			w := a.stdout
			if out != "" && out != "-" {
				f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
				if err != nil {
					return fmt.Errorf("export: %w", err)
				}
				defer f.Close()
				w = f
			}
			if err := report.Write(w, format, l); err != nil {
				return err
			}
			if f, ok := w.(*os.File); ok && f != os.Stdout {
				if err := f.Close(); err != nil {
					return fmt.Errorf("export: %w", err)
				}
			}
			if out != "" && out != "-" {
				fmt.Fprintf(a.stderr, "wrote %s (study %s, trial %d)\n", out, name, rec.Number)
			}
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&trial, "trial", 0, "trial number to export (default: the best)")
	f.StringVar(&format, "format", "bash", "bash | docker | json")
	f.StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")
	f.StringVar(&command, "command", "", "engine command for the script (default: the study's engine.launch_command, else engine.command)")
	return cmd
}

func scoreText(r search.Record) string {
	if r.Score == nil {
		return "-"
	}
	s := fmt.Sprintf("%.1f", *r.Score)
	if !r.ScoreOK {
		s += " (SLO miss)"
	}
	return s
}

func detail(r search.Record) string {
	d := r.FailureClass
	if r.Reason != "" {
		if d != "" {
			d += ": "
		}
		d += r.Reason
	}
	if r.State == search.StateComplete && !r.ScoreOK {
		d = r.ScoreReason
	}
	if r.RetryOf != nil {
		d = strings.TrimSpace(fmt.Sprintf("retry of #%d %s", *r.RetryOf, d))
	}
	if len(d) > 90 {
		d = d[:87] + "..."
	}
	return d
}

func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/report"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/shell"
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

func (a *app) bestCmd() *cobra.Command {
	var sf studyFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "best",
		Short: "Show the study's declared winner (before confirmation, its best trial): score, params and launch flags",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := sf.open()
			if err != nil {
				return err
			}
			defer d.store.Close()
			b, ok := d.best()
			if !ok {
				read, _ := a.readCommand(d.store, sf.storage, d.name)
				return fmt.Errorf("study %s has no complete trial that meets its SLO and gates yet (%d trials; see `sgtune status%s`)", d.name, len(d.recs), read)
			}
			if asJSON {
				doc := struct {
					search.Record
					// Confirmed is the declared winner's confirmation: its
					// pooled score, spread and runs (absent before one).
					Confirmed *search.Winner `json:"confirmed,omitempty"`
					// VersusDefault states it against the engine
					// default (budget.baseline), as the text does.
					VersusDefault string `json:"versus_default,omitempty"`
				}{Record: b, Confirmed: d.confirmation(b), VersusDefault: d.versusDefault()}
				return writeJSON(a.stdout, doc)
			}
			// A confirmed winner heads with its pooled score, as the study
			// declared it and as the report heads.
			w := d.confirmation(b)
			if w != nil {
				fmt.Fprintf(a.stdout, "study %s: best trial %d, score %.2f pooled over %d runs (first run %.2f)\n", d.name, b.Number, w.Pooled, len(w.Runs), *b.Score)
			} else {
				fmt.Fprintf(a.stdout, "study %s: best trial %d, score %.2f\n", d.name, b.Number, *b.Score)
			}
			if d.winnerErr != nil {
				fmt.Fprintf(a.stderr, "warning: %v\n", d.winnerErr)
			}
			if w != nil {
				fmt.Fprintf(a.stdout, "%s: %s\n", w.Confirmed(), w.Reason)
			}
			if v := d.versusDefault(); v != "" {
				fmt.Fprintln(a.stdout, v)
			}
			fmt.Fprintf(a.stdout, "params: %s\n", paramsText(b))
			fmt.Fprintf(a.stdout, "command: %s\n", commandLine(b))
			med := b.Medians()
			levels := slices.Sorted(maps.Keys(med))
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
		trial      int
		format     string
		out        string
		command    string
		schemaFile string
		apiKeyEnv  string
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write a trial (default: the best) as a launch script or JSON",
		Long: `Export writes the winning configuration as a bash launch script, a docker run
script, or JSON. The script starts the engine with the study's engine command
(engine.launch_command when set, or --command) and the trial's flags; extra
arguments given to the script, such as --host or --port, are passed through to
the engine. The server's API key is read when the script runs, from the
variable --api-key-env names (default SGTUNE_API_KEY); no key is ever written
into the file.

Every flag is checked against the engine's flag schema first (the bundled
schema of the study's engine version, or --flags-schema FILE); an unknown flag
or a bad value exits 2 naming the flag and the closest valid one, and nothing
is written. The header records the study, trial, score (for the declared
winner also its pooled confirmation runs), throughput and TTFT p99 at the
scored level, engine version, model revision (when stored) and date.

A trial that failed, was stopped before the end or missed its SLO or gates
still exports (to reproduce it), with a warning on stderr and a WARNING line
in the header.`,
		Example: `  sgtune export --format bash -o best-launch.sh
  sgtune export --trial 7 --format json
  sgtune export --command "sglang serve" -o launch.sh
  SGTUNE_API_KEY=secret ./best-launch.sh --port 30000`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(report.Formats, format) {
				return badInput(fmt.Errorf("--format %q: valid formats are %s", format, strings.Join(report.Formats, ", ")))
			}
			d, err := sf.open()
			if err != nil {
				return err
			}
			defer d.store.Close()
			var rec search.Record
			if cmd.Flags().Changed("trial") {
				found := false
				for _, r := range d.recs {
					if r.Number == trial {
						rec, found = r, true
					}
				}
				if !found {
					return badInput(fmt.Errorf("--trial %d: study %s has no such trial (0..%d)", trial, d.name, len(d.recs)-1))
				}
				if len(rec.Flags()) == 0 {
					return badInput(fmt.Errorf("--trial %d was %s before it had a config; nothing to export", trial, rec.State))
				}
			} else {
				if d.winnerErr != nil {
					fmt.Fprintf(a.stderr, "warning: %v; exporting the best trial instead\n", d.winnerErr)
				}
				b, ok := d.best()
				if !ok {
					return fmt.Errorf("study %s has no complete trial that meets its SLO and gates; pick one with --trial", d.name)
				}
				rec = b
			}
			schema, err := d.flagSchema(rec, schemaFile, a.stderr)
			if err != nil {
				return err
			}
			if err := report.CheckFlags(schema, rec.Flags()); err != nil {
				return badInput(fmt.Errorf("export: trial %d: %w; nothing written", rec.Number, err))
			}
			rev := d.modelRevision(rec)
			l := report.Launch{
				Engine: recordEngine(rec), Study: d.name, Trial: rec.Number, Command: rec.Engine, Flags: rec.Flags(),
				Env: rec.Env(), GPUs: rec.GPUs, Params: rec.ConfigParams(), Version: rec.Version,
				ScoreReason: rec.ScoreReason, Measured: figuresAt(rec, d.scoredConcurrency()),
				ModelRevision: rev, APIKeyEnv: apiKeyEnv, Created: now(a.getenv),
			}
			if s, ok := rec.Scored(); ok {
				l.Score = &s
			}
			if l.Warning = notDeployable(rec); l.Warning != "" {
				fmt.Fprintf(a.stderr, "warning: %s\n", l.Warning)
			}
			if w := d.confirmation(rec); w != nil {
				l.Confirmed = strings.TrimPrefix(w.Confirmed(), "confirmed: ")
				l.Confirmation = &report.Pooled{Pooled: w.Pooled, Runs: len(w.Runs), Spread: w.Spread}
			}
			if format == "docker" {
				// The trial's own image, options and command inside it.
				l.Container = rec.Container
			}
			switch {
			case command != "":
				words, err := shell.Split(command)
				if err != nil || len(words) == 0 {
					return badInput(fmt.Errorf("--command %q: %v; valid: a shell-style command line such as \"python3 -m sglang.launch_server\"; nothing written", command, cmp.Or(err, errors.New("empty"))))
				}
				l.Command = words
			case len(rec.LaunchCmd) > 0 && l.Container == nil:
				l.Command = rec.LaunchCmd
			}
			var buf bytes.Buffer
			if err := report.Write(&buf, format, l); err != nil {
				return badInput(err)
			}
			if out == "" || out == "-" {
				_, err := a.stdout.Write(buf.Bytes())
				return err
			}
			if err := writeExecutable(out, buf.Bytes()); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			fmt.Fprintf(a.stderr, "wrote %s (study %s, trial %d)\n", out, d.name, rec.Number)
			return nil
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.IntVar(&trial, "trial", 0, "trial number to export (default: the best)")
	f.StringVar(&format, "format", "bash", "bash | docker | json")
	f.StringVarP(&out, "output", "o", "", "write to FILE instead of standard output (an existing FILE is replaced only when an earlier export wrote it)")
	f.StringVar(&command, "command", "", "engine command for the script (default: the study's engine.launch_command, else engine.command)")
	f.StringVar(&schemaFile, "flags-schema", "", "check the flags against this flag schema file (default: the bundled schema of the study's engine version)")
	f.StringVar(&apiKeyEnv, "api-key-env", report.DefaultAPIKeyEnv, "environment variable the script reads the server's API key from at run time")
	return cmd
}

// notDeployable says why an exported trial is not a config to deploy: it
// did not run to the end, or missed its SLO or quality gates; "" when it
// passed. Such a trial may still be exported, to reproduce a crash.
func notDeployable(rec search.Record) string {
	switch {
	case rec.State == search.StateFailed:
		why := rec.FailureClass
		if rec.Reason != "" {
			why += ": " + rec.Reason
		}
		return fmt.Sprintf("trial %d failed (%s); this config crashed or broke, export it to reproduce the failure, not to deploy", rec.Number, why)
	case rec.State != search.StateComplete:
		return fmt.Sprintf("trial %d is %s, not measured to the end (%s); its config is untested under the study's workload", rec.Number, rec.State, cmp.Or(rec.Reason, "no reason stored"))
	case !rec.ScoreOK:
		return fmt.Sprintf("trial %d missed its SLO or quality gates (%s)", rec.Number, cmp.Or(rec.ScoreReason, "no reason stored"))
	}
	return ""
}

// maxExportBytes bounds the size of a file writeExecutable reads to see
// whether an earlier export wrote it.
const maxExportBytes = 1 << 20

// writeExecutable writes b to path through a temporary file and a rename:
// an existing script is replaced whole or not at all. Only a file an
// earlier export wrote is replaced: -o sgtune.db would have put a script
// where every trial was.
func writeExecutable(path string, b []byte) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return badInput(fmt.Errorf("-o %s is a directory: give the script's file name, e.g. %s", path, filepath.Join(path, "best-launch.sh")))
	} else if err == nil {
		// An export is a few KB: a larger file (a study database given as
		// -o) is not read whole to find that out.
		var old []byte
		if fi.Size() <= maxExportBytes {
			if old, err = os.ReadFile(path); err != nil {
				return fmt.Errorf("-o %s: %w", path, err)
			}
		}
		if !report.IsExport(old) {
			return badInput(fmt.Errorf("-o %s exists and is not an earlier sgtune export; nothing written: give a new file name, or remove the file first", path))
		}
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return badInput(fmt.Errorf("-o %s: no directory %s to write it in", path, dir))
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("-o %s: %w", path, cmp.Or(errors.Unwrap(err), err))
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// paramsText is a trial's params as status and best print them: "k=v
// k=v", and for an engine default that leaves params to the engine the
// values it set and those it left ("radix_cache=true; ep, mem_fraction
// left to the engine").
func paramsText(r search.Record) string {
	if r.InSpace() {
		return space.Params(r.Params).String()
	}
	text := space.Params(r.ConfigParams()).String()
	left := strings.Join(r.Omitted, ", ") + " left to the engine"
	if text == "" {
		return left
	}
	return text + "; " + left
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
	if r.ConfirmOf != nil {
		d = strings.TrimSpace(fmt.Sprintf("confirms #%d %s", *r.ConfirmOf, d))
	}
	if r.Baseline && r.ConfirmOf == nil {
		d = strings.TrimSuffix("engine default; "+d, "; ")
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

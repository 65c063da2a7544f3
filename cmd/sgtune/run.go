package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/shell"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// errInterrupted reports a run stopped by a signal (exit code 130).
var errInterrupted = errext.WithExitCode(
	errors.New("interrupted: the running trial was stopped and will be retried; run the same command to continue"),
	errext.Interrupted)

func (a *app) runCmd() *cobra.Command {
	var (
		storagePath string
		trials      int
		timeout     time.Duration
		parallel    int
		logDir      string
	)
	cmd := &cobra.Command{
		Use:   "run STUDY_FILE",
		Short: "Run a study, or continue it if the storage already holds it",
		Long: `Run proposes configurations from the study's space, rejects the ones the
engine's rules say cannot work, launches and benchmarks the rest (one trial per
GPU group, side by side with --parallel), and stores every trial. Running the same command again continues the
study: trial numbers continue, completed trials are kept, and trials that were
interrupted are re-run first. A study resumes only from the file it was
measured under: when its engine, model, fixed flags, GPUs per trial, workload
or score changed, run refuses (exit 2) and names them, since new trials would
not compare with the stored ones. The budget, the params' ranges and the
launch settings may change.

The first Ctrl-C stops launching, ends the running trial cleanly and marks it to
be retried; a second Ctrl-C tears the servers down at once; a third exits.

--trials is the number of launched trials the whole study may use (also across
resumed runs); proposals rejected before launch do not count. --timeout stops
starting new trials after the given time; the trial in flight finishes.`,
		Example: `  sgtune run testdata/studies/demo.yaml
  sgtune run study.yaml --storage runs/glm.db --trials 40 --timeout 10h --parallel 2`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := space.Load(args[0])
			if err != nil {
				return err
			}
			if err := budgetFlags(cmd, trials, parallel, timeout); err != nil {
				return err
			}
			pre, store, logs, err := a.openStudy(st, storagePath, logDir, parallel)
			if err != nil {
				return err
			}
			defer store.Close()

			// Ctrl-C cancels the run with objective.ErrInterrupted as the
			// cause (see interruptible), as sgtune bench does.
			ctx, stop, cancel := interruptible(cmd.Context())
			defer cancel()
			abort := make(chan struct{})
			watchDone := make(chan struct{})
			defer close(watchDone)
			prog := newProgress(a.stdout)
			go a.watchSignals(stop, abort, watchDone, func(s string) { prog.aside(a.stderr, s) })
			tickDone := make(chan struct{})
			go prog.tick(tickDone) // ends when the run does
			sum, runErr := search.Run(ctx, search.Options{
				Study: st, Store: store, LogDir: logs,
				Trials: trials, Timeout: timeout, Parallel: parallel,
				Getenv: a.getenv, Abort: abort, Preflight: &pre,
				Events: prog.event,
			})
			close(tickDone)
			prog.stop()
			return a.finish(st, sum, store, storagePath, runErr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&storagePath, "storage", "sgtune.db", storageHelp)
	f.IntVar(&trials, "trials", 0, "launched-trial budget for the study (default: the study file's budget.trials)")
	f.DurationVar(&timeout, "timeout", 0, "stop starting trials after this long, e.g. 8h (default: the study file's budget.timeout)")
	f.IntVar(&parallel, "parallel", 0, "trials at once, one per GPU group (default: the study file's budget.parallel, else every group)")
	f.StringVar(&logDir, "log-dir", "", "directory for per-trial server logs (default: sgtune-logs beside the storage)")
	return cmd
}

// interruptible returns the context of a run or worker, the func that
// cancels it for the first Ctrl-C and the one that releases it when the
// command ends. An interrupt's cause is objective.ErrInterrupted, so that
// the load generator marks the point it cuts short interrupted and its
// cut requests neither completed nor failed (a plain cancel reads as a
// failure: the point and its requests were stored failed).
func interruptible(parent context.Context) (ctx context.Context, interrupt, cancel func()) {
	ctx, cause := context.WithCancelCause(parent)
	return ctx, func() { cause(objective.ErrInterrupted) }, func() { cause(nil) }
}

// watchSignals cancels the run on the first interrupt (stop), closes abort
// on the second and exits on the third; say prints what it does (below a
// live status line, not onto it).
func (a *app) watchSignals(stop func(), abort chan struct{}, done <-chan struct{}, say func(string)) {
	if a.interrupts == nil {
		return
	}
	n := 0
	for {
		select {
		case <-done:
			return
		case <-a.interrupts:
			switch n++; n {
			case 1:
				say("sgtune: interrupt: stopping the running trial cleanly; it is re-run when the study resumes (Ctrl-C again to tear down at once)")
				stop()
			case 2:
				say("sgtune: second interrupt: tearing down now (Ctrl-C again to exit at once)")
				close(abort)
			default:
				say("sgtune: third interrupt: exiting; run the same command to clean up and continue")
				if a.exit != nil {
					a.exit(exitInterrupted)
				}
				return
			}
		}
	}
}

// finish prints a run's summary and returns what ends it: the run's
// error, else errInterrupted when a signal stopped it. A run refused as
// bad input (an edited study, say) ran nothing: its error alone.
func (a *app) finish(st *space.Study, sum search.Summary, store *storage.Store, storagePath string, runErr error) error {
	if errext.Code(runErr) == errext.BadInput {
		return runErr
	}
	read, note := a.readCommand(store, storagePath, st.Name)
	a.printSummary(st, sum, read, note)
	if runErr != nil {
		return runErr
	}
	if sum.Interrupted {
		return errInterrupted
	}
	return nil
}

// printSummary prints what the run did; read is the reading command's
// arguments for this study (see readCommand), for the hints it ends with,
// and note the line that follows them.
func (a *app) printSummary(st *space.Study, sum search.Summary, read, note string) {
	counts := map[string]int{}
	for _, r := range sum.Records {
		counts[r.State]++
	}
	var parts []string
	for _, s := range []string{search.StateComplete, search.StatePruned, search.StateFailed, search.StateInfeasible,
		search.StateDuplicate, search.StateUnlaunched, search.StateInterrupted, search.StateRunning} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
	}
	if n := counts[search.StateWaiting]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d queued to run again", n))
	}
	confirms := ""
	if sum.Confirmations > 0 {
		confirms = fmt.Sprintf(" and measured the top configs again %d time(s)", sum.Confirmations)
	}
	stored := fmt.Sprintf("%d trials stored", len(sum.Records))
	if len(parts) > 0 {
		stored += " (" + strings.Join(parts, ", ") + ")"
	}
	fmt.Fprintf(a.stdout, "\nstudy %s: %s; this run launched %d%s\n", st.Name, stored, sum.Launched, confirms)
	versus := search.VersusDefault(sum.Winner, sum.Best, sum.Records)
	if sum.Best == nil {
		if versus != "" {
			fmt.Fprintln(a.stdout, versus)
		}
		fmt.Fprintf(a.stdout, "no trial met the score's SLO and gates yet; see `sgtune status%s` for the reasons\n%s", read, note)
		return
	}
	b := sum.Best
	if w := sum.Winner; w != nil {
		fmt.Fprintf(a.stdout, "best: trial %d, %s\n", b.Number, w.Confirmed())
	} else {
		fmt.Fprintf(a.stdout, "best: trial %d, score %.2f\n", b.Number, *b.Score)
	}
	if versus != "" {
		fmt.Fprintln(a.stdout, versus)
	}
	fmt.Fprintf(a.stdout, "  %s\n", commandLine(*b))
	fmt.Fprintf(a.stdout, "export it with: sgtune export%s --format bash -o best-launch.sh\n%s", read, note)
}

// readCommand is what a reading command (status, export) needs to find the
// study just run, as words to paste after it: --storage unless the command
// reads that storage without it ($SGTUNE_STORAGE, else sgtune.db), and
// --study when the storage holds other studies too (or cannot list them).
// Each word is quoted where a shell needs it. A PostgreSQL URL's password
// is left out (hints end up in logs and scrollback): the pasted command
// reads it from $PGPASSWORD or ~/.pgpass, as note (the line to print after
// the hints; "" when no password was left out) says.
func (a *app) readCommand(store *storage.Store, storagePath, study string) (read, note string) {
	var words []string
	if storagePath != cmp.Or(a.getenv("SGTUNE_STORAGE"), "sgtune.db") {
		public, hidden := storage.WithoutPassword(storagePath)
		words = append(words, "--storage", public)
		if hidden {
			note = "(the storage URL's password is left out of these commands: they read it from $PGPASSWORD or ~/.pgpass)\n"
		}
	}
	if names, err := store.StudyNames(); err != nil || len(names) != 1 {
		words = append(words, "--study", study)
	}
	if len(words) == 0 {
		return "", note
	}
	return " " + shell.Join(words), note
}

// exactArgs is cobra.ExactArgs with bad input mapped to exit code 2.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return badInput(fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath()))
		}
		return nil
	}
}

// openStudy runs what run and worker check before they write anything
// (the parallel trials against the GPU groups, the storage's directory,
// the study's preflight) and opens the storage. It returns the log
// directory: logDir, or by default sgtune-logs beside a SQLite file (else
// here).
func (a *app) openStudy(st *space.Study, storagePath, logDir string, parallel int) (search.Preflight, *storage.Store, string, error) {
	var pre search.Preflight
	if groups := max(len(st.GPUGroups), 1); !st.Slurmed() && parallel > groups {
		return pre, nil, "", badInput(fmt.Errorf("--parallel %d: the study has %d GPU group(s) (gpus.groups in %s); one trial runs per group", parallel, groups, st.Path))
	}
	logBase := "."
	if !storage.IsPostgres(storagePath) {
		dbPath, err := storage.ParsePath(storagePath)
		if err != nil {
			return pre, nil, "", badInput(fmt.Errorf("--storage: %w", err))
		}
		logBase = filepath.Dir(dbPath)
		if fi, err := os.Stat(logBase); err != nil || !fi.IsDir() {
			return pre, nil, "", badInput(fmt.Errorf("--storage %s: directory %s does not exist", storagePath, logBase))
		}
	}
	pre = search.Check(st, a.getenv)
	if err := pre.Err(); err != nil {
		return pre, nil, "", err
	}
	for _, w := range pre.Warnings {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	flag := "--log-dir"
	if logDir == "" {
		flag, logDir = "the log directory", filepath.Join(logBase, "sgtune-logs")
	}
	if err := writableDir(logDir); err != nil {
		return pre, nil, "", badInput(fmt.Errorf("%s %s: the servers' logs cannot be written there: %w; valid: a directory sgtune can create and write", flag, logDir, err))
	}
	store, err := openStorage(storagePath)
	if err != nil {
		return pre, nil, "", err
	}
	return pre, store, logDir, nil
}

// writableDir makes dir (as a trial's launch would) and writes a file in
// it: a log directory that cannot take the servers' logs fails every
// launch.
func writableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return cmp.Or(errors.Unwrap(err), err)
	}
	f, err := os.CreateTemp(dir, ".sgtune-write-check-*")
	if err != nil {
		return cmp.Or(errors.Unwrap(err), err)
	}
	return errors.Join(f.Close(), os.Remove(f.Name()))
}

// storageHelp documents --storage for every command that has it.
const storageHelp = "SQLite file or postgres:// URL holding the study; $SGTUNE_STORAGE, when set, replaces the default"

// storageFromEnv makes $SGTUNE_STORAGE the default of a command's --storage.
func (a *app) storageFromEnv(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("storage")
	if f == nil || f.Changed {
		return nil
	}
	if env := a.getenv("SGTUNE_STORAGE"); env != "" {
		return f.Value.Set(env)
	}
	return nil
}

// openExisting opens a storage that must already exist: commands that only
// read never create a database, and read one they cannot write
// (storage.OpenRead).
func openExisting(path string) (*storage.Store, error) {
	if storage.IsPostgres(path) {
		return openStorage(path)
	}
	file, err := storage.ParsePath(path)
	if err != nil {
		return nil, badInput(fmt.Errorf("--storage: %w", err))
	}
	fi, err := os.Stat(file)
	if err != nil {
		return nil, badInput(fmt.Errorf("no storage at %s (run `sgtune run STUDY_FILE` first, or pass --storage): %w", path, err))
	}
	// Opening migrates: an empty file would become an empty study database.
	if fi.Mode().IsRegular() && fi.Size() == 0 {
		return nil, badInput(fmt.Errorf("storage %s is an empty file, not a study database (`sgtune run STUDY_FILE --storage %s` creates one)", path, path))
	}
	return openWith(storage.OpenRead, path)
}

// openStorage opens a storage; one that is not sgtune's (a directory, a
// file that is not SQLite, another program's tables) is bad input.
func openStorage(path string) (*storage.Store, error) {
	return openWith(storage.Open, path)
}

// openWith opens a storage with open (storage.Open or OpenRead), mapping a
// storage that is not sgtune's to bad input.
func openWith(open func(string) (*storage.Store, error), path string) (*storage.Store, error) {
	store, err := open(path)
	if errors.Is(err, storage.ErrNotStudyDB) {
		return nil, badInput(err)
	}
	if err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	return store, nil
}

// budgetFlags checks the budget flags given on the command line: each must
// be positive (left out, the study file's budget applies).
func budgetFlags(cmd *cobra.Command, trials, parallel int, timeout time.Duration) error {
	for _, f := range []struct {
		name  string
		bad   bool
		value string
		want  string
	}{
		{"trials", trials < 1, strconv.Itoa(trials), "an integer >= 1"},
		{"parallel", parallel < 1, strconv.Itoa(parallel), "an integer >= 1"},
		{"timeout", timeout <= 0, timeout.String(), "a positive duration such as 8h"},
	} {
		if f.bad && cmd.Flags().Changed(f.name) {
			return badInput(fmt.Errorf("--%s %s: want %s (leave it out for the study file's budget.%s)", f.name, f.value, f.want, f.name))
		}
	}
	return nil
}

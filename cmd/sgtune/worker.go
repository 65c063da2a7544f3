package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

func (a *app) workerCmd() *cobra.Command {
	var (
		storagePath string
		timeout     time.Duration
		parallel    int
		logDir      string
	)
	cmd := &cobra.Command{
		Use:   "worker STUDY_FILE",
		Short: "Take trials of a shared study, as one of many processes on any hosts, until its budget is spent",
		Long: `Worker runs the study exactly as run does (same checks, same loop), as one of
many processes sharing it through one storage: start as many as you like, on
as many hosts as you like, with the same study file and --storage (a
postgres:// URL every host reaches; a SQLite file only serves workers of one
host). Together they launch the study's budget (budget.trials) and never the
same config twice; each proposal sees the trials the others are running.

A worker that dies (kill -9, a lost host) stops beating: after
launch.stale_after (default 2m) another worker takes its trial over,
cancels what it left behind (its Slurm job) and runs it again. Once the budget
is spent a worker waits while other workers' trials still run, so such a
re-run always finds a worker, then exits.

With launch.scheduler: slurm each trial is a Slurm job and --parallel (or
budget.parallel) is how many jobs this worker keeps in flight; with local
processes it is the number of GPU groups used, as for run. Progress lines
are plain text, one per event.`,
		Example: `  export SGTUNE_STORAGE=postgres://tuner@db.example:5432/tuner
  sgtune worker study.yaml            # on each of several hosts
  sgtune worker study.yaml --storage postgres://tuner@db/tuner --parallel 2`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := space.Load(args[0])
			if err != nil {
				return err
			}
			if storagePath == "" {
				return badInput(errors.New("--storage is required: the postgres:// URL (or SQLite file) every worker of the study shares; $SGTUNE_STORAGE also sets it"))
			}
			if err := budgetFlags(cmd, 0, parallel, timeout); err != nil {
				return err
			}
			pre, store, logs, err := a.openStudy(st, storagePath, logDir, parallel)
			if err != nil {
				return err
			}
			defer store.Close()
			// Slurm jobs write beside the log on their nodes: an absolute
			// path on a shared filesystem.
			if logs, err = filepath.Abs(logs); err != nil {
				return badInput(fmt.Errorf("--log-dir: %w", err))
			}

			// Ctrl-C cancels the run with objective.ErrInterrupted as the
			// cause (see interruptible), as sgtune bench does.
			ctx, stop, cancel := interruptible(cmd.Context())
			defer cancel()
			abort := make(chan struct{})
			watchDone := make(chan struct{})
			defer close(watchDone)
			go a.watchSignals(stop, abort, watchDone, func(s string) { fmt.Fprintln(a.stderr, s) })

			sum, runErr := search.Run(ctx, search.Options{
				Study: st, Store: store, LogDir: logs,
				Timeout: timeout, Parallel: parallel, Worker: true,
				Getenv: a.getenv, Abort: abort, Preflight: &pre,
				Events: func(ev search.Event) { fmt.Fprintln(a.stdout, ev.Text) },
			})
			return a.finish(st, sum, store, storagePath, runErr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&storagePath, "storage", "", "SQLite file or postgres:// URL every worker of the study shares; required unless $SGTUNE_STORAGE names it")
	f.DurationVar(&timeout, "timeout", 0, "stop starting trials after this long, e.g. 8h (default: the study file's budget.timeout)")
	f.IntVar(&parallel, "parallel", 0, "trials this worker runs at once: Slurm jobs in flight, or local GPU groups (default: the study file's budget.parallel)")
	f.StringVar(&logDir, "log-dir", "", "directory for per-trial server logs, shared by the nodes with Slurm (default: sgtune-logs beside the storage, or in the working directory for PostgreSQL)")
	return cmd
}

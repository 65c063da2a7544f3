// Command demo-cluster runs a study with several `sgtune worker` processes
// sharing one storage, kills one of them with SIGKILL in the middle of a
// trial, waits for the others to finish the study, and prints what the
// storage then holds, as its last line:
//
//	workers=4 launched=40 duplicate_configs=0 lost_trials=0 hosts=2 killed_worker_trial_rerun=yes
//
// Every figure is read from the storage: workers is the number of distinct
// processes that ran trials, launched the trials counted against the
// budget, duplicate_configs the launched trials whose config another
// launched trial already had (a rerun that races a measured config aside),
// lost_trials the trials left running or
// queued, or interrupted without a re-run, hosts the distinct nodes (or
// hosts) that ran trials, killed_worker_trial_rerun whether the killed
// worker's trial was run again, to its end, by another worker. It exits 1
// when any figure is not what a correct run gives.
//
// `make demo-cluster` starts Slurm and PostgreSQL (scripts/demo-cluster.sh)
// and runs it; Slurm's clients find the cluster through SLURM_CONF.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

func main() {
	var c config
	flag.StringVar(&c.sgtune, "sgtune", "bin/sgtune", "the sgtune binary the workers run")
	flag.StringVar(&c.study, "study", "testdata/studies/cluster-sim.yaml", "study file")
	flag.StringVar(&c.storage, "storage", os.Getenv("SGTUNE_STORAGE"), "storage every worker shares (postgres:// URL)")
	flag.StringVar(&c.dir, "dir", "", "directory for the workers' output and the trial logs (default: a new temporary one)")
	flag.IntVar(&c.workers, "workers", 4, "sgtune worker processes")
	flag.IntVar(&c.killAfter, "kill-after", 8, "kill one worker with SIGKILL in a trial once this many trials were launched (0: kill none)")
	flag.DurationVar(&c.timeout, "timeout", 15*time.Minute, "give up after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c.out = os.Stdout
	fig, err := run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster:", err)
		os.Exit(1)
	}
	// What `sgtune status` shows of the study: every trial with the host
	// (node) and Slurm job that ran it.
	status := exec.Command(c.sgtune, "status", "--storage", c.storage)
	status.Stdout, status.Stderr = os.Stdout, os.Stderr
	if err := status.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo-cluster: sgtune status:", err)
		os.Exit(1)
	}
	if msg := fig.check(c.workers, c.killAfter > 0); msg != "" {
		fmt.Fprintln(os.Stderr, "demo-cluster:", msg)
		fmt.Println(fig)
		os.Exit(1)
	}
	fmt.Println(fig)
}

type config struct {
	sgtune, study, storage, dir string
	workers, killAfter          int
	timeout                     time.Duration
	out                         io.Writer // progress lines
}

// figures are what the storage holds after the run.
type figures struct {
	Workers, Launched, Budget, DuplicateConfigs, LostTrials, Hosts int
	// Killed is the trial of the killed worker (-1: none killed);
	// Rerun, whether another worker ran it again to its end.
	Killed int
	Rerun  bool
}

func (f figures) String() string {
	rerun := "no"
	if f.Rerun {
		rerun = "yes"
	}
	return fmt.Sprintf("workers=%d launched=%d duplicate_configs=%d lost_trials=%d hosts=%d killed_worker_trial_rerun=%s",
		f.Workers, f.Launched, f.DuplicateConfigs, f.LostTrials, f.Hosts, rerun)
}

// check says what is wrong with the figures ("" when nothing is).
func (f figures) check(workers int, killed bool) string {
	var bad []string
	if f.Workers != workers {
		bad = append(bad, fmt.Sprintf("%d of %d workers ran trials", f.Workers, workers))
	}
	if f.Launched != f.Budget {
		bad = append(bad, fmt.Sprintf("%d trials launched, the budget is %d", f.Launched, f.Budget))
	}
	if f.DuplicateConfigs != 0 {
		bad = append(bad, fmt.Sprintf("%d configs launched twice", f.DuplicateConfigs))
	}
	if f.LostTrials != 0 {
		bad = append(bad, fmt.Sprintf("%d trials lost", f.LostTrials))
	}
	if killed && !f.Rerun {
		bad = append(bad, fmt.Sprintf("the killed worker's trial %d was not run again", f.Killed))
	}
	return strings.Join(bad, "; ")
}

// worker is one started sgtune worker.
type worker struct {
	i    int
	cmd  *exec.Cmd
	out  string
	done chan struct{}
	err  error
}

// run starts the workers, kills one mid-trial, waits for the rest and
// reads the figures.
func run(ctx context.Context, c config) (figures, error) {
	fig := figures{Killed: -1}
	st, err := space.Load(c.study)
	if err != nil {
		return fig, err
	}
	if c.storage == "" {
		return fig, errors.New("--storage (or SGTUNE_STORAGE) is required")
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "sgtune-demo-cluster-"); err != nil {
			return fig, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	host, _ := os.Hostname()
	logDir := filepath.Join(c.dir, "trial-logs")
	var ws []*worker
	defer func() { // whatever happened, no worker outlives the demo
		for _, w := range ws {
			select {
			case <-w.done:
			default:
				_ = w.cmd.Process.Kill()
				<-w.done
			}
		}
	}()
	for i := range c.workers {
		w := &worker{i: i, out: filepath.Join(c.dir, fmt.Sprintf("worker-%d.out", i)), done: make(chan struct{})}
		f, err := os.Create(w.out)
		if err != nil {
			return fig, err
		}
		w.cmd = exec.Command(c.sgtune, "worker", c.study, "--storage", c.storage, "--log-dir", logDir)
		w.cmd.Stdout, w.cmd.Stderr = f, f
		if err := w.cmd.Start(); err != nil {
			f.Close()
			return fig, fmt.Errorf("start worker %d: %w", i, err)
		}
		go func() { // ends when the worker exits
			w.err = w.cmd.Wait()
			f.Close()
			close(w.done)
		}()
		ws = append(ws, w)
		fmt.Fprintf(c.out, "worker %d: pid %d, output in %s\n", i, w.cmd.Process.Pid, w.out)
	}
	owner := func(w *worker) string { return host + ":" + strconv.Itoa(w.cmd.Process.Pid) }

	store, err := storage.Open(c.storage)
	if err != nil {
		return fig, err
	}
	defer store.Close()
	var victim *worker
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if allDone(ws) {
			break
		}
		select {
		case <-ctx.Done():
			return fig, fmt.Errorf("the workers did not finish the study: %w", ctx.Err())
		case <-tick.C:
		}
		if victim != nil || c.killAfter <= 0 {
			continue
		}
		w, trial, err := pickVictim(ctx, store, st, c.killAfter, ws, owner)
		if err != nil {
			return fig, err
		}
		if w == nil {
			continue
		}
		// Mid-trial: its job is submitted, its server starting or measured.
		if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return fig, fmt.Errorf("kill worker %d: %w", w.i, err)
		}
		victim, fig.Killed = w, trial
		fmt.Fprintf(c.out, "killed worker %d (pid %d) with SIGKILL during trial %d\n", w.i, w.cmd.Process.Pid, trial)
	}
	for _, w := range ws {
		if w != victim && w.err != nil {
			return fig, fmt.Errorf("worker %d: %v (see %s)", w.i, w.err, w.out)
		}
	}
	killedOwner := ""
	if victim != nil {
		killedOwner = owner(victim)
	}
	return measure(ctx, store, st, fig.Killed, killedOwner)
}

func allDone(ws []*worker) bool {
	for _, w := range ws {
		select {
		case <-w.done:
		default:
			return false
		}
	}
	return true
}

// pickVictim returns a live worker in the middle of a launched trial once
// the study has launched after trials, else nil: its server is ready (the
// worker said so) and not yet stopped, so the kill leaves a server (a
// Slurm job) behind for the worker taking the trial over to end.
func pickVictim(ctx context.Context, store *storage.Store, st *space.Study, after int, ws []*worker, owner func(*worker) string) (*worker, int, error) {
	study := st.Name
	id, err := store.GetStudyIDFromName(study)
	if err != nil {
		return nil, 0, nil // not created yet
	}
	n, err := store.LaunchedCount(ctx, id)
	if err != nil || n < after {
		return nil, 0, err
	}
	recs, err := search.Records(store, study)
	if err != nil {
		return nil, 0, err
	}
	for _, r := range recs {
		if r.State != search.StateRunning || r.LogPath == "" || (st.Slurmed() && (r.SlurmJob == "" || r.Host == "")) {
			continue
		}
		for _, w := range ws {
			select {
			case <-w.done:
				continue
			default:
			}
			if r.Owner == owner(w) && measuring(w.out, r.Number) {
				return w, r.Number, nil
			}
		}
	}
	return nil, 0, nil
}

// measuring reports whether a worker's output says trial n's server is
// ready and the trial has not ended yet.
func measuring(out string, n int) bool {
	b, err := os.ReadFile(out)
	if err != nil {
		return false
	}
	ready := false
	prefix := fmt.Sprintf("trial %d ", n)
	for _, l := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(l, prefix)
		switch {
		case !ok:
		case strings.HasPrefix(rest, "ready in "):
			ready = true
		case strings.HasPrefix(rest, "complete") || strings.HasPrefix(rest, "failed") || strings.HasPrefix(rest, "rejected"):
			return false
		}
	}
	return ready
}

// measure reads the figures from the storage.
func measure(ctx context.Context, store *storage.Store, st *space.Study, killed int, killedOwner string) (figures, error) {
	fig := figures{Killed: killed, Budget: st.Budget.Trials}
	id, err := store.GetStudyIDFromName(st.Name)
	if err != nil {
		return fig, err
	}
	if fig.Launched, err = store.LaunchedCount(ctx, id); err != nil {
		return fig, err
	}
	recs, err := search.Records(store, st.Name)
	if err != nil {
		return fig, err
	}
	owners, hosts, configs := map[string]bool{}, map[string]bool{}, map[string]int{}
	retried := map[int][]search.Record{} // by the number of the trial re-run
	for _, r := range recs {
		if r.RetryOf != nil {
			retried[*r.RetryOf] = append(retried[*r.RetryOf], r)
		}
	}
	for _, r := range recs {
		if r.Owner != "" && r.LogPath != "" { // it reached the launch
			owners[r.Owner] = true
		}
		launched, err := store.Launched(ctx, r.ID)
		if err != nil {
			return fig, err
		}
		if launched {
			if r.ConfirmOf == nil { // a confirmation rerun runs its config again on purpose
				configs[configKey(r)]++
			}
			for _, h := range strings.Split(r.Host, ",") {
				if h != "" {
					hosts[h] = true
				}
			}
		}
		switch {
		case r.State == search.StateRunning || r.State == search.StateWaiting:
			fig.LostTrials++
		case r.State == search.StateInterrupted && r.LogPath != "" && len(retried[r.Number]) == 0:
			fig.LostTrials++ // launched, stopped, never run again
		}
	}
	for _, n := range configs {
		fig.DuplicateConfigs += n - 1
	}
	fig.Workers, fig.Hosts = len(owners), len(hosts)
	if killed >= 0 {
		fig.Rerun = rerunElsewhere(ctx, store, recs, retried, killed, killedOwner)
	}
	return fig, nil
}

// rerunElsewhere follows the killed trial's re-runs: true when one ran to
// its end (launched, finished) in another process.
func rerunElsewhere(ctx context.Context, store *storage.Store, recs []search.Record, retried map[int][]search.Record, killed int, killedOwner string) bool {
	i := slices.IndexFunc(recs, func(r search.Record) bool { return r.Number == killed })
	if i < 0 || recs[i].State != search.StateInterrupted {
		return false
	}
	queue := retried[killed]
	for len(queue) > 0 {
		r := queue[0]
		queue = append(queue[1:], retried[r.Number]...)
		launched, err := store.Launched(ctx, r.ID)
		if err == nil && launched && r.Owner != killedOwner && (r.State == search.StateComplete || r.State == search.StateFailed) {
			return true
		}
	}
	return false
}

// configKey is what a launched trial ran: its flags and environment.
func configKey(r search.Record) string {
	env := r.Env()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := strings.Join(r.Flags(), " ")
	for _, k := range keys {
		b += " " + k + "=" + env[k]
	}
	return b
}

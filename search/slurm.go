package search

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/storage"
)

// slurmNodeFlags are the engines that can run one server over several
// nodes, with the flags that place each node.
var slurmNodeFlags = map[string]launcher.NodeFlags{"sglang": launcher.SGLangNodeFlags}

// slurmBackend runs each trial's server as a Slurm job (launch.scheduler:
// slurm): the scheduler places it, so no local GPU group is leased. It
// stores the job ID with the trial as soon as the job is submitted (a
// worker that takes the trial over cancels the job) and the nodes and GPUs
// once the server runs.
type slurmBackend struct {
	r      *runner
	opt    launcher.SlurmOptions
	target objective.Target

	mu       sync.Mutex
	failures int       // sbatch failures in a row
	retryAt  time.Time // no submission before (backoff after failures)
}

// slurmBackend checks that sbatch accepts the study's jobs and returns
// the Backend that runs them.
func (r *runner) slurmBackend(ctx context.Context, target objective.Target) (Backend, error) {
	sl := r.st.Launch.Slurm
	opt := launcher.SlurmOptions{
		Partition: sl.Partition, Account: sl.Account, TimeLimit: sl.TimeLimit, Nodes: sl.Nodes,
		GPURequest: sl.GPURequest, CPUsPerTask: sl.CPUsPerTask, ExtraSbatch: sl.ExtraSbatch, PendingTimeout: sl.PendingTimeout,
	}
	if opt.Nodes > 1 {
		f, ok := slurmNodeFlags[r.st.Engine.Name]
		if !ok {
			return nil, errext.Bad(fmt.Errorf("%s: launch.slurm.nodes %d: engine %s cannot run one server over several nodes", r.st.Path, opt.Nodes, r.st.Engine.Name))
		}
		opt.NodeFlags = f
	}
	if err := launcher.CheckSlurm(ctx, opt); err != nil {
		return nil, fmt.Errorf("%s: %w", r.st.Path, err)
	}
	return &slurmBackend{r: r, opt: opt, target: target}, nil
}

// submitBackoff bounds the wait between submissions after sbatch failed.
const submitBackoff = time.Minute

// Start implements Backend.
func (b *slurmBackend) Start(ctx context.Context, spec launcher.Spec) (Running, error) {
	if err := b.wait(ctx); err != nil {
		return nil, err
	}
	number, ok := b.r.trialOfSpec(spec)
	opt := b.opt
	if ok {
		opt.JobName = b.r.jobName(number)
		opt.Placed = func(p launcher.SlurmPlacement) { b.r.placed(number, p) }
	}
	spec.GPUs = nil // Slurm allocates them; the job sees CUDA_VISIBLE_DEVICES as Slurm sets it
	srv, err := launcher.StartSlurm(ctx, spec, opt)
	b.mu.Lock()
	if errors.Is(err, launcher.ErrSubmit) {
		b.failures++
		b.retryAt = time.Now().Add(min(submitBackoff, time.Duration(1<<min(b.failures, 6))*time.Second))
	} else {
		b.failures = 0
	}
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	t := b.target
	t.URL = srv.URL
	return &slurmJob{srv: srv, target: t}, nil
}

// wait holds a submission back after sbatch failed (the controller down, a
// limit reached), so a worker does not spin through trials meanwhile.
func (b *slurmBackend) wait(ctx context.Context) error {
	b.mu.Lock()
	d := time.Until(b.retryAt)
	b.mu.Unlock()
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting to submit again after sbatch failed: %w", ctx.Err())
	case <-time.After(d):
		return nil
	}
}

// slurmJob is a ready server in a Slurm job.
type slurmJob struct {
	srv    *launcher.SlurmServer
	target objective.Target
}

func (j *slurmJob) Facts() engine.Facts { return j.srv.Facts }

// LogErr is the error that cut the job's log short (launcher's
// SlurmServer.LogErr).
func (j *slurmJob) LogErr() error { return j.srv.LogErr() }

func (j *slurmJob) Measure(ctx context.Context, w objective.Workload, opt objective.Options) (*objective.Result, error) {
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // ends with the measurement or when the job ends
		select {
		case <-j.srv.Exited():
			cancel()
		case <-mctx.Done():
		}
	}()
	res, err := objective.Run(mctx, j.target, w, opt)
	if err != nil && ctx.Err() == nil {
		select {
		case <-j.srv.Exited():
		case <-time.After(crashGrace):
		}
		if errors.Is(err, objective.ErrHang) && j.srv.Failure() == nil {
			j.srv.MarkHang()
		}
	}
	return res, err
}

func (j *slurmJob) Stop(ctx context.Context) (*launcher.Failure, error) {
	crashed := j.srv.Failure()
	err := j.srv.Stop(ctx)
	if crashed == nil {
		crashed = j.srv.Failure()
	}
	return crashed, err
}

// trialOfSpec finds the trial number in the tag the loop puts into every
// server's environment (trialTag).
func (r *runner) trialOfSpec(spec launcher.Spec) (int, bool) {
	prefix, _, _ := strings.Cut(r.trialTag(0), "/") // SGTUNE_TRIAL=<study>
	prefix += "/" + r.uid + "/"
	for _, e := range spec.Env {
		if rest, ok := strings.CutPrefix(e, prefix); ok {
			n, err := strconv.Atoi(rest)
			return n, err == nil
		}
	}
	return 0, false
}

// jobName names a trial's Slurm job: unique per study (its random id) and
// trial, so a worker taking the trial over finds the job by name even when
// its ID was never stored.
func (r *runner) jobName(number int) string {
	return fmt.Sprintf("sgtune-%s-%s-%d", safeName(r.st.Name), r.uid, number)
}

// placed stores where a trial's job runs: its ID once submitted, then its
// nodes (AttrHost) and GPUs.
func (r *runner) placed(number int, p launcher.SlurmPlacement) {
	id, err := r.trialID(number)
	if err == nil {
		if len(p.Nodes) == 0 {
			err = r.store.SetTrialSystemAttr(id, storage.AttrSlurmJob, p.Job)
		} else {
			err = r.store.SetTrialSystemAttr(id, storage.AttrHost, strings.Join(p.Nodes, ","))
			if err == nil && p.GPUs != "" {
				err = r.store.SetTrialUserAttr(id, storage.AttrGPUs, p.GPUs)
			}
		}
	}
	if err != nil {
		r.trialEvent(EventNote, number, "could not store its Slurm placement (job %s): %v", p.Job, err)
		return
	}
	if len(p.Nodes) == 0 {
		r.trialEvent(EventNote, number, "submitted as Slurm job %s", p.Job)
	} else {
		r.trialEvent(EventNote, number, "Slurm job %s runs on %s (CUDA_VISIBLE_DEVICES=%s)", p.Job, strings.Join(p.Nodes, ","), p.GPUs)
	}
}

// trialID maps a trial number of the study to its storage ID.
func (r *runner) trialID(number int) (int, error) {
	recs, err := Records(r.store, r.st.Name)
	if err != nil {
		return 0, err
	}
	for _, rec := range recs {
		if rec.Number == number {
			return rec.ID, nil
		}
	}
	return 0, fmt.Errorf("no trial %d in study %s", number, r.st.Name)
}

// cancelLeftoverJob cancels the Slurm job of a trial taken over from a
// dead worker: by its stored ID, and by its name in case the worker died
// between sbatch and storing the ID. It reports whether scancel did.
func (r *runner) cancelLeftoverJob(id, number int) bool {
	job := ""
	if sys, err := r.store.GetTrialSystemAttrs(id); err == nil {
		job = sys[storage.AttrSlurmJob]
	}
	// Its job directory holds the raw, unredacted output: the dead worker
	// cannot remove it any more.
	if ua, err := r.store.GetTrialUserAttrs(id); err == nil && ua[storage.AttrLogPath] != "" {
		if abs, err := filepath.Abs(ua[storage.AttrLogPath]); err == nil {
			defer os.RemoveAll(launcher.JobDir(abs))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jobs, err := launcher.CancelSlurmJobs(ctx, job, r.jobName(number))
	if err != nil {
		r.trialEvent(EventNote, number, "could not cancel its Slurm job: %v", err)
		return false
	}
	if len(jobs) > 0 {
		r.trialEvent(EventNote, number, "cancelled its leftover Slurm job %s", strings.Join(jobs, ","))
	}
	return true
}

package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/shell"
)

// A trial's server as a Slurm job.
//
// StartSlurm writes a batch script into a directory beside the trial's log
// (LogPath + ".slurm", which the nodes must see at the same path: a shared
// filesystem, as the log directory of a cluster study must be) and submits
// it with sbatch. On its node the job picks a free port, writes
// "NODE PORT CUDA_VISIBLE_DEVICES" to an endpoint file, and execs the
// server bound to 0.0.0.0, with CUDA_VISIBLE_DEVICES as Slurm set it (it
// is never rebuilt from SLURM_*_GPUS, whose indices mean something else
// under task/cgroup). The job's output file is copied, redacted, into
// LogPath through the same line sink the local launcher uses, so the ready
// line, the startup facts and the failure classes are decided exactly as
// for a local process. Readiness is the ready line plus the engine's
// health path over the network at the node's address (scontrol show node:
// NodeAddr). Job state comes from `scontrol show job -o` (no accounting
// needed); Stop and every give-up use scancel.

// Failure classes of Slurm jobs, beside the engine's.
const (
	// ClassSlurmPending: the job stayed pending past the pending timeout
	// (a busy or misconfigured cluster); it was cancelled.
	ClassSlurmPending = "slurm_pending"
	// ClassSlurmTimeLimit: the job reached its Slurm time limit.
	ClassSlurmTimeLimit = "slurm_time_limit"
)

// ErrSubmit is wrapped by StartSlurm's error when sbatch failed: the
// cluster refused or did not answer, nothing about the config.
var ErrSubmit = errors.New("launcher: sbatch failed")

// DefaultPendingTimeout is SlurmOptions.PendingTimeout's zero value.
const DefaultPendingTimeout = 10 * time.Minute

// NodeFlags name an engine's flags for its place in a multi-node launch.
type NodeFlags struct {
	NNodes, NodeRank, DistInitAddr string
}

// SGLangNodeFlags are SGLang's: --nnodes N --node-rank R --dist-init-addr HOST:PORT.
var SGLangNodeFlags = NodeFlags{NNodes: "--nnodes", NodeRank: "--node-rank", DistInitAddr: "--dist-init-addr"}

// SlurmOptions say how a server is run as a Slurm job.
type SlurmOptions struct {
	Partition string        // --partition; "" for the cluster's default
	Account   string        // --account; "" for the user's default
	TimeLimit time.Duration // --time, rounded up to minutes; 0 for the partition's
	// Nodes is the job's node count (default 1). With more than one, the
	// server runs through srun, one task per node, with NodeFlags.
	Nodes int
	// GPURequest is the sbatch option asking for each node's GPUs, e.g.
	// --gres=gpu:4 or --gpus-per-node=4.
	GPURequest string
	// CPUsPerTask is --cpus-per-task (a CPU engine's cores); 0 leaves it
	// to the cluster.
	CPUsPerTask int
	ExtraSbatch []string // more sbatch options, verbatim
	// PendingTimeout is how long the job may wait in the queue before it is
	// cancelled and reported as ClassSlurmPending; 0 means DefaultPendingTimeout.
	PendingTimeout time.Duration
	JobName        string    // --job-name; "" means "sgtune"
	NodeFlags      NodeFlags // required when Nodes > 1
	// Placed, when set, is called once the job is submitted (Job set) and
	// again when its server's node and GPUs are known.
	Placed func(SlurmPlacement)
	// Poll is how often the job's state is read; 0 means 1s.
	Poll time.Duration
}

// SlurmPlacement is where a job runs.
type SlurmPlacement struct {
	Job   string
	Nodes []string // the job's nodes; the server's (rank 0) first
	GPUs  string   // CUDA_VISIBLE_DEVICES as Slurm set it on the first node
}

// SlurmServer is a started, ready server running as a Slurm job.
type SlurmServer struct {
	URL   string   // http://NODEADDR:PORT
	Job   string   // the Slurm job ID
	Nodes []string // the job's nodes, the server's first
	GPUs  string   // CUDA_VISIBLE_DEVICES of the server's node
	Port  int
	Facts engine.Facts

	spec    Spec
	opt     SlurmOptions
	dir     string // the job's directory (scripts, raw output, endpoint)
	sink    *lineSink
	logFile *os.File
	tail    *tailer
	exited  chan struct{} // closed when the job ended and Failure is final
	fast    chan struct{} // closed by Stop: the monitor polls quickly
	attempt int

	ending
}

// slurmCmdTimeout bounds one Slurm client command.
const slurmCmdTimeout = 60 * time.Second

// slurmRun runs a Slurm client command and returns its standard output;
// the error carries its standard error.
func slurmRun(ctx context.Context, name string, args ...string) (string, error) {
	return slurmRunEnv(ctx, nil, name, args...)
}

// slurmRunEnv is slurmRun with the command's environment (nil: ours).
func slurmRunEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, slurmCmdTimeout)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = &stdout, &stderr, env
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// jobInfo is what scontrol said of a job.
type jobInfo struct {
	State    string // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...
	Reason   string
	NodeList string
	ExitCode int  // 128+N for a signal N
	Gone     bool // Slurm no longer knows the job (past MinJobAge)
}

// field returns KEY's value in a one-line scontrol record ("" if absent).
// Keys are matched whole: NodeList is not ReqNodeList.
func field(rec, key string) string {
	for _, w := range strings.Fields(rec) {
		if v, ok := strings.CutPrefix(w, key+"="); ok {
			return v
		}
	}
	return ""
}

// parseJob decodes `scontrol show job -o` output.
func parseJob(rec string) jobInfo {
	info := jobInfo{State: field(rec, "JobState"), Reason: field(rec, "Reason"), NodeList: field(rec, "NodeList")}
	if info.NodeList == "(null)" {
		info.NodeList = ""
	}
	code, sig, _ := strings.Cut(field(rec, "ExitCode"), ":")
	c, _ := strconv.Atoi(code)
	if s, _ := strconv.Atoi(sig); s > 0 {
		c = 128 + s
	}
	info.ExitCode = c
	return info
}

// queryJob reads a job's state.
func queryJob(ctx context.Context, id string) (jobInfo, error) {
	out, err := slurmRun(ctx, "scontrol", "show", "job", "-o", id)
	if err != nil {
		if strings.Contains(err.Error(), "Invalid job id") {
			return jobInfo{Gone: true}, nil
		}
		return jobInfo{}, err
	}
	return parseJob(out), nil
}

// jobEnv is the environment a job is submitted with (sbatch --export=ALL
// gives the job sbatch's own): ours without the storage's credentials,
// which the server has no use for and Slurm would keep with the job.
func jobEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if k != "SGTUNE_STORAGE" && k != "PGPASSWORD" {
			out = append(out, kv)
		}
	}
	return out
}

// JobDir is the directory of a trial's job files for the log at logPath.
func JobDir(logPath string) string { return strings.TrimSuffix(logPath, ".log") + ".slurm" }

// pendingState: the job waits for resources (or nodes booting).
func pendingState(s string) bool {
	switch s {
	case "PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD":
		return true
	}
	return false
}

// endedState: the job is over and its processes are gone. COMPLETING is
// not: its processes may still be being killed.
func endedState(s string) bool {
	switch s {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
		"DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT":
		return true
	}
	return false
}

// slurmTime formats a duration as sbatch --time D-HH:MM:SS, rounded up to
// whole minutes.
func slurmTime(d time.Duration) string {
	m := int((d + time.Minute - 1) / time.Minute)
	return fmt.Sprintf("%d-%02d:%02d:00", m/1440, m%1440/60, m%60)
}

// nodeNames expands a Slurm node list ("node[1-2]") into names.
func nodeNames(ctx context.Context, list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	out, err := slurmRun(ctx, "scontrol", "show", "hostnames", list)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// nodeAddr is the address other hosts reach a node at, as Slurm has it
// (NodeAddr, which defaults to the node's name).
func nodeAddr(ctx context.Context, node string) (string, error) {
	out, err := slurmRun(ctx, "scontrol", "show", "node", "-o", node)
	if err != nil {
		return "", err
	}
	if a := field(out, "NodeAddr"); a != "" && a != "(null)" {
		return a, nil
	}
	return node, nil
}

// CheckSlurm verifies, before any trial, that the Slurm client commands
// exist and that sbatch would accept a trial's job as opt asks for it
// (sbatch --test-only: a wrong partition, account or GPU request is
// reported here, not as a failure of every trial).
func CheckSlurm(ctx context.Context, opt SlurmOptions) error {
	for _, c := range []string{"sbatch", "scontrol", "scancel"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("launch.scheduler slurm: %s not found on PATH (install the Slurm client commands): %w", c, err)
		}
	}
	args := append([]string{"--test-only"}, sbatchArgs(opt)...)
	if _, err := slurmRun(ctx, "sbatch", append(args, "--output=/dev/null", "--wrap=true")...); err != nil {
		if unreachable(err.Error()) {
			// The cluster, not the study file.
			return fmt.Errorf("launch.scheduler slurm: sbatch cannot reach the Slurm controller (is slurmctld up, and SLURM_CONF or /etc/slurm/slurm.conf this cluster's?): %w", err)
		}
		return errext.Bad(fmt.Errorf("launch.slurm: sbatch refuses a trial's job (check partition, account, nodes, gres and extra_sbatch): %w", err))
	}
	return nil
}

// controllerErrors are what Slurm's client commands say when they cannot
// find or reach slurmctld (no slurm.conf and no DNS SRV record, a
// controller down or unreachable).
var controllerErrors = []string{
	"Unable to contact slurm controller",
	"Could not establish a configuration source",
	"DNS SRV lookup failed",
	"Unable to establish controller machine",
	"Socket timed out",
	"Zero Bytes were transmitted or received",
}

// unreachable reports whether a client command's error says the
// controller cannot be reached.
func unreachable(msg string) bool {
	for _, e := range controllerErrors {
		if strings.Contains(msg, e) {
			return true
		}
	}
	return false
}

// sbatchArgs are the job's resource options.
func sbatchArgs(opt SlurmOptions) []string {
	nodes := max(opt.Nodes, 1)
	args := []string{"--export=ALL", "--no-requeue", fmt.Sprintf("--nodes=%d", nodes), "--ntasks-per-node=1"}
	if opt.GPURequest != "" {
		args = append(args, opt.GPURequest)
	}
	if opt.CPUsPerTask > 0 {
		args = append(args, fmt.Sprintf("--cpus-per-task=%d", opt.CPUsPerTask))
	}
	if opt.Partition != "" {
		args = append(args, "--partition="+opt.Partition)
	}
	if opt.Account != "" {
		args = append(args, "--account="+opt.Account)
	}
	if opt.TimeLimit > 0 {
		args = append(args, "--time="+slurmTime(opt.TimeLimit))
	}
	return append(args, opt.ExtraSbatch...)
}

// pickPort is the shell function that finds a port nobody listens on, on
// the node the job runs on. Another process may take it before the server
// binds it: the server then fails with the port line, and the job is
// submitted again, as the local launcher retries.
const pickPort = `pick_port() {
  local p i
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}
`

// shellQuote quotes s for bash, always.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// scripts returns the batch script and the per-node task script of an
// attempt, whose endpoint file is endpoint.
func (s *SlurmServer) scripts(endpoint string) (batch, task string, err error) {
	eng := s.eng()
	var b strings.Builder
	b.WriteString("#!/bin/bash\n# sgtune: one trial's server as a Slurm job (generated; see launcher/slurm.go).\n")
	for _, kv := range s.spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validEnvName(k) {
			return "", "", fmt.Errorf("launcher: environment entry %q is not NAME=VALUE", kv)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
	}
	taskPath := shellQuote(filepath.Join(s.dir, "task.sh"))
	if n := max(s.opt.Nodes, 1); n > 1 {
		// The first node of the allocation runs the batch script: the
		// distributed init address is its address and a free port on it.
		b.WriteString(pickPort)
		b.WriteString(`first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node -o "$first" | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
dport=$(pick_port) || { echo "sgtune: no free port for the distributed init address on $first" >&2; exit 1; }
export SGTUNE_DIST_INIT_ADDR="${addr:-$first}:$dport"
echo "` + notePrefix + `job $SLURM_JOB_ID on $SLURM_JOB_NODELIST: distributed init address $SGTUNE_DIST_INIT_ADDR"
`)
		fmt.Fprintf(&b, "exec srun --nodes=%d --ntasks=%d --ntasks-per-node=1 --kill-on-bad-exit=1 bash %s\n", n, n, taskPath)
	} else {
		fmt.Fprintf(&b, "exec bash %s\n", taskPath)
	}

	var t strings.Builder
	t.WriteString("#!/bin/bash\n# sgtune: one task (node) of a trial's Slurm job (generated).\n")
	t.WriteString(pickPort)
	ep := shellQuote(endpoint)
	epTmp := shellQuote(endpoint + ".tmp")
	fmt.Fprintf(&t, `rank=${SLURM_NODEID:-0}
node=${SLURMD_NODENAME:-$(hostname)}
port=$(pick_port) || { echo "sgtune: no free port on node $node" >&2; exit 1; }
echo "%sjob ${SLURM_JOB_ID:-?} node $node rank $rank: port $port, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-}"
if [ "$rank" = 0 ]; then
  printf '%%s %%s %%s\n' "$node" "$port" "${CUDA_VISIBLE_DEVICES-}" >%s && mv -f %s %s
fi
`, notePrefix, epTmp, epTmp, ep)
	// The engine's own launch flags (metrics, a log level with the facts) as Start adds them.
	t.WriteString("exec " + shell.Join(slices.Concat(s.spec.Argv, eng.LaunchFlags)))
	if n := max(s.opt.Nodes, 1); n > 1 {
		f := s.opt.NodeFlags
		if f.NNodes == "" || f.NodeRank == "" || f.DistInitAddr == "" {
			return "", "", errors.New("launcher: a multi-node Slurm job needs the engine's node flags")
		}
		fmt.Fprintf(&t, " %s %d %s \"$rank\" %s \"$SGTUNE_DIST_INIT_ADDR\"", f.NNodes, n, f.NodeRank, f.DistInitAddr)
	}
	fmt.Fprintf(&t, " %s 0.0.0.0 %s \"$port\"\n", eng.HostFlag, eng.PortFlag)
	return b.String(), t.String(), nil
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func (s *SlurmServer) eng() *engine.Engine {
	if s.spec.Engine == nil {
		return engine.SGLang
	}
	return s.spec.Engine
}

// StartSlurm submits spec as a Slurm job and waits until its server is
// ready, has failed, stayed pending past opt.PendingTimeout, or the startup
// timeout passed (counted from when the job runs). spec.GPUs is ignored:
// Slurm allocates the GPUs. On failure the error is a *Failure (the job
// ended before it was ready, classified from its log as the local launcher
// does; ClassSlurmPending; ClassStartupTimeout) and the job is cancelled;
// a job Slurm itself ended (node failure, preemption, a foreign scancel)
// or a failing sbatch give a plain error: nothing about the config. When
// ctx ends first the job is cancelled and the error wraps ctx's error.
func StartSlurm(ctx context.Context, spec Spec, opt SlurmOptions) (_ *SlurmServer, err error) {
	ctx, cancelStart := context.WithCancelCause(ctx)
	defer cancelStart(nil)
	if spec.Abort != nil {
		go func() { // ends when StartSlurm returns or on abort
			select {
			case <-spec.Abort:
				cancelStart(ErrAborted)
			case <-ctx.Done():
			}
		}()
	}
	if len(spec.Argv) == 0 {
		return nil, &Failure{Class: engine.ClassBadCommand, ExitCode: -1, Err: errors.New("empty command")}
	}
	if opt.PendingTimeout <= 0 {
		opt.PendingTimeout = DefaultPendingTimeout
	}
	if opt.Poll <= 0 {
		opt.Poll = time.Second
	}
	if opt.JobName == "" {
		opt.JobName = "sgtune"
	}
	s := &SlurmServer{spec: spec, opt: opt}
	red := newRedactor(append([]string{spec.APIKey}, spec.Secrets...))
	var out io.Writer
	if spec.LogPath != "" {
		logPath, err := filepath.Abs(spec.LogPath)
		if err != nil {
			return nil, fmt.Errorf("launcher: log path: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
			return nil, fmt.Errorf("launcher: log dir: %w", err)
		}
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("launcher: log file: %w", err)
		}
		s.logFile, out = f, f
		s.dir = JobDir(logPath)
		// No sink yet (closeLog needs one): the empty log is closed here.
		noJobDir := func(err error) error {
			s.logFile = nil
			if cerr := f.Close(); cerr != nil {
				return errors.Join(fmt.Errorf("launcher: job dir: %w", err), fmt.Errorf("launcher: close log: %w", cerr))
			}
			return fmt.Errorf("launcher: job dir: %w", err)
		}
		if err := os.RemoveAll(s.dir); err != nil {
			return nil, noJobDir(err)
		}
		if err := os.Mkdir(s.dir, 0o700); err != nil {
			return nil, noJobDir(err)
		}
	} else {
		// Without a log path only this host sees the job's files.
		d, err := os.MkdirTemp("", "sgtune-slurm-")
		if err != nil {
			return nil, fmt.Errorf("launcher: job dir: %w", err)
		}
		s.dir = d
	}
	s.sink = newLineSink(out, red, s.eng())
	defer func() { err = withLogErr(err, s.sink) }() // every failure below closed the log

	timeout := spec.StartupTimeout
	if timeout <= 0 {
		timeout = DefaultStartupTimeout
	}
	for s.attempt = 1; ; s.attempt++ {
		if s.attempt > 1 {
			s.sink.reset()
		}
		if err := s.submit(ctx); err != nil {
			s.cleanup()
			return nil, err
		}
		res, info, err := s.waitReady(ctx, timeout)
		switch res {
		case readyOK:
			s.exited = make(chan struct{})
			s.fast = make(chan struct{})
			go s.monitor()
			return s, nil
		case readyDied:
			s.tail.finish()
			_, _, m := s.sink.state()
			if m != nil && m.port && s.attempt < PortAttempts && ctx.Err() == nil {
				s.sink.note(fmt.Sprintf("job %s: the port was taken; submitting again", s.Job))
				continue
			}
			f, plain := s.endFailure(info, false)
			s.cleanup()
			if plain != nil {
				return nil, plain
			}
			return nil, f
		case readyCanceled:
			s.sink.note("start canceled; cancelling job " + s.Job)
			cerr := s.cancelJob(context.WithoutCancel(ctx))
			s.cleanup()
			return nil, errors.Join(fmt.Errorf("launcher: start canceled: %w", context.Cause(ctx)), cerr)
		case readyPending:
			why := fmt.Sprintf("Slurm job %s still pending after %s (Reason=%s); cancelled", s.Job, opt.PendingTimeout, info.Reason)
			s.sink.note(why)
			cerr := s.cancelJob(ctx)
			f := sinkFailure(s.sink, ClassSlurmPending, -1, nil, errors.New(why))
			s.cleanup()
			if cerr != nil {
				return nil, errors.Join(f, cerr)
			}
			return nil, f
		case readyTimeout:
			s.sink.note(fmt.Sprintf("not ready after %s; cancelling job %s", timeout, s.Job))
			cerr := s.cancelJob(ctx)
			f := sinkFailure(s.sink, engine.ClassStartupTimeout, -1, nil, fmt.Errorf("not ready within %s", timeout))
			s.cleanup()
			if cerr != nil {
				return nil, errors.Join(f, cerr)
			}
			return nil, f
		default: // the job vanished, or scontrol kept failing
			s.sink.note(fmt.Sprintf("job %s: %v", s.Job, err))
			cerr := s.cancelJob(ctx)
			s.cleanup()
			return nil, errors.Join(fmt.Errorf("launcher: slurm job %s: %w", s.Job, err), cerr)
		}
	}
}

// submit writes the attempt's scripts and submits the job.
func (s *SlurmServer) submit(ctx context.Context) error {
	outPath := filepath.Join(s.dir, fmt.Sprintf("out.%d", s.attempt))
	endpoint := filepath.Join(s.dir, fmt.Sprintf("endpoint.%d", s.attempt))
	batch, task, err := s.scripts(endpoint)
	if err != nil {
		return err
	}
	batchPath := filepath.Join(s.dir, "batch.sh")
	for p, text := range map[string]string{batchPath: batch, filepath.Join(s.dir, "task.sh"): task} {
		if err := os.WriteFile(p, []byte(text), 0o700); err != nil {
			return fmt.Errorf("launcher: job script: %w", err)
		}
	}
	args := append([]string{"--parsable", "--job-name=" + s.opt.JobName, "--output=" + outPath, "--open-mode=truncate"},
		sbatchArgs(s.opt)...)
	args = append(args, batchPath)
	s.sink.note(fmt.Sprintf("attempt %d: sbatch %s", s.attempt, shell.Join(args)))
	s.sink.note("server: " + shell.Join(s.spec.Argv))
	// The submission runs to its end even when ctx ends meanwhile: a job
	// submitted behind our back would run unseen; one we know of is
	// cancelled by the caller's cleanup.
	env := slices.DeleteFunc(jobEnv(os.Environ()), func(kv string) bool { // nor what the engine must not inherit
		k, _, _ := strings.Cut(kv, "=")
		return s.eng().Cleared(k)
	})
	out, err := slurmRunEnv(context.WithoutCancel(ctx), env, "sbatch", args...)
	if err != nil {
		s.sink.note(err.Error())
		return fmt.Errorf("%w: %w", ErrSubmit, err)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		return fmt.Errorf("launcher: sbatch printed %q, not a job ID", strings.TrimSpace(out))
	}
	s.Job, s.URL, s.Port, s.Nodes, s.GPUs = id, "", 0, nil, ""
	s.sink.note("submitted Slurm job " + id)
	if s.opt.Placed != nil {
		s.opt.Placed(SlurmPlacement{Job: id})
	}
	s.tail = startTail(outPath, s.sink)
	return nil
}

// readyPending and readyGone extend readyResult for jobs.
const (
	readyPending readyResult = iota + 100
	readyGone
)

// maxQueryFailures is how many failed state reads in a row end a start.
const maxQueryFailures = 30

// waitReady follows the submitted job until its server is ready or the
// start ends otherwise; info is the job's last state.
func (s *SlurmServer) waitReady(ctx context.Context, timeout time.Duration) (readyResult, jobInfo, error) {
	submitted := time.Now()
	endpoint := filepath.Join(s.dir, fmt.Sprintf("endpoint.%d", s.attempt))
	stateTick := time.NewTicker(s.opt.Poll)
	defer stateTick.Stop()
	probeTick := time.NewTicker(pollInterval)
	defer probeTick.Stop()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	var running, deadline time.Time
	markRunning := func(nodes string) {
		if running.IsZero() {
			running, deadline = time.Now(), time.Now().Add(timeout)
			s.sink.note(fmt.Sprintf("job %s running on %s after %.1fs in the queue", s.Job, nodes, time.Since(submitted).Seconds()))
		}
	}
	var info jobInfo
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return readyCanceled, info, nil
		case <-stateTick.C:
			i, err := queryJob(ctx, s.Job)
			if err != nil {
				if ctx.Err() != nil {
					return readyCanceled, info, nil
				}
				if failures++; failures >= maxQueryFailures {
					return readyGone, info, fmt.Errorf("cannot read its state: %w", err)
				}
				continue
			}
			failures, info = 0, i
			switch {
			case info.Gone:
				return readyGone, info, errors.New("Slurm no longer knows the job")
			case endedState(info.State):
				return readyDied, info, nil
			case pendingState(info.State):
				if time.Since(submitted) >= s.opt.PendingTimeout {
					return readyPending, info, nil
				}
			default:
				markRunning(info.NodeList)
				if time.Now().After(deadline) {
					return readyTimeout, info, nil
				}
			}
		case <-probeTick.C:
			if s.URL == "" {
				ok, err := s.readEndpoint(ctx, endpoint)
				if err != nil {
					s.sink.note(err.Error())
				}
				if !ok {
					continue
				}
				markRunning(strings.Join(s.Nodes, ","))
			}
			if _, ready, _ := s.sink.state(); s.eng().ReadyLine != "" && !ready {
				continue
			}
			if probeHealth(ctx, client, s.URL+s.eng().HealthPath, s.spec.APIKey) {
				facts, _, _ := s.sink.state()
				facts.StartupS = time.Since(running).Seconds()
				s.Facts = facts
				return readyOK, info, nil
			}
		}
	}
}

// readEndpoint reads the file the job's first task wrote: its node, port
// and CUDA_VISIBLE_DEVICES. ok is false while it is not there yet.
func (s *SlurmServer) readEndpoint(ctx context.Context, path string) (ok bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, nil
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return false, nil // being written
	}
	port, err := strconv.Atoi(f[1])
	if err != nil || port <= 0 {
		return false, fmt.Errorf("job %s wrote a bad endpoint %q", s.Job, strings.TrimSpace(string(b)))
	}
	info, err := queryJob(ctx, s.Job)
	if err != nil {
		return false, err
	}
	nodes, err := nodeNames(ctx, info.NodeList)
	if err != nil {
		return false, err
	}
	// The server's node first, then the others in Slurm's order.
	all := []string{f[0]}
	for _, n := range nodes {
		if n != f[0] {
			all = append(all, n)
		}
	}
	addr, err := nodeAddr(ctx, f[0])
	if err != nil {
		return false, err
	}
	s.Nodes, s.Port = all, port
	if len(f) > 2 {
		s.GPUs = f[2]
	}
	s.URL = "http://" + hostPort(addr, port)
	s.sink.note(fmt.Sprintf("job %s serves on node %s at %s (CUDA_VISIBLE_DEVICES=%s)", s.Job, f[0], s.URL, s.GPUs))
	if s.opt.Placed != nil {
		s.opt.Placed(SlurmPlacement{Job: s.Job, Nodes: all, GPUs: s.GPUs})
	}
	return true, nil
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// probeHealth reports whether GET url answered 200 (the API key is sent
// for engines whose health path needs it).
func probeHealth(ctx context.Context, client *http.Client, url, apiKey string) bool {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// endFailure classifies a job that ended on its own. States that say
// nothing of the config (a node failed, the job was preempted or cancelled
// by someone else, Slurm forgot it) give plain before it was ready; after
// it, a Failure of class slurm_<state>.
func (s *SlurmServer) endFailure(info jobInfo, readyBefore bool) (f *Failure, plain error) {
	_, _, m := s.sink.state()
	code := info.ExitCode
	state := info.State
	if info.Gone {
		state = "GONE"
	}
	s.sink.note(fmt.Sprintf("job %s ended %s (exit code %d, Reason=%s)", s.Job, state, code, info.Reason))
	var class string
	switch state {
	case "COMPLETED", "FAILED":
		class = classify(m, code, readyBefore)
		if (m == nil || m.sig == nil) && (code == 126 || code == 127) {
			class = engine.ClassBadCommand // the job's exec could not run the command
		}
	case "OUT_OF_MEMORY":
		class = engine.ClassOOM
	case "TIMEOUT":
		class = ClassSlurmTimeLimit
	default:
		if !readyBefore {
			return nil, fmt.Errorf("launcher: slurm job %s ended %s (Reason=%s) before its server was ready", s.Job, state, info.Reason)
		}
		class = "slurm_" + strings.ToLower(state)
	}
	return sinkFailure(s.sink, class, code, m, nil), nil
}

// monitor follows a ready server's job until it ends, then records how.
func (s *SlurmServer) monitor() {
	defer close(s.exited)
	interval := s.opt.Poll
	fast := s.fast
	for {
		select {
		case <-fast:
			interval, fast = min(interval, 250*time.Millisecond), nil
			continue
		case <-time.After(interval):
		}
		info, err := queryJob(context.Background(), s.Job)
		if err != nil || !(info.Gone || endedState(info.State)) {
			continue // a busy controller is asked again
		}
		s.tail.finish()
		s.mu.Lock()
		if !s.stopping {
			f, _ := s.endFailure(info, true)
			s.failure = f
		}
		s.mu.Unlock()
		return
	}
}

// Exited is closed when the job has ended and Failure is final.
func (s *SlurmServer) Exited() <-chan struct{} { return s.exited }

// LogTail returns the last n log lines (redacted).
func (s *SlurmServer) LogTail(n int) string { return s.sink.Tail(n) }

// LogErr returns the first error writing or closing the log file
// (Spec.LogPath), nil when there was none; final once Stop returned.
func (s *SlurmServer) LogErr() error { return s.sink.logErr() }

// Failure classifies how the job ended; nil while it runs (unless
// MarkHang was called) or after a clean Stop.
func (s *SlurmServer) Failure() *Failure {
	return s.failureOr(func() *Failure { return hangFailure(s.sink, -1) })
}

// Stop cancels the job (scancel: SIGTERM to its processes, SIGKILL after
// Spec.Grace) and waits until Slurm reports it ended, then closes the log
// and removes the job's directory. Safe to call more than once; later
// calls wait for the first. An error means the job could not be ended.
func (s *SlurmServer) Stop(ctx context.Context) error {
	return s.stopOnce(ctx, func() error {
		// A job that ended on its own just before Stop is a failure, not a
		// stop: ask Slurm before deciding.
		if info, err := queryJob(ctx, s.Job); err == nil && (info.Gone || endedState(info.State)) {
			close(s.fast)
			<-s.exited
		} else {
			s.markStopping(s.exited)
			close(s.fast)
			s.sink.note("stopping: cancelling job " + s.Job)
		}
		err := s.cancelJob(ctx)
		if err == nil {
			<-s.exited
		}
		s.cleanup()
		return err
	})
}

// cancelJob ends the job: SIGTERM to every step, up to Spec.Grace for it
// to end, then scancel (Slurm's own SIGTERM, KillWait, SIGKILL); with
// Spec.Abort closed SIGKILL at once. It waits until the job ended, up to
// Spec.ReleaseTimeout (default 2 minutes).
func (s *SlurmServer) cancelJob(ctx context.Context) error {
	grace := s.spec.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	release := s.spec.ReleaseTimeout
	if release <= 0 {
		release = 2 * time.Minute
	}
	bg := context.WithoutCancel(ctx)
	info, err := queryJob(bg, s.Job)
	if err == nil && (info.Gone || endedState(info.State)) {
		return nil
	}
	signal := "TERM"
	if s.aborted() {
		signal = "KILL"
	}
	if err == nil && !pendingState(info.State) {
		_, _ = slurmRun(bg, "scancel", "--signal="+signal, "--full", s.Job) // fails harmlessly if it just ended
		if s.waitEnded(ctx, grace) == nil {
			return nil
		}
	}
	if _, err := slurmRun(bg, "scancel", s.Job); err != nil && !strings.Contains(err.Error(), "already complet") {
		s.sink.note(err.Error())
	}
	wctx, cancel := context.WithTimeout(bg, release)
	defer cancel()
	if err := s.waitEnded(wctx, release); err != nil {
		s.sink.note(err.Error())
		return fmt.Errorf("launcher: slurm job %s: %w", s.Job, err)
	}
	return nil
}

// waitEnded polls until the job ended, for up to d or until ctx ends (or
// Spec.Abort, which also cuts the wait).
func (s *SlurmServer) waitEnded(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	var last jobInfo
	for {
		info, err := queryJob(context.WithoutCancel(ctx), s.Job)
		if err == nil {
			if info.Gone || endedState(info.State) {
				return nil
			}
			last = info
		}
		if time.Now().After(end) {
			return fmt.Errorf("still %s %s after scancel", last.State, d)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still %s when the wait was cut short: %w", last.State, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (s *SlurmServer) aborted() bool {
	select {
	case <-s.spec.Abort:
		return true
	default:
		return false
	}
}

// cleanup ends the log copy, closes the log and removes the job's
// directory: its raw output is not redacted.
func (s *SlurmServer) cleanup() {
	if s.tail != nil {
		s.tail.finish()
	}
	s.closeLog()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// closeLog flushes and closes the log file; its error is kept as LogErr's.
func (s *SlurmServer) closeLog() {
	s.sink.flush()
	if s.logFile != nil {
		s.sink.closeOut(s.logFile)
		s.logFile = nil // a second close would report os.ErrClosed
	}
}

// tailer copies a file another host appends to (the job's output) into a
// sink, polling: the file may live on a network filesystem.
type tailer struct {
	path string
	sink *lineSink
	stop chan struct{}
	done chan struct{}
	once sync.Once
	off  int64
}

// tailEvery is how often the job's output file is read.
var tailEvery = 100 * time.Millisecond

func startTail(path string, sink *lineSink) *tailer {
	t := &tailer{path: path, sink: sink, stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // owned by the server: ends when finish is called
		defer close(t.done)
		for {
			select {
			case <-t.stop:
				t.read() // what the job wrote last
				return
			case <-time.After(tailEvery):
				t.read()
			}
		}
	}()
	return t
}

// read copies what was appended since the last read.
func (t *tailer) read() {
	f, err := os.Open(t.path)
	if err != nil {
		return // not created yet
	}
	defer f.Close()
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return
	}
	n, _ := io.Copy(t.sink, f)
	t.off += n
}

// finish reads the rest of the file and stops the copy.
func (t *tailer) finish() {
	t.once.Do(func() { close(t.stop) })
	<-t.done
}

// CancelSlurmJobs cancels what a dead worker left in the queue: the job
// with ID job (none when "") and every active job named name (sgtune names
// each trial's job uniquely), waits until they ended, and returns their
// IDs.
func CancelSlurmJobs(ctx context.Context, job, name string) ([]string, error) {
	var ids []string
	if job != "" {
		if info, err := queryJob(ctx, job); err == nil && !info.Gone && !endedState(info.State) {
			ids = append(ids, job)
		}
	}
	if name != "" {
		out, err := slurmRun(ctx, "squeue", "-h", "-o", "%i", "--name="+name)
		if err != nil {
			return nil, err
		}
		for _, id := range strings.Fields(out) {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	var errs []error
	for _, id := range ids {
		if _, err := slurmRun(ctx, "scancel", id); err != nil && !strings.Contains(err.Error(), "already complet") {
			errs = append(errs, err)
		}
	}
	for _, id := range ids {
		s := &SlurmServer{Job: id}
		if err := s.waitEnded(ctx, 2*time.Minute); err != nil {
			errs = append(errs, fmt.Errorf("slurm job %s: %w", id, err))
		}
	}
	return ids, errors.Join(errs...)
}

package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/internal/slurmtest"
)

func TestParseJob(t *testing.T) {
	tests := []struct {
		name, rec string
		want      jobInfo
	}{
		{"running", "JobId=5 JobName=x JobState=RUNNING Reason=None ExitCode=0:0 ReqNodeList=(null) ExcNodeList=(null) NodeList=node1 BatchHost=node1",
			jobInfo{State: "RUNNING", Reason: "None", NodeList: "node1"}},
		{"pending", "JobId=6 JobState=PENDING Reason=Resources ExitCode=0:0 NodeList=(null)",
			jobInfo{State: "PENDING", Reason: "Resources"}},
		{"failed", "JobId=7 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 NodeList=node[1-2]",
			jobInfo{State: "FAILED", Reason: "NonZeroExitCode", NodeList: "node[1-2]", ExitCode: 3}},
		{"signal", "JobId=8 JobState=CANCELLED Reason=None ExitCode=0:9 NodeList=node2",
			jobInfo{State: "CANCELLED", Reason: "None", NodeList: "node2", ExitCode: 137}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseJob(tc.rec); got != tc.want {
				t.Errorf("parseJob = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSlurmTime(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute:                "0-00:01:00",
		90 * time.Second:           "0-00:02:00",
		2 * time.Hour:              "0-02:00:00",
		49*time.Hour + time.Minute: "2-01:01:00",
	} {
		if got := slurmTime(d); got != want {
			t.Errorf("slurmTime(%s) = %s, want %s", d, got, want)
		}
	}
}

// TestSlurm runs the simulator as Slurm jobs on a local two-node cluster
// with fake GPUs (scripts/slurm-up.sh).
// TestSlurmJobDirFailure: a job directory that cannot be made (here a
// name one past the filesystem's 255 bytes; a full disk in practice) is an
// error naming it, with the log closed. Before, StartSlurm closed the log
// through a sink it had not made yet and panicked (nil pointer), taking
// the whole run down. No Slurm is needed: the job dir comes before sbatch.
func TestSlurmJobDirFailure(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), strings.Repeat("a", 251)+".log") // 255 bytes; its .slurm dir is 257
	spec := Spec{Argv: []string{"true"}, LogPath: logPath}
	srv, err := StartSlurm(context.Background(), spec, SlurmOptions{})
	if srv != nil || err == nil || !strings.Contains(err.Error(), "launcher: job dir: ") {
		t.Fatalf("StartSlurm = %v, %v; want a job dir error", srv, err)
	}
	if _, serr := os.Stat(logPath); serr != nil {
		t.Errorf("log file: %v", serr)
	}
}

func TestSlurm(t *testing.T) {
	bin := buildSim(t)
	slurmtest.Start(t, 2, 8)
	opt := SlurmOptions{GPURequest: "--gres=gpu:4", PendingTimeout: time.Minute, Poll: 250 * time.Millisecond, JobName: "sgtune-launcher-test"}

	t.Run("ready, served over the network, stopped without a job left", func(t *testing.T) {
		const key = "sk-slurm-test-81c2"
		tag := fmt.Sprintf("SGTUNE_TRIAL=launcher-test/%d/1", os.Getpid())
		spec := simSpec(t, bin, "--max-running-requests", "64", "--api-key", key)
		spec.APIKey, spec.Env = key, []string{tag}
		spec.GPUs = []int{6, 7} // ignored: Slurm allocates
		var mu sync.Mutex
		var placed []SlurmPlacement
		o := opt
		o.Placed = func(p SlurmPlacement) { mu.Lock(); placed = append(placed, p); mu.Unlock() }
		srv, err := StartSlurm(context.Background(), spec, o)
		if err != nil {
			t.Fatalf("StartSlurm: %v", startErr(err))
		}
		// Each job is reported submitted, then placed; a job whose port was
		// taken on its node is submitted again (CI saw it once), so the
		// last pair is the server's job.
		if n := len(placed); n < 2 || n%2 != 0 || placed[n-2].Job != srv.Job || placed[n-1].Job != srv.Job ||
			len(placed[n-2].Nodes) != 0 || len(placed[n-1].Nodes) != 1 {
			t.Errorf("placements %+v for job %s", placed, srv.Job)
		}
		// CUDA_VISIBLE_DEVICES is Slurm's: four GPUs, whatever spec.GPUs said.
		if strings.Count(srv.GPUs, ",") != 3 || srv.GPUs == "6,7" {
			t.Errorf("GPUs %q, want the four Slurm allocated", srv.GPUs)
		}
		if srv.Facts.MaxRunningRequests <= 0 || srv.Facts.StartupS <= 0 {
			t.Errorf("facts %+v", srv.Facts)
		}
		if n := taggedProcesses(t, tag); n == 0 {
			t.Error("no server process carries the trial's tag")
		}
		// The server answers a chat request at the node's address.
		body := `{"model":"zai-org/GLM-5.3-Flash","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("chat request to %s: %v", srv.URL, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"completion_tokens"`)) {
			t.Errorf("chat: %d %s", resp.StatusCode, b)
		}
		if err := srv.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if f := srv.Failure(); f != nil {
			t.Errorf("Failure after a clean stop: %+v", f)
		}
		if active := activeJobs(t); active != "" {
			t.Errorf("jobs left in the queue after Stop:\n%s", active)
		}
		if n := taggedProcesses(t, tag); n != 0 {
			t.Errorf("%d server process(es) left after Stop", n)
		}
		if _, err := os.Stat(strings.TrimSuffix(spec.LogPath, ".log") + ".slurm"); !os.IsNotExist(err) {
			t.Errorf("the job's directory (raw, unredacted output) was not removed: %v", err)
		}
		log, err := os.ReadFile(spec.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(log), key) || !strings.Contains(string(log), "api_key='<redacted>'") {
			t.Error("the log is not redacted")
		}
		if !strings.Contains(string(log), "The server is fired up and ready to roll!") || !strings.Contains(string(log), "submitted Slurm job "+srv.Job) {
			t.Errorf("the log lacks the job's output or the launcher's notes:\n%s", log)
		}
	})

	t.Run("startup failure classified from the job's log", func(t *testing.T) {
		for _, tc := range []struct {
			name, class, excerpt string
			exit                 int
			flags                []string
		}{
			{"oom", engine.ClassOOM, "torch.OutOfMemoryError: CUDA out of memory", 1, []string{"--chunked-prefill-size", "16384", "--mem-fraction-static", "0.88"}},
			{"unknown flag", engine.ClassBadCommand, "unrecognized arguments: --no-such-flag", 2, []string{"--no-such-flag"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				srv, err := StartSlurm(context.Background(), simSpec(t, bin, tc.flags...), opt)
				if srv != nil {
					srv.Stop(context.Background())
					t.Fatalf("StartSlurm succeeded, want %s", tc.class)
				}
				var f *Failure
				if !errors.As(err, &f) {
					t.Fatalf("err %v is not a *Failure", err)
				}
				if f.Class != tc.class || f.ExitCode != tc.exit || !strings.Contains(f.Excerpt, tc.excerpt) {
					t.Errorf("class %s exit %d, want %s exit %d; excerpt:\n%s", f.Class, f.ExitCode, tc.class, tc.exit, f.Excerpt)
				}
			})
		}
	})

	t.Run("pending past its limit is cancelled and reported", func(t *testing.T) {
		// A job holding every GPU of both nodes keeps the trial's pending.
		out, err := exec.Command("sbatch", "--parsable", "--job-name=blocker", "--nodes=2", "--gres=gpu:8",
			"--output=/dev/null", "--wrap=sleep 600").CombinedOutput()
		if err != nil {
			t.Fatalf("sbatch blocker: %v: %s", err, out)
		}
		blocker := strings.TrimSpace(string(out))
		defer exec.Command("scancel", blocker).Run()
		waitState(t, blocker, "RUNNING")
		o := opt
		o.PendingTimeout = 3 * time.Second
		var job string
		o.Placed = func(p SlurmPlacement) { job = p.Job }
		start := time.Now()
		srv, err := StartSlurm(context.Background(), simSpec(t, bin), o)
		if srv != nil {
			srv.Stop(context.Background())
			t.Fatal("StartSlurm succeeded while every GPU was taken")
		}
		var f *Failure
		if !errors.As(err, &f) || f.Class != ClassSlurmPending || !strings.Contains(f.Reason, "pending") {
			t.Fatalf("err %v, want a %s failure", err, ClassSlurmPending)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("gave up after %s with a 3s pending limit", d)
		}
		if st := jobState(t, job); st != "CANCELLED" {
			t.Errorf("the pending job %s is %s, want CANCELLED", job, st)
		}
	})

	t.Run("two nodes: one task each with the node flags", func(t *testing.T) {
		o := opt
		o.Nodes, o.GPURequest, o.NodeFlags = 2, "--gres=gpu:2", SGLangNodeFlags
		spec := simSpec(t, bin)
		srv, err := StartSlurm(context.Background(), spec, o)
		if err != nil {
			t.Fatalf("StartSlurm: %v", startErr(err))
		}
		nodes := srv.Nodes
		if err := srv.Stop(context.Background()); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if len(nodes) != 2 {
			t.Errorf("nodes %v, want two", nodes)
		}
		log, _ := os.ReadFile(spec.LogPath)
		for _, want := range []string{"nnodes=2", "node_rank=0", "node_rank=1", "dist_init_addr='"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("no %s in the servers' output", want)
			}
		}
		if active := activeJobs(t); active != "" {
			t.Errorf("jobs left: %s", active)
		}
	})
}

// startErr shows a failed start with its log tail.
func startErr(err error) string {
	var f *Failure
	if errors.As(err, &f) {
		return fmt.Sprintf("%v\n%s", err, f.Tail)
	}
	return err.Error()
}

// activeJobs lists the cluster's pending, running or completing jobs.
func activeJobs(t *testing.T) string {
	out, err := exec.Command("squeue", "-h", "-o", "%i %j %T").CombinedOutput()
	if err != nil {
		t.Fatalf("squeue: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func jobState(t *testing.T, id string) string {
	info, err := queryJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

func waitState(t *testing.T, id, want string) {
	for range 120 {
		if jobState(t, id) == want {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("job %s never %s", id, want)
}

// taggedProcesses counts live processes whose environment holds tag.
func taggedProcesses(t *testing.T, tag string) int {
	names, err := filepath.Glob("/proc/[0-9]*/environ")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(append([]byte{0}, b...), append(append([]byte{0}, tag...), 0)) {
			continue
		}
		stat, err := os.ReadFile(strings.TrimSuffix(p, "environ") + "stat")
		if err != nil {
			continue
		}
		if st, _, ok := parseStat(string(stat)); ok && st != 'Z' {
			n++
		}
	}
	return n
}

func TestJobEnv(t *testing.T) {
	got := jobEnv([]string{"PATH=/bin", "SGTUNE_STORAGE=postgres://u:pw@db/t", "SLURM_CONF=/etc/slurm.conf", "PGPASSWORD=pw", "SGTUNE_STORAGEX=1"})
	want := []string{"PATH=/bin", "SLURM_CONF=/etc/slurm.conf", "SGTUNE_STORAGEX=1"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("jobEnv = %v, want %v", got, want)
	}
}

// TestCheckSlurmCause: sbatch refusing the job is bad input (the study's
// partition, gres...); sbatch that cannot find or reach the controller is
// the cluster's fault (exit 1), and says so. Fake client commands stand in
// for Slurm's.
func TestCheckSlurmCause(t *testing.T) {
	for _, tc := range []struct {
		name, stderr string
		bad          bool
		want         string
	}{
		{"no such partition", "sbatch: error: invalid partition specified: nosuch", true, "sbatch refuses a trial's job"},
		{"no configuration", "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\nsbatch: error: fetch_config: DNS SRV lookup failed\nsbatch: fatal: Could not establish a configuration source",
			false, "sbatch cannot reach the Slurm controller"},
		{"controller down", "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", false, "sbatch cannot reach the Slurm controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, c := range []string{"scontrol", "scancel"} {
				if err := os.WriteFile(filepath.Join(dir, c), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			script := fmt.Sprintf("#!/bin/sh\ncat >&2 <<'EOF'\n%s\nEOF\nexit 1\n", tc.stderr)
			if err := os.WriteFile(filepath.Join(dir, "sbatch"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			err := CheckSlurm(context.Background(), SlurmOptions{Partition: "nosuch"})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if got := errext.Code(err) == errext.BadInput; got != tc.bad {
				t.Errorf("bad input %v, want %v: %v", got, tc.bad, err)
			}
		})
	}
}

// TestSbatchArgsCPUs: a CPU engine's job asks for its cores and no GPU.
func TestSbatchArgsCPUs(t *testing.T) {
	got := sbatchArgs(SlurmOptions{CPUsPerTask: 2, Partition: "debug"})
	if !slices.Contains(got, "--cpus-per-task=2") || slices.ContainsFunc(got, func(a string) bool { return strings.Contains(a, "gpu") }) {
		t.Errorf("sbatch args %v, want --cpus-per-task=2 and no GPU request", got)
	}
}

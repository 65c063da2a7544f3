package search

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/internal/slurmtest"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// TestSlurmBackend runs the cluster demo's study (the simulator as Slurm
// jobs on a local two-node cluster) through the study loop: every trial
// is started, measured and stopped through the Slurm backend, and stores
// its job and node.
func TestSlurmBackend(t *testing.T) {
	slurmtest.Start(t, 2, 8)
	slurmtest.Build(t, "./cmd/sglang-sim")
	path := filepath.Join("..", "testdata", "studies", "cluster-sim.yaml")
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(text), "trials: 40", "trials: 4", 1)
	doc = strings.Replace(doc, "parallel: 1 ", "parallel: 2 ", 1)
	st, err := space.Parse(path, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	store, err := storage.Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var lines []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Options{Study: st, Store: store, LogDir: t.TempDir(),
		Events: func(ev Event) { lines = append(lines, ev.Text) }})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, strings.Join(lines, "\n"))
	}
	if sum.Launched != 4 || sum.Complete+sum.Failed != 4 || sum.Complete == 0 {
		t.Fatalf("launched %d, complete %d, failed %d; want 4 launched\n%s", sum.Launched, sum.Complete, sum.Failed, strings.Join(lines, "\n"))
	}
	jobs := map[string]bool{}
	for _, r := range sum.Records {
		if r.State != StateComplete && r.State != StateFailed {
			continue
		}
		if r.SlurmJob == "" || jobs[r.SlurmJob] || (r.Host != "node1" && r.Host != "node2") {
			t.Errorf("trial %d: job %q host %q", r.Number, r.SlurmJob, r.Host)
		}
		jobs[r.SlurmJob] = true
		if r.State == StateComplete && (r.Score == nil || len(r.Medians()) != 2 || strings.Count(r.GPUs, ",") != 3) {
			t.Errorf("trial %d: score %v, medians %v, GPUs %q", r.Number, r.Score, r.Medians(), r.GPUs)
		}
	}
	if active := slurmtest.ActiveJobs(t); active != "" {
		t.Errorf("jobs left in the queue:\n%s", active)
	}

	// With every GPU of the cluster taken, one more trial stays pending:
	// it is cancelled at launch.slurm.pending_timeout and stored as failed.
	out, err := exec.Command("sbatch", "--parsable", "--nodes=2", "--gres=gpu:8", "--output=/dev/null", "--wrap=sleep 600").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v: %s", err, out)
	}
	blocker := strings.TrimSpace(string(out))
	defer exec.Command("scancel", blocker).Run()
	st.Launch.Slurm.PendingTimeout = 3 * time.Second
	sum, err = Run(ctx, Options{Study: st, Store: store, LogDir: t.TempDir(), Trials: 5, Parallel: 1})
	if err != nil {
		t.Fatal(err)
	}
	last := sum.Records[len(sum.Records)-1]
	if last.State != StateFailed || last.FailureClass != launcher.ClassSlurmPending || last.SlurmJob == "" || last.Host != "" {
		t.Errorf("trial %d: %s %s job %q host %q (%s), want failed %s", last.Number, last.State, last.FailureClass, last.SlurmJob, last.Host, last.Reason, launcher.ClassSlurmPending)
	}
	if active := slurmtest.ActiveJobs(t); strings.Count(active, "\n") != 0 || !strings.HasPrefix(active, blocker+" ") {
		t.Errorf("jobs in the queue besides the blocker %s:\n%s", blocker, active)
	}

	// A job sbatch refuses (no such partition) is bad input, found before
	// the storage holds anything of the study.
	bad, err := space.Parse(path, []byte(strings.Replace(doc, "partition: debug", "partition: nosuch", 1)))
	if err != nil {
		t.Fatal(err)
	}
	empty, err := storage.Open(filepath.Join(t.TempDir(), "empty.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	_, err = Run(ctx, Options{Study: bad, Store: empty, LogDir: t.TempDir()})
	if errext.Code(err) != errext.BadInput || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("partition nosuch: exit %d: %v", errext.Code(err), err)
	}
	if _, err := Records(empty, bad.Name); !errors.Is(err, ErrNoStudy) {
		t.Errorf("partition nosuch: the storage holds the study (%v)", err)
	}
}

func TestTrialOfSpec(t *testing.T) {
	r := &runner{st: &space.Study{Name: "my study"}, uid: "ab12"}
	for _, tc := range []struct {
		env  []string
		n    int
		want bool
	}{
		{[]string{"A=1", r.trialTag(17)}, 17, true},
		{[]string{"SGTUNE_TRIAL=my_study/other/3"}, 0, false},
		{[]string{"SGTUNE_TRIAL=my_study/ab12/x"}, 0, false},
		{nil, 0, false},
	} {
		n, ok := r.trialOfSpec(launcher.Spec{Env: tc.env})
		if n != tc.n || ok != tc.want {
			t.Errorf("trialOfSpec(%v) = %d, %v; want %d, %v", tc.env, n, ok, tc.n, tc.want)
		}
	}
	if got := r.jobName(17); got != "sgtune-my_study-ab12-17" {
		t.Errorf("jobName = %q", got)
	}
}

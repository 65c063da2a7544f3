package space

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadSlurmErrors(t *testing.T) {
	slurm := base + "gpus: {per_trial: 4}\nlaunch:\n  scheduler: slurm\n"
	tests := []struct {
		name, doc, want string
	}{
		{"scheduler", base + "launch: {scheduler: pbs}\n", `t.yaml:6:21: launch.scheduler: "pbs"; valid: local (default: processes on this host) or slurm`},
		{"slurm without scheduler", base + "launch: {slurm: {nodes: 1}}\n", "launch.slurm: set, but launch.scheduler is local; valid: scheduler: slurm"},
		{"stale_after short", base + "launch: {stale_after: 5s}\n", "launch.stale_after: 5s is too short; valid: a Go duration of at least 20s"},
		{"groups with slurm", base + "gpus: {per_trial: 1, groups: [[0], [1]]}\nlaunch: {scheduler: slurm}\n",
			"t.yaml:6:30: gpus.groups: not used with launch.scheduler slurm"},
		{"parallel zero", slurm + "budget: {parallel: 0}\n", "budget.parallel: 0; valid: 1 or more"},
		{"unknown field", slurm + "  slurm: {partitoin: gpu}\n", "launch.slurm.partitoin: unknown field (did you mean partition?)"},
		{"partition", slurm + "  slurm: {partition: 'a b'}\n", `launch.slurm.partition: "a b"; valid: one Slurm partition name`},
		{"time_limit", slurm + "  slurm: {time_limit: 30s}\n", "launch.slurm.time_limit: 30s; valid: a Go duration of at least 1m"},
		{"time_limit int", slurm + "  slurm: {time_limit: 30}\n", "launch.slurm.time_limit: got an integer (30); valid: a Go duration"},
		{"pending_timeout", slurm + "  slurm: {pending_timeout: 0s}\n", "launch.slurm.pending_timeout: must be positive"},
		{"nodes zero", slurm + "  slurm: {nodes: 0}\n", "launch.slurm.nodes: 0; valid: 1 or more"},
		{"nodes split", slurm + "  slurm: {nodes: 3}\n", "launch.slurm.nodes: 3 nodes do not split gpus.per_trial = 4 evenly"},
		{"nodes fixed flag", strings.Replace(slurm, "gpus:", "fixed: {--nnodes: 2}\ngpus:", 1) + "  slurm: {nodes: 2}\n",
			"launch.slurm.nodes: 2 with --nnodes in fixed"},
		{"gpus_per_node", slurm + "  slurm: {gpus_per_node: 8}\n", "launch.slurm.gpus_per_node: 8; valid: gpus.per_trial / launch.slurm.nodes = 4"},
		{"gres count", slurm + "  slurm: {gres: 'gpu:h200:8'}\n", `launch.slurm.gres: "gpu:h200:8" asks for 8 GPUs per node; valid: gpus.per_trial / launch.slurm.nodes = 4`},
		{"gres form", slurm + "  slurm: {gres: 'tpu:4'}\n", `launch.slurm.gres: "tpu:4"; valid: gpu:COUNT or gpu:TYPE:COUNT`},
		{"gres and gpus_per_node", slurm + "  slurm: {gres: 'gpu:4', gpus_per_node: 4}\n", "launch.slurm.gres: set together with gpus_per_node"},
		{"extra not an option", slurm + "  slurm: {extra_sbatch: [qos=high]}\n", `launch.slurm.extra_sbatch[0]: "qos=high"; valid: one sbatch option per item`},
		{"extra owned", slurm + "  slurm: {extra_sbatch: ['--time=10']}\n", "launch.slurm.extra_sbatch[0]: --time is set by sgtune; valid: launch.slurm.time_limit"},
		{"extra owned short", slurm + "  slurm: {extra_sbatch: ['-N2']}\n", "launch.slurm.extra_sbatch[0]: -N is set by sgtune; valid: launch.slurm.nodes"},
		{"extra output", slurm + "  slurm: {extra_sbatch: ['--output=x']}\n", "--output is set by sgtune for every trial's job; valid: leave it out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error\n%v\nwant substring\n%s", err, tt.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "t.yaml:") {
					t.Errorf("line %q is not file:line:col: ...", line)
				}
			}
		})
	}
}

func TestLoadSlurm(t *testing.T) {
	tests := []struct {
		name, launch string
		gpus         int
		want         Slurm
		parallel     int
	}{
		{"defaults", "launch: {scheduler: slurm}\n", 4,
			Slurm{Nodes: 1, GPURequest: "--gres=gpu:4", PendingTimeout: 10 * time.Minute}, 1},
		{"everything", `budget: {parallel: 6}
launch:
  scheduler: slurm
  slurm:
    partition: gpu
    account: team
    time_limit: 2h
    pending_timeout: 90s
    nodes: 2
    gres: gpu:h200:4
    extra_sbatch: [--qos=high, --constraint=h200, --exclude=node7]
`, 8, Slurm{Partition: "gpu", Account: "team", TimeLimit: 2 * time.Hour, Nodes: 2, GPURequest: "--gres=gpu:h200:4",
			ExtraSbatch: []string{"--qos=high", "--constraint=h200", "--exclude=node7"}, PendingTimeout: 90 * time.Second}, 6},
		{"gpus per node", "launch: {scheduler: slurm, slurm: {gpus_per_node: 2, nodes: 2}}\n", 4,
			Slurm{Nodes: 2, GPURequest: "--gpus-per-node=2", PendingTimeout: 10 * time.Minute}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := base + "gpus: {per_trial: " + string(rune('0'+tt.gpus)) + "}\n" + tt.launch
			st, err := Parse("t.yaml", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			got := st.Launch.Slurm
			if !st.Slurmed() || got.Partition != tt.want.Partition || got.Account != tt.want.Account || got.TimeLimit != tt.want.TimeLimit ||
				got.Nodes != tt.want.Nodes || got.GPURequest != tt.want.GPURequest || got.PendingTimeout != tt.want.PendingTimeout ||
				!slices.Equal(got.ExtraSbatch, tt.want.ExtraSbatch) {
				t.Errorf("launch.slurm = %+v, want %+v", got, tt.want)
			}
			if st.Budget.Parallel != tt.parallel {
				t.Errorf("budget.parallel = %d, want %d", st.Budget.Parallel, tt.parallel)
			}
		})
	}
	st, err := Parse("t.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if st.Slurmed() || st.Launch.Scheduler != SchedulerLocal || st.Launch.StaleAfter != 2*time.Minute {
		t.Errorf("defaults: %+v", st.Launch)
	}
	st, err = Parse("t.yaml", []byte(base+"launch: {stale_after: 20s}\n"))
	if err != nil || st.Launch.StaleAfter != 20*time.Second {
		t.Errorf("stale_after 20s: %v %+v", err, st)
	}
}

// TestLoadSlurmCPUEngine: a llama.cpp (CPU) study's jobs ask for
// cpus.per_trial cores and no GPU (sbatch asked for --gres=gpu:1, which a
// CPU partition refuses, and no cores); GPU options and several nodes are
// errors naming the engine.
func TestLoadSlurmCPUEngine(t *testing.T) {
	const cpu = llamaBase + "cpus: {per_trial: 2}\n"
	st, err := Parse("t.yaml", []byte(cpu+"launch: {scheduler: slurm, slurm: {partition: debug}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Launch.Slurm; got.GPURequest != "" || got.CPUsPerTask != 2 {
		t.Errorf("launch.slurm = %+v, want no GPU request and 2 CPUs per task", got)
	}
	for _, tc := range []struct{ slurm, want string }{
		{"{gres: gpu:1}", "launch.slurm.gres: llamacpp runs on CPUs: its jobs ask for no GPUs"},
		{"{gpus_per_node: 1}", "launch.slurm.gpus_per_node: llamacpp runs on CPUs"},
		{"{nodes: 2}", "launch.slurm.nodes: 2: multi-node trials need an engine launched with --nnodes"},
	} {
		_, err := Parse("t.yaml", []byte(cpu+"launch: {scheduler: slurm, slurm: "+tc.slurm+"}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("slurm %s: got %v, want %q", tc.slurm, err, tc.want)
		}
	}
}

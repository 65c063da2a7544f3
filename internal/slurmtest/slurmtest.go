// Package slurmtest starts a throwaway local Slurm cluster for tests:
// scripts/slurm-up.sh in a temporary directory (emulated nodes on
// 127.0.0.1, fake GPUs), stopped by scripts/slurm-down.sh when the test
// ends.
package slurmtest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start brings up a cluster of nodes emulated nodes with gpus fake GPUs
// each and points the test's Slurm clients at it (SLURM_CONF, inherited by
// the commands the test runs). It skips the test when Slurm's daemons are
// not installed (Debian: apt-get install slurm-wlm slurmctld slurmd
// munge; CI installs them) and fails it when they cannot start, e.g. when
// not run as root.
func Start(t testing.TB, nodes, gpus int) (dir string) {
	t.Helper()
	for _, c := range []string{"slurmctld", "slurmd", "munge", "sbatch"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("Slurm test skipped: %s is not installed (Debian: apt-get install -y slurm-wlm slurmctld slurmd munge)", c)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("a local Slurm cluster needs root (slurmd, mknod): run the Slurm tests as root")
	}
	up := filepath.Join(Root(), "scripts", "slurm-up.sh")
	down := filepath.Join(Root(), "scripts", "slurm-down.sh")
	dir = filepath.Join(t.TempDir(), "slurm")
	var out []byte
	var err error
	for attempt := 0; attempt < 3; attempt++ { // the ports may be taken meanwhile
		port := freePorts(t, nodes+1)
		cmd := exec.Command("bash", up, dir, strconv.Itoa(nodes), strconv.Itoa(gpus), strconv.Itoa(port))
		if out, err = cmd.CombinedOutput(); err == nil {
			break
		}
		_ = exec.Command("bash", down, dir).Run()
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		t.Fatalf("scripts/slurm-up.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if b, err := exec.Command("bash", down, dir).CombinedOutput(); err != nil {
			t.Errorf("scripts/slurm-down.sh: %v\n%s", err, b)
		}
	})
	t.Setenv("SLURM_CONF", filepath.Join(dir, "etc", "slurm.conf"))
	return dir
}

// freePorts returns a port p such that p .. p+n-1 are all free on
// 127.0.0.1 (slurmctld, then one slurmd per node).
func freePorts(t testing.TB, n int) int {
	for range 200 {
		p := 20000 + rand.IntN(20000)
		ok := true
		for i := range n {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatal("no free port range for a Slurm cluster")
	return 0
}

// Build builds the repository's commands (e.g. "./cmd/sglang-sim") into a
// temporary directory, puts it first on the test's PATH (the jobs inherit
// it: study files name commands on PATH) and returns it. -short skips the
// test: no build at all.
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no build of " + strings.Join(pkgs, " "))
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(gobin, append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

// ActiveJobs lists the cluster's pending, running and completing jobs
// ("" when none).
func ActiveJobs(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("squeue", "-h", "-o", "%i %j %T").CombinedOutput()
	if err != nil {
		t.Fatalf("squeue: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

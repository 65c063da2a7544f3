package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/internal/slurmtest"
)

// TestWorkerKilledMidTrial runs three `sgtune worker` processes on one
// study of 8 launched trials (the cluster demo's, as Slurm jobs on a local
// cluster), kills one with SIGKILL during a trial, and checks from the
// storage that another worker ran that trial again and none was lost or
// launched twice. The storage is a throwaway PostgreSQL cluster
// (scripts/pg-up.sh), or a SQLite file when PostgreSQL's server binaries
// are not installed.
func TestWorkerKilledMidTrial(t *testing.T) {
	slurmtest.Start(t, 2, 8)
	bin := slurmtest.Build(t, "./cmd/sgtune", "./cmd/sglang-sim")
	dir := t.TempDir()
	text, err := os.ReadFile(filepath.Join(slurmtest.Root(), "testdata", "studies", "cluster-sim.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	study := filepath.Join(dir, "study.yaml")
	if err := os.WriteFile(study, []byte(strings.Replace(string(text), "trials: 40", "trials: 8", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := config{sgtune: filepath.Join(bin, "sgtune"), study: study, storage: testStorage(t, dir), dir: dir,
		workers: 3, killAfter: 2, timeout: 4 * time.Minute, out: &out}
	fig, err := run(ctx, c)
	t.Logf("%s\n%s", out.String(), fig)
	if err != nil {
		t.Fatal(err)
	}
	if fig.Killed < 0 {
		t.Fatal("no worker was killed")
	}
	if msg := fig.check(3, true); msg != "" {
		t.Errorf("%s (figures %s)", msg, fig)
		for i := range 3 {
			b, _ := os.ReadFile(filepath.Join(dir, "worker-"+strconv.Itoa(i)+".out"))
			t.Logf("worker %d:\n%s", i, b)
		}
	}
	if fig.Launched != 8 || fig.Hosts < 1 {
		t.Errorf("figures %s", fig)
	}
	// The killed worker's server was measuring: its job outlived the
	// worker until the one taking the trial over cancelled it.
	var outs []byte
	for i := range 3 {
		b, _ := os.ReadFile(filepath.Join(dir, "worker-"+strconv.Itoa(i)+".out"))
		outs = append(outs, b...)
	}
	if want := fmt.Sprintf("trial %d cancelled its leftover Slurm job", fig.Killed); !bytes.Contains(outs, []byte(want)) {
		t.Errorf("no worker says %q", want)
	}
	if active := slurmtest.ActiveJobs(t); active != "" {
		t.Errorf("jobs left in the queue (the killed worker's job must be cancelled):\n%s", active)
	}
}

// testStorage returns a storage every worker can share.
func testStorage(t *testing.T, dir string) string {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 || os.Geteuid() != 0 {
		t.Log("PostgreSQL server binaries not found: the workers share a SQLite file")
		return filepath.Join(dir, "study.db")
	}
	pg := filepath.Join(dir, "pg")
	for _, d := range []string{filepath.Dir(dir), dir} { // user postgres must reach it
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	up := filepath.Join(slurmtest.Root(), "scripts", "pg-up.sh")
	down := filepath.Join(slurmtest.Root(), "scripts", "pg-down.sh")
	var url string
	for attempt := 0; attempt < 3 && url == ""; attempt++ {
		b, err := exec.Command("bash", up, pg, freePort(t)).CombinedOutput()
		if err != nil {
			_ = os.RemoveAll(pg)
			if attempt == 2 {
				t.Fatalf("scripts/pg-up.sh: %v\n%s", err, b)
			}
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		url = lines[len(lines)-1]
	}
	t.Cleanup(func() {
		if b, err := exec.Command("bash", down, pg).CombinedOutput(); err != nil {
			t.Errorf("scripts/pg-down.sh: %v\n%s", err, b)
		}
	})
	return url
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

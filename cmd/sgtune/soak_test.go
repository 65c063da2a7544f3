package main

import (
	"bufio"
	"database/sql"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/sgtune/sgtune/search"
)

// TestSoak runs 50 short trials with faults injected at random (startup
// crashes, OOM, crashes under load, hangs) and kills the tuner itself with
// SIGKILL a few times along the way. At the end no server process may be
// left, no completed trial may be lost, and the database must pass
// PRAGMA integrity_check. It takes a few minutes: run it with SGTUNE_LONG=1
// (make soak).
func TestSoak(t *testing.T) {
	if os.Getenv("SGTUNE_LONG") == "" {
		t.Skip("set SGTUNE_LONG=1 to run the 50-trial soak")
	}
	bin := buildBins(t, "sglang-sim", "sgtune")
	dir := t.TempDir()
	body := strings.Replace(studyYAML("soak", 100, ""), "  --tp-size: 4\n  --max-running-requests: 64\n", "", 1)
	body = strings.Replace(body, "per_trial: 4, groups: [[0, 1, 2, 3]]", "per_trial: 8, groups: [[0, 1, 2, 3, 4, 5, 6, 7]]", 1)
	body = strings.Replace(body, "concurrency: [1, 8], requests: [2, 8]", "concurrency: [1, 40], requests: [2, 40]", 1)
	body = strings.Replace(body, "concurrency: 8}", "concurrency: 40}", 1)
	body += `params:
  - name: fault
    type: categorical
    choices: [none, startup_crash, oom, midsweep, hang]
    values:
      none: --tp-size 4 --max-running-requests 64
      startup_crash: --tp-size 8
      oom: --tp-size 4 --chunked-prefill-size 16384 --mem-fraction-static 0.88
      midsweep: --tp-size 4 --ep-size 1 --disable-radix-cache --max-mamba-cache-size 64
      hang: --tp-size 4 --dp-size 2 --enable-dp-attention --max-running-requests 128
  # A harmless flag that makes every config unique, so a fault is injected
  # again and again instead of being learned and skipped after its first run.
  - name: seed
    type: int
    low: 0
    high: 1000000
    flag: --random-seed
budget: {trials: 50, sampler: random, seed: 11}
`
	study := writeFile(t, dir, "soak.yaml", body)
	db := filepath.Join(dir, "soak.db")
	rng := rand.New(rand.NewSource(5))

	completed := map[int]bool{} // every trial ever seen complete
	for round := 0; round < 20; round++ {
		cmd := exec.Command(filepath.Join(bin, "sgtune"), "run", study, "--storage", db)
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill the tuner after a random number of launches, three times.
		killAfter := -1
		if round < 3 {
			killAfter = 2 + rng.Intn(8)
		}
		launches, killed := 0, false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), " launching ") {
				launches++
				if launches == killAfter {
					time.Sleep(time.Duration(rng.Intn(1500)) * time.Millisecond)
					_ = cmd.Process.Signal(syscall.SIGKILL)
					killed = true
					break
				}
			}
		}
		go io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		for _, r := range records(t, db) {
			if r.State == search.StateComplete {
				completed[r.Number] = true
			}
		}
		if !killed {
			if err != nil {
				t.Fatalf("round %d: sgtune run: %v", round, err)
			}
			break
		}
	}

	recs := records(t, db)
	launched, failed := 0, map[string]int{}
	for _, r := range recs {
		switch r.State {
		case search.StateComplete:
			launched++
		case search.StateFailed:
			launched++
			failed[r.FailureClass]++
		case search.StateRunning:
			t.Errorf("trial %d still running after the study finished", r.Number)
		}
	}
	for n := range completed {
		if recs[n].State != search.StateComplete {
			t.Errorf("completed trial %d lost: now %s", n, recs[n].State)
		}
	}
	if launched < 50 {
		t.Errorf("launched %d trials, want the budget of 50", launched)
	}
	t.Logf("%d trials stored, %d launched, failures by class %v", len(recs), launched, failed)
	if pids := leftovers("SGTUNE_TRIAL=soak/"); len(pids) > 0 {
		t.Errorf("server processes left behind: %v", pids)
	}
	conn, err := sql.Open("sqlite3", db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var ok string
	if err := conn.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check = %q, %v", ok, err)
	}
}

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sgtune/sgtune/search"
)

func TestWorkerBadInput(t *testing.T) {
	dir := t.TempDir()
	study := writeFile(t, dir, "s.yaml", studyYAML("w", 100, fmt.Sprintf(twoParams, 2)))
	t.Setenv("SGTUNE_STORAGE", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"worker", study}, "--storage is required"},
		{[]string{"worker", study, "--storage", filepath.Join(dir, "s.db"), "--parallel", "2"}, "--parallel 2: the study has 1 GPU group(s)"},
		{[]string{"worker"}, "accepts 1 arg(s)"},
	} {
		code, out := cli(t, nil, nil, tc.args...)
		if code != exitUsage || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q:\n%s", tc.args, code, exitUsage, tc.want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s.db")); !os.IsNotExist(err) {
		t.Errorf("bad input wrote the storage: %v", err)
	}
}

// TestTwoWorkersLocal: two workers of one host share a study and its one
// GPU group (local processes): together they launch the budget, each
// trial on its own, and status names the host of each.
func TestTwoWorkersLocal(t *testing.T) {
	bin := buildBins(t, "sglang-sim", "sgtune")
	dir := t.TempDir()
	// Two GPU groups: each worker takes whichever is free (before, both
	// took the first and ran one after the other).
	study := writeFile(t, dir, "s.yaml", studyYAMLGroups("two-workers", 100, "[[0, 1, 2, 3], [4, 5, 6, 7]]", fmt.Sprintf(twoParams, 4)))
	db := filepath.Join(dir, "s.db")
	var wg sync.WaitGroup
	errs, outs := make([]error, 2), make([]string, 2)
	for i := range 2 { // two processes, as on two hosts
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := exec.Command(filepath.Join(bin, "sgtune"), "worker", study, "--storage", db, "--parallel", "1").CombinedOutput()
			errs[i], outs[i] = err, string(b)
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v\n%s", i, errs[i], outs[i])
		}
	}
	launched, seen, groups := 0, map[string]bool{}, map[string]int{}
	host, _ := os.Hostname()
	for _, r := range records(t, db) {
		if r.State != search.StateComplete && r.State != search.StateFailed {
			continue
		}
		launched++
		groups[r.GPUs]++
		key := strings.Join(r.Flags(), " ")
		if seen[key] {
			t.Errorf("config launched twice: %s", key)
		}
		seen[key] = true
		if r.Host != host || r.SlurmJob != "" {
			t.Errorf("trial %d: host %q job %q, want %q and none", r.Number, r.Host, r.SlurmJob, host)
		}
	}
	if launched != 4 {
		t.Errorf("%d trials launched, want the budget of 4\n%s\n%s", launched, outs[0], outs[1])
	}
	if len(groups) != 2 {
		t.Errorf("trials per GPU group %v, want both groups used\n%s\n%s", groups, outs[0], outs[1])
	}
	code, out := cli(t, nil, nil, "status", "--storage", db)
	if code != 0 || !strings.Contains(out, "HOST") || !strings.Contains(out, host) {
		t.Errorf("status: exit %d\n%s", code, out)
	}
}

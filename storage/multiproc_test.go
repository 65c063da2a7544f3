package storage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c-bata/goptuna"
)

// helperWorker runs runWorker in a child process and prints its result as
// JSON: args dsn, study, resource, holder, budget, marker.
func helperWorker(args []string) error {
	budget, err := strconv.Atoi(args[4])
	if err != nil {
		return err
	}
	s, err := Open(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	waitGo()
	r, err := runWorker(context.Background(), s, workerConfig{
		study: args[1], resource: args[2], holder: args[3], budget: budget, marker: args[5]})
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode([3]int{r.complete, r.interrupted, r.refused})
}

// waitGo blocks until the parent closes the child's stdin, so that all
// children start their work at once.
func waitGo() {
	_, _ = io.Copy(io.Discard, os.Stdin) // EOF is the signal; nothing to check
}

// startHelpers starts n helper processes of a role, lets them go at once and
// returns their stdout after they all exit successfully.
func startHelpers(t *testing.T, n int, role string, args func(i int) []string) []string {
	t.Helper()
	outs := make([]strings.Builder, n)
	errs := make([]strings.Builder, n)
	cmds := make([]interface{ Wait() error }, n)
	gates := make([]io.WriteCloser, n)
	for i := range n {
		cmd := helperCmd(t, role, args(i)...)
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		gate, err := cmd.StdinPipe()
		must(t, err)
		must(t, cmd.Start())
		cmds[i], gates[i] = cmd, gate
	}
	for _, g := range gates {
		must(t, g.Close())
	}
	var wg sync.WaitGroup
	failed := make([]error, n)
	for i := range n {
		wg.Go(func() { failed[i] = cmds[i].Wait() })
	}
	wg.Wait()
	res := make([]string, n)
	for i := range n {
		if failed[i] != nil {
			t.Fatalf("%s helper %d: %v\n%s%s", role, i, failed[i], outs[i].String(), errs[i].String())
		}
		res[i] = outs[i].String()
	}
	return res
}

// Processes share one GPU group and one budget through the storage (the
// "two sgtune run on one study" case of issue 12): never two on the group
// at once, exactly the budget launched; then processes race for a budget
// without a lease and never launch more than it.
func testMultiProcessLeaseAndBudget(t *testing.T, b *backend) {
	dsn := b.newDSN(t)
	s := openDSN(t, dsn)
	for _, name := range []string{"lease", "race"} {
		if _, _, err := s.EnsureStudy(name, goptuna.StudyDirectionMaximize); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(t.TempDir(), "gpus-in-use")
	for _, tc := range []struct {
		study, resource, marker string
		budget, procs           int
	}{
		{"lease", "gpus@host:0,1,2,3", marker, 8, 3},
		{"race", "", "", 9, 4},
	} {
		outs := startHelpers(t, tc.procs, "worker", func(i int) []string {
			return []string{dsn, tc.study, tc.resource, fmt.Sprintf("host:%d", 1000+i), strconv.Itoa(tc.budget), tc.marker}
		})
		var sum workerResult
		for i, out := range outs {
			var r [3]int
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("helper %d printed %q: %v", i, out, err)
			}
			sum.complete += r[0]
			sum.interrupted += r[1]
			sum.refused += r[2]
		}
		checkBudget(t, s, tc.study, tc.budget, sum, tc.resource != "")
		if sum.refused != tc.procs {
			t.Fatalf("%d refusals; each of the %d processes should stop on one", sum.refused, tc.procs)
		}
		t.Logf("%s: %d processes, budget %d: %d complete, %d interrupted (launch given back), %d refused",
			tc.study, tc.procs, tc.budget, sum.complete, sum.interrupted, sum.refused)
	}
}

// helperReapClaim plays a worker resuming a shared study: it reaps stale
// trials and claims WAITING ones, beating each claimed trial's heartbeat and
// creating new trials meanwhile, until nothing waits: args dsn, study,
// newPerClaim. It prints "reaped ID RETRY", "claimed ID", "created ID".
func helperReapClaim(args []string) error {
	perClaim, err := strconv.Atoi(args[2])
	if err != nil {
		return err
	}
	s, err := Open(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	study, err := s.GetStudyIDFromName(args[1])
	if err != nil {
		return err
	}
	waitGo()
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for {
		reaped, err := s.ReapStale(study, time.Minute, 1)
		if err != nil {
			return err
		}
		for _, r := range reaped {
			fmt.Fprintf(w, "reaped %d %d\n", r.TrialID, r.RetryID)
		}
		id, ok, err := s.ClaimWaitingTrial(study)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		fmt.Fprintf(w, "claimed %d\n", id)
		for range perClaim {
			if err := s.Heartbeat(id); err != nil {
				return fmt.Errorf("heartbeat of claimed trial %d: %w", id, err)
			}
			nid, err := s.CreateNewTrial(study)
			if err != nil {
				return err
			}
			if err := s.SetTrialState(nid, goptuna.TrialStatePruned); err != nil {
				return err
			}
			fmt.Fprintf(w, "created %d\n", nid)
		}
		if err := s.SetTrialValue(id, 1); err != nil {
			return err
		}
		if err := s.SetTrialState(id, goptuna.TrialStateComplete); err != nil {
			return err
		}
	}
}

// Processes resuming one study at once: every stale trial is reaped and
// retried exactly once, every WAITING trial is claimed by exactly one
// process, heartbeats of claimed trials succeed, and trial numbers stay
// unique and contiguous.
func testMultiProcessReapAndClaim(t *testing.T, b *backend) {
	const stale, waiting, procs, perClaim = 8, 6, 4, 3
	dsn := b.newDSN(t)
	s := openDSN(t, dsn)
	study := mustStudy(t, s, "resume", goptuna.StudyDirectionMaximize)
	dist := goptuna.IntUniformDistribution{Low: 0, High: 100}
	staleIDs := map[int]bool{}
	waitingIDs := map[int]bool{}
	old := time.Now().Add(-time.Hour)
	for i := range stale {
		id := mustTrial(t, s, study)
		must(t, s.SetTrialParam(id, "x", float64(i), dist))
		setHeartbeat(t, s, id, old)
		staleIDs[id] = true
	}
	for i := range waiting {
		id, err := s.CloneTrial(study, goptuna.FrozenTrial{State: goptuna.TrialStateWaiting,
			SystemAttrs: map[string]string{AttrFixedParams: fmt.Sprintf(`{"x":%d}`, 50+i)}})
		must(t, err)
		waitingIDs[id] = true
	}

	outs := startHelpers(t, procs, "reapclaim", func(int) []string {
		return []string{dsn, "resume", strconv.Itoa(perClaim)}
	})
	reaped := map[int]int{}
	claimed := map[int]int{}
	created := 0
	for _, out := range outs {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var a, c int
			switch {
			case line == "":
			case strings.HasPrefix(line, "reaped"):
				if _, err := fmt.Sscanf(line, "reaped %d %d", &a, &c); err != nil {
					t.Fatalf("helper said %q", line)
				}
				reaped[a]++
				if c == 0 {
					t.Fatalf("stale trial %d reaped without a retry", a)
				}
				waitingIDs[c] = true
			case strings.HasPrefix(line, "claimed"):
				if _, err := fmt.Sscanf(line, "claimed %d", &a); err != nil {
					t.Fatalf("helper said %q", line)
				}
				claimed[a]++
			case strings.HasPrefix(line, "created"):
				created++
			default:
				t.Fatalf("helper said %q", line)
			}
		}
	}
	if len(reaped) != stale {
		t.Fatalf("%d of %d stale trials reaped: %v", len(reaped), stale, reaped)
	}
	for id, n := range reaped {
		if !staleIDs[id] || n != 1 {
			t.Fatalf("trial %d reaped %d times (stale: %v)", id, n, staleIDs[id])
		}
	}
	if len(claimed) != waiting+stale {
		t.Fatalf("%d trials claimed; want %d (%d waiting + %d retries)", len(claimed), waiting+stale, waiting, stale)
	}
	for id, n := range claimed {
		if !waitingIDs[id] || n != 1 {
			t.Fatalf("trial %d claimed %d times (waiting: %v)", id, n, waitingIDs[id])
		}
	}
	all, err := s.GetAllTrials(study)
	must(t, err)
	if want := stale + waiting + stale + created; len(all) != want || created != (waiting+stale)*perClaim {
		t.Fatalf("%d trials, %d created by helpers; want %d", len(all), created, want)
	}
	states := map[goptuna.TrialState]int{}
	for i, tr := range all {
		if tr.Number != i {
			t.Fatalf("trial %d has number %d: numbers not unique and contiguous", i, tr.Number)
		}
		states[tr.State]++
	}
	if states[goptuna.TrialStateFail] != stale || states[goptuna.TrialStateComplete] != waiting+stale ||
		states[goptuna.TrialStateRunning] != 0 || states[goptuna.TrialStateWaiting] != 0 {
		t.Fatalf("final states %v", states)
	}
	t.Logf("%d processes: %d stale trials reaped once each, %d WAITING claimed once each, %d trials numbered 0..%d",
		procs, len(reaped), len(claimed), len(all), len(all)-1)
}

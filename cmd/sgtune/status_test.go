package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/storage"
)

// syncBuffer is an output the watch writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestStatusTable(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, map[string]string{attrBudget: "10"})
	code, out := cli(t, nil, nil, "status", "--storage", db)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	lines := strings.Split(out, "\n")
	if lines[0] != "study rescore: 3 trials (3 complete); 3 of 10 launched" {
		t.Errorf("summary line: %q", lines[0])
	}
	head := lines[1]
	for _, col := range []string{"#", "STATE", "SCORE", "SLO", "TIME", "DETAIL", "PARAMS"} {
		if !strings.Contains(head, col) {
			t.Errorf("header %q lacks %s", head, col)
		}
	}
	// Aligned: every row's state starts in the STATE column.
	at := strings.Index(head, "STATE")
	for _, row := range lines[2:5] {
		if len(row) <= at || row[at:at+8] != "complete" {
			t.Errorf("row not aligned under STATE (col %d): %q", at, row)
		}
	}
	if !strings.Contains(out, "best: trial 0 (score 2000.00)") {
		t.Errorf("no best line:\n%s", out)
	}
}

// openSeeded opens db and finds the seeded study ("rescore"); the store
// closes when the test ends.
func openSeeded(t *testing.T, db string) (*storage.Store, int) {
	t.Helper()
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sid, err := st.GetStudyIDFromName("rescore")
	if err != nil {
		t.Fatal(err)
	}
	return st, sid
}

// addRunning stores a RUNNING trial owned by host:pid.
func addRunning(t *testing.T, db, owner string) int {
	t.Helper()
	st, sid := openSeeded(t, db)
	id, err := st.CreateNewTrial(sid)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetTrialSystemAttr(id, "sgtune.owner", owner); err != nil {
		t.Fatal(err)
	}
	return id
}

// watch runs `status --watch` in the background; the returned channel
// gives its exit code.
func watch(t *testing.T, ctx context.Context, out *syncBuffer, args ...string) <-chan int {
	done := make(chan int, 1)
	a := &app{stdout: out, stderr: out, getenv: os.Getenv}
	go func() { done <- a.execute(ctx, append([]string{"status", "--watch"}, args...)) }()
	return done
}

func TestStatusWatchFollowsRunUntilItEnds(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)
	// A stand-in for the run's process: the watch follows it while it lives.
	proc := exec.Command("sleep", "60")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = proc.Process.Kill(); _, _ = proc.Process.Wait() }()
	host, _ := os.Hostname()
	id := addRunning(t, db, fmt.Sprintf("%s:%d", host, proc.Process.Pid))

	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := watch(t, ctx, &out, "20ms", "--storage", db)
	deadline := time.After(20 * time.Second)
	for !strings.Contains(out.String(), "running: trial 3") {
		select {
		case code := <-done:
			t.Fatalf("watch ended (exit %d) while trial 3 ran:\n%s", code, out.String())
		case <-deadline:
			t.Fatalf("watch never showed the running trial:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Many reads later it still watches: the trial runs and its owner lives.
	time.Sleep(300 * time.Millisecond)
	select {
	case code := <-done:
		t.Fatalf("watch ended (exit %d) while the run was alive:\n%s", code, out.String())
	default:
	}

	// The trial completes and the run's process exits: the watch shows the
	// new state and ends by itself.
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"sgtune.state": "complete", "sgtune.score": "2500", "sgtune.score_ok": "true"} {
		if err := st.SetTrialUserAttr(id, k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetTrialState(id, goptuna.TrialStateComplete); err != nil {
		t.Fatal(err)
	}
	st.Close()
	_ = proc.Process.Kill()
	_, _ = proc.Process.Wait()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("watch exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("watch did not end after the run ended:\n%s", out.String())
	}
	got := out.String()
	if !strings.Contains(got, "best: trial 3 (score 2500.00)") || !strings.Contains(got, "has ended") {
		t.Errorf("watch output lacks the final state or why it ended:\n%s", got)
	}
	// Not a terminal: the table is printed again only when it changed.
	if n := strings.Count(got, "study rescore:"); n < 2 || n > 4 {
		t.Errorf("table printed %d times, want once per change (2..4):\n%s", n, got)
	}
}

func TestStatusWatchEnds(t *testing.T) {
	host, _ := os.Hostname()
	for _, tt := range []struct {
		name, owner, want string
	}{
		{"finished study", "", "nothing changed for 3 reads"},
		{"run on another host", "elsewhere.example:4242", "nothing changed for 3 reads"},
		{"killed run leaves a stale running trial", host + ":999999999", "has ended"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := seedStudy(t, t.TempDir(), rankingTrials, nil)
			id := -1
			if tt.owner != "" {
				id = addRunning(t, db, tt.owner)
			}
			if tt.name == "run on another host" {
				// Its trial finished; the owner cannot be checked from here.
				st, err := storage.Open(db)
				if err != nil {
					t.Fatal(err)
				}
				if err := st.SetTrialState(id, goptuna.TrialStateComplete); err != nil {
					t.Fatal(err)
				}
				st.Close()
			}
			var out syncBuffer
			select {
			case code := <-watch(t, context.Background(), &out, "--storage", db, "--watch=10ms"):
				if code != 0 || !strings.Contains(out.String(), tt.want) {
					t.Errorf("exit %d, want 0 and %q:\n%s", code, tt.want, out.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("watch did not end:\n%s", out.String())
			}
		})
	}
}

// requeue ends a RUNNING trial as a Ctrl-C'd run does: failed and queued
// to run again (a WAITING retry).
func requeue(t *testing.T, db string, id int) {
	t.Helper()
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ended, err := st.InterruptTrial(id, storage.StateInterrupted, "interrupted (Ctrl-C)", true); err != nil || !ended {
		t.Fatalf("interrupt trial: %v (ended %v)", err, ended)
	}
}

// holdLease stores a GPU group lease of the study held by holder.
func holdLease(t *testing.T, db, holder string) {
	t.Helper()
	st, sid := openSeeded(t, db)
	if ok, err := st.AcquireLease(context.Background(), sid, "gpus@test:0", holder, time.Hour); err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
}

// A run stopped by Ctrl-C leaves its trial queued to run again: the watch
// ends once that run is gone, and follows a run that lives (it owns the
// latest trial, or holds a GPU group's lease and is about to claim the
// queued trial) until it is gone.
func TestStatusWatchEndsWithQueuedRetry(t *testing.T) {
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadOwner := fmt.Sprintf("%s:%d", host, dead.Process.Pid)

	t.Run("interrupted run ended", func(t *testing.T) {
		db := seedStudy(t, t.TempDir(), rankingTrials, nil)
		requeue(t, db, addRunning(t, db, deadOwner))
		var out syncBuffer
		select {
		case code := <-watch(t, context.Background(), &out, "--storage", db, "--watch=10ms"):
			want := "watch ended: no trial is running and the run (process " + deadOwner + ") has ended; trial 4 is queued and runs when the study resumes\n"
			if code != 0 || !strings.Contains(out.String(), want) {
				t.Errorf("exit %d, want 0 and %q:\n%s", code, want, out.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch did not end though no process runs the queued trial:\n%s", out.String())
		}
	})

	for _, tc := range []struct {
		name  string
		lease bool // the live process holds a lease, and the dead one owned the trial
	}{{"run that queued it lives", false}, {"next run holds a GPU group", true}} {
		t.Run(tc.name, func(t *testing.T) {
			db := seedStudy(t, t.TempDir(), rankingTrials, nil)
			proc := exec.Command("sleep", "60")
			if err := proc.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = proc.Process.Kill(); _, _ = proc.Process.Wait() }()
			live := fmt.Sprintf("%s:%d", host, proc.Process.Pid)
			owner := live
			if tc.lease {
				owner = deadOwner
				holdLease(t, db, live)
			}
			requeue(t, db, addRunning(t, db, owner))
			var out syncBuffer
			done := watch(t, context.Background(), &out, "--storage", db, "--watch=10ms")
			select {
			case code := <-done:
				t.Fatalf("watch ended (exit %d) while %s lived:\n%s", code, live, out.String())
			case <-time.After(500 * time.Millisecond):
			}
			_ = proc.Process.Kill()
			_, _ = proc.Process.Wait()
			select {
			case code := <-done:
				if code != 0 || !strings.Contains(out.String(), "trial 4 is queued and runs when the study resumes") {
					t.Errorf("exit %d:\n%s", code, out.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("watch did not end after %s ended:\n%s", live, out.String())
			}
		})
	}
}

func TestStatusBadInput(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	for _, args := range [][]string{
		{"status", "--storage", missing, "--watch"},
		{"status", "--storage", missing},
		{"status", "--storage", missing, "5s"},
		{"status", "--storage", missing, "--watch", "--json"},
		{"status", "--storage", missing, "--watch=-1s"},
	} {
		if code, out := cli(t, nil, nil, args...); code != exitUsage {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, out)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("status created %s", missing)
	}
}

// deadOwner is a trial owner ("host:pid") whose process has ended.
func deadOwner(t *testing.T) string {
	t.Helper()
	proc := exec.Command("true")
	if err := proc.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, proc.Process.Pid)
}

// Plain status tells a trial left running by a dead process (kill -9 of
// the run) from one that runs, as status --watch does.
func TestStatusNamesStaleTrial(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)
	owner := deadOwner(t)
	addRunning(t, db, owner)
	code, out := cli(t, nil, nil, "status", "--storage", db)
	want := "stale: trial 3 was left running by process " + owner + ", which has ended; the next run re-runs it\n"
	if code != 0 || !strings.Contains(out, want) || strings.Contains(out, "running: trial 3") {
		t.Errorf("status: exit %d, want %q and no running line:\n%s", code, want, out)
	}
}

// A trial stored before its server stopped, whose process then died, is
// named with what the next run does about its server.
func TestStatusNamesDeadStoppingTrial(t *testing.T) {
	db := seedStudy(t, t.TempDir(), rankingTrials, nil)
	owner := deadOwner(t)
	id := addRunning(t, db, owner)
	st, _ := openSeeded(t, db)
	if err := st.FinishTrial(id, storage.Finish{State: goptuna.TrialStateFail,
		Attrs: map[string]string{storage.AttrState: search.StateFailed, storage.AttrStopping: "1"}}); err != nil {
		t.Fatal(err)
	}
	code, out := cli(t, nil, nil, "status", "--storage", db)
	want := "stopping: trial 3's process " + owner + " ended before its server stopped; the next run kills what the server left\n"
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("status: exit %d, want %q:\n%s", code, want, out)
	}
}

// The command best and run print runs when pasted into a shell: a JSON
// value is quoted and vLLM's model is positional, as the launcher runs it.
func TestCommandLinePastes(t *testing.T) {
	for _, tc := range []struct {
		rec  search.Record
		want string
	}{
		{search.Record{EngineName: "vllm", Engine: []string{"vllm", "serve"},
			Config: json.RawMessage(`{"flags":["--model","org/m","--speculative-config","{\"method\": \"mtp\", \"num_speculative_tokens\": 2}"]}`)},
			`vllm serve org/m --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}'`},
		{search.Record{Engine: []string{"python3", "-m", "sglang.launch_server"},
			Config: json.RawMessage(`{"flags":["--model-path","org/m","--tp-size","4"]}`)},
			`python3 -m sglang.launch_server --model-path org/m --tp-size 4`},
	} {
		if got := commandLine(tc.rec); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

// status tells a confirmation rerun from a search trial: its detail names
// the trial it confirms, and the header counts reruns apart from the
// search's launches.
func TestStatusNamesConfirmationReruns(t *testing.T) {
	first := 0
	db := seedStudy(t, t.TempDir(), []fakeTrial{rankingTrials[0], rankingTrials[1], {name: "fast", tokS: 2100, ttftLo: 0.2, ttftHi: 1.6, rerunOf: &first}}, nil)
	code, out := cli(t, nil, nil, "status", "--storage", db)
	for _, want := range []string{"launched by the search, and 1 confirmation rerun(s)\n", "confirms #0"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("status: exit %d, lacks %q:\n%s", code, want, out)
		}
	}
}

// status counts the confirmation reruns that ran, as run and report do: one
// stopped by an interrupt and its queued retry are said apart, not counted.
func TestStatusCountsRerunsThatRan(t *testing.T) {
	first := 0
	db := seedStudy(t, t.TempDir(), []fakeTrial{rankingTrials[0], rankingTrials[1], {name: "fast", tokS: 2100, ttftLo: 0.2, ttftHi: 1.6, rerunOf: &first}}, nil)
	// A second rerun of trial 0 was running when the run was interrupted.
	id := addRunning(t, db, "elsewhere.example:4242")
	st, err := storage.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetTrialSystemAttr(id, storage.AttrConfirmOf, "0"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	requeue(t, db, id)
	code, out := cli(t, nil, nil, "status", "--storage", db)
	want := "study rescore: 5 trials (3 complete, 1 interrupted, 1 waiting); 3 launched by the search, and 1 confirmation rerun(s) (1 queued, 1 interrupted)\n"
	if code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("status: exit %d, want the summary %q:\n%s", code, want, out)
	}
}

// status --json carries what the text's summary lines say: launches,
// budget, the best trial and its confirmation.
func TestStatusJSONSummary(t *testing.T) {
	win := storedWinner(t, "best pooled", confirmed(2, [2]float64{1, 1800}, [2]float64{3, 1900}))
	first := 1
	db := seedStudy(t, t.TempDir(), append(slices.Clone(rankingTrials), fakeTrial{name: "steady", tokS: 1900, ttftLo: 0.2, ttftHi: 0.6, rerunOf: &first}),
		map[string]string{attrBudget: "10", storage.AttrWinner: win})
	code, out := cli(t, nil, nil, "status", "--storage", db, "--json")
	var doc struct {
		Launched  int            `json:"launched"`
		Budget    int            `json:"budget"`
		Best      *int           `json:"best"`
		Confirmed *search.Winner `json:"confirmed"`
		Trials    []search.Record
	}
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Launched != 4 || doc.Budget != 10 || doc.Best == nil || *doc.Best != 1 ||
		doc.Confirmed == nil || doc.Confirmed.Pooled != 1850 || len(doc.Trials) != 4 {
		t.Errorf("exit %d, %v: %+v\n%s", code, err, doc, out)
	}
}

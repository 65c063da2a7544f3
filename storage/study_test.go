package storage

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/c-bata/goptuna"
	"github.com/c-bata/goptuna/tpe"

	"github.com/sgtune/sgtune/objective"
)

// mixedObjective is a small mixed space with a conditional parameter, shaped
// like an SGLang study: categorical, step-int, float, log-float, int, and
// spec_steps only when speculative decoding is on.
func mixedObjective(tr goptuna.Trial) (float64, error) {
	attn, err := tr.SuggestCategorical("attention_backend", []string{"fa3", "triton", "flashinfer"})
	if err != nil {
		return 0, err
	}
	slots, err := tr.SuggestStepInt("max_mamba_cache_size", 128, 512, 64)
	if err != nil {
		return 0, err
	}
	mem, err := tr.SuggestFloat("mem_fraction_static", 0.7, 0.95)
	if err != nil {
		return 0, err
	}
	lr, err := tr.SuggestLogFloat("log_thing", 1e-3, 1)
	if err != nil {
		return 0, err
	}
	ep, err := tr.SuggestInt("ep_size", 1, 4)
	if err != nil {
		return 0, err
	}
	spec, err := tr.SuggestCategorical("speculative", []string{"none", "eagle"})
	if err != nil {
		return 0, err
	}
	v := 1000*mem - math.Abs(float64(slots)-384)/10 + float64(ep)*20 - 10*math.Log(lr)
	if attn == "fa3" {
		v += 50
	}
	if spec == "eagle" {
		steps, err := tr.SuggestInt("spec_steps", 1, 5)
		if err != nil {
			return 0, err
		}
		v += float64(steps) * 7
	}
	if err := tr.SetUserAttr("sgtune.argv", fmt.Sprintf(`["--attention-backend","%s"]`, attn)); err != nil {
		return 0, err
	}
	return v, nil
}

func testGoptunaStudyEndToEnd(t *testing.T, b *backend) {
	path := b.newDSN(t)
	s, err := Open(path)
	must(t, err)
	study, err := goptuna.CreateStudy("e2e",
		goptuna.StudyOptionStorage(s),
		goptuna.StudyOptionSampler(tpe.NewSampler(tpe.SamplerOptionSeed(1), tpe.SamplerOptionNumberOfStartupTrials(10))),
		goptuna.StudyOptionDirection(goptuna.StudyDirectionMaximize),
		goptuna.StudyOptionLoadIfExists(true),
		goptuna.StudyOptionLogger(nil))
	must(t, err)
	must(t, study.SetUserAttr("study_file", "demo.yaml"))
	must(t, study.Optimize(mixedObjective, 30))
	first, err := study.GetTrials()
	must(t, err)
	bestVal, err := study.GetBestValue()
	must(t, err)
	must(t, s.Close())

	// A new Store (a new process, in effect) sees everything.
	s2, err := Open(path)
	must(t, err)
	defer s2.Close()
	must(t, s2.IntegrityCheck())
	study2, err := goptuna.CreateStudy("e2e",
		goptuna.StudyOptionStorage(s2),
		goptuna.StudyOptionSampler(tpe.NewSampler(tpe.SamplerOptionSeed(2))),
		goptuna.StudyOptionLoadIfExists(true),
		goptuna.StudyOptionLogger(nil))
	must(t, err)
	if study2.ID != study.ID || study2.Direction() != goptuna.StudyDirectionMaximize {
		t.Fatalf("reloaded study id %d direction %s", study2.ID, study2.Direction())
	}
	again, err := study2.GetTrials()
	must(t, err)
	if len(again) != 30 {
		t.Fatalf("reopened: %d trials, want 30", len(again))
	}
	conditional := 0
	for i, tr := range again {
		if tr.Number != i || tr.State != goptuna.TrialStateComplete {
			t.Fatalf("trial %d: number %d state %s", i, tr.Number, tr.State)
		}
		if fmt.Sprint(tr.Params) != fmt.Sprint(first[i].Params) || tr.Value != first[i].Value ||
			tr.UserAttrs["sgtune.argv"] == "" || len(tr.Distributions) != len(tr.Params) {
			t.Fatalf("trial %d differs after reopen:\n%+v\n%+v", i, tr, first[i])
		}
		if _, ok := tr.Params["spec_steps"]; ok {
			conditional++
		}
		if (tr.Params["speculative"] == "eagle") != (tr.Params["spec_steps"] != nil) {
			t.Fatalf("trial %d: spec_steps present iff eagle violated: %v", i, tr.Params)
		}
	}
	if conditional == 0 || conditional == 30 {
		t.Fatalf("conditional param in %d/30 trials; the space was not exercised", conditional)
	}
	if ua, _ := study2.GetUserAttrs(); ua["study_file"] != "demo.yaml" {
		t.Fatalf("study attrs after reopen = %v", ua)
	}
	if v, _ := study2.GetBestValue(); v != bestVal {
		t.Fatalf("best value %v after reopen, %v before", v, bestVal)
	}

	// Resume continues numbering; an enqueued trial is honoured.
	must(t, study2.EnqueueTrial(map[string]float64{"attention_backend": 2, "ep_size": 3}))
	must(t, study2.Optimize(mixedObjective, 3))
	all, err := study2.GetTrials()
	must(t, err)
	if len(all) != 33 {
		t.Fatalf("%d trials after resume, want 33", len(all))
	}
	for i, tr := range all {
		if tr.Number != i {
			t.Fatalf("numbers not contiguous after resume: index %d has number %d", i, tr.Number)
		}
	}
	if all[30].Params["attention_backend"] != "flashinfer" || all[30].Params["ep_size"] != 3 {
		t.Fatalf("enqueued params not used: %v", all[30].Params)
	}
}

// The helper-process pattern of os/exec's tests: the test binary re-runs
// itself with SGTUNE_STORAGE_HELPER set to play a child process.
const helperEnv = "SGTUNE_STORAGE_HELPER"

func helperCmd(t *testing.T, role string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+role, "SGTUNE_HELPER_ARGS="+strings.Join(args, "\x1f"))
	// No helper outlives the test: killed with the test binary, and on any
	// early return of the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// TestHelperProcess is not a test: it is a child process of the tests
// below, doing nothing unless started by helperCmd.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(helperEnv)
	if role == "" {
		t.Skip("helper process only")
	}
	args := strings.Split(os.Getenv("SGTUNE_HELPER_ARGS"), "\x1f")
	var err error
	switch role {
	case "tpe":
		err = helperTPE(args)
	case "writer":
		err = helperWriter(args)
	case "midtx":
		err = helperMidTx(args)
	case "worker":
		err = helperWorker(args)
	case "reapclaim":
		err = helperReapClaim(args)
	case "read":
		err = helperRead(args)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helperTPE runs N TPE trials of the study on the DB: args path, study, n, seed.
func helperTPE(args []string) error {
	n, _ := strconv.Atoi(args[2])
	seed, _ := strconv.Atoi(args[3])
	s, err := Open(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	sampler := goptuna.StudyOptionSampler(tpe.NewSampler(tpe.SamplerOptionSeed(int64(seed))))
	var study *goptuna.Study
	if seed%2 == 0 {
		study, err = s.LoadOrCreateStudy(args[1], goptuna.StudyDirectionMaximize, sampler, goptuna.StudyOptionLogger(nil))
	} else {
		// goptuna's own way, once a race-free creator has made the study:
		// CreateStudy gets ErrDuplicateStudy and loads. It cannot race the
		// creation itself: it creates the study and sets its direction in
		// two steps, and a process loading in between sees the default
		// direction (EnsureStudy refuses it; goptuna's loader would
		// optimize the wrong way).
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := s.GetStudyIDFromName(args[1]); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("study %q not created in 30 s", args[1])
			}
			time.Sleep(10 * time.Millisecond)
		}
		for range 5 {
			study, err = goptuna.CreateStudy(args[1], goptuna.StudyOptionStorage(s), sampler,
				goptuna.StudyOptionDirection(goptuna.StudyDirectionMaximize),
				goptuna.StudyOptionLoadIfExists(true), goptuna.StudyOptionLogger(nil))
			if !errors.Is(err, ErrDuplicateStudy) {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	return study.Optimize(func(tr goptuna.Trial) (float64, error) {
		v, err := mixedObjective(tr)
		if err != nil {
			return 0, err
		}
		if err := s.Heartbeat(tr.ID); err != nil {
			return 0, err
		}
		return v, s.SavePoints(tr.ID, samplePoints())
	}, n)
}

// helperWriter writes trials in a loop until killed, printing "done N" after
// each trial is COMPLETE: args path, study.
func helperWriter(args []string) error {
	s, err := Open(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	study, err := s.GetStudyIDFromName(args[1])
	if err != nil {
		return err
	}
	dist := goptuna.IntUniformDistribution{Low: 0, High: 1 << 30}
	pts := samplePoints()
	stop := time.Now().Add(time.Minute) // a safety net; the test kills it much sooner
	for i := 0; time.Now().Before(stop); i++ {
		id, err := s.CreateNewTrial(study)
		if err != nil {
			return err
		}
		if err := s.SetTrialParam(id, "i", float64(i), dist); err != nil {
			return err
		}
		big := make([]objective.Point, 0, 40)
		for range 10 {
			big = append(big, pts...)
		}
		if err := s.SavePoints(id, big); err != nil {
			return err
		}
		if err := s.SetTrialValue(id, float64(i)); err != nil {
			return err
		}
		if err := s.SetTrialState(id, goptuna.TrialStateComplete); err != nil {
			return err
		}
		fmt.Printf("done %d\n", i+1)
	}
	return nil
}

// helperMidTx opens a write transaction, inserts a trial and points, says
// "in-tx" and waits to be killed: args path, study.
func helperMidTx(args []string) error {
	s, err := Open(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	study, err := s.GetStudyIDFromName(args[1])
	if err != nil {
		return err
	}
	return s.write(func(tx *txn) error {
		id, err := newTrial(tx, study, "RUNNING", nil, time.Now().UnixNano(), nil, nil)
		if err != nil {
			return err
		}
		// ~8,000 points (several MB, beyond the page cache) so uncommitted
		// pages spill into the WAL before the kill.
		pts := samplePoints()
		for i := range 2000 {
			if err := insertPoints(tx, id, i*len(pts), pts); err != nil {
				return err
			}
		}
		fmt.Println("in-tx")
		time.Sleep(time.Minute)
		return errors.New("not killed")
	})
}

// A process killed while holding the write lock inside a transaction leaves
// nothing of it behind, and the lock is free for the next writer at once.
func testKilledInsideTransaction(t *testing.T, b *backend) {
	path := b.newDSN(t)
	s, err := Open(path)
	must(t, err)
	defer s.Close()
	study, err := s.CreateNewStudy("midtx")
	must(t, err)
	before := mustTrial(t, s, study)

	cmd := helperCmd(t, "midtx", path, "midtx")
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "in-tx" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", sc.Text())
	}
	// While the child holds the lock our write waits (busy timeout), so
	// kill first, then write.
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()

	start := time.Now()
	after := mustTrial(t, s, study) // must not hit "database is locked"
	if d := time.Since(start); d > 5*time.Second {
		t.Logf("write after kill waited %v", d)
	}
	must(t, s.IntegrityCheck())
	all, err := s.GetAllTrials(study)
	must(t, err)
	if len(all) != 2 || all[0].ID != before || all[1].ID != after || all[1].Number != 1 {
		t.Fatalf("trials after a killed transaction: %+v", all)
	}
	var n int
	must(t, queryRow(s, "SELECT count(*) FROM points").Scan(&n))
	if n != 0 {
		t.Fatalf("%d points of the killed transaction are visible", n)
	}
	if st, err := os.Stat(path + "-wal"); err == nil && b.d == dialectSQLite {
		t.Logf("WAL after the killed transaction: %d bytes (uncommitted frames ignored)", st.Size())
	}
}

func testMultiProcessTPE(t *testing.T, b *backend) {
	const procs, perProc = 4, 15
	path := b.newDSN(t)
	var wg sync.WaitGroup
	outs := make([]strings.Builder, procs)
	errs := make([]error, procs)
	start := time.Now()
	for i := range procs {
		cmd := helperCmd(t, "tpe", path, "multi", strconv.Itoa(perProc), strconv.Itoa(100+i))
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		wg.Go(func() { errs[i] = cmd.Run() })
	}
	wg.Wait()
	elapsed := time.Since(start)
	for i := range procs {
		if errs[i] != nil || strings.Contains(outs[i].String(), "locked") {
			t.Fatalf("process %d: %v\n%s", i, errs[i], outs[i].String())
		}
	}

	s, err := Open(path)
	must(t, err)
	defer s.Close()
	must(t, s.IntegrityCheck())
	id, err := s.GetStudyIDFromName("multi")
	must(t, err)
	if d, err := s.GetStudyDirection(id); err != nil || d != goptuna.StudyDirectionMaximize {
		t.Fatalf("direction = %v, %v", d, err)
	}
	all, err := s.GetAllTrials(id)
	must(t, err)
	if len(all) != procs*perProc {
		t.Fatalf("%d trials, want %d", len(all), procs*perProc)
	}
	seen := map[int]bool{}
	for i, tr := range all {
		if tr.State != goptuna.TrialStateComplete || tr.Number != i || seen[tr.Number] {
			t.Fatalf("trial #%d: state %s, number %d", i, tr.State, tr.Number)
		}
		seen[tr.Number] = true
		if pts, err := s.Points(tr.ID); err != nil || len(pts) != len(samplePoints()) {
			t.Fatalf("trial #%d: %d points, %v", i, len(pts), err)
		}
	}
	t.Logf("%d processes x %d TPE trials: %d COMPLETE, numbers 0..%d unique, %v", procs, perProc, len(all), len(all)-1, elapsed.Round(time.Millisecond))
}

func testGoroutinesShareOneStore(t *testing.T, b *backend) {
	const workers, perWorker = 4, 8
	s := b.open(t)
	first, err := goptuna.CreateStudy("par", goptuna.StudyOptionStorage(s), goptuna.StudyOptionLogger(nil),
		goptuna.StudyOptionDirection(goptuna.StudyDirectionMaximize))
	must(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			st, err := goptuna.LoadStudy("par", goptuna.StudyOptionStorage(s), goptuna.StudyOptionLogger(nil),
				goptuna.StudyOptionSampler(tpe.NewSampler(tpe.SamplerOptionSeed(int64(w)))))
			if err == nil {
				err = st.Optimize(mixedObjective, perWorker)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	all, err := first.GetTrials()
	must(t, err)
	if len(all) != workers*perWorker {
		t.Fatalf("%d trials, want %d", len(all), workers*perWorker)
	}
	for i, tr := range all {
		if tr.Number != i || tr.State != goptuna.TrialStateComplete {
			t.Fatalf("trial %d: number %d state %s", i, tr.Number, tr.State)
		}
	}
}

// A writer killed with SIGKILL mid-loop leaves a consistent database: every
// trial it reported COMPLETE is there, multi-row writes are all-or-nothing,
// and at most the one trial in flight is left RUNNING (for ReapStale).
func testKilledWriterLeavesConsistentDB(t *testing.T, b *backend) {
	path := b.newDSN(t)
	s, err := Open(path)
	must(t, err)
	defer s.Close()
	study, err := s.CreateNewStudy("kill")
	must(t, err)

	floor := 0 // COMPLETE trials left by earlier rounds
	for round := range 5 {
		cmd := helperCmd(t, "writer", path, "kill")
		out, err := cmd.StdoutPipe()
		must(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		must(t, cmd.Start())
		sc := bufio.NewScanner(out)
		reported := 0
		want := 15 + 7*round // vary the kill point
		for reported < want && sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "done %d", &reported); err != nil {
				t.Fatalf("helper said %q", sc.Text())
			}
		}
		// Let the writer get into its next trial before the kill lands.
		time.Sleep(time.Duration(round) * 1300 * time.Microsecond)
		must(t, cmd.Process.Signal(syscall.SIGKILL))
		// Lines already written after the last one read still count as reported.
		for sc.Scan() {
			fmt.Sscanf(sc.Text(), "done %d", &reported)
		}
		werr := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: helper was not killed: %v\n%s", round, werr, stderr.String())
		}
		if reported < want {
			t.Fatalf("round %d: helper stopped after %d trials: %s", round, reported, stderr.String())
		}

		must(t, s.IntegrityCheck())
		all, err := s.GetAllTrials(study)
		must(t, err)
		complete, running := 0, 0
		for _, tr := range all {
			pts, err := s.Points(tr.ID)
			must(t, err)
			if n := len(pts); n != 0 && n != 40 {
				t.Fatalf("trial %d has %d points: SavePoints was not atomic", tr.Number, n)
			}
			switch tr.State {
			case goptuna.TrialStateComplete:
				complete++
				if len(pts) != 40 || len(tr.Params) != 1 {
					t.Fatalf("complete trial %d lacks data: %d points, params %v", tr.Number, len(pts), tr.Params)
				}
			case goptuna.TrialStateRunning:
				running++
			}
		}
		// Earlier rounds' trials are still there plus all this round's
		// writer reported; at most one more committed before it could say so.
		if complete < floor+reported || complete > floor+reported+1 || running > 1 {
			t.Fatalf("round %d: %d complete (earlier %d + reported %d), %d running", round, complete, floor, reported, running)
		}
		floor = complete
		// Reap what the dead writer left RUNNING. PostgreSQL may not have
		// noticed the killed client yet: its open transaction still locks
		// the trial, and the reaper skips locked rows (SKIP LOCKED) until
		// the server ends that backend.
		eventually(t, 10*time.Second, 50*time.Millisecond, func() (bool, string) {
			if _, err := s.ReapStale(study, 0, 0); err != nil {
				t.Fatal(err)
			}
			ids, err := s.StaleRunning(study, 0)
			must(t, err)
			return len(ids) == 0, fmt.Sprintf("still running 10 s after the kill, reaped again and again: %v", ids)
		})
		t.Logf("round %d: killed after %d reported trials; %d trials in DB, %d complete, %d left running, integrity ok", round, reported, len(all), complete, running)
	}
}

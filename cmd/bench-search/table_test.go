package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

// cancelAfter is a backend that cancels the recording as its launch n+1
// begins: an interrupt between two runs.
type cancelAfter struct {
	search.Backend
	n      int64
	starts atomic.Int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Start(ctx context.Context, spec launcher.Spec) (search.Running, error) {
	if c.starts.Add(1) > c.n {
		c.cancel()
	}
	return c.Backend.Start(ctx, spec)
}

// recordSmall records the small vLLM space in virtual time (with
// measurement noise, so repeats differ) into path, interrupted after 5
// runs and resumed.
func recordSmall(t *testing.T, st *space.Study, path string, repeats int) *Table {
	t.Helper()
	var seed atomic.Uint64
	vb := &drawing{next: &virtualBackend{profile: studyProfile(st.Engine.Command), noiseCV: 0.1, eng: newSimEngine(st)},
		draws: func() (uint64, uint64) { n := seed.Add(1); return n, n }}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opt := recordOptions{Path: path, Repeats: repeats, Backend: &cancelAfter{Backend: vb, n: 5, cancel: cancel}}
	if _, err := recordTable(ctx, st, opt); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted recording: %v; want context.Canceled", err)
	}
	part, err := loadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	if part.Runs() != 5 || part.Header.Complete {
		t.Fatalf("the checkpoint holds %d runs (complete %v); want the 5 before the interrupt", part.Runs(), part.Header.Complete)
	}
	opt.Backend = vb
	tbl, err := recordTable(t.Context(), st, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestRecordResumeReplay: a recording interrupted between runs resumes
// where it stopped; every feasible config has one run per round, each
// round in a shuffled order of its own; the table read back is the
// landscape of the runs' values, and the backend replays each run so that
// search.Decide reaches the recorded outcome, handing out copies.
func TestRecordResumeReplay(t *testing.T) {
	st := loadStudy(t, smallVLLMStudy)
	path := filepath.Join(t.TempDir(), "small.table.json.gz")
	const repeats = 2
	tbl := recordSmall(t, st, path, repeats)
	if !tbl.Header.Complete || tbl.Header.Sessions != 2 || tbl.Header.Repeats != repeats || tbl.Header.StudySHA256 == "" {
		t.Errorf("header %+v", tbl.Header)
	}
	if got := tbl.Runs(); got != repeats*tbl.Feasible() || tbl.Feasible() != 12 {
		t.Fatalf("%d runs of %d feasible configs; want %d of 12", got, tbl.Feasible(), repeats*12)
	}
	orders := make([][]int, repeats)
	for i, c := range tbl.Configs {
		if c.Reject != "" {
			if len(c.Runs) > 0 {
				t.Errorf("%s: statically infeasible but launched", c.Params)
			}
			continue
		}
		var rounds []int
		for _, r := range c.Runs {
			rounds = append(rounds, r.Round)
			orders[r.Round] = append(orders[r.Round], r.Order)
		}
		slices.Sort(rounds)
		if !slices.Equal(rounds, []int{0, 1}) {
			t.Errorf("config %d: rounds %v", i, rounds)
		}
	}
	for r, o := range orders {
		slices.Sort(o)
		for i := range o {
			if o[i] != i {
				t.Fatalf("round %d: orders %v; want a permutation", r, o)
			}
		}
	}
	if a, b := shuffled([]int{0, 1, 2, 3, 4, 5, 6, 7}, 0, st.Name), shuffled([]int{0, 1, 2, 3, 4, 5, 6, 7}, 1, st.Name); slices.Equal(a, b) {
		t.Errorf("rounds 0 and 1 visit in the same order %v", a)
	}

	ls, err := tableLandscape(path, st)
	if err != nil {
		t.Fatal(err)
	}
	back, err := loadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	b := &drawing{next: &tableBackend{replay: ls.replay}}
	for i, ct := range ls.Configs {
		tc := &back.Configs[i]
		if ct.Launched() != (tc.Reject == "") || len(ct.Values) != len(tc.Runs) {
			t.Fatalf("config %d: landscape %+v, table %+v", i, ct, tc)
		}
		cfg, err := st.Resolve(ct.Params, nil)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for j := range tc.Runs {
			run := &tc.Runs[j]
			sum += run.Value()
			pick := uint64(j)
			b.draws = func() (uint64, uint64) { return pick, 0 }
			got := replayOnce(t, b, st, cfg)
			// The table keeps tableDigits of each number, the score
			// derived from them agrees to as many.
			want := run.Outcome.outcome()
			if !digitsNear(got.Score, want.Score) || !digitsNear(got.Value(), run.Outcome.Value) {
				t.Errorf("%s round %d: replayed score %v value %v, recorded %+v", ct.Params, run.Round, got.Score, got.Value(), run.Outcome)
			}
			got.Score, want.Score = 0, 0
			if got != want {
				t.Errorf("%s round %d: replayed %+v, recorded %+v", ct.Params, run.Round, got, run.Outcome)
			}
		}
		if len(tc.Runs) > 0 && !near(ct.Mean, sum/float64(len(tc.Runs))) {
			t.Errorf("%s: true score %v, want the mean of its runs %v", ct.Params, ct.Mean, sum/float64(len(tc.Runs)))
		}
	}
	best := ls.Configs[ls.Best]
	if best.Mean <= 0 || best.Params["expert_parallel"] != true {
		t.Errorf("best %s %v", best.Params, best.Mean)
	}

	// What the backend hands out is a copy: changing it changes no later
	// replay.
	cfg, err := st.Resolve(best.Params, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.draws = func() (uint64, uint64) { return 0, 0 }
	first := measureOnce(t, b, st, cfg)
	first.Points[0].OutputTokS = -1
	first.Medians[16] = objective.Median{}
	if again := measureOnce(t, b, st, cfg); again.Points[0].OutputTokS < 0 || again.Medians[16].OutputTokS <= 0 {
		t.Errorf("a replayed result shares memory with the table")
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// digitsNear says whether a and b agree to the digits a table keeps.
func digitsNear(a, b float64) bool {
	return math.Abs(a-b) <= 1e-6*math.Max(math.Abs(a), math.Abs(b))
}

// replayOnce launches cfg through b and decides the outcome as
// search.Decide does for the study loop.
func replayOnce(t *testing.T, b search.Backend, st *space.Study, cfg *space.Config) search.Outcome {
	t.Helper()
	srv, err := b.Start(t.Context(), launcher.Spec{Argv: st.Argv(cfg)})
	if err != nil {
		var f *launcher.Failure
		if !errors.As(err, &f) {
			t.Fatalf("start: %v", err)
		}
		return search.Decide(st, err, engine.Facts{}, nil, nil, nil)
	}
	facts := srv.Facts()
	if o := search.Decide(st, nil, facts, nil, nil, nil); o.Class == search.ClassLimitsReduced {
		crash, err := srv.Stop(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return search.Decide(st, nil, facts, nil, nil, crash)
	}
	res, merr := srv.Measure(t.Context(), st.Workload, objective.Options{})
	crash, err := srv.Stop(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return search.Decide(st, nil, facts, res, merr, crash)
}

func measureOnce(t *testing.T, b search.Backend, st *space.Study, cfg *space.Config) *objective.Result {
	t.Helper()
	srv, err := b.Start(t.Context(), launcher.Spec{Argv: st.Argv(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := srv.Measure(t.Context(), st.Workload, objective.Options{})
	if err != nil || res == nil || len(res.Points) == 0 {
		t.Fatalf("measure: %v %+v", err, res)
	}
	return res
}

// syntheticRun is a complete run at levels 1 and 16 (one repeat each, a
// warm-up wave before each) scoring tokS at 16.
func syntheticRun(tokS float64) TableRun {
	pt := func(phase string, conc int, tok float64) objective.Point {
		return objective.Point{Phase: phase, Concurrency: conc, Repeat: 1, State: "passed", Requested: conc, Issued: conc, Completed: conc,
			OutputTokS: tok, TTFT: objective.Stats{P50: 0.1, P90: 0.15, P99: 0.2, Mean: 0.1}}
	}
	res := &objective.Result{Kind: "chat",
		Warmup:   []objective.Point{pt("warmup", 1, tokS/10), pt("warmup", 16, tokS)},
		Points:   []objective.Point{pt("", 1, tokS/10), pt("", 16, tokS)},
		Requests: []objective.RequestRecord{{Concurrency: 1, Repeat: 1, OK: true}, {Concurrency: 16, Repeat: 1, OK: true}},
		Audit:    objective.OverallAudit{OK: true, Points: 2, Errors: []string{}}}
	res.Medians = objective.Medians(res.Points)
	return TableRun{Facts: &engine.Facts{MaxRunningRequests: 64, MaxTotalNumTokens: 1000}, Result: res}
}

// TestReplayRuns: each kind of recorded run replays as the study loop saw
// it live: a startup failure as Start's *launcher.Failure, a measurement
// error with the sentinels it wrapped, a crash as Stop's failure; a
// pruning callback stops the replayed measurement after the level it
// prunes at, with the points of later levels dropped.
func TestReplayRuns(t *testing.T) {
	st := loadStudy(t, smallVLLMStudy)
	prune := errors.New("pruned here")
	hang := syntheticRun(500)
	hang.Result.Points = hang.Result.Points[:1]
	hang.MeasureErr = recordError(errors.Join(errors.New("concurrency 16 repeat 1"), objective.ErrHang))
	crash := syntheticRun(500)
	crash.Result.Points = crash.Result.Points[:1]
	crash.MeasureErr = recordError(errors.New("concurrency 16 repeat 1: connection reset"))
	crash.Crash = recordFailure(&launcher.Failure{Class: engine.ClassIllegalMemoryAccess, ExitCode: 1, Reason: "CUDA error: an illegal memory access", Err: errors.New("exit status 1")})
	early := syntheticRun(500)
	early.Result.Points, early.Result.Warmup = early.Result.Points[:1], early.Result.Warmup[:1]
	early.Result.Points[0].State, early.Result.Points[0].Failed = "failed", 1
	early.MeasureErr = recordError(fmt.Errorf("concurrency 1 repeat 1: 1 of 1 %w: 500", objective.ErrFailedRequests))
	for _, tc := range []struct {
		name string
		run  TableRun
		// afterLevel: nil, or fails at that level
		pruneAt int
		want    search.Outcome
		// levels the replayed measurement calls AfterLevel with, and the
		// levels its points keep
		called, kept []int
	}{
		{name: "complete", run: syntheticRun(500), want: search.Outcome{State: search.StateComplete, Score: 500, ScoreOK: true},
			called: []int{1}, kept: []int{1, 16}},
		{name: "startup failure", run: TableRun{StartFailure: recordFailure(&launcher.Failure{Class: engine.ClassOOM, ExitCode: 137, Reason: "CUDA out of memory"})},
			want: search.Outcome{State: search.StateFailed, Class: engine.ClassOOM, Reason: "CUDA out of memory"}},
		{name: "hang", run: hang, want: search.Outcome{State: search.StateFailed, Class: engine.ClassHang, Reason: hang.MeasureErr.Text},
			called: []int{1}, kept: []int{1}},
		{name: "crash", run: crash, want: search.Outcome{State: search.StateFailed, Class: engine.ClassIllegalMemoryAccess, Reason: "CUDA error: an illegal memory access"},
			called: []int{1}, kept: []int{1}},
		{name: "failed in the first level", run: early, want: search.Outcome{State: search.StateFailed, Class: search.ClassRequestsFailed, Reason: early.MeasureErr.Text},
			called: nil, kept: []int{1}},
		{name: "pruned", run: syntheticRun(500), pruneAt: 1, called: []int{1}, kept: []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tcfg := TableConfig{Runs: []TableRun{tc.run}}
			b := &drawing{next: &tableBackend{replay: &tableReplay{path: "synthetic", byArgv: map[string]*TableConfig{"x": &tcfg}}},
				draws: func() (uint64, uint64) { return 7, 0 }}
			srv, err := b.Start(t.Context(), launcher.Spec{Argv: []string{"x"}})
			if tc.run.StartFailure != nil {
				if o := search.Decide(st, err, engine.Facts{}, nil, nil, nil); o != tc.want {
					t.Errorf("startup: %+v, want %+v", o, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var called []int
			opt := objective.Options{AfterLevel: func(conc int, pts []objective.Point) error {
				called = append(called, conc)
				if len(pts) != 1 || pts[0].Concurrency != conc {
					t.Errorf("level %d: points %+v", conc, pts)
				}
				if conc == tc.pruneAt {
					return prune
				}
				return nil
			}}
			res, merr := srv.Measure(t.Context(), st.Workload, opt)
			if !slices.Equal(called, tc.called) {
				t.Errorf("AfterLevel at %v, want %v", called, tc.called)
			}
			var kept []int
			for _, p := range res.Points {
				kept = append(kept, p.Concurrency)
			}
			if !slices.Equal(kept, tc.kept) {
				t.Errorf("points at %v, want %v", kept, tc.kept)
			}
			if tc.pruneAt > 0 {
				if !errors.Is(merr, prune) || len(res.Requests) != 1 || len(res.Warmup) != 1 || len(res.Medians) != 1 {
					t.Errorf("pruned: err %v, %d requests, %d warm-ups, medians %v", merr, len(res.Requests), len(res.Warmup), res.Medians)
				}
				return
			}
			f, err := srv.Stop(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if o := search.Decide(st, nil, srv.Facts(), res, merr, f); o != tc.want {
				t.Errorf("outcome %+v, want %+v", o, tc.want)
			}
		})
	}
}

// TestTableCommand: --table reads the landscape from a measured table
// and prints its summary after the landscape's; the searches replay it
// (the engine command need not be on PATH); a table of another study is
// refused.
func TestTableCommand(t *testing.T) {
	st := loadStudy(t, smallVLLMStudy)
	dir := t.TempDir()
	path := filepath.Join(dir, "small.table.json.gz")
	recordSmall(t, st, path, 2)
	t.Setenv("PATH", dir) // no sglang-sim: nothing is launched
	args := []string{"--study", smallVLLMStudy, "--table", path, "--cache", t.TempDir(), "--workers", "2"}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append(args, "--landscape"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"landscape of study bench-search-small-vllm on profile measured:small.table.json.gz", "best: ",
		"configs with a true score >= 97% of the best", "spread across repeats", "illegal_memory_access"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^table_best=\S+ table_best_mean=[0-9.]+ within_97=\d+/12 median_cv=[0-9.]+% failures=".*" wall_s=\d+$`).MatchString(last) {
		t.Errorf("last line %q", last)
	}
	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), append(args, "--seeds", "2", "--budget", "4", "--methods", "ours,random", "-q"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if !strings.Contains(out.String(), "suite_landscapes=1 ours_worst_trials_to_97=") {
		t.Errorf("no comparison:\n%s", out.String())
	}
	errOut.Reset()
	if code := run(context.Background(), []string{"--study", smallStudy, "--table", path, "--landscape"}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), "a table of study bench-search-small-vllm") {
		t.Errorf("a table of another study: exit %d, %s", code, errOut.String())
	}
}

func TestRecordFlags(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want bool
	}{
		{"--record-table", true}, {"-record-table", true}, {"--record-table=x.json.gz", true},
		{"--table", false}, {"record-table", false}, {"--record-tables", false},
	} {
		if got := isRecordFlag(tc.arg); got != tc.want {
			t.Errorf("%q: %v", tc.arg, got)
		}
	}
	for _, args := range [][]string{
		{"--record-table", "x.json.gz"},
		{"--record-table", "x.json.gz", "--study", smallVLLMStudy, "--repeats", "0"},
		{"--record-table", "x.json.gz", "--study", smallVLLMStudy, "extra"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	if _, err := os.Stat("x.json.gz"); err == nil {
		t.Error("a refused recording wrote its table")
	}
}

// TestMeasuredTable: the committed table of testdata/studies/llama-cpu.yaml
// reads as that study's landscape: every feasible config measured in
// every round, the statically infeasible ones never launched.
func TestMeasuredTable(t *testing.T) {
	t.Setenv("LLAMA_MODEL", filepath.Join(t.TempDir(), "model.gguf")) // the study names it; the replay needs no file
	st := loadStudy(t, "../../testdata/studies/llama-cpu.yaml")
	ls, err := tableLandscape("../../testdata/landscapes/llama-cpu.table.json.gz", st)
	if err != nil {
		t.Fatal(err)
	}
	h := ls.replay.table.Header
	if !h.Complete || h.Repeats < 3 || h.EngineVersion == "" || h.Machine.NProc == 0 {
		t.Errorf("header %+v", h)
	}
	// Runs beside other work measure its noise: the table's truth is
	// then a mean of noisier runs than a user's quiet machine gives.
	if n := ls.replay.table.Busy(); n > 0 {
		t.Errorf("%d of %d runs recorded at a load above %d CPUs + 1: record the table on a quiet machine", n, ls.replay.table.Runs(), h.Machine.NProc)
	}
	launched := 0
	for _, c := range ls.Configs {
		if !c.Launched() {
			if len(c.Values) > 0 {
				t.Errorf("%s: statically infeasible but measured", c.Params)
			}
			continue
		}
		launched++
		if len(c.Values) != h.Repeats {
			t.Errorf("%s: %d runs, want %d", c.Params, len(c.Values), h.Repeats)
		}
	}
	if len(ls.Configs) != 128 || launched != 96 || ls.Best < 0 || ls.Configs[ls.Best].Mean <= 0 {
		t.Errorf("%d configs, %d launched, best %d", len(ls.Configs), launched, ls.Best)
	}
}

// TestTableKeepsMeasuredDigits: a saved table keeps tableDigits of each
// measured number and no medians; loaded, each result's medians are those
// of its points.
func TestTableKeepsMeasuredDigits(t *testing.T) {
	points := []objective.Point{
		{Concurrency: 4, Repeat: 1, State: "passed", OutputTokS: 123.456789012345, DurationS: 0.123456789},
		{Concurrency: 4, Repeat: 2, State: "passed", OutputTokS: 130.987654321098, DurationS: 0.2},
	}
	res := &objective.Result{Kind: "chat", Points: points, Medians: objective.Medians(points)}
	tb := &Table{Version: tableVersion, Configs: []TableConfig{{Runs: []TableRun{{Load1: 0.25, Result: res}}}}}
	path := filepath.Join(t.TempDir(), "t.json.gz")
	if err := saveTable(path, tb); err != nil {
		t.Fatal(err)
	}
	if tb.Configs[0].Runs[0].Result.Medians == nil || tb.Configs[0].Runs[0].Result.Points[0].OutputTokS != 123.456789012345 {
		t.Fatal("saving changed the table in memory")
	}
	back, err := loadTable(path)
	if err != nil {
		t.Fatal(err)
	}
	got := back.Configs[0].Runs[0]
	if p := got.Result.Points; p[0].OutputTokS != 123.4568 || p[1].OutputTokS != 130.9877 || p[0].DurationS != 0.1234568 || p[1].DurationS != 0.2 || got.Load1 != 0.25 {
		t.Errorf("points %+v, load %v: want 7 significant digits", p, got.Load1)
	}
	if m, want := got.Result.Medians, objective.Medians(got.Result.Points); m[4].Repeats != 2 || m[4] != want[4] {
		t.Errorf("medians %+v, want those of the points %+v", m, want)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(text, []byte(`"medians":null`)) {
		t.Errorf("stored %s: want no medians", text)
	}
}

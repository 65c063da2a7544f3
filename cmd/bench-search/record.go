package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

// isRecordFlag reports whether an argument asks for a recording
// (--record-table), which has its own flags (recordMain).
func isRecordFlag(a string) bool {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	return strings.HasPrefix(a, "-") && name == "record-table"
}

// recordMain is `bench-search --record-table FILE --study FILE [--repeats
// R] [--logs DIR] [-q]`: it measures every statically feasible config of
// the study for real, R rounds, into the table FILE (recordTable), and
// resumes a partial FILE.
func recordMain(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench-search --record-table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("record-table", "", "the table to write (gzip-compressed JSON); a partial one is resumed")
	studyPath := fs.String("study", "", "study file")
	repeats := fs.Int("repeats", 3, "rounds: launches per feasible config, each round in its own shuffled order")
	logDir := fs.String("logs", "", "keep the servers' logs in this directory (default: a temporary one, removed)")
	quiet := fs.Bool("q", false, "no progress lines")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bench-search: "+format+"\n", a...)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q (flags only; see -h)", fs.Arg(0))
	case *path == "" || *studyPath == "":
		return bad("--record-table FILE and --study FILE are both needed")
	case *repeats < 1:
		return bad("--repeats %d: want at least 1", *repeats)
	}
	st, err := space.Load(*studyPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	pre := search.Check(st, os.Getenv)
	if err := pre.Err(); err != nil {
		fmt.Fprintln(stderr, "bench-search:", err)
		return 2
	}
	opt := recordOptions{Path: *path, Repeats: *repeats, LogDir: *logDir, APIKey: pre.APIKey,
		Backend: search.Processes{Target: objective.Target{Model: st.ServedName(), APIKey: pre.APIKey, TokenCounter: st.Engine.Kind.Metrics.GenerationTokens}},
		Version: commandVersion}
	if !*quiet {
		opt.Log = stderr
	}
	if l, n := loadAvg()[0], runtime.NumCPU(); l > float64(n)/2 {
		// A table records the engine's noise: a run sharing the CPUs
		// with other work records that work's too (llama-cpu recorded
		// at load 4-9 on 2 CPUs measured a median 19% noise per run,
		// 8.4% on the same machine idle).
		fmt.Fprintf(stderr, "bench-search: warning: the machine is busy (load average %.2f on %d CPUs): runs recorded beside other work measure its noise too; stop it, or interrupt and resume later\n", l, n)
	}
	t, err := recordTable(ctx, st, opt)
	if err != nil {
		fmt.Fprintln(stderr, "bench-search:", err)
		return 1
	}
	fmt.Fprintf(stdout, "table %s: %d configs, %d feasible, %d runs (%d recorded at a load above the CPUs + 1), %.0f s recording\n",
		*path, len(t.Configs), t.Feasible(), t.Runs(), t.Busy(), t.Header.WallS)
	return 0
}

// recordOptions configure recordTable.
type recordOptions struct {
	Path    string
	Repeats int
	// LogDir keeps the servers' logs; "" writes them to a temporary
	// directory removed afterwards.
	LogDir string
	APIKey string
	// Backend launches the servers: search.Processes for the real engine
	// (tests record the simulator in virtual time).
	Backend search.Backend
	// Version returns what the engine command says its version is.
	Version func(ctx context.Context, command []string) string
	Log     io.Writer // progress lines; nil: none
}

// recordTable measures st's space through opt.Backend as a `sgtune run`
// launches a trial: the study's argv, environment, startup timeout and
// workload, the measurement in full (no pruning: a replay prunes), the
// outcome decided by search.Decide. Every statically feasible config runs
// once per round, rounds in their own shuffled order so that the
// machine's drift spreads over all configs alike. The table is rewritten
// after every run; a partial one at opt.Path is resumed (a finished run is
// never measured again; the run an interrupt cut short is dropped).
func recordTable(ctx context.Context, st *space.Study, opt recordOptions) (*Table, error) {
	logf := func(format string, a ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, format+"\n", a...)
		}
	}
	confs, cfgs, err := enumerateTable(st)
	if err != nil {
		return nil, err
	}
	t, err := loadTable(opt.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		t, err = newTable(ctx, st, confs, opt)
		if err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		if err := sameSpace(t, st, confs); err != nil {
			return nil, fmt.Errorf("%s: %w; move it away to start afresh", opt.Path, err)
		}
		logf("resuming %s: %d runs recorded", opt.Path, t.Runs())
	}
	t.Header.Repeats = max(t.Header.Repeats, opt.Repeats)
	t.Header.Sessions++
	logDir := opt.LogDir
	if logDir == "" {
		if logDir, err = os.MkdirTemp("", "bench-search-record-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(logDir)
	} else if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	var feasible []int
	for i := range t.Configs {
		if t.Configs[i].Reject == "" {
			feasible = append(feasible, i)
		}
	}
	todo := 0
	for round := range t.Header.Repeats {
		for _, i := range feasible {
			if !hasRound(&t.Configs[i], round) {
				todo++
			}
		}
	}
	logf("%d configs, %d statically feasible, %d rounds: %d runs to go", len(t.Configs), len(feasible), t.Header.Repeats, todo)
	session := time.Now()
	wall0 := t.Header.WallS
	checkpoint := func() error {
		t.Header.Updated = time.Now().UTC()
		t.Header.WallS = wall0 + time.Since(session).Seconds()
		t.Header.LoadEnd = loadAvg()
		return saveTable(opt.Path, t)
	}
	if err := checkpoint(); err != nil {
		return nil, fmt.Errorf("write %s: %w", opt.Path, err)
	}
	done := 0
	for round := range t.Header.Repeats {
		for order, i := range shuffled(feasible, round, st.Name) {
			c := &t.Configs[i]
			if hasRound(c, round) {
				continue
			}
			run, err := recordRun(ctx, st, cfgs[i], opt, filepath.Join(logDir, fmt.Sprintf("round%d-config%d.log", round, i)))
			if err != nil {
				if cerr := checkpoint(); cerr != nil {
					err = errors.Join(err, fmt.Errorf("write %s: %w", opt.Path, cerr))
				}
				return t, err
			}
			run.Round, run.Order = round, order
			c.Runs = append(c.Runs, run)
			done++
			if err := checkpoint(); err != nil {
				return t, fmt.Errorf("write %s: %w", opt.Path, err)
			}
			left := time.Duration(float64(time.Since(session)) / float64(done) * float64(todo-done)).Round(time.Second)
			logf("round %d/%d %2d/%d %s: %s (%.1f s; load %.2f) — %d/%d runs, about %s left",
				round+1, t.Header.Repeats, order+1, len(feasible), c.Params, runLine(&run), run.WallS, run.Load1, done, todo, left)
		}
	}
	t.Header.Complete = true
	if err := checkpoint(); err != nil {
		return t, fmt.Errorf("write %s: %w", opt.Path, err)
	}
	return t, nil
}

// runLine says how a run ended, in a few words.
func runLine(r *TableRun) string {
	o := r.Outcome.outcome()
	switch {
	case o.State == search.StateComplete && o.ScoreOK:
		return fmt.Sprintf("score %.1f", o.Score)
	case o.State == search.StateComplete:
		return fmt.Sprintf("score %.1f, misses the SLO", o.Score)
	}
	return fmt.Sprintf("%s %s: %s", o.State, o.Class, firstLineOf(o.Reason))
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 120 {
		l = l[:120] + "..."
	}
	return l
}

// recordRun launches one config, measures it in full and stops it. An
// error is the recording's (ctx ended, a launch that could not be made, a
// server that could not be stopped), not the config's.
func recordRun(ctx context.Context, st *space.Study, cfg *space.Config, opt recordOptions, logPath string) (TableRun, error) {
	kind := st.Engine.Kind
	spec := launcher.Spec{Engine: kind, Argv: st.Argv(cfg), LogPath: logPath, StartupTimeout: st.Launch.StartupTimeout, APIKey: opt.APIKey}
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		spec.Env = append(spec.Env, k+"="+cfg.Env[k])
	}
	if opt.APIKey != "" {
		spec.Argv = append(spec.Argv, kind.APIKeyFlag, opt.APIKey)
	}
	t0 := time.Now()
	run := TableRun{At: t0.UTC(), Load1: loadAvg()[0]}
	srv, err := opt.Backend.Start(ctx, spec)
	var f *launcher.Failure
	switch {
	case ctx.Err() != nil:
		if err == nil {
			_, _ = srv.Stop(context.Background())
		}
		return run, ctx.Err()
	case errors.As(err, &f):
		run.StartFailure = recordFailure(f)
		run.Outcome = recordOutcome(search.Decide(st, err, engine.Facts{}, nil, nil, nil))
	case err != nil:
		return run, fmt.Errorf("launch %s: %w", cfg.Params, err)
	default:
		facts := srv.Facts()
		run.Facts = &facts
		var res *objective.Result
		var merr error
		// A server whose limits the engine reduced is stopped unmeasured,
		// as the study loop stops it.
		if o := search.Decide(st, nil, facts, nil, nil, nil); o.Class == search.ClassLimitsReduced {
			run.Limits = o.Reason
		} else {
			res, merr = srv.Measure(ctx, st.Workload, objective.Options{MaxRunning: facts.MaxRunningRequests})
		}
		// As the study loop: how the server ended counts only when the
		// measurement failed or the server already showed a failure.
		clean := run.Limits == "" && merr == nil && !failedYet(srv)
		crash, stopErr := srv.Stop(context.Background())
		if ctx.Err() != nil {
			return run, ctx.Err()
		}
		if stopErr != nil {
			return run, fmt.Errorf("stop the server of %s: %w", cfg.Params, stopErr)
		}
		if clean {
			crash = nil
		}
		run.Result, run.MeasureErr, run.Crash = res, recordError(merr), recordFailure(crash)
		run.Outcome = recordOutcome(search.Decide(st, nil, facts, res, merr, crash))
	}
	run.WallS = time.Since(t0).Seconds()
	return run, nil
}

// failedYet reports whether a running server already shows a failure,
// where its backend can tell before Stop (search's failedYet).
func failedYet(srv search.Running) bool {
	f, ok := srv.(interface{ Failure() *launcher.Failure })
	return ok && f.Failure() != nil
}

func hasRound(c *TableConfig, round int) bool {
	return slices.ContainsFunc(c.Runs, func(r TableRun) bool { return r.Round == round })
}

// shuffled is the order a round visits the feasible configs in: a
// permutation of its own, the same for a resumed round.
func shuffled(feasible []int, round int, study string) []int {
	rng := rand.New(rand.NewPCG(uint64(round)+1, hashString("record "+study)))
	out := slices.Clone(feasible)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// enumerateTable is st's space in enumeration order, as the landscape
// enumerates it: each config resolved and statically checked.
func enumerateTable(st *space.Study) ([]TableConfig, []*space.Config, error) {
	var confs []TableConfig
	var cfgs []*space.Config
	var enumErr error
	st.Enumerate(func(p space.Params) bool {
		cfg, err := st.Resolve(p, nil)
		if err != nil {
			enumErr = fmt.Errorf("resolve %s: %w", p, err)
			return false
		}
		tc := TableConfig{Params: cfg.Params, Flags: cfg.Flags}
		if rej := st.Check(cfg); len(rej) > 0 {
			tc.Reject = rej[0].Rule + ": " + rej[0].Message
		}
		confs = append(confs, tc)
		cfgs = append(cfgs, cfg)
		return true
	})
	if enumErr != nil {
		return nil, nil, enumErr
	}
	if len(confs) == 0 {
		return nil, nil, errors.New("the space has no config (continuous params cannot be enumerated)")
	}
	return confs, cfgs, nil
}

// sameSpace checks that a partial table was recorded for st's space.
func sameSpace(t *Table, st *space.Study, confs []TableConfig) error {
	if t.Header.Study != st.Name {
		return fmt.Errorf("a table of study %s, not %s", t.Header.Study, st.Name)
	}
	if len(t.Configs) != len(confs) {
		return fmt.Errorf("%d configs, the study's space has %d", len(t.Configs), len(confs))
	}
	for i := range confs {
		a, b := &t.Configs[i], &confs[i]
		if flagsKey(a.Flags) != flagsKey(b.Flags) || a.Reject != b.Reject {
			return fmt.Errorf("config %d is %q (%s), the study's is %q (%s)", i, flagsKey(a.Flags), a.Reject, flagsKey(b.Flags), b.Reject)
		}
	}
	return nil
}

// newTable is an empty table of st's space with its header.
func newTable(ctx context.Context, st *space.Study, confs []TableConfig, opt recordOptions) (*Table, error) {
	h := TableHeader{Study: st.Name, StudyFile: st.Path, Engine: st.Engine.Name, EngineCommand: st.Engine.Command,
		Model: st.Model, Machine: thisMachine(), Started: time.Now().UTC(), LoadStart: loadAvg()}
	sum, err := fileSHA256(st.Path)
	if err != nil {
		return nil, fmt.Errorf("study file: %w", err)
	}
	h.StudySHA256 = sum
	if fi, err := os.Stat(st.Model); err == nil && fi.Mode().IsRegular() {
		h.ModelBytes = fi.Size()
		if h.ModelSHA256, err = fileSHA256(st.Model); err != nil {
			return nil, fmt.Errorf("model file: %w", err)
		}
	}
	if opt.Version != nil {
		h.EngineVersion = opt.Version(ctx, st.Engine.Command)
	}
	return &Table{Version: tableVersion, Header: h, Configs: confs}, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// commandVersion is what `COMMAND --version` prints (llama-server prints
// its build number and commit), or why it printed nothing.
func commandVersion(ctx context.Context, command []string) string {
	if len(command) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, command[0], "--version").CombinedOutput()
	var lines []string
	for l := range strings.SplitSeq(string(out), "\n") {
		// llama-server lists its compute devices first; the version and
		// the build are what identify it.
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "version:") || strings.HasPrefix(l, "built with") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		lines = append(lines, strings.TrimSpace(string(out)))
	}
	v := strings.Join(lines, "; ")
	if err != nil {
		v = strings.TrimSpace(v + " (" + command[0] + " --version: " + err.Error() + ")")
	}
	return v
}

// thisMachine describes the host (Linux's /proc where it has it).
func thisMachine() Machine {
	m := Machine{NProc: runtime.NumCPU()}
	m.Host, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				m.MemKB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				break
			}
		}
		f.Close()
	}
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages (zeros where the
// system does not say).
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		out[i], _ = strconv.ParseFloat(f, 64)
	}
	return out
}

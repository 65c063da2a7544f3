// Command bench-search measures search methods on landscapes without
// servers: every trial runs the simulator's engine in virtual time
// (sim/virtual) with the same startup, scheduler, memory model, performance
// model and faults as a real `sgtune run` against sglang-sim.
//
//	bench-search [--suite FILE | --study FILE [--profile NAME|FILE]] [--landscape]
//	    [--seeds 20] [--budget 30] [--noise-cv 0.12] [--methods ours,random,goptuna_tpe]
//	    [--draws K] [--workers N] [--cache DIR] [--refresh]
//
// A landscape is the true score of every config of a study's space: each
// feasible config run over K of the simulator's own random draws (no
// measurement noise), its value averaged. It is cached per profile, study
// and K under ${SGTUNE_CACHE:-$HOME/.cache/sgtune}/bench-search/, and a
// cached one is used only when this build measures a sample of its configs
// the same (see stale). --landscape prints the summaries and exits.
//
// Otherwise each method runs --seeds studies per landscape, every launch
// measured with multiplicative noise of --noise-cv per repeat. ours is
// what a user running the study with the default sampler (bayes) gets:
// search.Run with the study's own parallelism, engine-default baseline
// and confirmation; every launch is counted (search trials, the baseline
// and confirmation reruns) and the winner scored is the one the
// study declares. A study whose launches all count in its budget runs
// once and is scored after every launch (search.DeclareFrom: what the
// same study with that budget declares); one that confirms after its
// search runs at every budget of a ladder up to --budget. ours_random is
// the same loop with random proposals; random, goptuna_tpe and grid are
// the plain propose-launch-tell loop of the peer tools.
// Printed per landscape and method: the median launches to a declared
// winner whose true score is at least 97% of the best, with its 95%
// interval, the median regret after 10, 20 and 30 launches, and the crash
// and infeasible launches per study; the last line sums up the suite.
// A method's draws are keyed by its name, the seed and the launch's
// history, so two runs of one method compare; 20 seeds decide little.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/sim"
	"github.com/sgtune/sgtune/space"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// defaultCacheDir is ${SGTUNE_CACHE:-$HOME/.cache/sgtune}/bench-search.
func defaultCacheDir() string {
	base := os.Getenv("SGTUNE_CACHE")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache", "sgtune")
	}
	return filepath.Join(base, "bench-search")
}

func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	// Measured tables (table.go): --record-table records one.
	if slices.ContainsFunc(argv, isRecordFlag) {
		return recordMain(ctx, argv, stdout, stderr)
	}
	fs := flag.NewFlagSet("bench-search", flag.ContinueOnError)
	fs.SetOutput(stderr)
	suitePath := fs.String("suite", "", "a suite file (YAML: landscapes: [{name, study, profile or table, why}]): run every landscape of it")
	studyPath := fs.String("study", "testdata/studies/glm-5.3-flash-h200x4.yaml", "study file (without --suite)")
	profile := fs.String("profile", "", "simulator profile: a bundled name or a file (default: the study command's --sim-profile, else "+sim.DefaultProfile+")")
	draws := fs.Int("draws", defaultDraws, "simulator draws (seeds) averaged per config near the top for the true score")
	screen := fs.Int("screen-draws", defaultScreenDraws, "draws every config gets first (0: all get --draws)")
	refine := fs.Float64("refine", defaultRefine, "configs whose screened true score is at least this fraction of the best get all --draws")
	onlyLandscape := fs.Bool("landscape", false, "print the landscape summary and exit")
	seeds := fs.Int("seeds", 20, "searches per method (search seeds)")
	budget := fs.Int("budget", 30, "launches per search, every launch counted (search trials, the engine default, reruns)")
	noiseCV := fs.Float64("noise-cv", 0.12, "measurement noise per repeat: coefficient of variation of a log-normal factor (0: none)")
	workers := fs.Int("workers", runtime.NumCPU(), "parallel virtual trials")
	cacheDir := fs.String("cache", defaultCacheDir(), "landscape cache directory")
	refresh := fs.Bool("refresh", false, "recompute the landscape even when cached")
	from := fs.String("landscape-from", "", "use this cached landscape file instead of the one keyed by the study (without --suite)")
	noShare := fs.Bool("no-share", false, "measure every config itself instead of sharing measurements between configs that behave the same (slow; checks the sharing)")
	quiet := fs.Bool("q", false, "no progress lines")
	trace := fs.Bool("trace", false, "print every trial of every search of ours (state, params, measured score with ! where it missed the SLO or a gate, true score) and the trial each budget declares, to stderr")
	tablePath := fs.String("table", "", "measured table (see --record-table) of --study's space: the landscape and every launch come from it instead of the simulator")
	runsPath := fs.String("runs", "", "write every search's result to this file, one JSON object per line (landscape, method, seed, launches to 97%, first launch of a config within 97%, crash launches, regret after each launch): for paired comparisons between builds over the same seeds")
	only := fs.String("methods", strings.Join(reported, ","), "comma-separated methods to run; all: "+methodNames())
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
	case *draws < 1:
		return bad("--draws %d: want at least 1", *draws)
	case *screen < 0 || *refine < 0 || *refine > 1:
		return bad("--screen-draws %d --refine %v: want draws >= 0 and a fraction in [0, 1]", *screen, *refine)
	case *seeds < 1 || *budget < 1:
		return bad("--seeds %d --budget %d: want at least 1 each", *seeds, *budget)
	case *noiseCV < 0:
		return bad("--noise-cv %v: want 0 or more", *noiseCV)
	case *workers < 1:
		return bad("--workers %d: want at least 1", *workers)
	case *suitePath != "" && (*from != "" || *tablePath != ""):
		return bad("--landscape-from, --table: one landscape only; not with --suite (a suite member names its table)")
	case *tablePath != "" && (*from != "" || *profile != ""):
		return bad("--table: the landscape comes from the table; not with --landscape-from or --profile")
	}
	ms, err := pickMethods(*only)
	if err != nil {
		return bad("--methods: %v", err)
	}
	members := []member{{Name: "", Study: *studyPath, Profile: *profile, Table: *tablePath}}
	if *suitePath != "" {
		if members, err = loadSuite(*suitePath); err != nil {
			fmt.Fprintln(stderr, "bench-search:", err)
			return 2
		}
	}
	progress := stderr
	if *quiet {
		progress = nil
	}
	// Every study is loaded and checked before anything runs: a bad
	// member fails the suite at once.
	studies := make([]*space.Study, len(members))
	for i := range members {
		m := &members[i]
		for k, v := range m.Env {
			if _, set := os.LookupEnv(k); !set {
				if err := os.Setenv(k, v); err != nil {
					return bad("%s: env %s: %v", m.Name, k, err)
				}
			}
		}
		st, err := space.Load(m.Study)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if st.Workload.Kind != "chat" {
			return bad("%s: workload kind %s: the virtual runner measures chat workloads only", m.Study, st.Workload.Kind)
		}
		if m.Name == "" {
			m.Name = st.Name
		}
		if m.Table != "" {
			studies[i] = st
			continue
		}
		if m.Profile == "" {
			m.Profile = studyProfile(st.Engine.Command)
		}
		if _, err := sim.LoadProfile(m.Profile); err != nil {
			return bad("%s: profile: %v", m.Name, err)
		}
		studies[i] = st
	}
	var runsOut *os.File
	if *runsPath != "" && !*onlyLandscape {
		f, err := os.Create(*runsPath)
		if err != nil {
			return bad("--runs: %v", err)
		}
		defer f.Close() // on an early return; the end closes it and checks
		runsOut = f
	}
	var all []scored
	for i, m := range members {
		st := studies[i]
		lopt := landscapeOptions{Profile: m.Profile, Draws: *draws, ScreenDraws: *screen, Refine: *refine, NoShare: *noShare, Workers: *workers, Log: progress}
		var ls *Landscape
		var backend drawnBackend = &virtualBackend{profile: m.Profile, noiseCV: *noiseCV, eng: newSimEngine(st)}
		if m.Table != "" {
			ls, err = tableLandscape(m.Table, st)
			if err == nil {
				backend = &tableBackend{replay: ls.replay}
			}
		} else if *from != "" {
			var ok bool
			if ls, ok, err = loadLandscape(*from); err == nil && !ok {
				err = fmt.Errorf("%s: not a landscape of this version", *from)
			}
		} else {
			ls, err = landscape(ctx, st, m.Study, lopt, *cacheDir, *refresh)
		}
		if err != nil {
			fmt.Fprintln(stderr, "bench-search:", err)
			return 1
		}
		if len(members) > 1 {
			fmt.Fprintf(stdout, "\n== %s (%s)\n", m.Name, m.Why)
		}
		printSummary(stdout, ls)
		printTableSummary(stdout, ls)
		if *onlyLandscape {
			continue
		}
		if !ls.found() {
			fmt.Fprintf(stderr, "bench-search: %s: %v (see the summary above): widen the params or the SLO\n", m.Study, errNothingToFind)
			return 2
		}
		pre := search.Check(st, os.Getenv)
		if err := pre.NoFeasible(); err != nil {
			fmt.Fprintln(stderr, "bench-search:", err)
			return 2
		}
		// Every launch runs in process, in virtual time: the engine command
		// need not be on this host.
		pre.Host = nil
		cmp := comparison{Study: st, Profile: m.Profile, Landscape: ls, Seeds: *seeds, Budget: *budget, NoiseCV: *noiseCV,
			Workers: *workers, Log: progress, Preflight: &pre, Backend: backend}
		if st.Budget.Baseline == space.BaselineDefault {
			if m.Table != "" {
				// A table holds the configs of the space, measured; an
				// engine default outside it was never measured.
				if base, err := st.Baseline(nil); err != nil || !base.InSpace() {
					st.Budget.Baseline = space.BaselineNone
					fmt.Fprintf(stdout, "engine default: not in the measured table; the studies run without it\n")
				}
			} else {
				truth, base, err := defaultTruth(ctx, st, ls, m.Profile, *draws)
				if err != nil {
					fmt.Fprintln(stderr, "bench-search:", err)
					return 1
				}
				cmp.DefaultTruth = truth
				fmt.Fprintf(stdout, "engine default (%s): true score %.1f, %.1f%% of the best\n", base.Describe(), truth, 100*truth/ls.Configs[ls.Best].Mean)
			}
		}
		if *trace {
			cmp.Trace = stderr
		}
		res, err := cmp.Run(ctx, ms)
		if err != nil {
			fmt.Fprintln(stderr, "bench-search:", err)
			return 1
		}
		s := scored{Name: m.Name, Budget: *budget, Runs: res}
		if runsOut != nil {
			if err := writeRuns(runsOut, s); err != nil {
				fmt.Fprintln(stderr, "bench-search: --runs:", err)
				return 1
			}
		}
		printScored(stdout, s, st.Budget.Parallel)
		all = append(all, s)
	}
	if *onlyLandscape {
		return 0
	}
	if runsOut != nil {
		if err := runsOut.Close(); err != nil {
			fmt.Fprintln(stderr, "bench-search: --runs:", err)
			return 1
		}
	}
	fmt.Fprintln(stdout, suiteLine(all))
	return 0
}

// landscape loads the cached landscape or computes and caches it.
func landscape(ctx context.Context, st *space.Study, studyPath string, opt landscapeOptions, dir string, refresh bool) (*Landscape, error) {
	log := opt.Log
	key, err := cacheKey(studyPath, opt)
	if err != nil {
		return nil, err
	}
	path := cachePath(dir, st.Name, opt.Profile, key)
	if !refresh {
		ls, ok, err := loadLandscape(path)
		if err != nil {
			return nil, err
		}
		if ok {
			why, err := stale(ctx, st, ls, opt.Profile)
			if err != nil {
				return nil, err
			}
			if why == "" {
				if log != nil {
					fmt.Fprintf(log, "landscape from %s\n", path)
				}
				return ls, nil
			}
			if log != nil {
				fmt.Fprintf(log, "cached landscape %s is stale (%s): computing it again\n", path, why)
			}
		}
	}
	ls, err := ComputeLandscape(ctx, st, opt)
	if err != nil {
		return nil, err
	}
	ls.Key = key
	if err := saveLandscape(path, ls); err != nil {
		return nil, fmt.Errorf("cache the landscape: %w", err)
	}
	if log != nil {
		fmt.Fprintf(log, "landscape cached in %s\n", path)
	}
	return ls, nil
}

// studyProfile is the --sim-profile of a study's engine command (a study
// run against sglang-sim names it there), else the default profile.
func studyProfile(command []string) string {
	for i, w := range command {
		if v, ok := strings.CutPrefix(w, "--sim-profile="); ok {
			return v
		}
		if w == "--sim-profile" && i+1 < len(command) {
			return command[i+1]
		}
	}
	return sim.DefaultProfile
}

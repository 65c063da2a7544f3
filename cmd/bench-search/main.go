// Command bench-search measures search methods on a study's landscape
// without servers: every trial runs the simulator's engine in virtual time
// (sim/virtual) with the same startup, scheduler, memory model, performance
// model and faults as a real `sgtune run` against sglang-sim.
//
//	bench-search --study FILE [--profile NAME|FILE] [--draws K] [--landscape]
//	    [--seeds 20] [--budget 30] [--noise-cv 0.12] [--workers N] [--cache DIR] [--refresh]
//
// The landscape is the true score of every config of the study's space:
// each feasible config run over K of the simulator's own random draws (no
// measurement noise), its value averaged; it is cached per program,
// profile, study and K under ${SGTUNE_CACHE:-$HOME/.cache/sgtune}/bench-search/.
// --landscape prints its summary and exits. Otherwise the search methods
// run, each --seeds times with a budget of --budget launches, every launch
// measured with multiplicative noise of --noise-cv per repeat, and the
// launches until the winner the study would declare has a true score of at
// least 97% of the best are reported. Methods: ours (the study loop with
// the study's own budget.sampler, what a user running the study gets),
// ours_tpe, ours_bayes and ours_random (the loop with those samplers), and the
// baselines random, goptuna_tpe and grid. A method's noise draws are keyed
// by its name and the seed, so two runs of one method compare; 20 seeds
// decide little (see docs/study-file.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
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
	fs := flag.NewFlagSet("bench-search", flag.ContinueOnError)
	fs.SetOutput(stderr)
	studyPath := fs.String("study", "testdata/studies/glm-5.3-flash-h200x4.yaml", "study file")
	profile := fs.String("profile", "", "simulator profile: a bundled name or a file (default: the study command's --sim-profile, else "+sim.DefaultProfile+")")
	draws := fs.Int("draws", defaultDraws, "simulator draws (seeds) averaged per config near the top for the true score")
	screen := fs.Int("screen-draws", defaultScreenDraws, "draws every config gets first (0: all get --draws)")
	refine := fs.Float64("refine", defaultRefine, "configs whose screened true score is at least this fraction of the best get all --draws")
	onlyLandscape := fs.Bool("landscape", false, "print the landscape summary and exit")
	seeds := fs.Int("seeds", 20, "searches per method (search seeds)")
	budget := fs.Int("budget", 30, "launches per search")
	noiseCV := fs.Float64("noise-cv", 0.12, "measurement noise per repeat: coefficient of variation of a log-normal factor (0: none)")
	workers := fs.Int("workers", runtime.NumCPU(), "parallel virtual trials")
	cacheDir := fs.String("cache", defaultCacheDir(), "landscape cache directory")
	refresh := fs.Bool("refresh", false, "recompute the landscape even when cached")
	from := fs.String("landscape-from", "", "use this cached landscape file (from an earlier build) instead of the one keyed by this build")
	noShare := fs.Bool("no-share", false, "measure every config itself instead of sharing measurements between configs that behave the same (slow; checks the sharing)")
	quiet := fs.Bool("q", false, "no progress lines")
	trace := fs.Bool("trace", false, "print every trial of every search of ours (state, params, measured and true score) to stderr")
	only := fs.String("methods", "", "comma-separated methods to run (default: all: "+methodNames()+")")
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
	}
	st, err := space.Load(*studyPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if st.Workload.Kind != "chat" {
		return bad("%s: workload kind %s: the virtual runner measures chat workloads only", *studyPath, st.Workload.Kind)
	}
	if *profile == "" {
		*profile = studyProfile(st.Engine.Command)
	}
	if _, err := sim.LoadProfile(*profile); err != nil {
		return bad("--profile: %v", err)
	}
	progress := stderr
	if *quiet {
		progress = nil
	}
	lopt := landscapeOptions{Profile: *profile, Draws: *draws, ScreenDraws: *screen, Refine: *refine, NoShare: *noShare, Workers: *workers, Log: progress}
	var ls *Landscape
	if *from != "" {
		var ok bool
		if ls, ok, err = loadLandscape(*from); err == nil && !ok {
			err = fmt.Errorf("%s: not a landscape of this version", *from)
		}
	} else {
		ls, err = landscape(ctx, st, *studyPath, lopt, *cacheDir, *refresh)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench-search:", err)
		if errors.Is(err, context.Canceled) {
			return 1
		}
		return 1
	}
	printSummary(stdout, ls)
	if *onlyLandscape {
		return 0
	}
	pre := search.Check(st, os.Getenv)
	if err := pre.NoFeasible(); err != nil {
		fmt.Fprintln(stderr, "bench-search:", err)
		return 2
	}
	cmp := comparison{Study: st, Profile: *profile, Landscape: ls, Seeds: *seeds, Budget: *budget, NoiseCV: *noiseCV,
		Workers: *workers, Log: progress, Preflight: &pre}
	if *trace {
		cmp.Trace = stderr
	}
	ms, err := pickMethods(*only)
	if err != nil {
		return bad("--methods: %v", err)
	}
	res, err := cmp.Run(ctx, ms)
	if err != nil {
		fmt.Fprintln(stderr, "bench-search:", err)
		return 1
	}
	printComparison(stdout, res, *budget)
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
			if log != nil {
				fmt.Fprintf(log, "landscape from %s\n", path)
			}
			return ls, nil
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

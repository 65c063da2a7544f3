package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/sim/virtual"
	"github.com/sgtune/sgtune/space"
)

// method is a search method under test.
type method interface {
	Name() string
	// New starts one search of st with seed.
	New(st *space.Study, seed uint64) proposer
}

// proposer is one search in progress.
type proposer interface {
	// Next proposes the next point.
	Next() (space.Params, error)
	// Tell reports what became of a proposal: its value (0 when it
	// failed, was infeasible or missed the SLO), whether it was launched.
	Tell(p space.Params, value float64, launched bool)
}

// randomMethod draws uniformly from the space.
type randomMethod struct{}

func (randomMethod) Name() string { return "random" }

func (randomMethod) New(st *space.Study, seed uint64) proposer {
	return &randomSearch{st: st, g: space.NewRandomSuggester(int64(seed))}
}

type randomSearch struct {
	st *space.Study
	g  *space.RandomSuggester
}

func (r *randomSearch) Next() (space.Params, error)      { return r.st.Suggest(r.g) }
func (r *randomSearch) Tell(space.Params, float64, bool) {}

// comparison runs methods on a study against its landscape.
type comparison struct {
	Study     *space.Study
	Profile   string
	Landscape *Landscape
	Seeds     int
	Budget    int
	NoiseCV   float64
	Workers   int
	Log       io.Writer
}

// searchRun is one search (a method and a seed).
type searchRun struct {
	Method string
	Seed   int
	// TrialsTo97 is the first launch count after which the winner the
	// study would declare has a true score of at least 97% of the best;
	// Budget+1 when never.
	TrialsTo97 int
	// Regret[n-1] is 1 - true score of the winner after n launches / best.
	Regret []float64
	// InfeasibleLaunches counts launches of statically infeasible
	// configs; CrashLaunches launches that crashed (startup or serving).
	InfeasibleLaunches, CrashLaunches int
}

// crashClasses are the failure classes of a crash.
var crashClasses = map[string]bool{
	engine.ClassIllegalMemoryAccess: true, engine.ClassOOM: true,
	engine.ClassStartupCrash: true, engine.ClassCrashed: true,
}

// Run runs every method Seeds times.
func (c *comparison) Run(ctx context.Context, methods []method) ([]searchRun, error) {
	ls := c.Landscape
	if ls.Best < 0 || ls.Configs[ls.Best].Mean <= 0 {
		return nil, fmt.Errorf("the landscape has no config with a positive true score: nothing to find")
	}
	index := map[string]int{}
	for i, ct := range ls.Configs {
		index[ct.Params.String()] = i
	}
	best := ls.Configs[ls.Best].Mean
	jobs := len(methods) * c.Seeds
	runs := make([]searchRun, jobs)
	err := parallel(ctx, c.Workers, jobs, func(j int) error {
		m, seed := methods[j/c.Seeds], j%c.Seeds+1
		r, err := c.search(ctx, m, seed, index, best)
		runs[j] = r
		return err
	})
	return runs, err
}

// search runs one search and scores it against the landscape.
func (c *comparison) search(ctx context.Context, m method, seed int, index map[string]int, best float64) (searchRun, error) {
	ls := c.Landscape
	run := searchRun{Method: m.Name(), Seed: seed, TrialsTo97: c.Budget + 1}
	rng := rand.New(rand.NewPCG(uint64(seed), 0xbe5c))
	p := m.New(c.Study, uint64(seed))
	seen := map[string]float64{}
	winner, winnerValue := -1, -1.0
	for proposals := 0; len(run.Regret) < c.Budget; proposals++ {
		if proposals > 100*c.Budget {
			return run, fmt.Errorf("%s seed %d: %d proposals without filling the budget", m.Name(), seed, proposals)
		}
		params, err := p.Next()
		if err != nil {
			return run, fmt.Errorf("%s seed %d: %w", m.Name(), seed, err)
		}
		cfg, err := c.Study.Resolve(params, nil)
		if err != nil {
			return run, fmt.Errorf("%s seed %d: %w", m.Name(), seed, err)
		}
		key := strings.Join(cfg.Flags, " ")
		if v, ok := seen[key]; ok {
			p.Tell(cfg.Params, v, false) // a duplicate is not launched again
			continue
		}
		idx, ok := index[cfg.Params.String()]
		if !ok {
			return run, fmt.Errorf("%s seed %d: %s is not in the landscape", m.Name(), seed, cfg.Params)
		}
		if len(c.Study.Check(cfg)) > 0 {
			seen[key] = 0
			p.Tell(cfg.Params, 0, false) // rejected before launch
			continue
		}
		if !ls.Configs[idx].Launched() {
			run.InfeasibleLaunches++
		}
		o, err := c.launch(ctx, cfg, rng)
		if err != nil {
			return run, err
		}
		if crashClasses[o.Class] {
			run.CrashLaunches++
		}
		v := o.Value()
		seen[key] = v
		p.Tell(cfg.Params, v, true)
		if v > winnerValue {
			winner, winnerValue = idx, v
		}
		truth := 0.0
		if winnerValue > 0 {
			truth = ls.Configs[winner].Mean
		}
		run.Regret = append(run.Regret, 1-truth/best)
		if truth >= 0.97*best && run.TrialsTo97 > c.Budget {
			run.TrialsTo97 = len(run.Regret)
		}
	}
	return run, nil
}

// launch runs one trial of cfg as a real launch would: a fresh draw of the
// simulator's randomness and measurement noise.
func (c *comparison) launch(ctx context.Context, cfg *space.Config, rng *rand.Rand) (outcome, error) {
	opt := virtual.Options{Profile: c.Profile, Seed: rng.Uint64(), NoiseCV: c.NoiseCV, NoiseSeed: rng.Uint64()}
	srv, o, err := start(ctx, c.Study, cfg, opt)
	if err != nil || srv == nil {
		return o, err
	}
	return measure(ctx, c.Study, srv, o.Facts)
}

// printComparison prints per method the median launches to 97%, the
// median regret curve and the infeasible and crash launches, then one
// line per method with the median.
func printComparison(w io.Writer, runs []searchRun, budget int) {
	by := map[string][]searchRun{}
	var names []string
	for _, r := range runs {
		if _, ok := by[r.Method]; !ok {
			names = append(names, r.Method)
		}
		by[r.Method] = append(by[r.Method], r)
	}
	fmt.Fprintf(w, "\nsearch methods (%d launches each; launches to a winner with true score >= 97%% of the best, %d = never)\n", budget, budget+1)
	var last []string
	for _, name := range names {
		rs := by[name]
		to := make([]float64, len(rs))
		inf, crash := 0, 0
		for i, r := range rs {
			to[i] = float64(r.TrialsTo97)
			inf += r.InfeasibleLaunches
			crash += r.CrashLaunches
		}
		fmt.Fprintf(w, "  %-12s median %g (per seed %v), infeasible launches %d, crash launches %d\n", name, median(to), ints(to), inf, crash)
		fmt.Fprintf(w, "  %-12s median regret after n launches:", "")
		for _, n := range []int{1, 5, 10, 15, 20, 25, 30, 50, 100} {
			if n > budget {
				break
			}
			reg := make([]float64, len(rs))
			for i, r := range rs {
				reg[i] = r.Regret[n-1]
			}
			fmt.Fprintf(w, " n=%d %.1f%%", n, median(reg)*100)
		}
		fmt.Fprintln(w)
		last = append(last, fmt.Sprintf("%s_trials_to_97=%g", strings.ReplaceAll(name, "-", "_"), median(to)))
	}
	fmt.Fprintln(w, strings.Join(last, " "))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return objective.Percentile(s, 50)
}

func ints(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

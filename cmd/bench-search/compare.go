package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

// method is a search method under test: sgtune's study loop itself
// (search.Run: duplicate checks, crash regions, learned feasibility,
// pruning) with one of its samplers, or a baseline: a sampler in the plain
// loop the peer tools run (see baseline). An empty Sampler is the study's
// own budget.sampler: what a user running the study gets.
type method struct {
	Name, Sampler string
	Baseline      bool
}

// methods are those the comparison runs: ours, and the baselines.
var methods = []method{
	{Name: "ours", Sampler: "bayes"},
	{Name: "ours_random", Sampler: "random"},
	{Name: "random", Sampler: "random", Baseline: true},
	{Name: "goptuna_tpe", Sampler: "tpe", Baseline: true},
	{Name: "grid", Sampler: "grid", Baseline: true},
}

func methodNames() string {
	names := make([]string, len(methods))
	for i, m := range methods {
		names[i] = m.Name
	}
	return strings.Join(names, ",")
}

// pickMethods returns the methods named in a comma-separated list (all for "").
func pickMethods(list string) ([]method, error) {
	if list == "" {
		return methods, nil
	}
	var out []method
	for _, n := range strings.Split(list, ",") {
		i := slices.IndexFunc(methods, func(m method) bool { return m.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown method %q; valid: %s", n, methodNames())
		}
		out = append(out, methods[i])
	}
	return out, nil
}

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
	// Preflight is the study's, computed once for every search.
	Preflight *search.Preflight
	// Trace, when set, gets every trial of every search of the study loop.
	Trace io.Writer
	// Backend starts every launch (the simulator in virtual time, or a
	// measured table's replay).
	Backend drawnBackend
	// DefaultTruth is the true score of the engine default when it lies
	// outside the landscape's space (0: unknown, scored as nothing found).
	DefaultTruth float64
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
	// configs; CrashLaunches launches that crashed (startup or serving);
	// Pruned launches stopped after a cheap level.
	InfeasibleLaunches, CrashLaunches, Pruned int
	// Stored is every trial the study stored (launches, rejections,
	// duplicates).
	Stored int
	// FoundTo97 is the first launch count at which a config with a true
	// score of at least 97% of the best had been launched (whether or not
	// the study declared it): the search's part, apart from the winner's.
	FoundTo97 int
}

// crashClasses are the failure classes of a crash.
var crashClasses = map[string]bool{
	engine.ClassIllegalMemoryAccess: true, engine.ClassOOM: true,
	engine.ClassStartupCrash: true, engine.ClassCrashed: true,
}

// Run runs every method Seeds times.
func (c *comparison) Run(ctx context.Context, ms []method) ([]searchRun, error) {
	ls := c.Landscape
	if !ls.found() {
		return nil, errNothingToFind
	}
	index := map[string]int{}
	for i, ct := range ls.Configs {
		cfg, err := c.Study.Resolve(ct.Params, nil)
		if err != nil {
			return nil, fmt.Errorf("landscape config %s: %w", ct.Params, err)
		}
		index[strings.Join(cfg.Flags, " ")] = i
	}
	best := ls.Configs[ls.Best].Mean
	jobs := len(ms) * c.Seeds
	runs := make([]searchRun, jobs)
	var done atomic.Int64
	err := parallel(ctx, c.Workers, jobs, func(j int) error {
		m, seed := ms[j/c.Seeds], j%c.Seeds+1
		run := c.search
		if m.Baseline {
			run = c.baseline
		}
		r, err := run(ctx, m, seed, index, best)
		runs[j] = r
		if n := done.Add(1); c.Log != nil {
			fmt.Fprintf(c.Log, "  %s seed %d: %d launches to 97%% (%d/%d searches)\n", m.Name, seed, r.TrialsTo97, n, jobs)
		}
		return err
	})
	return runs, err
}

// search scores, for each count of launches a user can afford, the winner
// the method's study declares with that budget: from one run (see
// anytime) when every launch counts in the budget, else from a run at
// every budget of the ladder (see ladder), the largest that fits.
func (c *comparison) search(ctx context.Context, m method, seed int, index map[string]int, best float64) (searchRun, error) {
	run := searchRun{Method: m.Name, Seed: seed, TrialsTo97: c.Budget + 1, FoundTo97: c.Budget + 1}
	mem := &memo{runs: map[uint64]*memoRun{}}
	var rungs []rung
	var last []search.Record
	budgets := ladder(c.Budget)
	if c.Study.Budget.Confirm == 0 {
		var err error
		if rungs, last, err = c.anytime(ctx, m, seed, index, best); err != nil {
			return run, err
		}
		budgets = nil // the single run scored every budget
	}
	for _, n := range budgets {
		r, recs, err := c.study(ctx, m, seed, n, mem, index, best)
		if err != nil {
			return run, err
		}
		if r.Launches > c.Budget && len(rungs) > 0 {
			break // a user with this many launches picks a smaller budget
		}
		rungs = append(rungs, r)
		last = recs
	}
	for _, r := range rungs {
		if r.Truth >= 0.97 && r.Launches <= c.Budget {
			run.TrialsTo97 = min(run.TrialsTo97, r.Launches)
		}
	}
	for l := 1; l <= c.Budget; l++ {
		truth := 0.0
		for _, r := range rungs {
			if r.Launches <= l {
				truth = r.Truth
			}
		}
		run.Regret = append(run.Regret, 1-truth)
	}
	if n := len(rungs); n > 0 {
		run.InfeasibleLaunches, run.CrashLaunches = rungs[n-1].Infeasible, rungs[n-1].Crash
	}
	launches := 0
	for _, rec := range last {
		if !search.RanToEnd(rec.State) {
			continue
		}
		launches++
		run.Stored++
		if rec.State == search.StatePruned {
			run.Pruned++
		}
		if idx, ok := index[strings.Join(rec.Flags(), " ")]; ok && c.Landscape.Configs[idx].Mean >= 0.97*best && run.FoundTo97 > c.Budget {
			run.FoundTo97 = launches
		}
	}
	if c.Trace != nil {
		c.trace(m, seed, last, rungs, index, best)
	}
	return run, nil
}

// launch scores one launch of the plain loop at idx, after which it
// would declare the config at winner (-1: none yet).
func (r *searchRun) launch(ls *Landscape, idx, winner int, best float64, budget int) {
	if ls.Configs[idx].Mean >= 0.97*best && r.FoundTo97 > budget {
		r.FoundTo97 = len(r.Regret) + 1
	}
	truth := 0.0
	if winner >= 0 {
		truth = ls.Configs[winner].Mean
	}
	r.Regret = append(r.Regret, 1-truth/best)
	if truth >= 0.97*best && r.TrialsTo97 > budget {
		r.TrialsTo97 = len(r.Regret)
	}
}

// pad extends the regret curve of a search that stopped early (its space
// exhausted) to the budget: it keeps its winner.
func (r *searchRun) pad(budget int) {
	for len(r.Regret) < budget {
		last := 1.0
		if n := len(r.Regret); n > 0 {
			last = r.Regret[n-1]
		}
		r.Regret = append(r.Regret, last)
	}
}

// trace prints the study with the largest budget, one line per trial
// (state, measured and true score), and what each rung of the ladder
// declared, in one write.
func (c *comparison) trace(m method, seed int, recs []search.Record, rungs []rung, index map[string]int, best float64) {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s seed %d\n", m.Name, seed)
	for _, rec := range recs {
		truth := "-"
		if idx, ok := index[strings.Join(rec.Flags(), " ")]; ok {
			truth = fmt.Sprintf("%.1f%%", c.Landscape.Configs[idx].Mean/best*100)
		}
		score := "-"
		if rec.Score != nil {
			score = fmt.Sprintf("%.0f", *rec.Score)
			if !rec.ScoreOK {
				score += "!" // missed the SLO or a gate
			}
		}
		if slack, ok := objective.SLOSlack(c.Study.Score, rec.Medians()); ok {
			score += fmt.Sprintf(" slo %+.2f", slack) // log of the worst SLO statistic over its bound
		}
		why := rec.FailureClass
		if rec.State == search.StateInfeasible || rec.State == search.StatePruned {
			why = rec.Reason
			if len(why) > 90 {
				why = why[:90] + "..."
			}
		}
		confirm := ""
		if rec.ConfirmOf != nil {
			confirm = fmt.Sprintf("(rerun of %d)", *rec.ConfirmOf)
		}
		fmt.Fprintf(&b, "  %3d %-10s score %-16s true %-6s %s %s  %s\n", rec.Number, rec.State, score, truth, confirm, paramsLine(rec.Params), why)
	}
	for _, r := range rungs {
		declared := "nothing"
		if r.Winner >= 0 {
			declared = fmt.Sprintf("trial %d, %.1f%%", r.Winner, r.Truth*100)
		}
		fmt.Fprintf(&b, "  budget %d: %d launches, declared %s\n", r.Budget, r.Launches, declared)
	}
	fmt.Fprint(c.Trace, b.String())
}

func paramsLine(p map[string]any) string {
	keys := slices.Sorted(maps.Keys(p))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, p[k])
	}
	return strings.Join(parts, " ")
}

// hashString tells the methods' random streams apart.
func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return objective.Percentile(s, 50)
}

// medianCI is a 95% bootstrap interval of the median of xs (percentiles
// of the medians of 2,000 resamples, drawn from a fixed seed so a run
// prints the same interval). The median over 20 seeds moves a lot: on the
// GLM study two runs of one sampler that differ only in their noise draws
// gave 14.5 and 20.5; the interval says how far a difference between two
// methods can be read.
func medianCI(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	const resamples = 2000
	rng := rand.New(rand.NewPCG(1, 2))
	meds := make([]float64, resamples)
	sample := make([]float64, len(xs))
	for i := range meds {
		for j := range sample {
			sample[j] = xs[rng.IntN(len(xs))]
		}
		meds[i] = median(sample)
	}
	sort.Float64s(meds)
	return meds[resamples*25/1000], meds[resamples*975/1000-1]
}

func ints(xs []float64) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = int(x)
	}
	return out
}

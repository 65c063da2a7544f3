package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
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
	{Name: "ours"},
	{Name: "ours_tpe", Sampler: "tpe"},
	{Name: "ours_bayes", Sampler: "bayes"},
	{Name: "ours_random", Sampler: "random"},
	{Name: "random", Sampler: "random", Baseline: true},
	{Name: "goptuna_tpe", Sampler: "goptuna-tpe", Baseline: true},
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
	if ls.Best < 0 || ls.Configs[ls.Best].Mean <= 0 {
		return nil, fmt.Errorf("the landscape has no config with a positive true score: nothing to find")
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

// search runs one study (a method and a seed) through the study loop on
// the simulator's engine in virtual time, then scores it against the
// landscape: after each launch, the winner the study would declare (its
// leader, search.Leader: the best estimate, which pools a config's runs and
// shrinks them toward what similar configs measured) and that winner's
// true score.
func (c *comparison) search(ctx context.Context, m method, seed int, index map[string]int, best float64) (searchRun, error) {
	ls := c.Landscape
	run := searchRun{Method: m.Name, Seed: seed, TrialsTo97: c.Budget + 1, FoundTo97: c.Budget + 1}
	st := *c.Study
	if m.Sampler != "" {
		st.Budget.Sampler = m.Sampler
	}
	st.Budget.Seed, st.Budget.Trials = int64(seed), c.Budget
	st.Budget.Confirm, st.Budget.Parallel, st.Budget.Timeout = 0, 1, 0
	dir, err := os.MkdirTemp("", "bench-search-")
	if err != nil {
		return run, err
	}
	defer os.RemoveAll(dir)
	store, err := storage.Open(filepath.Join(dir, "study.db"))
	if err != nil {
		return run, err
	}
	defer store.Close()
	// Each launch draws the simulator's randomness and the measurement
	// noise afresh, reproducibly per method and seed.
	rng := rand.New(rand.NewPCG(uint64(seed), hashString(m.Name)))
	b := &virtualBackend{profile: c.Profile, noiseCV: c.NoiseCV, command: len(st.Engine.Command),
		draws: func() (uint64, uint64) { return rng.Uint64(), rng.Uint64() }}
	sum, err := search.Run(ctx, search.Options{Study: &st, Store: store, Backend: b, LogDir: dir, Parallel: 1,
		Preflight: c.Preflight, Getenv: func(string) string { return "" }})
	if err != nil {
		return run, fmt.Errorf("%s seed %d: %w", m.Name, seed, err)
	}
	run.Stored = len(sum.Records)
	leads := leaders(&st, sum.Records)
	if c.Trace != nil {
		c.trace(m, seed, sum.Records, leads, index, best)
	}
	winner := -1
	keyIndex := map[string]int{}
	for _, rec := range sum.Records {
		if idx, ok := index[strings.Join(rec.Flags(), " ")]; ok && rec.ConfigKey != "" {
			keyIndex[rec.ConfigKey] = idx
		}
	}
	for i, rec := range sum.Records {
		launched := search.RanToEnd(rec.State)
		if !launched || rec.ConfirmOf != nil {
			continue
		}
		idx, ok := index[strings.Join(rec.Flags(), " ")]
		if !ok {
			return run, fmt.Errorf("%s seed %d: trial %d's config is not in the landscape", m.Name, seed, rec.Number)
		}
		if !ls.Configs[idx].Launched() {
			run.InfeasibleLaunches++
			if c.Log != nil {
				fmt.Fprintf(c.Log, "  %s seed %d: trial %d launched a statically infeasible config: %s (%s)\n",
					m.Name, seed, rec.Number, ls.Configs[idx].Params, ls.Configs[idx].Reject)
			}
		}
		if crashClasses[rec.FailureClass] {
			run.CrashLaunches++
		}
		if rec.State == search.StatePruned {
			run.Pruned++
		}
		if lead := leads[i]; lead != nil {
			if idx, known := keyIndex[lead.ConfigKey]; known {
				winner = idx
			}
		}
		run.launch(ls, idx, winner, best, c.Budget)
	}
	run.pad(c.Budget)
	return run, nil
}

// leaders returns, after each of recs, the winner the study would declare
// then: its leader (search.Leader: the best estimate, the config it would
// confirm first); nil before any.
func leaders(st *space.Study, recs []search.Record) []*search.Record {
	out := make([]*search.Record, len(recs))
	for i := range recs {
		if l, ok := search.Leader(st, recs[:i+1]); ok {
			out[i] = &l
		}
	}
	return out
}

// launch scores one launch of the config at idx, after which the search
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

// trace prints a search's trials, one line each, in one write: state,
// measured and true score, and the leader after each (see leaders; -1
// before any).
func (c *comparison) trace(m method, seed int, recs []search.Record, leads []*search.Record, index map[string]int, best float64) {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s seed %d\n", m.Name, seed)
	for i, rec := range recs {
		lead := -1
		if l := leads[i]; l != nil {
			lead = l.Number
		}
		truth := "-"
		if idx, ok := index[strings.Join(rec.Flags(), " ")]; ok {
			truth = fmt.Sprintf("%.1f%%", c.Landscape.Configs[idx].Mean/best*100)
		}
		score := "-"
		if rec.Score != nil {
			score = fmt.Sprintf("%.0f", *rec.Score)
		}
		why := rec.FailureClass
		if rec.State == search.StateInfeasible || rec.State == search.StatePruned {
			why = rec.Reason
			if len(why) > 90 {
				why = why[:90] + "..."
			}
		}
		fmt.Fprintf(&b, "  %3d %-10s score %-6s true %-6s lead %3d %s  %s\n", rec.Number, rec.State, score, truth, lead, paramsLine(rec.Params), why)
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

// printComparison prints per method the median launches to 97%, the
// median regret curve and the infeasible, crash and pruned launches; its
// last line is the summary: ours, random and goptuna's TPE, and the
// statically infeasible and crash launches of ours (summed over seeds).
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
	medians := map[string]float64{}
	sums := map[string][3]int{}
	for _, name := range names {
		rs := by[name]
		to := make([]float64, len(rs))
		found := make([]float64, len(rs))
		var inf, crash, pruned, stored int
		for i, r := range rs {
			to[i] = float64(r.TrialsTo97)
			found[i] = float64(r.FoundTo97)
			inf += r.InfeasibleLaunches
			crash += r.CrashLaunches
			pruned += r.Pruned
			stored += r.Stored
		}
		medians[name] = median(to)
		sums[name] = [3]int{inf, crash, pruned}
		lo, hi := medianCI(to)
		fmt.Fprintf(w, "  %-18s median %g, 95%% interval %g-%g (per seed %v); infeasible launches %d, crash launches %d, pruned %d; %.1f trials stored per search\n",
			name, median(to), lo, hi, ints(to), inf, crash, pruned, float64(stored)/float64(len(rs)))
		fmt.Fprintf(w, "  %-18s a config >= 97%% first launched after: median %g (per seed %v)\n", "", median(found), ints(found))
		fmt.Fprintf(w, "  %-18s median regret after n launches:", "")
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
	}
	fmt.Fprintf(w, "ours_trials_to_97=%g random_trials_to_97=%g goptuna_tpe_trials_to_97=%g infeasible_launches=%d crash_launches=%d\n",
		medians["ours"], medians["random"], medians["goptuna_tpe"], sums["ours"][0], sums["ours"][1])
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

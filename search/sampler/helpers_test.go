package sampler

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/c-bata/goptuna"
)

// newStudy returns an in-memory study using s.
func newStudy(t testing.TB, s goptuna.Sampler, dir goptuna.StudyDirection) *goptuna.Study {
	t.Helper()
	study, err := goptuna.CreateStudy("test",
		goptuna.StudyOptionStorage(goptuna.NewInMemoryStorage()),
		goptuna.StudyOptionSampler(s),
		goptuna.StudyOptionDirection(dir),
		goptuna.StudyOptionLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	return study
}

// spaceParam is one param of a test space, suggested in order.
type spaceParam struct {
	name string
	dist interface{}
	// when, if set, makes the param conditional on the values so far.
	when func(map[string]float64) bool
}

// ask creates a trial and samples the space's params through goptuna's own
// Trial (as the search loop does), leaving the trial RUNNING.
func ask(t testing.TB, study *goptuna.Study, space []spaceParam) (int, map[string]float64) {
	t.Helper()
	id, err := study.Storage.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := suggestAll(goptuna.Trial{Study: study, ID: id}, space)
	if err != nil {
		t.Fatal(err)
	}
	return id, vals
}

// suggestAll suggests every active param of the space; values are in
// goptuna's internal representation.
func suggestAll(tr goptuna.Trial, space []spaceParam) (map[string]float64, error) {
	vals := map[string]float64{}
	for _, sp := range space {
		if sp.when != nil && !sp.when(vals) {
			continue
		}
		var v float64
		var err error
		switch d := sp.dist.(type) {
		case goptuna.UniformDistribution:
			v, err = tr.SuggestFloat(sp.name, d.Low, d.High)
		case goptuna.LogUniformDistribution:
			v, err = tr.SuggestLogFloat(sp.name, d.Low, d.High)
		case goptuna.IntUniformDistribution:
			var i int
			i, err = tr.SuggestInt(sp.name, d.Low, d.High)
			v = float64(i)
		case goptuna.StepIntUniformDistribution:
			var i int
			i, err = tr.SuggestStepInt(sp.name, d.Low, d.High, d.Step)
			v = float64(i)
		case goptuna.DiscreteUniformDistribution:
			v, err = tr.SuggestDiscreteFloat(sp.name, d.Low, d.High, d.Q)
		case goptuna.CategoricalDistribution:
			var c string
			c, err = tr.SuggestCategorical(sp.name, d.Choices)
			v = -1
			for i, x := range d.Choices {
				if x == c {
					v = float64(i)
				}
			}
		default:
			err = fmt.Errorf("unknown distribution %T", sp.dist)
		}
		if err != nil {
			return nil, err
		}
		vals[sp.name] = v
	}
	return vals, nil
}

// tell finishes a trial.
func tell(t testing.TB, study *goptuna.Study, id int, state goptuna.TrialState, value float64) {
	t.Helper()
	if state == goptuna.TrialStateComplete {
		if err := study.Storage.SetTrialValue(id, value); err != nil {
			t.Fatal(err)
		}
	}
	if err := study.Storage.SetTrialState(id, state); err != nil {
		t.Fatal(err)
	}
}

// store adds a trial with the given params and state, as if it had run.
func store(t testing.TB, study *goptuna.Study, space []spaceParam, vals map[string]float64, state goptuna.TrialState, value float64) int {
	t.Helper()
	id, err := study.Storage.CreateNewTrial(study.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range space {
		v, ok := vals[sp.name]
		if !ok {
			continue
		}
		if err := study.Storage.SetTrialParam(id, sp.name, v, sp.dist); err != nil {
			t.Fatal(err)
		}
	}
	if state != goptuna.TrialStateRunning {
		tell(t, study, id, state, value)
	}
	return id
}

// problem is a toy objective for the quality check (minimised unless max).
type problem struct {
	name  string
	space []spaceParam
	max   bool
	// f returns the objective, or ok=false for an infeasible config
	// (stored PRUNED, as sgtune stores a crash).
	f func(v map[string]float64) (y float64, ok bool)
	// best is the optimum, to report regret.
	best float64
}

func cat(choices ...string) goptuna.CategoricalDistribution {
	return goptuna.CategoricalDistribution{Choices: choices}
}

// problems are the toy problems of the quality check.
func problems() []problem {
	sq := func(x float64) float64 { return x * x }
	return []problem{
		{
			name: "sphere2d",
			space: []spaceParam{
				{name: "x", dist: goptuna.UniformDistribution{Low: -5, High: 5}},
				{name: "y", dist: goptuna.UniformDistribution{Low: -5, High: 5}},
			},
			f: func(v map[string]float64) (float64, bool) { return sq(v["x"]) + sq(v["y"]), true },
		},
		{
			name: "mixed",
			space: []spaceParam{
				{name: "c", dist: cat("a", "b", "c", "d")},
				{name: "i", dist: goptuna.IntUniformDistribution{Low: 1, High: 8}},
				{name: "x", dist: goptuna.UniformDistribution{Low: 0, High: 1}},
				{name: "lr", dist: goptuna.LogUniformDistribution{Low: 1e-5, High: 1e-1}},
			},
			f: func(v map[string]float64) (float64, bool) {
				off := []float64{1, 0, 2, 1.5}[int(v["c"])]
				return off + 0.5*math.Abs(v["i"]-6) + 4*sq(v["x"]-0.3) + sq(math.Log10(v["lr"])+3), true
			},
		},
		{
			name: "step-ints",
			space: []spaceParam{
				{name: "a", dist: goptuna.StepIntUniformDistribution{Low: 0, High: 256, Step: 16}},
				{name: "b", dist: goptuna.StepIntUniformDistribution{Low: 1, High: 33, Step: 4}},
				{name: "c", dist: goptuna.IntUniformDistribution{Low: 0, High: 10}},
			},
			f: func(v map[string]float64) (float64, bool) {
				return sq((v["a"]-160)/16) + sq((v["b"]-29)/4) + 0.5*sq(v["c"]-10), true
			},
		},
		configLike(),
	}
}

// configLike is a discrete, engine-config-like problem (maximise a
// throughput) with interactions: the best attention backend depends on the
// parallelism, CUDA graphs pay only for small batches, the memory fraction
// and the chunk size together run out of memory (infeasible), and the batch
// limit saturates at what memory holds.
func configLike() problem {
	tps := []float64{1, 2, 4, 8}
	pr := problem{
		name: "config-like",
		max:  true,
		space: []spaceParam{
			{name: "tp", dist: cat("1", "2", "4", "8")},
			{name: "backend", dist: cat("flashinfer", "triton", "fa3")},
			{name: "cuda_graph", dist: cat("on", "off")},
			{name: "chunk", dist: goptuna.StepIntUniformDistribution{Low: 1024, High: 16384, Step: 1024}},
			{name: "mem", dist: goptuna.DiscreteUniformDistribution{Low: 0.70, High: 0.95, Q: 0.05}},
			{name: "max_bs", dist: goptuna.StepIntUniformDistribution{Low: 32, High: 512, Step: 32}},
		},
	}
	pr.f = func(v map[string]float64) (float64, bool) {
		tp := tps[int(v["tp"])]
		chunk, mem, bs := v["chunk"], v["mem"], v["max_bs"]
		// Memory: KV room grows with mem and tp; a big chunk at a high
		// fraction leaves no activation room.
		if mem >= 0.9 && chunk > 4096*tp {
			return 0, false
		}
		capacity := (mem - 0.6) * 1600 * math.Sqrt(tp) // requests the KV holds
		eff := math.Min(bs, capacity)
		base := 1000 * math.Pow(tp, 0.7) * eff / (eff + 120)
		var backend float64
		switch int(v["backend"]) {
		case 0: // flashinfer: best at small tp
			backend = []float64{1.10, 1.05, 0.95, 0.90}[int(v["tp"])]
		case 1: // triton: flat, mediocre
			backend = 0.97
		case 2: // fa3: best at large tp
			backend = []float64{0.85, 0.95, 1.12, 1.18}[int(v["tp"])]
		}
		graph := 1.0
		if v["cuda_graph"] == 0 {
			if bs <= 256 {
				graph = 1.15
			} else {
				graph = 1.02
			}
		}
		// Chunked prefill: best near 4096-8192 tokens.
		lc := math.Log2(chunk)
		chunkF := 1 - 0.04*(lc-12.5)*(lc-12.5)
		return base * backend * graph * chunkF, true
	}
	pr.best = bruteBest(pr)
	return pr
}

// bruteBest enumerates a finite problem's space for its optimum.
func bruteBest(pr problem) float64 {
	dists := map[string]interface{}{}
	for _, sp := range pr.space {
		dists[sp.name] = sp.dist
	}
	points, err := GridPoints(dists)
	if err != nil {
		panic(err)
	}
	best := math.Inf(1)
	if pr.max {
		best = math.Inf(-1)
	}
	for _, pt := range points {
		y, ok := pr.f(pt)
		if !ok {
			continue
		}
		if pr.max == (y > best) {
			best = y
		}
	}
	return best
}

// runProblem runs one study of n trials and returns the best feasible value
// (worst possible if none).
func runProblem(t testing.TB, pr problem, s goptuna.Sampler, n int) float64 {
	t.Helper()
	dir := goptuna.StudyDirectionMinimize
	if pr.max {
		dir = goptuna.StudyDirectionMaximize
	}
	study := newStudy(t, s, dir)
	err := study.Optimize(func(tr goptuna.Trial) (float64, error) {
		v, err := suggestAll(tr, pr.space)
		if err != nil {
			return 0, err
		}
		y, ok := pr.f(v)
		if !ok {
			return 0, goptuna.ErrTrialPruned
		}
		return y, nil
	}, n)
	if err != nil {
		t.Fatal(err)
	}
	best, err := study.GetBestValue()
	if errors.Is(err, goptuna.ErrNoCompletedTrials) {
		if pr.max {
			return math.Inf(-1)
		}
		return math.Inf(1)
	}
	if err != nil {
		t.Fatal(err)
	}
	return best
}

func median(x []float64) float64 {
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	n := len(y)
	if n%2 == 1 {
		return y[n/2]
	}
	return (y[n/2-1] + y[n/2]) / 2
}

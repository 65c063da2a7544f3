package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/search/sampler"
	"github.com/sgtune/sgtune/space"
)

// baseline runs a sampler as the peer tools run theirs: a plain
// propose-launch-tell loop over the space (auto-tuning-vllm's Optuna TPE,
// vLLM auto_tune's grid, a random search). Proposals the engine's static
// rules reject are skipped without a launch (any user runs `sgtune check`
// first) and a config already measured is not launched again; there are no
// crash regions, no learned feasibility, no pruning and no confirmation.
// A launch that fails is told to the sampler as a score of 0.
func (c *comparison) baseline(ctx context.Context, m method, seed int, index map[string]int, best float64) (searchRun, error) {
	ls := c.Landscape
	run := searchRun{Method: m.Name, Seed: seed, TrialsTo97: c.Budget + 1, FoundTo97: c.Budget + 1}
	st := c.Study
	var opts []sampler.Option
	if m.Sampler == "grid" {
		points, err := search.GridPoints(st)
		if err != nil {
			return run, err
		}
		opts = append(opts, sampler.WithGridPoints(points))
	}
	smp, err := sampler.New(m.Sampler, int64(seed), opts...)
	if err != nil {
		return run, err
	}
	study, err := goptuna.CreateStudy(fmt.Sprintf("%s-%d", m.Name, seed), goptuna.StudyOptionStorage(goptuna.NewInMemoryStorage()),
		goptuna.StudyOptionSampler(smp), goptuna.StudyOptionDirection(goptuna.StudyDirectionMaximize), goptuna.StudyOptionLogger(nil))
	if err != nil {
		return run, err
	}
	rng := rand.New(rand.NewPCG(uint64(seed), hashString(m.Name)))
	seen := map[string]bool{}
	winner, winnerScore := -1, 0.0
	// skipped counts the proposals in a row that launched nothing; the
	// study loop gives up after as many (search.maxSkips).
	const maxSkipped = 200
	for skipped := 0; len(run.Regret) < c.Budget; skipped++ {
		if skipped > maxSkipped {
			break // the sampler keeps proposing what it measured: it is done
		}
		id, err := study.Storage.CreateNewTrial(study.ID)
		if err != nil {
			return run, err
		}
		trial := goptuna.Trial{Study: study, ID: id}
		p, err := st.Suggest(&trial)
		if err != nil {
			if m.Sampler == "grid" {
				break // the grid is exhausted
			}
			return run, fmt.Errorf("%s seed %d: %w", m.Name, seed, err)
		}
		tell := func(v float64) error {
			if err := study.Storage.SetTrialValue(id, v); err != nil {
				return err
			}
			return study.Storage.SetTrialState(id, goptuna.TrialStateComplete)
		}
		run.Stored++
		cfg, err := st.Resolve(p, nil)
		if err != nil || len(st.Check(cfg)) > 0 {
			if err := tell(0); err != nil {
				return run, err
			}
			continue
		}
		key := strings.Join(cfg.Flags, " ")
		if seen[key] {
			if err := tell(0); err != nil {
				return run, err
			}
			continue
		}
		seen[key] = true
		idx, ok := index[key]
		if !ok {
			return run, fmt.Errorf("%s seed %d: %s is not in the landscape", m.Name, seed, cfg.Params)
		}
		o, err := c.launchOnce(ctx, st, cfg, rng.Uint64(), rng.Uint64())
		if err != nil {
			return run, err
		}
		if err := tell(o.Value()); err != nil {
			return run, err
		}
		if crashClasses[o.Class] {
			run.CrashLaunches++
		}
		if v := o.Value(); v > winnerScore {
			winner, winnerScore = idx, v
		}
		run.launch(ls, idx, winner, best, c.Budget)
		skipped = -1 // a launch: the loop's increment restarts the count
	}
	run.pad(c.Budget)
	return run, nil
}

// launchOnce launches one config through the backend and decides its
// outcome as the study loop would.
func (c *comparison) launchOnce(ctx context.Context, st *space.Study, cfg *space.Config, seed, noise uint64) (search.Outcome, error) {
	srv, err := c.Backend.startDrawn(ctx, launcher.Spec{Argv: st.Argv(cfg)}, seed, noise)
	if err != nil {
		if ctx.Err() != nil {
			return search.Outcome{}, ctx.Err()
		}
		return search.Decide(st, err, engine.Facts{}, nil, nil, nil), nil
	}
	res, merr := srv.Measure(ctx, st.Workload, objective.Options{})
	if ctx.Err() != nil {
		return search.Outcome{}, ctx.Err()
	}
	crash, err := srv.Stop(ctx)
	if err != nil {
		return search.Outcome{}, err
	}
	return search.Decide(st, nil, srv.Facts(), res, merr, crash), nil
}

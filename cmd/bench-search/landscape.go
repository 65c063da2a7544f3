package main

import (
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/sim"
	"github.com/sgtune/sgtune/sim/virtual"
	"github.com/sgtune/sgtune/space"
)

// landscapeVersion changes when the landscape's meaning or format does.
const landscapeVersion = 1

// defaultDraws is K, the draws averaged per config (see the report in
// the package doc).
const defaultDraws = 16

// defaultScreenDraws and defaultRefine: every config gets 4 draws, those
// within 90% of the best all 16.
const (
	defaultScreenDraws = 4
	defaultRefine      = 0.90
)

// Landscape is the true score of every config of a study's space on a
// profile: each feasible config run in virtual time over Draws of the
// simulator's own random draws (seeds 0..Draws-1, no measurement noise),
// its value (the score when it met the SLOs and gates, else 0) averaged.
type Landscape struct {
	Version int    `json:"version"`
	Study   string `json:"study"`
	Profile string `json:"profile"`
	Key     string `json:"key"` // the cache key it was computed for
	Draws   int    `json:"draws"`
	// ScreenDraws and Refine: every config got ScreenDraws draws; those
	// then within Refine of the best got Draws.
	ScreenDraws int           `json:"screen_draws"`
	Refine      float64       `json:"refine,omitempty"`
	Configs     []ConfigTruth `json:"configs"`
	// Best indexes Configs: the highest mean value (ties: the first in
	// enumeration order).
	Best int `json:"best"`
	// Stats of the computation.
	Groups   int     `json:"groups"`    // behaviour groups among started configs
	Runs     int     `json:"runs"`      // virtual measurements actually run
	Reused   int     `json:"reused"`    // measurements reused from an equivalent config
	WallS    float64 `json:"wall_s"`    // to compute it
	StartupS float64 `json:"startup_s"` // of which startups
	Workers  int     `json:"workers"`
	// replay, for a landscape read from a measured table (--table), is
	// the table the searches' launches replay (tableBackend).
	replay *tableReplay
}

// errNothingToFind: regret and "within 97% of the best" are fractions of
// the best, so a landscape without one scores no search.
var errNothingToFind = errors.New("no config of the space starts and meets the study's SLO on this landscape: nothing to search for")

// found reports whether some config of the landscape has a positive true
// score.
func (ls *Landscape) found() bool {
	return ls.Best >= 0 && ls.Configs[ls.Best].Mean > 0
}

// ConfigTruth is one config of the space.
type ConfigTruth struct {
	Params space.Params `json:"params"`
	// Reject is why the config is statically infeasible (not launched).
	Reject string `json:"reject,omitempty"`
	// Class and Reason say how the launch failed (startup, limits) or, for
	// the draws that failed, the most frequent measurement failure.
	Class  string `json:"class,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Values holds the value of each draw (0 when the draw failed or
	// missed the SLO); empty when not launched or the startup failed.
	Values []float64 `json:"values,omitempty"`
	Failed int       `json:"failed,omitempty"` // draws that failed
	Mean   float64   `json:"mean"`
	SE     float64   `json:"se"` // standard error of Mean
	Group  int       `json:"group"`
}

// Launched reports whether the config would be launched (statically feasible).
func (c *ConfigTruth) Launched() bool { return c.Reject == "" }

// landscapeOptions configure Compute.
type landscapeOptions struct {
	Profile string // name or file
	Draws   int
	// ScreenDraws, when below Draws, is the draws every config gets
	// first; only configs whose mean is then at least Refine times the
	// best get all Draws.
	ScreenDraws int
	Refine      float64
	// NoShare measures every config itself, for checking the sharing.
	NoShare bool
	Workers int
	Log     io.Writer // progress lines; nil: none
}

// config is one statically feasible config during the computation.
type config struct {
	idx   int // into Landscape.Configs
	cfg   *space.Config
	srv   *virtual.Server
	facts engine.Facts
	kv    int
	chunk int
}

// ComputeLandscape enumerates st's space and runs every feasible config
// virtually over opt.Draws draws. Configs whose simulated behaviour is
// provably the same share measurements: equal sim.Virtual keys, and KV
// capacity and chunk size within the span a measurement touched.
func ComputeLandscape(ctx context.Context, st *space.Study, opt landscapeOptions) (*Landscape, error) {
	t0 := time.Now()
	logf := func(format string, a ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, format+"\n", a...)
		}
	}
	ls := &Landscape{Version: landscapeVersion, Study: st.Name, Profile: opt.Profile, Draws: opt.Draws, Workers: opt.Workers}
	var feasible []*config
	var enumErr error
	st.Enumerate(func(p space.Params) bool {
		ct := ConfigTruth{Params: p, Group: -1}
		cfg, err := st.Resolve(p, nil)
		if err != nil {
			enumErr = fmt.Errorf("resolve %s: %w", p, err)
			return false
		}
		ct.Params = cfg.Params
		if rej := st.Check(cfg); len(rej) > 0 {
			ct.Reject = rej[0].Rule + ": " + rej[0].Message
		} else {
			feasible = append(feasible, &config{idx: len(ls.Configs), cfg: cfg})
		}
		ls.Configs = append(ls.Configs, ct)
		return true
	})
	if enumErr != nil {
		return nil, enumErr
	}
	if len(ls.Configs) == 0 {
		return nil, errors.New("the space has no config (continuous params cannot be enumerated)")
	}
	logf("%d configs, %d statically feasible; starting them (%d workers)", len(ls.Configs), len(feasible), opt.Workers)

	// Startups: the live startup code, in process.
	vopt := virtual.Options{Profile: opt.Profile}
	eng := newSimEngine(st)
	err := parallel(ctx, opt.Workers, len(feasible), func(i int) error {
		c := feasible[i]
		srv, facts, class, reason, err := startConfig(ctx, st, eng, st.Argv(c.cfg), vopt)
		if err != nil {
			return err
		}
		if srv == nil {
			ct := &ls.Configs[c.idx]
			ct.Class, ct.Reason = class, reason
			return nil
		}
		c.srv, c.facts = srv, facts
		c.kv, c.chunk = srv.Plan().KVTokens, srv.Plan().ChunkedPrefill
		return nil
	})
	if err != nil {
		return nil, err
	}
	ls.StartupS = time.Since(t0).Seconds()

	// Behaviour groups, each measured by one worker: largest capacities
	// first, so their spans cover the smaller ones.
	byKey := map[string][]*config{}
	var keys []string
	for _, c := range feasible {
		if c.srv == nil {
			continue
		}
		k := c.srv.Key()
		if opt.NoShare {
			k = c.cfg.Params.String()
		}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], c)
	}
	ls.Groups = len(keys)
	for _, k := range keys {
		group := byKey[k]
		slices.SortStableFunc(group, func(a, b *config) int {
			return cmp.Or(cmp.Compare(b.kv, a.kv), cmp.Compare(b.chunk, a.chunk))
		})
	}
	var runs, reused atomic.Int64
	// measureGroups runs draws [from, to) of the groups listed.
	measureGroups := func(groups []int, from, to int) error {
		var done atomic.Int64
		last := time.Now()
		var mu sync.Mutex
		return parallel(ctx, opt.Workers, len(groups), func(gi int) error {
			g := groups[gi]
			group := byKey[keys[g]]
			type entry struct {
				kv, chunk int
				span      sim.Span
				o         search.Outcome
			}
			for draw := from; draw < to; draw++ {
				var memo []entry
				for _, c := range group {
					ct := &ls.Configs[c.idx]
					ct.Group = g
					var o *search.Outcome
					for i := range memo {
						if e := &memo[i]; !opt.NoShare && covers(e.kv, e.chunk, e.span, c.kv, c.chunk) {
							o = &e.o
							reused.Add(1)
							break
						}
					}
					if o == nil {
						srv, err := c.srv.Relaunch(virtual.Options{Seed: uint64(draw)})
						if err != nil {
							return err
						}
						out, err := try(ctx, st, eng.kind, srv, c.facts)
						if err != nil {
							return err
						}
						memo = append(memo, entry{kv: c.kv, chunk: c.chunk, span: srv.Span(), o: out})
						o = &memo[len(memo)-1].o
						runs.Add(1)
					}
					ct.Values = append(ct.Values, o.Value())
					if o.State == search.StateFailed {
						ct.Failed++
						if ct.Class == "" {
							ct.Class, ct.Reason = o.Class, o.Reason
						}
					}
				}
			}
			if n := done.Add(1); opt.Log != nil {
				mu.Lock()
				if time.Since(last) > 10*time.Second || int(n) == len(groups) {
					last = time.Now()
					logf("  %d/%d groups, %d runs, %d reused, %.0f s", n, len(groups), runs.Load(), reused.Load(), time.Since(t0).Seconds())
				}
				mu.Unlock()
			}
			return nil
		})
	}
	all := make([]int, len(keys))
	for i := range all {
		all[i] = i
	}
	screen := min(opt.ScreenDraws, opt.Draws)
	if screen <= 0 {
		screen = opt.Draws
	}
	logf("%d started in %.1f s, %d behaviour groups; screening with %d draws", countStarted(feasible), ls.StartupS, len(keys), screen)
	if err := measureGroups(all, 0, screen); err != nil {
		return nil, err
	}
	ls.ScreenDraws = screen
	best := 0.0
	for i := range ls.Configs {
		m, _ := meanSE(ls.Configs[i].Values)
		best = max(best, m)
	}
	if screen < opt.Draws && best > 0 {
		// Only configs near the top decide what is within 97% of the best:
		// they get all the draws.
		ls.Refine = opt.Refine
		var near []int
		for g, k := range keys {
			for _, c := range byKey[k] {
				if m, _ := meanSE(ls.Configs[c.idx].Values); m > 0 && m >= opt.Refine*best {
					near = append(near, g)
					break
				}
			}
		}
		logf("%d groups within %.0f%% of the best after screening: %d more draws each", len(near), 100*opt.Refine, opt.Draws-screen)
		if err := measureGroups(near, screen, opt.Draws); err != nil {
			return nil, err
		}
	}
	ls.Runs, ls.Reused = int(runs.Load()), int(reused.Load())
	ls.Best = -1
	for i := range ls.Configs {
		c := &ls.Configs[i]
		c.Mean, c.SE = meanSE(c.Values)
		if len(c.Values) > 0 && (ls.Best < 0 || c.Mean > ls.Configs[ls.Best].Mean) {
			ls.Best = i
		}
	}
	ls.WallS = time.Since(t0).Seconds()
	return ls, nil
}

func countStarted(cs []*config) int {
	n := 0
	for _, c := range cs {
		if c.srv != nil {
			n++
		}
	}
	return n
}

// covers reports whether a measurement of a config with capacity kv and
// chunk size chunk, which touched span, is also the measurement of an
// equivalent config (same key) with capacity kv2 and chunk size chunk2.
func covers(kv, chunk int, span sim.Span, kv2, chunk2 int) bool {
	kvOK := kv2 == kv || (!span.KVBound && kv2 >= span.KVPeak)
	chunkOK := chunk2 == chunk || (!span.Chunked && (chunk2 <= 0 || chunk2 >= span.PromptPeak))
	return kvOK && chunkOK
}

// meanSE is the mean of xs and its standard error (0 for fewer than two).
func meanSE(xs []float64) (mean, se float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first
// error; it stops handing out work once one failed or ctx ended.
func parallel(ctx context.Context, workers, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// cacheKey identifies a landscape: the profile and study contents and
// the draws. The program is not part of it: a cached landscape is checked
// against this build instead (see stale), so a change that does not move
// the simulator keeps its cache.
func cacheKey(studyPath string, opt landscapeOptions) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "landscape v%d draws %d screen %d refine %g share %v\n", landscapeVersion, opt.Draws, opt.ScreenDraws, opt.Refine, !opt.NoShare)
	if err := hashFile(h, studyPath); err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	if _, err := os.Stat(opt.Profile); err == nil {
		if err := hashFile(h, opt.Profile); err != nil {
			return "", fmt.Errorf("cache key: %w", err)
		}
	} else {
		fmt.Fprintf(h, "bundled profile %s\n", opt.Profile)
	}
	return hex.EncodeToString(h.Sum(nil))[:24], nil
}

// staleChecks is how many configs of a cached landscape are measured
// again before it is used.
const staleChecks = 24

// stale measures again, with this build, the first draw of a sample of a
// cached landscape's configs (the best, the rest spread over the space)
// and every startup failure, and returns the first that differs: a change
// to the simulator, the load generator or the outcome rules that moves any
// of them (a failure's message included: the search reads it) makes the
// cache stale.
func stale(ctx context.Context, st *space.Study, ls *Landscape, profile string) (string, error) {
	var sample []int
	if ls.Best >= 0 {
		sample = append(sample, ls.Best)
	}
	step := max(len(ls.Configs)/staleChecks, 1)
	eng := newSimEngine(st)
	for i := step / 2; i < len(ls.Configs); i += step {
		sample = append(sample, i)
	}
	// The engine's rules decide which configs launch at all: every config
	// is checked again (cheap), and every startup failure started again
	// (cheap: it ends before a measurement).
	for i := range ls.Configs {
		ct := &ls.Configs[i]
		cfg, err := st.Resolve(ct.Params, nil)
		if err != nil {
			return "", err
		}
		if rej := st.Check(cfg); (len(rej) > 0) != !ct.Launched() {
			return fmt.Sprintf("%s: static check changed", ct.Params), nil
		}
		if ct.Launched() && len(ct.Values) == 0 && i != ls.Best && !slices.Contains(sample, i) {
			sample = append(sample, i)
		}
	}
	for _, i := range sample {
		ct := &ls.Configs[i]
		cfg, err := st.Resolve(ct.Params, nil)
		if err != nil {
			return "", err
		}
		if !ct.Launched() {
			continue
		}
		srv, facts, class, reason, err := startConfig(ctx, st, eng, st.Argv(cfg), virtual.Options{Profile: profile})
		if err != nil {
			return "", err
		}
		if srv == nil {
			if len(ct.Values) > 0 || ct.Class != class || ct.Reason != reason {
				return fmt.Sprintf("%s: startup now %s (%s), cached %s (%s)", ct.Params, class, firstLineOf(reason), ct.Class, firstLineOf(ct.Reason)), nil
			}
			continue
		}
		if len(ct.Values) == 0 {
			return fmt.Sprintf("%s: now starts, cached %s", ct.Params, ct.Class), nil
		}
		r, err := srv.Relaunch(virtual.Options{Seed: 0})
		if err != nil {
			return "", err
		}
		o, err := try(ctx, st, eng.kind, r, facts)
		if err != nil {
			return "", err
		}
		if o.Value() != ct.Values[0] {
			return fmt.Sprintf("%s: draw 0 now %g, cached %g", ct.Params, o.Value(), ct.Values[0]), nil
		}
	}
	return "", nil
}

func hashFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// cachePath is where a landscape with key lives under dir.
func cachePath(dir, study, profile, key string) string {
	name := fmt.Sprintf("%s--%s--%s.json.gz", safe(study), safe(filepath.Base(profile)), key)
	return filepath.Join(dir, name)
}

func safe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// loadLandscape reads a cached landscape; ok is false when there is none.
func loadLandscape(path string) (ls *Landscape, ok bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	ls = &Landscape{}
	if err := json.NewDecoder(zr).Decode(ls); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return ls, ls.Version == landscapeVersion, nil
}

// saveLandscape writes ls to path atomically (a temporary file renamed).
func saveLandscape(path string, ls *Landscape) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".landscape-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	zw := gzip.NewWriter(tmp)
	if err := json.NewEncoder(zw).Encode(ls); err != nil {
		tmp.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// defaultTruth is the true score of the study's engine default (its
// budget.baseline config): the landscape's when the default is one of its
// configs, else measured as a landscape config is, over the same draws.
// A default that fails to start scores 0.
func defaultTruth(ctx context.Context, st *space.Study, ls *Landscape, profile string, draws int) (float64, *space.Baseline, error) {
	base, err := st.Baseline(nil)
	if err != nil {
		return 0, nil, fmt.Errorf("the engine default: %w", err)
	}
	argv := strings.Join(st.Argv(base.Config), " ")
	for i := range ls.Configs {
		cfg, err := st.Resolve(ls.Configs[i].Params, nil)
		if err == nil && strings.Join(st.Argv(cfg), " ") == argv {
			return ls.Configs[i].Mean, base, nil
		}
	}
	if len(st.Check(base.Config)) > 0 {
		return 0, base, nil
	}
	eng := newSimEngine(st)
	srv, facts, _, _, err := startConfig(ctx, st, eng, st.Argv(base.Config), virtual.Options{Profile: profile})
	if err != nil {
		return 0, nil, err
	}
	if srv == nil {
		return 0, base, nil
	}
	sum := 0.0
	for d := range draws {
		r, err := srv.Relaunch(virtual.Options{Seed: uint64(d)})
		if err != nil {
			return 0, nil, err
		}
		o, err := try(ctx, st, eng.kind, r, facts)
		if err != nil {
			return 0, nil, err
		}
		sum += o.Value()
	}
	return sum / float64(draws), base, nil
}

// startConfig starts a config's argv in virtual time as a study would
// launch it. A startup that failed, or a server whose limits the engine
// reduced (the trial fails right after startup, never measured), returns
// no server and the class and reason of that failure.
func startConfig(ctx context.Context, st *space.Study, eng simEngine, argv []string, opt virtual.Options) (srv *virtual.Server, facts engine.Facts, class, reason string, err error) {
	srv, facts, err = startVirtual(ctx, eng, argv, opt)
	var f *launcher.Failure
	if errors.As(err, &f) {
		return nil, facts, f.Class, f.Reason, nil
	}
	if err != nil {
		return nil, facts, "", "", err
	}
	if o := search.Decide(st, nil, facts, nil, nil, nil); o.Class == search.ClassLimitsReduced {
		return nil, facts, o.Class, o.Reason, nil
	}
	return srv, facts, "", "", nil
}

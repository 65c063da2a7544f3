package search

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/space"
	"github.com/sgtune/sgtune/storage"
)

// The engine's default config (budget.baseline: default) is the study's
// first launch, counted in its budget, and every winner is held against
// it. Its trial carries storage.AttrBaseline. When the default leaves a
// param to the engine (the param has neither a flagless value nor a
// default:), it is no point of the space: its trial stores no goptuna
// params (the samplers never see values it did not set), its Record has
// empty Params and InSpace false, and the models of the space (estimates,
// local moves, Thompson sampling, crash regions) skip it; the values it
// did set are in its stored config. A default whose every param has a
// value stores them as params like any trial, and the models learn from
// it.

// baselineMark is storage.AttrBaseline's JSON.
type baselineMark struct {
	Omitted []string `json:"omitted"`
}

// markBaseline is the AttrBaseline value of an engine default leaving
// omitted to the engine.
func markBaseline(omitted []string) string {
	b, _ := json.Marshal(baselineMark{Omitted: append([]string{}, omitted...)}) // a struct of strings always marshals
	return string(b)
}

// baselineLabel is how progress lines name the engine default.
const baselineLabel = "engine default"

// takeBaseline reports whether new trial number n is the study's engine
// default: budget.baseline is default and no trial took it yet. The
// storage settles it across processes (the first trial to store its
// number in the study's AttrBaselineTrial takes it), so it is launched
// once, and a resumed study that stored it does not launch it again.
func (r *runner) takeBaseline(n int) (bool, error) {
	r.mu.Lock()
	taken := r.baselineTaken
	r.mu.Unlock()
	if taken || r.st.Budget.Baseline != space.BaselineDefault {
		return false, nil
	}
	got, err := r.store.EnsureStudySystemAttr(r.study.ID, storage.AttrBaselineTrial, strconv.Itoa(n))
	if err != nil {
		return false, fmt.Errorf("trial %d: take the engine default's launch: %w", n, err)
	}
	r.mu.Lock()
	r.baselineTaken = true
	r.mu.Unlock()
	return got == strconv.Itoa(n), nil
}

// baselineTrial makes new trial t the engine default: it marks it, and
// when the default is a point of the space stores its params through the
// sampler's fixed params (as a queued re-run's), so that the samplers
// see them as those of any trial.
func (r *runner) baselineTrial(t *trialRun, trial *goptuna.Trial) error {
	t.baseline, t.label = true, baselineLabel
	b, err := r.st.Baseline(r.learned)
	if err != nil {
		t.params, t.resolveErr = space.Params{}, fmt.Errorf("the engine default: %w", err)
		return r.store.SetTrialSystemAttr(t.id, storage.AttrBaseline, markBaseline(nil))
	}
	if err := r.store.SetTrialSystemAttr(t.id, storage.AttrBaseline, markBaseline(b.Omitted)); err != nil {
		return err
	}
	t.label += ": " + b.Describe()
	t.cfg, t.params = b.Config, b.Config.Params
	if !b.InSpace() {
		return nil
	}
	rec := &recorder{params: b.Config.Params, internal: map[string]float64{}}
	if _, err := r.st.Suggest(rec); err != nil {
		return fmt.Errorf("the engine default's params: %w", err)
	}
	fixed, err := json.Marshal(rec.internal)
	if err != nil {
		return err
	}
	if err := r.store.SetTrialSystemAttr(t.id, storage.AttrFixedParams, string(fixed)); err != nil {
		return err
	}
	p, err := r.st.Suggest(trial)
	if err != nil {
		return fmt.Errorf("the engine default's params: %w", err)
	}
	t.params, t.cfg.Params = p, p
	return nil
}

// BaselineOf returns the study's engine-default trial: the last trial of
// the default (a retry replaces the trial it re-runs) that is not a
// confirmation run. ok is false when the study launched none.
func BaselineOf(recs []Record) (Record, bool) {
	var out Record
	found := false
	for _, r := range recs {
		if r.Baseline && r.ConfirmOf == nil && (!found || r.Number > out.Number) {
			out, found = r, true
		}
	}
	return out, found
}

// inSpace returns the trials whose params are points of the space (see
// Record.InSpace).
func inSpace(recs []Record) []Record {
	return slices.DeleteFunc(slices.Clone(recs), func(r Record) bool { return !r.InSpace() })
}

// levelRE finds the concurrency level in a measurement phase ("C64 r1",
// "warm-up C64", "decode ctx=8192 C16").
var levelRE = regexp.MustCompile(`\bC(\d+)\b`)

// failedWhere says where a failed launch failed: "at C64" (the level it
// was measuring), "at the quality check before the sweep", "at rate
// 12/s" (another phase), "at startup" (it never answered), or "" when
// unknown.
func failedWhere(r Record) string {
	switch m := levelRE.FindStringSubmatch(r.FailedIn); {
	case m != nil:
		return "at C" + m[1]
	case strings.HasPrefix(r.FailedIn, "quality "):
		return "at the quality check " + strings.TrimPrefix(r.FailedIn, "quality ") + " the sweep"
	case r.FailedIn != "":
		return "at " + r.FailedIn
	case len(r.Facts) == 0 && r.LogPath != "":
		return "at startup"
	}
	return ""
}

// VersusDefault states the study's declared best against its engine
// default, as run's summary, best, status and the report print it:
//
//	1.84× the engine default, pooled over 3 runs each (trial 0: pooled 2452.3)
//	the engine default is as good as anything found (pooled 2452.3 vs trial 7's 2490.1, within the spread 95.2)
//	the engine default failed: illegal_memory_access at C64
//	the engine default is rejected before launch: <rule's reason>
//
// w is the declared winner (nil before one), best the declared best trial
// (nil when none meets the SLO). "" when the study has no engine default
// or it is still to run.
func VersusDefault(w *Winner, best *Record, recs []Record) string {
	base, ok := BaselineOf(recs)
	if !ok {
		return ""
	}
	switch base.State {
	case StateInfeasible:
		return "the engine default is rejected before launch: " + base.Reason
	case StateFailed:
		line := "the engine default failed: " + base.FailureClass
		if where := failedWhere(base); where != "" {
			return line + " " + where
		}
		if base.Reason != "" {
			line += ": " + base.Reason
		}
		return line
	case StatePruned:
		return "the engine default was pruned: " + base.Reason
	case StateComplete:
	default:
		return ""
	}
	if !base.ScoreOK || base.Score == nil {
		return "the engine default does not count: " + base.ScoreReason
	}
	if w != nil && w.Baseline != nil {
		b := w.Baseline
		if w.DefaultAsGood {
			if s := w.Searched; s != nil {
				return fmt.Sprintf("the engine default is as good as anything found (pooled %.1f vs trial %d's %.1f, within the spread %.1f)",
					b.Pooled, s.Trial, s.Pooled, max(b.Spread, s.Spread))
			}
			return fmt.Sprintf("the engine default is as good as anything found (pooled %.1f over %s; no other config was confirmed)", b.Pooled, runs(len(b.Runs)))
		}
		return fmt.Sprintf("%s the engine default, pooled over %s (trial %d: pooled %.1f)", times(w.Gain), runCounts(len(w.Runs), len(b.Runs)), b.Trial, b.Pooled)
	}
	// Not confirmed: one run each, no spread measured.
	switch {
	case best == nil:
		return fmt.Sprintf("the engine default (trial %d) scored %.1f", base.Number, *base.Score)
	case best.Number == base.Number:
		return fmt.Sprintf("the best trial is the engine default (trial %d, %.1f); one run, no spread measured", base.Number, *base.Score)
	case *base.Score > 0 && best.Score != nil:
		return fmt.Sprintf("%s the engine default, one run each, not confirmed (trial %d: %.1f)", times(*best.Score / *base.Score), base.Number, *base.Score)
	}
	return ""
}

// times prints a ratio as "1.84×".
func times(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) + "×" }

// runCounts prints two configs' run counts: "3 runs each", "3 and 2 runs".
func runCounts(a, b int) string {
	if a == b {
		return runs(a) + " each"
	}
	return fmt.Sprintf("%d and %d runs", a, b)
}

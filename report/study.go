package report

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/sgtune/sgtune/objective"
)

// Trial is one stored trial as the study report sees it.
type Trial struct {
	Number  int
	State   string // complete, failed, infeasible, duplicate, interrupted, ...
	Score   *float64
	ScoreOK bool
	Class   string // failure class or rejection rule
	Reason  string
	Params  map[string]interface{}
	Flags   []string
	Levels  []Level // medians per concurrency, ascending
	Seconds float64 // wall time the trial took
	// Start and End bound the trial in time (zero when unknown); the
	// study's wall time runs from the first start to the last end.
	Start, End time.Time
	// Launched says the trial started a server (it spent budget).
	Launched bool
	// RetryOf is the trial this one runs again (it was interrupted).
	RetryOf *int
	// ConfirmOf is the trial whose config this one measured again (a
	// confirmation run), nil for a trial of the search.
	ConfirmOf *int
	// Baseline marks the engine's default config (budget.baseline:
	// default): its trial and its confirmation runs.
	Baseline bool
	// ExitCode of the engine when it died, LogExcerpt its decisive log
	// lines and LogPath the full log, for failures. LogError says why the
	// log at LogPath lacks lines (a write to it or its close failed; ""
	// when it is whole), for any trial.
	ExitCode   *int
	LogExcerpt string
	LogPath    string
	LogError   string
	// Points are the stored measurements; the report reads the matrix
	// workload's prefill and decode cells from them.
	Points []objective.Point
}

// Level is the median measurement at one concurrency.
type Level struct {
	Concurrency int
	Repeats     int
	OutputTokS  float64
	TTFTP50     float64
	TTFTP99     float64
	LatencyP99  float64
}

// Confirmation is the rerun of one top config before the study declares
// its winner: the scores of every run of the config (the search's first,
// then the reruns), the score pooled over them, and the spread (max - min)
// of the runs that met the SLO and gates (search.Pool). It is
// stored as JSON in the study user attribute sgtune.confirmation (a list).
type Confirmation struct {
	Trial  int       `json:"trial"`
	Scores []float64 `json:"scores"`
	// Met says whether each run met the SLO and gates (nil: every one
	// did); a run that did not counts 0 in Pooled and is no measurement
	// in Spread.
	Met    []bool  `json:"met,omitempty"`
	Pooled float64 `json:"pooled"`
	Spread float64 `json:"spread"`
}

// measured returns the scores of the runs that met the SLO and gates: the
// runs the spread is measured on.
func (c Confirmation) measured() []float64 {
	var out []float64
	for i, s := range c.Scores {
		if c.Met == nil || (i < len(c.Met) && c.Met[i]) {
			out = append(out, s)
		}
	}
	return out
}

// Study is what the report covers.
type Study struct {
	Name    string
	Storage string
	Trials  []Trial
	Best    *Trial
	// Budget is the number of launches the study planned (0: not stored).
	Budget int
	// Score describes how trials were scored ("output tok/s at c=64, TTFT
	// p99 <= 5 s"); empty when the study's score spec is not stored.
	Score string
	// ScoreUnit is the unit of a score ("output tok/s"), for the plots'
	// axes; empty when unknown.
	ScoreUnit string
	// ScoreConcurrency is the level the score reads (0: unknown; the plots
	// then use each trial's highest measured level).
	ScoreConcurrency int
	// ScoreContext is the matrix row the score reads (0: the smallest
	// context with a measured decode cell).
	ScoreContext int
	// SLO is the score's; the rate plot draws its TTFT or latency bound.
	SLO []objective.SLO
	// Confirmations are the winner's and runners-up's reruns, best first.
	Confirmations []Confirmation
	// Verdict says how the study declared its winner from them.
	Verdict string
	// VersusDefault states the winner against the engine default
	// ("1.84× the engine default, pooled over 3 runs each ...", "the
	// engine default failed: oom at C64"); "" when the study has none.
	VersusDefault string
	// DefaultGain is the winner's pooled score over the engine
	// default's when the winner beat it (0 otherwise).
	DefaultGain float64
	// Generated is printed in the page when set; tests leave it zero so
	// the output is byte-for-byte reproducible.
	Generated time.Time
}

// Plot file names the report always tries to draw.
const (
	plotProgress   = "progress.svg"
	plotThroughput = "throughput.svg"
	plotTTFT       = "ttft-p99.svg"
	plotPareto     = "pareto.svg"
	plotRate       = "rate.svg"
	plotAchieved   = "rate-achieved.svg"
)

// WriteReport writes index.html, report.md and their SVG plots into dir.
// The page needs nothing but the files in dir: no network, no remote fonts.
//
// It replaces an earlier report's files there; see Foreign for the files a
// caller should not let it replace.
func WriteReport(dir string, st Study) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// A report written here before may have plots this one does not draw
	// (a param no longer varied): they would sit beside it, out of date.
	old, err := filepath.Glob(filepath.Join(dir, "effect-*.svg"))
	if err != nil {
		return err
	}
	for _, n := range []string{plotProgress, plotThroughput, plotTTFT, plotPareto} {
		old = append(old, filepath.Join(dir, n))
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the earlier %s: %w", filepath.Base(f), err)
		}
	}
	v := buildView(st)
	for i, p := range v.plotSpecs() {
		pl, err := p.draw()
		if err != nil {
			return fmt.Errorf("plot %s: %w", p.file, err)
		}
		if pl == nil {
			continue
		}
		if err := saveSVG(pl, p.w, p.h, filepath.Join(dir, p.file)); err != nil {
			return fmt.Errorf("save %s: %w", p.file, err)
		}
		v.addPlot(i, p)
	}
	var md, page bytes.Buffer
	writeMarkdown(&md, v)
	if err := writeHTML(&page, v); err != nil {
		return fmt.Errorf("render index.html: %w", err)
	}
	for name, b := range map[string][]byte{"report.md": md.Bytes(), "index.html": page.Bytes()} {
		if err := writeFileAtomic(filepath.Join(dir, name), b); err != nil {
			return err
		}
	}
	return nil
}

// writeFileAtomic writes b to path through a temporary file and a rename, so
// a reader (or an interrupted run) never sees half a page.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return nil
}

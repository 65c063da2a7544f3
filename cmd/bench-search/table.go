package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/search"
	"github.com/sgtune/sgtune/space"
)

// tableVersion changes when the table's meaning or format does.
const tableVersion = 1

// Table is a study's space measured for real: every statically feasible
// config launched Repeats times against the real engine (record.go), each
// run kept as the study loop saw it (the startup facts, the measurement or
// the failure). Replayed (replay.go), it is a landscape whose noise is the
// real noise: a launch draws one of the config's measured runs.
type Table struct {
	Version int         `json:"version"`
	Header  TableHeader `json:"header"`
	// Configs is the study's space in enumeration order.
	Configs []TableConfig `json:"configs"`
}

// TableHeader says what was measured, where and when.
type TableHeader struct {
	Study string `json:"study"`
	// StudyFile is the study file's path as given, StudySHA256 its
	// contents' hash.
	StudyFile   string `json:"study_file"`
	StudySHA256 string `json:"study_sha256"`
	// Engine is the engine's name; EngineCommand the study's command
	// words; EngineVersion what the command's --version printed.
	Engine        string   `json:"engine"`
	EngineCommand []string `json:"engine_command"`
	EngineVersion string   `json:"engine_version"`
	// Model is the model path the study launched, ModelBytes and
	// ModelSHA256 the file's size and hash (when it is a local file).
	Model       string  `json:"model"`
	ModelBytes  int64   `json:"model_bytes,omitempty"`
	ModelSHA256 string  `json:"model_sha256,omitempty"`
	Machine     Machine `json:"machine"`
	// Started and Updated: the first run's start and the last checkpoint.
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	// Repeats is the rounds asked for: each visits every feasible config
	// once, in its own shuffled order (shuffleSeed).
	Repeats int `json:"repeats"`
	// WallS is the time spent recording, over every session; Sessions
	// counts the recordings (a resumed one adds one).
	WallS    float64 `json:"wall_s"`
	Sessions int     `json:"sessions"`
	// LoadStart and LoadEnd are the 1, 5 and 15 minute load averages at
	// the first session's start and at the last checkpoint: other
	// processes on the machine add noise.
	LoadStart [3]float64 `json:"load_start"`
	LoadEnd   [3]float64 `json:"load_end"`
	// Complete is set once every round has run every feasible config.
	Complete bool `json:"complete"`
}

// Machine is the host a table was measured on.
type Machine struct {
	Host     string `json:"host"`
	NProc    int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	MemKB    int64  `json:"mem_kb,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
}

// TableConfig is one config of the space and its measured runs.
type TableConfig struct {
	Params space.Params `json:"params"`
	// Flags are the config's flags as recorded (the model path of the
	// recording machine included); replay resolves Params again.
	Flags []string `json:"flags"`
	// Reject is why the config is statically infeasible: never launched.
	Reject string     `json:"reject,omitempty"`
	Runs   []TableRun `json:"runs,omitempty"`
}

// TableRun is one launch of a config, as the study loop saw it.
type TableRun struct {
	// Round is the repeat (0-based); Order the config's place in the
	// round's shuffled order.
	Round int       `json:"round"`
	Order int       `json:"order"`
	At    time.Time `json:"at"`
	// WallS is the launch from start to stopped; Load1 the 1-minute load
	// average as it started.
	WallS float64 `json:"wall_s"`
	Load1 float64 `json:"load1"`
	// StartFailure is how the startup failed (nil when the server became
	// ready); Facts what its startup log said.
	StartFailure *RecordedFailure `json:"start_failure,omitempty"`
	Facts        *engine.Facts    `json:"facts,omitempty"`
	// Limits says the engine reduced the config's limits: the server was
	// stopped right after startup, unmeasured.
	Limits string `json:"limits,omitempty"`
	// Result and MeasureErr are the full measurement's (no pruning);
	// Crash how the server ended when it did not stop cleanly.
	Result     *objective.Result `json:"result,omitempty"`
	MeasureErr *RecordedError    `json:"measure_err,omitempty"`
	Crash      *RecordedFailure  `json:"crash,omitempty"`
	// Outcome is search.Decide's verdict on the run, for reference.
	Outcome RecordedOutcome `json:"outcome"`
}

// Value is the run's value as the landscape counts it: the score of a
// complete run that met its SLOs and gates, else 0.
func (r *TableRun) Value() float64 { return r.Outcome.outcome().Value() }

// RecordedOutcome is a search.Outcome as stored, with its value.
type RecordedOutcome struct {
	State   string  `json:"state"`
	Class   string  `json:"class,omitempty"`
	Reason  string  `json:"reason,omitempty"`
	Score   float64 `json:"score"`
	ScoreOK bool    `json:"score_ok"`
	// Value is what the sampler was told (search.Outcome.Value).
	Value float64 `json:"value"`
}

func recordOutcome(o search.Outcome) RecordedOutcome {
	return RecordedOutcome{State: o.State, Class: o.Class, Reason: o.Reason, Score: o.Score, ScoreOK: o.ScoreOK, Value: o.Value()}
}

func (r RecordedOutcome) outcome() search.Outcome {
	return search.Outcome{State: r.State, Class: r.Class, Reason: r.Reason, Score: r.Score, ScoreOK: r.ScoreOK}
}

// RecordedFailure is a *launcher.Failure as stored (its errors as text).
type RecordedFailure struct {
	Class     string  `json:"class"`
	ExitCode  int     `json:"exit_code"`
	Reason    string  `json:"reason,omitempty"`
	Excerpt   string  `json:"excerpt,omitempty"`
	Tail      string  `json:"tail,omitempty"`
	Err       string  `json:"err,omitempty"`
	DetectedS float64 `json:"detected_s,omitempty"`
}

func recordFailure(f *launcher.Failure) *RecordedFailure {
	if f == nil {
		return nil
	}
	r := &RecordedFailure{Class: f.Class, ExitCode: f.ExitCode, Reason: f.Reason, Excerpt: f.Excerpt, Tail: f.Tail, DetectedS: f.Detected.Seconds()}
	if f.Err != nil {
		r.Err = f.Err.Error()
	}
	return r
}

// failure is the recorded failure as a fresh *launcher.Failure.
func (r *RecordedFailure) failure() *launcher.Failure {
	if r == nil {
		return nil
	}
	f := &launcher.Failure{Class: r.Class, ExitCode: r.ExitCode, Reason: r.Reason, Excerpt: r.Excerpt, Tail: r.Tail,
		Detected: time.Duration(r.DetectedS * float64(time.Second))}
	if r.Err != "" {
		f.Err = errors.New(r.Err)
	}
	return f
}

// RecordedError is a measurement error as stored: its text and the
// sentinels it wrapped (those search.Decide and objective tell apart).
type RecordedError struct {
	Text string   `json:"text"`
	Is   []string `json:"is,omitempty"`
}

// sentinels are the errors a recorded measurement error remembers
// wrapping, by name.
var sentinels = []struct {
	name string
	err  error
}{
	{"hang", objective.ErrHang},
	{"quality", objective.ErrQuality},
	{"failed_requests", objective.ErrFailedRequests},
	{"interrupted", objective.ErrInterrupted},
}

func recordError(err error) *RecordedError {
	if err == nil {
		return nil
	}
	r := &RecordedError{Text: err.Error()}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			r.Is = append(r.Is, s.name)
		}
	}
	return r
}

// replayedError is a recorded measurement error: its text, and errors.Is
// true for the sentinels it wrapped.
type replayedError struct {
	text string
	is   []error
}

func (e *replayedError) Error() string { return e.text }

func (e *replayedError) Is(target error) bool { return slices.Contains(e.is, target) }

// err is the recorded error as an error (nil for none).
func (r *RecordedError) err() error {
	if r == nil {
		return nil
	}
	e := &replayedError{text: r.Text}
	for _, name := range r.Is {
		for _, s := range sentinels {
			if s.name == name {
				e.is = append(e.is, s.err)
			}
		}
	}
	return e
}

// Feasible counts the statically feasible configs.
func (t *Table) Feasible() int {
	n := 0
	for i := range t.Configs {
		if t.Configs[i].Reject == "" {
			n++
		}
	}
	return n
}

// Runs counts the runs recorded.
func (t *Table) Runs() int {
	n := 0
	for i := range t.Configs {
		n += len(t.Configs[i].Runs)
	}
	return n
}

// Busy counts the runs recorded while the machine's 1-minute load average
// exceeded its CPUs by more than one: a run and its load generator load
// the CPUs by about one, so such a run shared them with other work, and
// its noise is partly that work's.
func (t *Table) Busy() int {
	n := 0
	for i := range t.Configs {
		for _, run := range t.Configs[i].Runs {
			if run.Load1 > float64(t.Header.Machine.NProc)+1 {
				n++
			}
		}
	}
	return n
}

// loadTable reads a table (gzip-compressed JSON).
func loadTable(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t := &Table{}
	if err := json.NewDecoder(zr).Decode(t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.Version != tableVersion {
		return nil, fmt.Errorf("%s: table version %d, this program reads %d", path, t.Version, tableVersion)
	}
	for i := range t.Configs {
		for _, run := range t.Configs[i].Runs {
			if run.Result != nil {
				run.Result.Medians = objective.Medians(run.Result.Points) // not stored: see encodeTable
			}
		}
	}
	return t, nil
}

// tableDigits is the significant digits a table keeps of each number it
// measured. A run's throughput varies by 2-3% between the repeats of one
// launch and its times come from a nanosecond clock, so 7 digits keep
// every digit a measurement means. The 17 of a float64, with the medians,
// made the llama-cpu table 1.34 MB compressed instead of 0.95.
const tableDigits = 7

// encodeTable writes t as JSON with its numbers at tableDigits and
// without each result's medians, which loadTable derives from the points
// as the measurement did (objective.Medians): the table stays small
// enough to keep in the repository.
func encodeTable(w io.Writer, t *Table) error {
	c := *t
	c.Configs = slices.Clone(t.Configs)
	for i := range c.Configs {
		runs := slices.Clone(c.Configs[i].Runs)
		for j := range runs {
			if runs[j].Result != nil {
				res := *runs[j].Result
				res.Medians = nil
				runs[j].Result = &res
			}
		}
		c.Configs[i].Runs = runs
	}
	raw, err := json.Marshal(&c)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(roundNumbers(tree))
}

// roundNumbers rounds every non-integer number of a decoded JSON tree
// (json.Number) to tableDigits significant digits.
func roundNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = roundNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = roundNumbers(x)
		}
	case json.Number:
		if !strings.ContainsAny(string(v), ".eE") {
			return v
		}
		if f, err := v.Float64(); err == nil {
			return json.Number(strconv.FormatFloat(f, 'g', tableDigits, 64))
		}
	}
	return v
}

// saveTable writes t to path atomically (a temporary file renamed), so a
// recording interrupted at any point leaves the last checkpoint whole.
func saveTable(path string, t *Table) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".table-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		tmp.Close()
		return err
	}
	if err := encodeTable(zw, t); err != nil {
		tmp.Close()
		return fmt.Errorf("encode the table: %w", err)
	}
	if err := zw.Close(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// flagsKey identifies a config by its flags.
func flagsKey(flags []string) string { return strings.Join(flags, " ") }

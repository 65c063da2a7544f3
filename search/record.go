package search

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/c-bata/goptuna"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/objective"
	"github.com/sgtune/sgtune/storage"
)

// Trial states as sgtune reports them (DESIGN.md vocabulary). goptuna's own
// state is coarser: failed and infeasible trials are stored as PRUNED so the
// TPE sampler learns to avoid their region, and interrupted ones as FAIL.
const (
	StateWaiting     = "waiting"
	StateRunning     = "running"
	StateComplete    = "complete"
	StatePruned      = "pruned"
	StateInfeasible  = "infeasible"
	StateFailed      = "failed"
	StateInterrupted = "interrupted"
	StateDuplicate   = "duplicate" // proposed again after it was measured; not launched
	// StateUnlaunched is a proposal made as other workers spent the
	// study's last launches: never launched, never re-run.
	StateUnlaunched = "unlaunched"
)

// RanToEnd reports whether a trial in state was launched and ran to an
// end (complete, failed or pruned): a launch whose duration and outcome
// count.
func RanToEnd(state string) bool {
	return state == StateComplete || state == StateFailed || state == StatePruned
}

// Failure classes the loop adds to the launcher's.
const (
	ClassQuality        = "quality"
	ClassLimitsReduced  = "limits_reduced"
	ClassMeasurement    = "measurement"
	ClassRequestsFailed = "requests_failed" // the server answered, but requests kept failing
	ClassKnownBadConfig = "same_as_failed"
	ClassCrashRegion    = "crash_region" // every launched config of its region failed (stored before the feasibility model)
)

// Scored returns the trial's score when one was read: a complete trial's,
// or a pruned one's partial score at the scored level. Trials stored
// before pruned ones kept no score there carry a 0 that was never
// measured.
func (r Record) Scored() (float64, bool) {
	if r.Score == nil || (r.State != StateComplete && *r.Score <= 0) {
		return 0, false
	}
	return *r.Score, true
}

// Record is one stored trial, decoded for reports.
type Record struct {
	ID           int                    `json:"-"`
	Number       int                    `json:"number"`
	State        string                 `json:"state"`
	Params       map[string]interface{} `json:"params"`
	Score        *float64               `json:"score"`
	ScoreOK      bool                   `json:"score_ok"`
	ScoreReason  string                 `json:"score_reason,omitempty"`
	FailureClass string                 `json:"failure_class,omitempty"`
	Reason       string                 `json:"reason,omitempty"`
	ExitCode     *int                   `json:"exit_code,omitempty"`
	RetryOf      *int                   `json:"retry_of,omitempty"`
	ConfirmOf    *int                   `json:"confirm_of,omitempty"`
	// Baseline marks the engine's default config (budget.baseline:
	// default): its trial, its retries and its confirmation runs.
	// Omitted are the params it leaves to the engine: with any, its
	// Params are empty (it is no point of the space; see InSpace) and
	// its config's own params are in Config.
	Baseline bool     `json:"baseline,omitempty"`
	Omitted  []string `json:"omitted,omitempty"`
	// FailedIn is the measurement phase a failed trial failed in ("C64
	// r1"); "" when it failed before measuring.
	FailedIn   string            `json:"failed_in,omitempty"`
	Retries    int               `json:"retries,omitempty"`
	GPUs       string            `json:"gpus,omitempty"`
	EngineName string            `json:"engine,omitempty"`
	Engine     []string          `json:"engine_command,omitempty"`
	Version    string            `json:"engine_version,omitempty"`
	LaunchCmd  []string          `json:"launch_command,omitempty"`
	Container  *container.Record `json:"container,omitempty"`
	ModelRev   string            `json:"model_revision,omitempty"`
	ConfigKey  string            `json:"-"`
	Config     json.RawMessage   `json:"config,omitempty"`
	Argv       []string          `json:"argv,omitempty"`
	Facts      json.RawMessage   `json:"facts,omitempty"`
	Result     json.RawMessage   `json:"result,omitempty"`
	LogPath    string            `json:"log_path,omitempty"`
	// LogError says why the log at LogPath lacks lines (a failed write or
	// close); "" when it is whole.
	LogError string `json:"log_error,omitempty"`
	// Launching: the trial claimed its config to launch (storage's
	// ClaimConfig; a running trial with it runs that config, or is about
	// to).
	Launching bool `json:"-"`
	// Stopping: the trial was stored before its server stopped, and the
	// stop has not been seen to end (storage.AttrStopping).
	Stopping     bool       `json:"-"`
	LogTail      string     `json:"log_tail,omitempty"`
	LogExcerpt   string     `json:"log_excerpt,omitempty"`
	Start        time.Time  `json:"start"`
	End          *time.Time `json:"end,omitempty"`
	DurationS    float64    `json:"duration_s,omitempty"`
	PromptTokens float64    `json:"prompt_tokens,omitempty"`
	Owner        string     `json:"-"`
	// Host is where the trial's server ran: the Slurm job's nodes, else,
	// for a launched trial, the host of the process that ran it.
	Host     string `json:"host,omitempty"`
	SlurmJob string `json:"slurm_job,omitempty"` // the Slurm job ID, when a Slurm job ran it
}

// InSpace reports whether the trial's params are a point of the study's
// space: every trial but an engine default that leaves params to the
// engine. Models of the space (estimates, local moves, Thompson
// sampling, crash regions) read only such trials.
func (r Record) InSpace() bool { return !r.Baseline || len(r.Omitted) == 0 }

// ConfigParams returns the params of the trial's config as it stored
// them: Params, or for an engine default outside the space the values it
// set (see space.Baseline).
func (r Record) ConfigParams() map[string]any {
	if r.InSpace() {
		return r.Params
	}
	var c struct {
		Params map[string]any `json:"params"`
	}
	_ = json.Unmarshal(r.Config, &c)
	return c.Params
}

// Flags returns the engine flags of the trial's config.
func (r Record) Flags() []string {
	var c struct {
		Flags []string `json:"flags"`
	}
	_ = json.Unmarshal(r.Config, &c)
	return c.Flags
}

// Env returns the extra environment of the trial's config.
func (r Record) Env() map[string]string {
	var c struct {
		Env map[string]string `json:"env"`
	}
	_ = json.Unmarshal(r.Config, &c)
	return c.Env
}

// Medians returns the stored medians per concurrency, if any.
func (r Record) Medians() map[int]objective.Median {
	var res objective.Result
	_ = json.Unmarshal(r.Result, &res)
	return res.Medians
}

func decode(t goptuna.FrozenTrial) Record {
	ua := t.UserAttrs
	r := Record{
		ID:           t.ID,
		Number:       t.Number,
		Params:       asWritten(t.Params),
		ScoreReason:  ua[storage.AttrScoreReason],
		FailureClass: ua[storage.AttrClass],
		Reason:       ua[storage.AttrReason],
		GPUs:         ua[storage.AttrGPUs],
		LogPath:      ua[storage.AttrLogPath],
		LogError:     ua[storage.AttrLogError],
		Launching:    ua[storage.AttrLaunching] != "",
		Stopping:     ua[storage.AttrStopping] != "",
		LogTail:      ua[storage.AttrLogTail],
		LogExcerpt:   ua[storage.AttrLogExcerpt],
		Start:        t.DatetimeStart,
		Owner:        t.SystemAttrs[storage.AttrOwner],
		Version:      ua[storage.AttrEngineVersion],
		ConfigKey:    ua[storage.AttrConfigKey],
		EngineName:   ua[storage.AttrEngineName],
		ModelRev:     ua[storage.AttrModelRevision],
	}
	r.SlurmJob = t.SystemAttrs[storage.AttrSlurmJob]
	r.Host = t.SystemAttrs[storage.AttrHost]
	if r.Host == "" && r.SlurmJob == "" && r.Owner != "" && r.LogPath != "" { // launched here
		owner, _, _ := strings.Cut(r.Owner, "#")
		r.Host, _, _ = strings.Cut(owner, ":")
	}
	r.State = ua[storage.AttrState]
	switch {
	case t.State == goptuna.TrialStateRunning:
		r.State = StateRunning
	case t.State == goptuna.TrialStateWaiting:
		r.State = StateWaiting
	case r.State == "":
		r.State = map[goptuna.TrialState]string{
			goptuna.TrialStateComplete: StateComplete,
			goptuna.TrialStatePruned:   StatePruned,
			goptuna.TrialStateFail:     StateFailed,
		}[t.State]
	}
	if s, ok := ua[storage.AttrScore]; ok {
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			r.Score = &v
		}
	}
	r.ScoreOK = ua[storage.AttrScoreOK] == "true"
	if s, ok := ua[storage.AttrExitCode]; ok {
		if v, err := strconv.Atoi(s); err == nil {
			r.ExitCode = &v
		}
	}
	if s, ok := t.SystemAttrs[storage.AttrRetryOf]; ok {
		if v, err := strconv.Atoi(s); err == nil {
			r.RetryOf = &v
		}
	}
	if s, ok := t.SystemAttrs[storage.AttrConfirmOf]; ok {
		if v, err := strconv.Atoi(s); err == nil {
			r.ConfirmOf = &v
		}
	}
	if s, ok := t.SystemAttrs[storage.AttrBaseline]; ok {
		r.Baseline = true
		var mark baselineMark
		if json.Unmarshal([]byte(s), &mark) == nil {
			r.Omitted = mark.Omitted
		}
	}
	r.FailedIn = ua[storage.AttrFailedIn]
	if s, ok := ua[storage.AttrDurationS]; ok {
		r.DurationS, _ = strconv.ParseFloat(s, 64)
	}
	if s, ok := ua[storage.AttrPromptTokens]; ok {
		r.PromptTokens, _ = strconv.ParseFloat(s, 64)
	}
	r.Retries, _ = strconv.Atoi(ua[storage.AttrRetries])
	_ = json.Unmarshal([]byte(ua[storage.AttrEngine]), &r.Engine)
	_ = json.Unmarshal([]byte(ua[storage.AttrLaunchCommand]), &r.LaunchCmd)
	if c := ua[storage.AttrContainer]; c != "" {
		var run container.Record
		if json.Unmarshal([]byte(c), &run) == nil {
			r.Container = &run
		}
	}
	_ = json.Unmarshal([]byte(ua[storage.AttrArgv]), &r.Argv)
	if s := ua[storage.AttrConfig]; s != "" {
		r.Config = json.RawMessage(s)
	}
	if s := ua[storage.AttrFacts]; s != "" {
		r.Facts = json.RawMessage(s)
	}
	if s := ua[storage.AttrResult]; s != "" {
		r.Result = json.RawMessage(s)
	}
	if !t.DatetimeComplete.IsZero() {
		end := t.DatetimeComplete
		r.End = &end
	}
	return r
}

// asWritten returns params with floats as a study file writes them: a
// sampled 0.70 + 12 x 0.01 is stored as 0.8200000000000001 and shown as
// 0.82 (12 significant digits are far below any step a study uses).
func asWritten(params map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(params))
	for k, v := range params {
		if f, ok := v.(float64); ok {
			if r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'g', 12, 64), 64); err == nil {
				v = r
			}
		}
		out[k] = v
	}
	return out
}

// StudyStore is the storage the reports read.
type StudyStore interface {
	GetStudyIDFromName(name string) (int, error)
	GetAllTrials(studyID int) ([]goptuna.FrozenTrial, error)
	GetStudySystemAttrs(studyID int) (map[string]string, error)
}

// ErrNoStudy is returned when the storage holds no study of that name.
var ErrNoStudy = errors.New("no such study")

// Records returns every trial of the named study, by number.
func Records(st StudyStore, study string) ([]Record, error) {
	id, err := st.GetStudyIDFromName(study)
	if errors.Is(err, storage.ErrStudyNotFound) {
		return nil, fmt.Errorf("%w %q", ErrNoStudy, study)
	}
	if err != nil {
		return nil, fmt.Errorf("find study %q: %w", study, err)
	}
	trials, err := st.GetAllTrials(id)
	if err != nil {
		return nil, fmt.Errorf("read trials of %q: %w", study, err)
	}
	out := make([]Record, 0, len(trials))
	for _, t := range trials {
		out = append(out, decode(t))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// Best returns the complete trial with the highest score among those meeting
// the score's SLOs and gates; ok is false when there is none.
func Best(recs []Record) (Record, bool) {
	var best Record
	found := false
	for _, r := range recs {
		if r.State != StateComplete || !r.ScoreOK || r.Score == nil {
			continue
		}
		if !found || *r.Score > *best.Score {
			best, found = r, true
		}
	}
	return best, found
}

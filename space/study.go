// Package space turns a study file into a search space and resolves sampled
// parameters into engine configurations, with the engine's rules and the
// study's constraints checked before anything is launched. The study file
// format, the expression language and the rules are documented in
// docs/study-file.md.
package space

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/errext"
	"github.com/sgtune/sgtune/objective"
)

// Study is a parsed, validated study file.
type Study struct {
	Path            string
	Name            string
	Engine          Engine
	Model           string            // --model-path
	ServedModelName string            // --served-model-name, optional
	Fixed           map[string]string // fixed flags, "--flag" -> value ("" for a bool flag)
	GPUsPerTrial    int
	GPUGroups       [][]int
	CPUsPerTrial    int // cpus.per_trial; 0 when the study does not say
	Params          []Param
	Constraints     []string
	Derived         []Derived          // flags computed from params
	Hybrid          bool               // model has a linear-attention/mamba state pool (model.hybrid)
	MoE             bool               // model has mixture-of-experts layers (model.moe)
	ModelRevision   string             // model.revision, recorded with trials and exports
	Memory          engine.Memory      // KV-capacity hint (memory:)
	Schema          *engine.FlagSchema `json:"-"`
	SchemaFile      string             // engine.flags_schema, resolved; "" for the bundled schema
	// SchemaStandIn: no bundled schema matches engine.version, so Schema
	// is the engine's default version's.
	SchemaStandIn   bool
	OnLimitsReduced string // reject (default) | accept
	Workload        objective.Workload
	Score           objective.ScoreSpec
	Budget          Budget
	Launch          Launch

	fixedArgv     []string                // fixed flags in file order
	fixedSettings map[string]fixedSetting // what fixed sets, by engine.FlagSpec.Setting
	constraints   []*Expr
}

// Engine says how to start the serving engine.
type Engine struct {
	Name string // sglang | llamacpp | vllm
	// Kind is what sgtune knows of the named engine: flags, log, rules.
	Kind    *engine.Engine `json:"-"`
	Command []string       // e.g. [python3 -m sglang.launch_server] or [sglang-sim --sim-profile X]
	// LaunchCommand is what exported launch scripts run; empty means Command.
	// A study tuned through a simulator or a wrapper deploys with the real one.
	LaunchCommand []string
	Version       string            // version or image digest to pin (recorded)
	Env           map[string]string // extra environment
	// Container runs every trial's Command inside an image
	// (engine.container); nil runs it on the host.
	Container *container.Spec
}

// Budget bounds the search.
type Budget struct {
	Trials   int
	Timeout  time.Duration
	Sampler  string // bayes (default) | random | grid | tpe
	Seed     int64
	Parallel int
	// Prune stops a trial whose cheap early levels already show it cannot
	// come near the best (multi-fidelity).
	Prune Prune
	// Confirm is how many of the top configs are measured again before
	// the study declares its winner (0: none), ConfirmRounds how often each.
	Confirm, ConfirmRounds int
	// Baseline is budget.baseline: BaselineDefault (the default) launches
	// the engine's default config (see Study.Baseline) as the study's
	// first trial, counted in Trials, and holds the winner against it;
	// BaselineNone does not.
	Baseline string
}

// Values of budget.baseline.
const (
	BaselineDefault = "default"
	BaselineNone    = "none"
)

// Prune is the multi-fidelity rule (budget.prune).
type Prune struct {
	// Rule: fraction (default; prune below Fraction x the best complete
	// trial at the same level), median (below the median of the complete
	// trials at that level: successive halving's rule) or off.
	Rule     string
	Fraction float64
	// MinComplete complete trials must have measured a level before it
	// prunes anything.
	MinComplete int
}

// Launch holds per-trial launch settings.
type Launch struct {
	StartupTimeout time.Duration // default 20m
	APIKeyEnv      string        // environment variable holding the API key
	APIKeyFile     string        // file holding the API key
	OnStale        string        // retry (default) | fail: running trials found stale on resume
	// Scheduler places trials: SchedulerLocal (default: processes on this
	// host, one per GPU group) or SchedulerSlurm (one Slurm job per trial).
	Scheduler string
	// Slurm holds launch.slurm; set when Scheduler is SchedulerSlurm.
	Slurm Slurm
	// StaleAfter is how long a running trial may go without a heartbeat
	// before another process takes it over, and how long the leases of
	// its process (its GPU group) outlive the process (default 2m).
	StaleAfter time.Duration
}

// Schedulers are the values launch.scheduler accepts.
const (
	SchedulerLocal = "local"
	SchedulerSlurm = "slurm"
)

// Slurm is how trials run as Slurm jobs (launch.slurm).
type Slurm struct {
	Partition string        // sbatch --partition; "" for the cluster's default
	Account   string        // sbatch --account; "" for the user's default
	TimeLimit time.Duration // sbatch --time, rounded up to minutes; 0 for the partition's default
	// Nodes is the number of nodes of one trial (tensor parallel across
	// nodes when > 1); gpus.per_trial is split evenly over them.
	Nodes int
	// GPURequest is the sbatch option that asks for the GPUs of each node:
	// --gres=gpu:N (default), --gres=<launch.slurm.gres>, or
	// --gpus-per-node=N (launch.slurm.gpus_per_node); "" for an engine that
	// runs on CPUs.
	GPURequest string
	// CPUsPerTask is sbatch --cpus-per-task: cpus.per_trial (a CPU
	// engine's cores); 0 asks for none.
	CPUsPerTask    int
	ExtraSbatch    []string      // more sbatch options, verbatim
	PendingTimeout time.Duration // a job pending longer is cancelled and reported (default 10m)
}

// Slurm-related defaults and limits of the loader.
var (
	DefaultStaleAfter     = 2 * time.Minute
	DefaultPendingTimeout = 10 * time.Minute
	// MinStaleAfter keeps launch.stale_after above two heartbeats (a
	// running trial beats every 10 s), so one late beat is not a death.
	MinStaleAfter = 20 * time.Second
)

// Slurmed reports whether the study's trials run as Slurm jobs.
func (s *Study) Slurmed() bool { return s.Launch.Scheduler == SchedulerSlurm }

// Param is one searched parameter.
type Param struct {
	Name     string
	Type     string // int | float | categorical | bool
	Low      float64
	High     float64
	Step     float64
	Log      bool
	Choices  []string
	Flag     string            // flag the value maps to
	Flags    []string          // several flags that each take the value
	Template string            // flag text with {value}, split shell-style
	Values   map[string]string // categorical/bool: value -> flag text override, e.g. "false": "--disable-radix-cache"
	When     string            // condition over earlier params
	// Default is the param's value that the engine runs when its flag is
	// absent (default:, as text like a choice), for a param none of whose
	// values passes no flag; "" when the study does not say.
	Default string

	when *Expr
	// unchecked: the param's own definition has errors, so expressions
	// that read it are not checked against its values.
	unchecked bool
	// switchWords: a bool param's flag text for true and false, from the
	// flag schema (its default and negation); nil: the flag for true,
	// nothing for false.
	switchWords map[string][]string
}

// Derived is a flag computed from params, e.g. draft tokens = steps + 1.
type Derived struct {
	Flag  string
	Value string // expression
	When  string // condition; empty = always

	value, when *Expr
	// line and col place value in the study file, for the messages of
	// configs it fails; 0 when unknown.
	line, col int
}

// Silent reports whether value v of the param (as text: "true", "auto",
// "4") passes no words to the engine: the engine runs its own default.
func (p *Param) Silent(v string) bool {
	w, err := p.emit(v)
	return err == nil && len(w) == 0
}

// Params is one sampled point: name -> int, float64, string or bool.
type Params map[string]any

// String renders p as "k=v k=v" with sorted names: stable enough to compare
// configs and short enough for a table.
func (p Params) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, p[k])
	}
	return strings.Join(parts, " ")
}

// Suggester is what the sampler offers; goptuna.Trial satisfies it.
type Suggester interface {
	SuggestStepInt(name string, low, high, step int) (int, error)
	SuggestFloat(name string, low, high float64) (float64, error)
	SuggestLogFloat(name string, low, high float64) (float64, error)
	SuggestDiscreteFloat(name string, low, high, q float64) (float64, error)
	SuggestCategorical(name string, choices []string) (string, error)
}

// Config is one point of the space resolved into an engine command line.
type Config struct {
	Params    Params            `json:"params"`
	Flags     []string          `json:"flags"` // engine flags, the model flag first; no --host/--port
	Env       map[string]string `json:"env,omitempty"`
	Predicted engine.Prediction `json:"predicted"`
}

// ServedName is the model name the OpenAI API serves: model.served_name,
// else the model path.
func (s *Study) ServedName() string {
	if s.ServedModelName != "" {
		return s.ServedModelName
	}
	return s.Model
}

// Argv is the full command line of a config: the engine command, then the
// config's flags (the model moved after the command for an engine whose
// model is positional, such as vllm serve MODEL). The launcher appends
// --host and --port.
func (s *Study) Argv(c *Config) []string {
	if s.Engine.Kind != nil {
		return s.Engine.Kind.CommandLine(s.Engine.Command, c.Flags)
	}
	return append(append([]string(nil), s.Engine.Command...), c.Flags...)
}

// ErrInvalid is wrapped by every error about a malformed study file; it
// carries exit code 2 (bad input).
var ErrInvalid = errext.Bad(errors.New("invalid study"))

// Package space turns a study file into a search space and resolves sampled
// parameters into engine configurations, with the engine's rules and the
// study's constraints checked before anything is launched.
package space

import (
	"errors"
	"time"

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
	Params          []Param
	Constraints     []string
	OnLimitsReduced string // reject (default) | accept
	Workload        objective.Workload
	Score           objective.ScoreSpec
	Budget          Budget
	Launch          Launch
}

// Engine says how to start the serving engine.
type Engine struct {
	Name    string            // sglang
	Command []string          // e.g. [python3 -m sglang.launch_server] or [sglang-sim --sim-profile X]
	Version string            // version or image digest to pin (recorded)
	Env     map[string]string // extra environment
}

// Budget bounds the search.
type Budget struct {
	Trials   int
	Timeout  time.Duration
	Sampler  string // tpe (default) | random
	Seed     int64
	Parallel int
}

// Launch holds per-trial launch settings.
type Launch struct {
	StartupTimeout time.Duration // default 20m
	APIKeyEnv      string        // environment variable holding the API key
	APIKeyFile     string        // file holding the API key
	OnStale        string        // retry (default) | fail: running trials found stale on resume
}

// Param is one searched parameter.
type Param struct {
	Name    string
	Type    string // int | float | categorical | bool
	Low     float64
	High    float64
	Step    float64
	Log     bool
	Choices []string
	Flag    string            // flag the value maps to
	Values  map[string]string // categorical/bool: value -> flag text override, e.g. "true": "--disable-radix-cache"
	When    string            // condition over earlier params
}

// Params is one sampled point: name -> int, float64, string or bool.
type Params map[string]any

// Suggester is what the sampler offers; goptuna.Trial satisfies it.
type Suggester interface {
	SuggestStepInt(name string, low, high, step int) (int, error)
	SuggestFloat(name string, low, high float64) (float64, error)
	SuggestLogFloat(name string, low, high float64) (float64, error)
	SuggestDiscreteFloat(name string, low, high, q float64) (float64, error)
	SuggestCategorical(name string, choices []string) (string, error)
}

// Prediction is what the engine rules predict for a config.
type Prediction struct {
	RequestedMaxRunningRequests int `json:"requested_max_running_requests"`
	MaxRunningRequests          int `json:"max_running_requests"`
	StateSlots                  int `json:"state_slots"`
	StateRatio                  int `json:"state_ratio"`
	KVTokens                    int `json:"kv_tokens"`
}

// Config is one point of the space resolved into an engine command line.
type Config struct {
	Params    Params            `json:"params"`
	Flags     []string          `json:"flags"` // engine flags, --model-path first; no --host/--port
	Env       map[string]string `json:"env,omitempty"`
	Predicted Prediction        `json:"predicted"`
}

// Rejection explains why a config cannot work, with its numbers.
type Rejection struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
}

// Load reads and validates a study file.
func Load(path string) (*Study, error) { return nil, errors.New("space.Load: not implemented") }

// Suggest samples every active parameter through sg, honouring conditions.
func (s *Study) Suggest(sg Suggester) (Params, error) {
	return nil, errors.New("not implemented")
}

// Resolve turns sampled params into a Config with predictions.
func (s *Study) Resolve(p Params) (*Config, error) { return nil, errors.New("not implemented") }

// Check returns every rule the config breaks; none means launchable.
func (s *Study) Check(c *Config) []Rejection { return nil }

// ErrInvalid is wrapped by every error about a malformed study file; the CLI
// maps it to exit code 2.
var ErrInvalid = errors.New("invalid study")

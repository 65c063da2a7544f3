// Package engine says what sgtune knows of each serving engine: its flag
// schema per version (data in flags/), how a config becomes a command line,
// how the engine reports readiness and startup facts in its log, its
// Prometheus metric names, its failure signatures and its rules for
// `sgtune check`. It knows nothing of the tuner: the study file, the search
// and the launcher all ask it. Adding an engine touches this package and
// its data files only.
package engine

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Engine is one serving engine.
type Engine struct {
	// Name is what study files write under engine.name.
	Name string
	// Title is the engine's own spelling, for messages.
	Title string
	// DefaultVersion picks the flag schema when a study pins no version
	// (or one without a bundled schema).
	DefaultVersion string
	// Command is how the engine is usually started; exports of a study
	// tuned through another command (a simulator, a wrapper) run it.
	Command []string
	// Image is the container image docker exports use, with its tag
	// (lmsysorg/sglang:latest), when the study pins no version (see
	// ImageFor).
	Image string
	// ReleaseImage is the image of a release, %s standing for its version
	// without the leading v (lmsysorg/sglang:v%s); "" when the engine's
	// images are not tagged by the version a study writes.
	ReleaseImage string
	// BuildImage is the image of a numbered build (llama.cpp's b6000),
	// %s standing for the number; "" when builds have none.
	BuildImage string
	// ImageCommand starts the server inside Image, before its flags; nil
	// when the image's entrypoint is the server itself.
	ImageCommand []string
	// UsesGPUs says the server runs on GPUs: exports pin
	// CUDA_VISIBLE_DEVICES and docker exports pass --gpus. False for a CPU
	// build such as `make llama-server`'s.
	UsesGPUs bool

	// LaunchFlags are added to every launch after the config's flags (and
	// before HostFlag/PortFlag): what sgtune itself needs of the server,
	// such as its metrics for the token check or a log level that prints
	// the startup facts. They are the launcher's, never a study's, and
	// exports leave them out.
	LaunchFlags []string
	// ClearEnv names environment variables the server must not inherit
	// because they would change its settings behind the command line; a
	// name ending in * is a prefix.
	ClearEnv []string

	// ModelFlag takes the model path; ServedNameFlag the name the OpenAI
	// API serves it under; APIKeyFlag the bearer token. HostFlag and
	// PortFlag are added by the launcher, never by a study.
	ModelFlag, ServedNameFlag, APIKeyFlag, HostFlag, PortFlag string
	// ModelPositional: the engine's command line takes the model as its
	// first positional argument (vllm serve MODEL). A config still carries
	// it as ModelFlag MODEL, which the schema parses; CommandLine moves it
	// after the command when a server is launched or exported.
	ModelPositional bool
	// DockerEntrypoint: the engine's image has the server as its own
	// entrypoint, so a docker export overrides it with the command's
	// first word (--entrypoint) and passes the rest as arguments.
	DockerEntrypoint bool

	// MemoryFractionFlag takes the fraction of each GPU's memory the
	// engine reserves for the weights and the KV pool ("" when it has
	// none). A larger fraction gives a larger pool and, while the engine
	// still starts and serves, never a slower one: the search treats a
	// number param on this flag as monotone (docs/study-file.md).
	MemoryFractionFlag string
	// WorkspaceFlags take numbers whose larger values need more of the
	// memory the fraction leaves outside the static pools (prefill
	// chunks' activations, CUDA graphs' buffers): a config that ran out
	// of memory blames its value of one and every larger value, never a
	// smaller one (docs/study-file.md).
	WorkspaceFlags []string
	// PoolTooSmall are texts of an out-of-memory failure that a larger
	// memory fraction fixes: the KV cache or a state pool got too little
	// of what the fraction reserves. Such a failure blames its fraction
	// and every smaller one, never a larger one (docs/study-file.md).
	PoolTooSmall []string

	// ToolParserFlag turns on tool-call parsing in the OpenAI API; without
	// it a tool-call quality gate cannot pass ("" when the engine needs
	// none).
	ToolParserFlag string

	// HealthPath answers 200 once the engine can serve (polled after the
	// ready line, when the engine has one).
	HealthPath string
	// ReadyLine, when not empty, is (part of) the line logged once the
	// engine is ready; the engine's log parser recognizes the line (its
	// wording may differ by build) and readiness then also needs
	// HealthPath to answer 200.
	ReadyLine string
	// MetricsFlag turns on /metrics ("" when the engine always serves it).
	MetricsFlag string
	// Metrics are the engine's Prometheus metric names.
	Metrics Metrics

	// Signatures classify failures from single log lines; PortTaken lists
	// texts saying the listening port was taken (the launcher retries on
	// another port).
	Signatures []Signature
	PortTaken  []string

	// NewLogParser returns a parser of the engine's startup log.
	NewLogParser func() LogParser
	// Rules predict a config's limits and reject what cannot work.
	Rules Rules
}

// Metrics are Prometheus metric names an engine serves on /metrics.
type Metrics struct {
	// GenerationTokens counts output tokens generated since start (a
	// counter): the audit compares its delta over a level with the tokens
	// the client counted.
	GenerationTokens string
	// PromptTokens counts prompt tokens processed (a counter).
	PromptTokens string
	// Running and Queued are gauges of requests running and waiting.
	Running, Queued string
}

var registry = []*Engine{SGLang, LlamaCpp, VLLM}

// Lookup returns the engine a study file names; the error lists the valid
// names.
func Lookup(name string) (*Engine, error) {
	for _, e := range registry {
		if e.Name == name {
			return e, nil
		}
	}
	return nil, fmt.Errorf("unknown engine %q; valid: %s", name, strings.Join(Names(), ", "))
}

// Names lists the engines sgtune knows, in order.
func Names() []string {
	out := make([]string, len(registry))
	for i, e := range registry {
		out[i] = e.Name
	}
	return out
}

// Cleared reports whether the environment variable name is one the engine
// must not inherit (ClearEnv).
func (e *Engine) Cleared(name string) bool {
	for _, c := range e.ClearEnv {
		if p, ok := strings.CutSuffix(c, "*"); ok && strings.HasPrefix(name, p) || c == name {
			return true
		}
	}
	return false
}

// All returns every known engine.
func All() []*Engine { return slices.Clone(registry) }

// releaseVersion is a release version as engines tag their images: v0.5.21,
// 0.11.1, v0.5.5.post1, v0.5.0rc0.
var releaseVersion = regexp.MustCompile(`^v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+)?)$`)

// buildVersion is a numbered build, as llama.cpp tags its releases: b6000.
var buildVersion = regexp.MustCompile(`^b(\d+)$`)

// ImageFor is the image a docker export runs for a study pinned to
// version: the version itself when it names an image (a repository or a
// digest), the engine's release or build image when it is a release
// version or build number, else Image. The flags were checked against that version's schema, so the
// export must not run another.
func (e *Engine) ImageFor(version string) string {
	if strings.Contains(version, "/") || strings.Contains(version, "@sha256:") {
		return version
	}
	if m := releaseVersion.FindStringSubmatch(version); m != nil && e.ReleaseImage != "" {
		return fmt.Sprintf(e.ReleaseImage, m[1])
	}
	if m := buildVersion.FindStringSubmatch(version); m != nil && e.BuildImage != "" {
		return fmt.Sprintf(e.BuildImage, m[1])
	}
	return e.Image
}

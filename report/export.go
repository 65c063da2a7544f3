// Package report turns stored trials into artifacts: launch scripts for the
// winner and human-readable study summaries.
package report

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/shell"
)

// DefaultAPIKeyEnv is the environment variable an exported script reads the
// server's API key from at run time.
const DefaultAPIKeyEnv = "SGTUNE_API_KEY"

// Pooled is the declared winner's measurement over its runs: the
// mean score, how many runs, and the range of those that met the SLO.
type Pooled struct {
	Pooled float64 `json:"pooled"`
	Runs   int     `json:"runs"`
	Spread float64 `json:"spread"`
}

// Launch is what an export needs to know about one trial.
type Launch struct {
	// Engine is the engine the trial ran (its API key flag, image, whether
	// it uses GPUs); nil means SGLang.
	Engine *engine.Engine
	Study  string
	Trial  int
	// Score is nil for a trial that read none (it failed, or was stopped
	// before the scored level).
	Score       *float64
	ScoreReason string            // how the score was read, e.g. "... at c=64"
	Command     []string          // engine command, e.g. python3 -m sglang.launch_server or llama-server
	Flags       []string          // engine flags, the model flag first (a positional model too: see Engine)
	Env         map[string]string // extra environment
	GPUs        string            // CUDA_VISIBLE_DEVICES, "" for unset
	Version     string            // engine version or image digest the study pinned
	Params      map[string]interface{}
	// Confirmed says how the study's declared winner measured when it was
	// run again ("pooled P over K runs, spread S"); "" for another trial.
	// Confirmation holds the same figures for scripts (JSON); nil then.
	Confirmed    string
	Confirmation *Pooled
	// Measured are the key figures at the scored level; nil when the
	// trial has no measurement there.
	Measured *Figures
	// ModelRevision is the model revision (commit) the trial served, ""
	// when the storage does not record it.
	ModelRevision string
	// APIKeyEnv names the variable the script reads the API key from
	// (DefaultAPIKeyEnv when empty). The key itself is never written.
	APIKeyEnv string
	// Created is the export's date; the CLI sets it, tests fix it.
	Created time.Time
	// Warning says why the trial is not a config to deploy (it failed, was
	// stopped, or missed its SLO); "" for one that passed. The header and
	// the JSON carry it.
	Warning string
	// Container is the image and run options the trial's server ran in
	// (engine.container); nil for a server run on the host. The docker
	// export then runs that image, pinned, with those options.
	Container *container.Record
}

// Figures are the measurements an export header quotes.
type Figures struct {
	Concurrency int     `json:"concurrency"`
	OutputTokS  float64 `json:"output_tok_s"`
	TTFTP99     float64 `json:"ttft_p99_s"`
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Formats lists the export formats.
var Formats = []string{"bash", "docker", "json"}

// Write renders l in format to w. An --api-key in the flags is left out:
// the script passes the key from l.APIKeyEnv at run time instead.
func Write(w io.Writer, format string, l Launch) error {
	if l.APIKeyEnv == "" {
		l.APIKeyEnv = DefaultAPIKeyEnv
	}
	if !envName.MatchString(l.APIKeyEnv) {
		return fmt.Errorf("API key variable %q: want a shell variable name such as %s", l.APIKeyEnv, DefaultAPIKeyEnv)
	}
	if l.Engine == nil {
		l.Engine = engine.SGLang
	}
	if !l.Engine.UsesGPUs {
		l.GPUs = "" // a CPU server: no GPU to pin
	}
	l.Flags = withoutAPIKey(l.Flags, l.Engine.APIKeyFlag)
	// model is the positional model argument (vllm serve MODEL), "" for
	// engines that take it as a flag (which then stays in l.Flags).
	model := ""
	if l.Engine.ModelPositional {
		if m, rest, ok := l.Engine.SplitModel(l.Flags); ok {
			model, l.Flags = m, rest
		}
	}
	switch format {
	case "bash":
		return bash(w, l, model)
	case "docker":
		if l.Container != nil {
			return containerScript(w, l, model)
		}
		return docker(w, l, model)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Engine        string                 `json:"engine"`
			Study         string                 `json:"study"`
			Trial         int                    `json:"trial"`
			Warning       string                 `json:"warning,omitempty"`
			Score         *float64               `json:"score"`
			ScoreReason   string                 `json:"score_reason,omitempty"`
			Confirmed     string                 `json:"confirmed,omitempty"`
			Confirmation  *Pooled                `json:"confirmation,omitempty"`
			Measured      *Figures               `json:"measured,omitempty"`
			Version       string                 `json:"engine_version,omitempty"`
			ModelRevision string                 `json:"model_revision,omitempty"`
			Date          string                 `json:"date,omitempty"`
			APIKeyEnv     string                 `json:"api_key_env"`
			Command       []string               `json:"command"`
			Model         string                 `json:"model,omitempty"`
			Flags         []string               `json:"flags"`
			Env           map[string]string      `json:"env,omitempty"`
			GPUs          string                 `json:"cuda_visible_devices,omitempty"`
			Params        map[string]interface{} `json:"params"`
		}{l.Engine.Name, l.Study, l.Trial, l.Warning, l.Score, l.ScoreReason, l.Confirmed, l.Confirmation, l.Measured, l.Version, l.ModelRevision, date(l.Created),
			l.APIKeyEnv, l.Command, model, l.Flags, l.Env, l.GPUs, l.Params})
	}
	return fmt.Errorf("unknown format %q (valid: %s)", format, strings.Join(Formats, ", "))
}

// withoutAPIKey drops the API key flag and its value: a key must not be
// written into a file that is shared and committed.
func withoutAPIKey(flags []string, keyFlag string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if flags[i] == keyFlag {
			if i+1 < len(flags) && !isFlagWord(flags[i+1]) {
				i++
			}
			continue
		}
		if strings.HasPrefix(flags[i], keyFlag+"=") {
			continue
		}
		out = append(out, flags[i])
	}
	return out
}

// isFlagWord reports whether an argv word starts a flag: --name, or a dash
// and a letter (llama.cpp's -np, -fa); "-1" is a value.
func isFlagWord(w string) bool {
	if strings.HasPrefix(w, "--") {
		return len(w) > 2
	}
	return len(w) > 1 && w[0] == '-' && (w[1] >= 'a' && w[1] <= 'z' || w[1] >= 'A' && w[1] <= 'Z')
}

func date(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02")
}

// oneLine keeps a stored value from breaking out of a comment line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// scriptMark opens every script export writes; IsExport looks for it.
const scriptMark = "#!/usr/bin/env bash\n# Launch script written by sgtune export.\n"

// IsExport reports whether b is a file an earlier export wrote (a script
// or its JSON): one that a new export may replace.
func IsExport(b []byte) bool {
	if bytes.HasPrefix(b, []byte(scriptMark)) {
		return true
	}
	var j struct {
		Engine, Study string
		Trial         *int
		Flags         []string
	}
	return json.Unmarshal(b, &j) == nil && j.Engine != "" && j.Study != "" && j.Trial != nil && j.Flags != nil
}

func header(w io.Writer, l Launch) {
	fmt.Fprint(w, scriptMark)
	row := func(k, v string) { fmt.Fprintf(w, "#   %-15s %s\n", k+":", oneLine(v)) }
	row("study", l.Study)
	row("trial", fmt.Sprint(l.Trial))
	if l.Warning != "" {
		row("WARNING", l.Warning)
	}
	score := "none"
	if l.Score != nil {
		score = fmt.Sprintf("%.2f", *l.Score)
	}
	if l.ScoreReason != "" {
		score += " (" + l.ScoreReason + ")"
	}
	row("score", score)
	if l.Confirmed != "" {
		row("confirmed", l.Confirmed)
	}
	if m := l.Measured; m != nil {
		row("measured", fmt.Sprintf("%.1f output tok/s at concurrency %d, TTFT p99 %.3f s", m.OutputTokS, m.Concurrency, m.TTFTP99))
	}
	version := l.Version
	if version == "" {
		version = "not pinned by the study"
	}
	row("engine version", version)
	rev := l.ModelRevision
	if rev == "" {
		rev = "not recorded"
	}
	row("model revision", rev)
	if d := date(l.Created); d != "" {
		row("date", d)
	}
	for i, k := range slices.Sorted(maps.Keys(l.Params)) {
		label := ""
		if i == 0 {
			label = "params:"
		}
		fmt.Fprintf(w, "#   %-15s %s = %s\n", label, oneLine(k), oneLine(fmt.Sprint(l.Params[k])))
	}
}

// apiKey lets the engine require the key from the environment, read when
// the script runs.
func apiKey(w io.Writer, l Launch) {
	fmt.Fprintf(w, "# When %s is set, the server requires that key from clients (%s).\n", l.APIKeyEnv, l.Engine.APIKeyFlag)
	fmt.Fprintf(w, "if [[ -n \"${%s:-}\" ]]; then\n", l.APIKeyEnv)
	fmt.Fprintf(w, "  set -- %s \"$%s\" \"$@\"\n", l.Engine.APIKeyFlag, l.APIKeyEnv)
	fmt.Fprintln(w, "fi")
}

func bash(w io.Writer, l Launch, model string) error {
	header(w, l)
	fmt.Fprintln(w, "# Extra arguments (e.g. --host 0.0.0.0 --port 30000) are passed through to the engine.")
	fmt.Fprintln(w, "set -euo pipefail")
	if l.GPUs != "" {
		// The trials numbered GPUs as nvidia-smi does.
		fmt.Fprintln(w, "export CUDA_DEVICE_ORDER=PCI_BUS_ID")
		fmt.Fprintf(w, "export CUDA_VISIBLE_DEVICES=%s\n", shell.Quote(l.GPUs))
	}
	for _, k := range slices.Sorted(maps.Keys(l.Env)) {
		fmt.Fprintf(w, "export %s=%s\n", k, shell.Quote(l.Env[k]))
	}
	apiKey(w, l)
	fmt.Fprintf(w, "exec %s", shell.Join(l.Command))
	if model != "" {
		fmt.Fprintf(w, " %s", shell.Quote(model))
	}
	writeFlags(w, l.Flags)
	fmt.Fprintln(w, " \\\n  \"$@\"")
	return nil
}

func docker(w io.Writer, l Launch, model string) error {
	header(w, l)
	fmt.Fprintln(w, "# Extra arguments (e.g. --port 30000) are passed through to the engine.")
	fmt.Fprintln(w, "# IMAGE defaults to the image of the engine version the study pinned.")
	fmt.Fprintln(w, "set -euo pipefail")
	image := l.Engine.ImageFor(l.Version)
	fmt.Fprintf(w, "IMAGE=${IMAGE:-%s}\n", shell.Quote(image))
	apiKey(w, l)
	run := "exec docker run --rm"
	if l.Engine.UsesGPUs {
		gpus := "all"
		if l.GPUs != "" {
			gpus = `'"device=` + l.GPUs + `"'`
		}
		// The GPU workers of a PyTorch server share memory between processes.
		run += " --gpus " + gpus + " --ipc=host --shm-size 32g"
	}
	fmt.Fprintf(w, "%s --network host \\\n", run)
	if dir := modelDir(l); dir != "" {
		// A model file on this machine: the same path inside, read-only.
		fmt.Fprintf(w, "  -v %s \\\n", shell.Quote(dir+":"+dir+":ro"))
	} else {
		fmt.Fprintln(w, "  -v \"${HF_HOME:-$HOME/.cache/huggingface}:/root/.cache/huggingface\" \\")
	}
	for _, k := range slices.Sorted(maps.Keys(l.Env)) {
		fmt.Fprintf(w, "  -e %s \\\n", shell.Quote(k+"="+l.Env[k]))
	}
	inside := dockerCommand(l)
	if l.Engine.DockerEntrypoint && len(inside) > 0 {
		// The image's entrypoint is the server already: name the program
		// instead, whatever entrypoint the tag has.
		fmt.Fprintf(w, "  --entrypoint %s \\\n", shell.Quote(inside[0]))
		inside = inside[1:]
	}
	fmt.Fprint(w, "  \"$IMAGE\"")
	if len(inside) > 0 {
		fmt.Fprintf(w, " %s", shell.Join(inside))
	}
	if model != "" {
		fmt.Fprintf(w, " %s", shell.Quote(model))
	}
	writeFlags(w, l.Flags)
	fmt.Fprintln(w, " \\\n  \"$@\"")
	return nil
}

// containerScript is the docker export of a trial that ran in a
// container: the same runtime, image (its registry digest where it has
// one, else the image as named, with the ID it had when tuned), run
// options and volumes, and the same command inside.
func containerScript(w io.Writer, l Launch, model string) error {
	c := l.Container
	header(w, l)
	runtime := cmp.Or(c.Runtime, "docker")
	image := cmp.Or(c.RepoDigest, c.Image)
	fmt.Fprintln(w, "# Extra arguments (e.g. --port 30000) are passed through to the engine.")
	fmt.Fprintf(w, "# IMAGE defaults to the image the trial ran: %s", c.Image)
	if c.ImageID != "" {
		fmt.Fprintf(w, ", image ID %s when tuned", c.ImageID)
	}
	fmt.Fprintln(w, ".")
	fmt.Fprintln(w, "set -euo pipefail")
	fmt.Fprintf(w, "IMAGE=${IMAGE:-%s}\n", shell.Quote(image))
	apiKey(w, l)
	fmt.Fprintf(w, "exec %s run --rm --network host", runtime)
	if l.Engine.UsesGPUs && l.GPUs != "" {
		if runtime == "podman" {
			for _, g := range strings.Split(l.GPUs, ",") {
				fmt.Fprintf(w, " --device nvidia.com/gpu=%s", shell.Quote(g))
			}
		} else {
			fmt.Fprintf(w, ` --gpus '"device=%s"'`, l.GPUs)
		}
	}
	fmt.Fprintln(w, " \\")
	if len(c.Options) > 0 {
		fmt.Fprintf(w, "  %s \\\n", shell.Join(c.Options))
	}
	for _, v := range c.Volumes {
		fmt.Fprintf(w, "  -v %s \\\n", shell.Quote(v))
	}
	for _, k := range slices.Sorted(maps.Keys(l.Env)) {
		fmt.Fprintf(w, "  -e %s \\\n", shell.Quote(k+"="+l.Env[k]))
	}
	fmt.Fprint(w, "  \"$IMAGE\"")
	if len(l.Command) > 0 {
		fmt.Fprintf(w, " %s", shell.Join(l.Command))
	}
	if model != "" {
		fmt.Fprintf(w, " %s", shell.Quote(model))
	}
	writeFlags(w, l.Flags)
	fmt.Fprintln(w, " \\\n  \"$@\"")
	return nil
}

// dockerCommand is the command run inside the engine's image: nil when the
// image's entrypoint is the server (llama.cpp's server image), else the
// study's command when it is one of the engine's own entry points (python3
// -m sglang.launch_server, sglang serve, vllm serve), else the engine's
// command in the image (a simulator or a wrapper is not in the image).
func dockerCommand(l Launch) []string {
	e := l.Engine
	if len(e.ImageCommand) == 0 {
		return nil
	}
	if len(l.Command) > 0 {
		prog := filepath.Base(l.Command[0])
		if strings.HasPrefix(prog, "python") || prog == e.Name || prog == filepath.Base(e.ImageCommand[0]) ||
			(len(e.Command) > 0 && prog == filepath.Base(e.Command[0])) {
			return l.Command
		}
	}
	return e.ImageCommand
}

// modelDir is the folder of the model when the model flag names a file by
// an absolute path (a local GGUF), else "" (a hub id or a relative path).
func modelDir(l Launch) string {
	for i := 0; i+1 < len(l.Flags); i++ {
		if l.Flags[i] == l.Engine.ModelFlag && filepath.IsAbs(l.Flags[i+1]) {
			return filepath.Dir(l.Flags[i+1])
		}
	}
	return ""
}

// writeFlags writes one flag (with its value) per continued line.
func writeFlags(w io.Writer, flags []string) {
	for i := 0; i < len(flags); i++ {
		fmt.Fprintf(w, " \\\n  %s", shell.Quote(flags[i]))
		if i+1 < len(flags) && !isFlagWord(flags[i+1]) {
			fmt.Fprintf(w, " %s", shell.Quote(flags[i+1]))
			i++
		}
	}
}

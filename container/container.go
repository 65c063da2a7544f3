// Package container runs a trial's server in a container through a
// runtime's command line (docker or podman) and finds, stops and removes
// those containers through the runtime's daemon, by name and label, never
// through the client process that started them: a client killed with -9
// leaves its container running, and only the daemon still knows it.
package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Runtimes are the container runtimes a study may name.
var Runtimes = []string{"docker", "podman"}

// Labels every trial container carries, so that the daemon can list a
// study's containers and a later run can remove those whose owner died.
const (
	LabelStudy = "io.sgtune.study" // the study's uid
	LabelTrial = "io.sgtune.trial" // the trial tag (study/uid/number)
	LabelHost  = "io.sgtune.host"  // the host of the process that started it
	LabelOwner = "io.sgtune.owner" // that process, "host:pid"
	LabelGPUs  = "io.sgtune.gpus"  // the trial's GPU group, "0,1"
)

// Spec is how a study runs its servers in containers (engine.container).
type Spec struct {
	Runtime string   // docker (default) | podman
	Image   string   // image by tag or digest
	Options []string // extra `run` options, before the image (--ipc=host, --shm-size=32g)
	Volumes []string // -v values (host:container[:ro])
}

// RuntimeName is Spec.Runtime or its default, docker.
func (s Spec) RuntimeName() string {
	if s.Runtime == "" {
		return "docker"
	}
	return s.Runtime
}

// Record is what a trial that ran in a container stores: the study's
// image and options, and the image the daemon ran (its ID, and its
// registry digest where it came from a registry), which exports pin.
type Record struct {
	Runtime    string   `json:"runtime"`
	Image      string   `json:"image"`
	ImageID    string   `json:"image_id,omitempty"`
	RepoDigest string   `json:"repo_digest,omitempty"`
	Options    []string `json:"options,omitempty"`
	Volumes    []string `json:"volumes,omitempty"`
	Name       string   `json:"name,omitempty"`
}

// Run is one trial's container.
type Run struct {
	Name   string
	Labels map[string]string
	// Env is the server's environment inside the container, KEY=VALUE.
	// The values reach the container through the client's environment
	// (`-e KEY`), so none of them appears on a command line.
	Env []string
	// GPUs are the host GPUs the trial owns.
	GPUs []int
	// PassGPUs gives the GPUs to the container (--gpus device=… for
	// Docker, CDI devices for Podman); false on a host without a GPU
	// runtime, where the environment alone says which GPUs the trial owns.
	PassGPUs bool
}

// RunArgs returns the runtime's arguments (after its program name) that run
// inside (the server's program and flags) as r. The container shares the
// host's network (the launcher picks the port on the host's loopback), is
// never pulled implicitly (a missing image fails at once), and is not
// removed on exit (its state says how it ended; Remove takes it away).
func (s Spec) RunArgs(r Run, inside []string) []string {
	args := []string{"run", "--name", r.Name, "--network", "host", "--pull", "never", "--init"}
	for _, k := range sortedKeys(r.Labels) {
		args = append(args, "--label", k+"="+r.Labels[k])
	}
	if r.PassGPUs && len(r.GPUs) > 0 {
		if s.RuntimeName() == "podman" {
			for _, g := range r.GPUs {
				args = append(args, "--device", "nvidia.com/gpu="+strconv.Itoa(g))
			}
		} else {
			args = append(args, "--gpus", `"device=`+gpuCSV(r.GPUs)+`"`)
		}
	}
	for _, kv := range InsideEnv(r) {
		k, _, _ := strings.Cut(kv, "=")
		args = append(args, "-e", k)
	}
	for _, v := range s.Volumes {
		args = append(args, "-v", v)
	}
	args = append(args, s.Options...)
	args = append(args, s.Image)
	return append(args, inside...)
}

// InsideEnv is the server's environment inside r's container: r.Env and
// the GPU selection. With the GPUs passed to the container they are its
// devices 0..n-1; without, the host's indices (every device is visible).
func InsideEnv(r Run) []string {
	env := slices.Clone(r.Env)
	if len(r.GPUs) > 0 {
		ids := r.GPUs
		if r.PassGPUs {
			ids = make([]int, len(r.GPUs))
			for i := range ids {
				ids[i] = i
			}
		}
		env = append(env, "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES="+gpuCSV(ids))
	}
	return env
}

// Reserved are the run options sgtune sets itself: a study's
// engine.container.options may not give them.
var Reserved = []string{"--name", "--rm", "-d", "--detach", "--gpus", "--network", "--net", "--pull", "--label", "-l"}

// ReservedOption returns the first option of opts that sgtune sets itself
// (Reserved, in either --opt or --opt=value form), or "".
func ReservedOption(opts []string) string {
	for _, o := range opts {
		name, _, _ := strings.Cut(o, "=")
		if slices.Contains(Reserved, name) {
			return name
		}
	}
	return ""
}

// Client is a runtime's command-line client.
type Client struct {
	Path string // the runtime program, found on PATH
	Name string // docker | podman
}

// ErrNoRuntime wraps every error that says the runtime or its daemon cannot
// be used; a missing image wraps ErrNoImage.
var (
	ErrNoRuntime = errors.New("container runtime unavailable")
	ErrNoImage   = errors.New("no such image")
)

// NewClient finds the runtime's program on PATH.
func NewClient(runtime string) (*Client, error) {
	if runtime == "" {
		runtime = "docker"
	}
	p, err := exec.LookPath(runtime)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not installed or not on PATH", ErrNoRuntime, runtime)
	}
	return &Client{Path: p, Name: runtime}, nil
}

// probeTimeout bounds each call to the daemon.
const probeTimeout = 30 * time.Second

func (c *Client) run(ctx context.Context, args ...string) (string, error) {
	return c.runFor(ctx, probeTimeout, args...)
}

// runFor runs the client with args, bounded by timeout.
func (c *Client) runFor(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Path, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), fmt.Errorf("%s %s: %s", c.Name, args[0], msg)
	}
	return out.String(), nil
}

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.run(ctx, "version", "--format", "{{.Server.Version}}"); err != nil {
		return fmt.Errorf("%w: the %s daemon does not answer (%v)", ErrNoRuntime, c.Name, err)
	}
	return nil
}

// ImageID returns the ID of image as the daemon holds it; an error wrapping
// ErrNoImage when it has no such image.
func (c *Client) ImageID(ctx context.Context, image string) (string, error) {
	out, err := c.run(ctx, "image", "inspect", "--format", "{{.Id}}", image)
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "no such image") {
			return "", fmt.Errorf("%s has no image %s (%w)", c.Name, image, ErrNoImage)
		}
		return "", fmt.Errorf("%w: %s could not look up image %s: %v", ErrNoImage, c.Name, image, err)
	}
	return strings.TrimSpace(out), nil
}

// RepoDigest returns the image's first registry digest (name@sha256:…),
// "" for an image that came from no registry (built or imported here).
func (c *Client) RepoDigest(ctx context.Context, image string) string {
	out, err := c.run(ctx, "image", "inspect", "--format", "{{range .RepoDigests}}{{.}}\n{{end}}", image)
	if err != nil {
		return ""
	}
	d, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return d
}

// State is how a container stands, as the daemon tells it.
type State struct {
	Exists    bool
	Running   bool
	ExitCode  int
	OOMKilled bool   // the kernel's OOM killer ended it (its memory limit)
	ImageID   string // the image it runs
}

// Inspect returns the state of the container name; Exists is false when
// the daemon has no such container.
func (c *Client) Inspect(ctx context.Context, name string) (State, error) {
	out, err := c.run(ctx, "container", "inspect", "--format",
		"{{.State.Running}} {{.State.ExitCode}} {{.State.OOMKilled}} {{.Image}}", name)
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "no such") {
			return State{}, nil
		}
		return State{}, err
	}
	f := strings.Fields(out)
	if len(f) < 4 {
		return State{}, fmt.Errorf("%s inspect %s: unexpected output %q", c.Name, name, out)
	}
	code, _ := strconv.Atoi(f[1])
	return State{Exists: true, Running: f[0] == "true", ExitCode: code, OOMKilled: f[2] == "true", ImageID: f[3]}, nil
}

// Stop asks the daemon to stop the container: SIGTERM, then SIGKILL after
// grace.
func (c *Client) Stop(ctx context.Context, name string, grace time.Duration) error {
	secs := max(1, int((grace+time.Second-1)/time.Second))
	// The daemon waits out the grace before its SIGKILL: bound the call
	// by that, not by probeTimeout alone.
	_, err := c.runFor(ctx, time.Duration(secs)*time.Second+probeTimeout, "stop", "--time", strconv.Itoa(secs), name)
	return err
}

// Kill sends SIGKILL to the container.
func (c *Client) Kill(ctx context.Context, name string) error {
	_, err := c.run(ctx, "kill", name)
	return err
}

// Remove removes the containers (killing those still running) and waits
// until the daemon no longer lists them, or ctx ends.
func (c *Client) Remove(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	_, rmErr := c.run(ctx, append([]string{"rm", "--force"}, names...)...)
	for {
		left := 0
		for _, n := range names {
			st, err := c.Inspect(ctx, n)
			if err != nil {
				return errors.Join(rmErr, err)
			}
			if st.Exists {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d container(s) still there after removal: %w", left, errors.Join(rmErr, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Listed is one container the daemon listed, with sgtune's labels.
type Listed struct {
	Name                     string
	Running                  bool
	Owner, GPUs, Trial, Host string
}

// List returns the containers, running or not, that carry every label of
// match (KEY=VALUE).
func (c *Client) List(ctx context.Context, match map[string]string) ([]Listed, error) {
	format := "{{.Names}}\t{{.State}}"
	for _, k := range []string{LabelOwner, LabelGPUs, LabelTrial, LabelHost} {
		format += "\t{{.Label \"" + k + "\"}}"
	}
	args := []string{"ps", "--all", "--no-trunc", "--format", format}
	for _, k := range sortedKeys(match) {
		args = append(args, "--filter", "label="+k+"="+match[k])
	}
	out, err := c.run(ctx, args...)
	if err != nil {
		return nil, err
	}
	var res []Listed
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) < 6 || f[0] == "" {
			continue
		}
		res = append(res, Listed{Name: f[0], Running: f[1] == "running", Owner: f[2], GPUs: f[3], Trial: f[4], Host: f[5]})
	}
	return res, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func gpuCSV(gpus []int) string {
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

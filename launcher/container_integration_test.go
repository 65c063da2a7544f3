package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sgtune/sgtune/container"
	"github.com/sgtune/sgtune/engine"
)

// The real simulator in a real container, started through Start as a
// study with engine.container would. These tests need a Docker daemon
// (DOCKER_HOST or the default socket): make test-containers starts one and
// runs them; elsewhere they skip, saying why.

const testImage = "sgtune-sim:launcher-test"

// simImage builds the simulator as a static binary and imports it as
// testImage (no registry is reached), once per test binary.
func simImage(t *testing.T) *container.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no image build")
	}
	cl, err := container.NewClient("docker")
	if err != nil {
		t.Skipf("no container runtime: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		t.Skipf("no Docker daemon (make test-containers starts one): %v", err)
	}
	dir := t.TempDir()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	build := exec.CommandContext(ctx, gobin, "build", "-buildvcs=false", "-o", filepath.Join(dir, "sglang-sim"), "./cmd/sglang-sim")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("static sglang-sim: %v\n%s", err, out)
	}
	tarPath := filepath.Join(dir, "image.tar")
	if out, err := exec.CommandContext(ctx, "tar", "-C", dir, "-cf", tarPath, "sglang-sim").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	if out, err := exec.CommandContext(ctx, cl.Path, "import", "-c", "ENTRYPOINT []", tarPath, testImage).CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	return cl
}

func containerSpec(t *testing.T, name string, options []string, extra ...string) Spec {
	argv := append([]string{"/sglang-sim", "--sim-profile", "glm-5.3-flash-h200x4", "--sim-speedup", "50",
		"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4"}, extra...)
	return Spec{
		Engine: engine.SGLang, Argv: argv, GPUs: []int{2, 3}, LogPath: filepath.Join(t.TempDir(), "trial.log"),
		StartupTimeout: time.Minute, Grace: 5 * time.Second, ReleaseTimeout: 30 * time.Second,
		Env: []string{"SGTUNE_TRIAL=launcher-test/" + name},
		Container: &Container{Spec: container.Spec{Image: testImage, Options: options}, Name: name,
			Labels: map[string]string{container.LabelTrial: "launcher-test/" + name}},
	}
}

func mustBeGone(t *testing.T, cl *container.Client, name string) {
	t.Helper()
	st, err := cl.Inspect(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if st.Exists {
		t.Errorf("container %s still exists (running %v)", name, st.Running)
		_ = cl.Remove(context.Background(), name)
	}
}

// A container server is ready, sees only its trial's GPUs, and is gone
// from the daemon once stopped.
func TestContainerStartStop(t *testing.T) {
	cl := simImage(t)
	name := "sgtune-launcher-test-startstop"
	srv, err := Start(context.Background(), containerSpec(t, name, []string{"--ipc=host"}))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	resp, err := http.Get(srv.URL + "/server_info")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Devices string `json:"sim_cuda_visible_devices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// No GPU runtime here: the host's indices, set inside the container.
	if info.Devices != "2,3" {
		t.Errorf("the server saw CUDA_VISIBLE_DEVICES=%q, want 2,3", info.Devices)
	}
	if st, err := cl.Inspect(context.Background(), name); err != nil || !st.Running {
		t.Fatalf("container %s not running under its name: %+v %v", name, st, err)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if f := srv.Failure(); f != nil {
		t.Errorf("a stopped server reads as failed: %v", f)
	}
	mustBeGone(t, cl, name)
}

// A container the kernel's OOM killer ends (a memory limit below what the
// server holds) is classified oom, with its exit status, and removed.
func TestContainerOOM(t *testing.T) {
	cl := simImage(t)
	name := "sgtune-launcher-test-oom"
	_, err := Start(context.Background(), containerSpec(t, name, []string{"--memory=32m", "--memory-swap=32m"}, "--sim-host-memory-mb", "128"))
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("Start: %v, want a Failure", err)
	}
	if f.Class != engine.ClassOOM || f.ExitCode != 137 {
		t.Errorf("class %s, exit %d; want oom, 137 (%s)", f.Class, f.ExitCode, f.Reason)
	}
	mustBeGone(t, cl, name)
}

// Closing Abort mid-startup kills the container and removes it.
func TestContainerAbort(t *testing.T) {
	cl := simImage(t)
	name := "sgtune-launcher-test-abort"
	spec := containerSpec(t, name, nil)
	spec.Argv[4] = "0.5" // a slow startup, to abort in the middle of
	abort := make(chan struct{})
	spec.Abort = abort
	go func() {
		for i := 0; i < 200; i++ {
			if st, err := cl.Inspect(context.Background(), name); err == nil && st.Running {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(abort)
	}()
	_, err := Start(context.Background(), spec)
	if err == nil || !errors.Is(err, ErrAborted) && !strings.Contains(err.Error(), "abort") {
		t.Fatalf("Start: %v, want aborted", err)
	}
	mustBeGone(t, cl, name)
}

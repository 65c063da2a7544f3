package launcher

import (
	"github.com/sgtune/sgtune/engine"

	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real simulator, started through Start exactly as a study would.

var (
	simOnce sync.Once
	simPath string
	simErr  error
)

// buildSim builds cmd/sglang-sim once per test binary into a temporary
// directory. A failed build fails the test: skipping would hide the lost
// coverage. Only -short skips (no build at all).
func buildSim(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no simulator build")
	}
	simOnce.Do(func() {
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			if gobin, err = exec.LookPath("go"); err != nil {
				simErr = err
				return
			}
		}
		dir, err := os.MkdirTemp("", "sgtune-launcher-sim-")
		if err != nil {
			simErr = err
			return
		}
		simPath = filepath.Join(dir, "sglang-sim")
		cmd := exec.Command(gobin, "build", "-o", simPath, "./cmd/sglang-sim")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			simErr = errors.New(string(out))
		}
	})
	if simErr != nil {
		t.Fatalf("cannot build sglang-sim: %v", simErr)
	}
	return simPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if simPath != "" {
		_ = os.RemoveAll(filepath.Dir(simPath))
	}
	os.Exit(code)
}

func simSpec(t *testing.T, bin string, flags ...string) Spec {
	argv := append([]string{bin, "--sim-profile", "glm-5.3-flash-h200x4", "--sim-speedup", "25",
		"--model-path", "zai-org/GLM-5.3-Flash", "--tp-size", "4"}, flags...)
	return Spec{Argv: argv, LogPath: filepath.Join(t.TempDir(), "trial.log"),
		StartupTimeout: 60 * time.Second, Grace: 5 * time.Second, ReleaseTimeout: 10 * time.Second}
}

func TestSimStartStop(t *testing.T) {
	bin := buildSim(t)
	const key = "sk-sim-integration-5f3a"
	spec := simSpec(t, bin, "--max-running-requests", "64", "--api-key", key)
	spec.APIKey = key
	srv, err := Start(context.Background(), spec)
	if err != nil {
		var f *Failure
		if errors.As(err, &f) {
			t.Fatalf("Start: %v\n%s", err, f.Tail)
		}
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if f := srv.Failure(); f != nil {
		t.Errorf("Failure after a clean stop: %+v", f)
	}
	if !groupGone(t, srv.PID) || !portFree(srv.Port) {
		t.Error("group or port left")
	}
	log, err := os.ReadFile(spec.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), key) {
		t.Error("the log holds the API key")
	}
	if !strings.Contains(string(log), "api_key='<redacted>'") {
		t.Error("the sim's server_args line was not redacted in place")
	}
	got := srv.Facts
	if got.StartupS <= 0 {
		t.Errorf("StartupS %v", got.StartupS)
	}
	got.StartupS = 0
	if want := engine.SGLang.ParseLog(strings.NewReader(string(log))); got != want {
		t.Errorf("Facts at ready %+v\nfrom the whole log %+v", got, want)
	}
	if got.MaxTotalNumTokens <= 0 || got.MaxRunningRequests <= 0 || got.MaxRunningRequests > 64 ||
		got.MambaCacheSize <= 0 || got.KVCacheTokens <= 0 || got.ContextLen <= 0 || !got.CUDAGraph {
		t.Errorf("implausible facts for a hybrid model with CUDA graphs: %+v", got)
	}
}

func TestSimStartupFaults(t *testing.T) {
	bin := buildSim(t)
	tests := []struct {
		name    string
		flags   []string
		class   string
		excerpt string
	}{
		// Profile rule long-prefill-oom.
		{"startup oom", []string{"--chunked-prefill-size", "16384", "--mem-fraction-static", "0.88"},
			engine.ClassOOM, "torch.OutOfMemoryError: CUDA out of memory"},
		// Profile rule world-size-exceeds-gpus.
		{"more ranks than GPUs", []string{"--tp-size", "8"}, engine.ClassStartupCrash, "invalid device ordinal"},
		{"unknown flag", []string{"--no-such-flag"}, engine.ClassBadCommand, "unrecognized arguments: --no-such-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := simSpec(t, bin, tc.flags...)
			srv, err := Start(context.Background(), spec)
			if srv != nil {
				killGroup(t, srv.PID)
				srv.Stop(context.Background())
				t.Fatalf("Start succeeded, want %s", tc.class)
			}
			var f *Failure
			if !errors.As(err, &f) {
				t.Fatalf("err %v is not a *Failure", err)
			}
			if f.Class != tc.class || !strings.Contains(f.Excerpt, tc.excerpt) || !strings.Contains(f.Reason, tc.excerpt) {
				t.Errorf("class %s (exit %d), want %s; reason %q; excerpt:\n%s", f.Class, f.ExitCode, tc.class, f.Reason, f.Excerpt)
			}
		})
	}
}

// TestSimCrashMidSweep drives the simulator into its profile rule
// ep1-radix-off-small-pool (TP4, EP1, radix off, <= 96 state slots: an
// illegal memory access after 34 requests) and checks that Exited closes
// and the Failure says so. Slow (~10 s): SGTUNE_LONG=1.
func TestSimCrashMidSweep(t *testing.T) {
	if os.Getenv("SGTUNE_LONG") != "1" {
		t.Skip("set SGTUNE_LONG=1")
	}
	bin := buildSim(t)
	spec := simSpec(t, bin, "--ep-size", "1", "--disable-radix-cache", "--max-mamba-cache-size", "64")
	srv, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	killGroup(t, srv.PID)
	defer srv.Stop(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() { // ends when its request ends; ctx cancels it
			defer wg.Done()
			body := `{"model":"x","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	select {
	case <-srv.Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not crash")
	}
	cancel()
	wg.Wait()
	f := srv.Failure()
	if f == nil || f.Class != engine.ClassIllegalMemoryAccess || f.ExitCode != 1 {
		t.Fatalf("Failure = %+v", f)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if !groupGone(t, srv.PID) || !portFree(srv.Port) {
		t.Error("group or port left")
	}
}

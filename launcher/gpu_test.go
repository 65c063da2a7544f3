package launcher

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeSMI installs a fake nvidia-smi that prints DIR/gpus.csv for
// --query-gpu and DIR/apps.csv for --query-compute-apps, the way the real
// one prints with --format=csv,noheader,nounits.
func fakeSMI(t *testing.T, gpus, apps string) (dir string) {
	t.Helper()
	dir = t.TempDir()
	script := `#!/bin/sh
case "$1" in
--query-gpu=*) cat "` + dir + `/gpus.csv" ;;
--query-compute-apps=*) cat "` + dir + `/apps.csv" ;;
*) echo "bad args: $*" >&2; exit 9 ;;
esac
`
	path := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	writeSMI(t, dir, gpus, apps)
	old := nvidiaSMI
	nvidiaSMI = path
	t.Cleanup(func() { nvidiaSMI = old })
	return dir
}

func writeSMI(t *testing.T, dir, gpus, apps string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "gpus.csv"), []byte(gpus), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "apps.csv"), []byte(apps), 0o644); err != nil {
		t.Fatal(err)
	}
}

const fourGPUs = `0, GPU-aaaa, 1
1, GPU-bbbb, 70312
2, GPU-cccc, 0
3, GPU-dddd, 4
`

func TestCheckGPUsFree(t *testing.T) {
	fakeSMI(t, fourGPUs, "4242, GPU-bbbb, 70300, python3\n777, GPU-dddd, [N/A], /usr/bin/some, odd name\n")
	tests := []struct {
		gpus    []int
		busy    bool
		errText string
	}{
		{gpus: []int{0, 2}},
		{gpus: nil},
		{gpus: []int{0, 1}, busy: true, errText: "GPU 1: pid 4242 (python3) holds 70300 MiB"},
		{gpus: []int{3}, busy: true, errText: "GPU 3: pid 777 (/usr/bin/some, odd name) holds unknown memory"},
		{gpus: []int{7}, errText: "no GPU with index 7"},
	}
	for _, tc := range tests {
		err := CheckGPUsFree(context.Background(), tc.gpus)
		if tc.errText == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.gpus, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.errText) || errors.Is(err, ErrGPUsBusy) != tc.busy {
			t.Errorf("%v: err %v, want %q (busy %v)", tc.gpus, err, tc.errText, tc.busy)
		}
	}
}

func TestCheckGPUsFreeWithoutSMI(t *testing.T) {
	old := nvidiaSMI
	nvidiaSMI = "/nonexistent/nvidia-smi"
	t.Cleanup(func() { nvidiaSMI = old })
	if err := CheckGPUsFree(context.Background(), []int{0}); err != nil {
		t.Errorf("without nvidia-smi: %v", err)
	}
}

func TestStartRefusesBusyGPUs(t *testing.T) {
	fakeSMI(t, fourGPUs, "4242, GPU-bbbb, 70300, python3\n")
	spec := helperSpec(t, "ok")
	spec.GPUs = []int{1}
	srv, err := Start(context.Background(), spec)
	if srv != nil {
		killGroup(t, srv.PID)
	}
	if !errors.Is(err, ErrGPUsBusy) {
		t.Fatalf("err = %v, want ErrGPUsBusy", err)
	}
	if _, err := os.Stat(spec.LogPath); err == nil {
		t.Error("a log was written although nothing was launched")
	}
}

func TestWaitGPUsReleased(t *testing.T) {
	old := gpuPoll
	gpuPoll = 20 * time.Millisecond
	t.Cleanup(func() { gpuPoll = old })
	dir := fakeSMI(t, fourGPUs, "")
	base := gpuBaseline(context.Background(), []int{1, 2})
	if base[1] != 70312 || base[2] != 0 {
		t.Fatalf("baseline %v", base)
	}
	base[1] = 100 // as if GPU 1 was empty before the launch

	// Still held: a process, then only memory, then released.
	writeSMI(t, dir, fourGPUs, "4242, GPU-bbbb, 70300, python3\n")
	err := waitGPUsReleased(context.Background(), []int{1, 2}, base, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "pid 4242") {
		t.Errorf("with a process: %v", err)
	}
	writeSMI(t, dir, fourGPUs, "")
	err = waitGPUsReleased(context.Background(), []int{1, 2}, base, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "GPU 1 still uses 70312 MiB") {
		t.Errorf("with memory held: %v", err)
	}
	go func() { // frees the GPU while the wait polls; ends at once
		time.Sleep(100 * time.Millisecond)
		_ = os.WriteFile(filepath.Join(dir, "gpus.csv"), []byte(strings.Replace(fourGPUs, "70312", "900", 1)), 0o644)
	}()
	if err := waitGPUsReleased(context.Background(), []int{1, 2}, base, 5*time.Second); err != nil {
		t.Errorf("after release: %v", err)
	}
}

// TestRealNvidiaSMI runs only where nvidia-smi exists: the queries must
// parse, and the busy check must either pass or name processes.
func TestRealNvidiaSMI(t *testing.T) {
	path := smiPath()
	if path == "" {
		t.Skip("no nvidia-smi")
	}
	gs, err := queryGPUs(context.Background(), path)
	if err != nil || len(gs) == 0 {
		t.Fatalf("queryGPUs: %v %v", gs, err)
	}
	if _, err := queryApps(context.Background(), path); err != nil {
		t.Fatalf("queryApps: %v", err)
	}
	if err := CheckGPUsFree(context.Background(), []int{gs[0].index}); err != nil && !errors.Is(err, ErrGPUsBusy) {
		t.Errorf("CheckGPUsFree: %v", err)
	}
	t.Logf("GPUs: %+v", gs)
}

package launcher

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrGPUsBusy says that a GPU meant for a server is used by another process.
var ErrGPUsBusy = errors.New("GPUs in use by other processes")

// nvidiaSMI is the program queried for GPU occupancy; tests point it at a
// fake script.
var nvidiaSMI = "nvidia-smi"

// gpuSlack is how much more memory than before the launch a GPU may still
// report as used once the server is gone (driver/context noise).
const gpuSlackMiB = 1024

type gpuInfo struct {
	index   int
	uuid    string
	usedMiB int
}

type computeApp struct {
	pid     int
	uuid    string
	usedMiB int // -1 when nvidia-smi says [N/A]
	name    string
}

// smiPath returns the nvidia-smi executable, or "" when there is none.
func smiPath() string {
	p, err := exec.LookPath(nvidiaSMI)
	if err != nil {
		return ""
	}
	return p
}

func runSMI(ctx context.Context, path string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", path, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// csvRows splits nvidia-smi's "--format=csv,noheader,nounits" output.
func csvRows(out string, minFields int) [][]string {
	var rows [][]string
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < minFields {
			continue
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows = append(rows, f)
	}
	return rows
}

// mib parses "1234", "1234 MiB" or "[N/A]" (-1).
func mib(s string) int {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "MiB"))
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

func queryGPUs(ctx context.Context, path string) ([]gpuInfo, error) {
	out, err := runSMI(ctx, path, "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	var gs []gpuInfo
	for _, f := range csvRows(out, 3) {
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		gs = append(gs, gpuInfo{index: idx, uuid: f[1], usedMiB: mib(f[2])})
	}
	if len(gs) == 0 {
		return nil, fmt.Errorf("%s listed no GPUs: %q", path, out)
	}
	return gs, nil
}

func queryApps(ctx context.Context, path string) ([]computeApp, error) {
	out, err := runSMI(ctx, path, "--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits")
	if err != nil {
		return nil, err
	}
	var as []computeApp
	for _, f := range csvRows(out, 2) {
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue // "No running processes found" and the like
		}
		a := computeApp{pid: pid, uuid: f[1], usedMiB: -1}
		if len(f) > 2 {
			a.usedMiB = mib(f[2])
		}
		if len(f) > 3 {
			a.name = strings.Join(f[3:], ", ")
		}
		as = append(as, a)
	}
	return as, nil
}

// gpuState is one snapshot of the requested GPUs.
type gpuState struct {
	gpus map[int]gpuInfo      // by index, only the requested ones
	apps map[int][]computeApp // by index
}

func snapshot(ctx context.Context, path string, want []int) (gpuState, error) {
	gs, err := queryGPUs(ctx, path)
	if err != nil {
		return gpuState{}, err
	}
	apps, err := queryApps(ctx, path)
	if err != nil {
		return gpuState{}, err
	}
	st := gpuState{gpus: map[int]gpuInfo{}, apps: map[int][]computeApp{}}
	byUUID := map[string]int{}
	for _, g := range gs {
		if slices.Contains(want, g.index) {
			st.gpus[g.index] = g
			byUUID[g.uuid] = g.index
		}
	}
	var missing []string
	for _, i := range want {
		if _, ok := st.gpus[i]; !ok {
			missing = append(missing, strconv.Itoa(i))
		}
	}
	if len(missing) > 0 {
		return st, fmt.Errorf("no GPU with index %s (nvidia-smi lists %d GPUs)", strings.Join(missing, ","), len(gs))
	}
	for _, a := range apps {
		if i, ok := byUUID[a.uuid]; ok {
			st.apps[i] = append(st.apps[i], a)
		}
	}
	return st, nil
}

// CheckGPUsFree returns an error wrapping ErrGPUsBusy when any of the GPUs
// (nvidia-smi indices, which the launcher's CUDA_DEVICE_ORDER=PCI_BUS_ID
// makes equal to CUDA's) runs a compute process, naming the processes; an
// error too when an index does not exist. Without nvidia-smi on PATH it
// returns nil: nothing can be checked.
func CheckGPUsFree(ctx context.Context, gpus []int) error {
	path := smiPath()
	if path == "" || len(gpus) == 0 {
		return nil
	}
	st, err := snapshot(ctx, path, gpus)
	if err != nil {
		return fmt.Errorf("check GPUs %v: %w", gpus, err)
	}
	return busyError(st, gpus)
}

func busyError(st gpuState, gpus []int) error {
	var msgs []string
	for _, i := range gpus {
		for _, a := range st.apps[i] {
			mem := "unknown memory"
			if a.usedMiB >= 0 {
				mem = fmt.Sprintf("%d MiB", a.usedMiB)
			}
			name := a.name
			if name == "" {
				name = "?"
			}
			msgs = append(msgs, fmt.Sprintf("GPU %d: pid %d (%s) holds %s", i, a.pid, name, mem))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s; stop those processes or choose other GPUs", ErrGPUsBusy, strings.Join(msgs, "; "))
}

// gpuBaseline records memory.used per GPU before a launch; nil without
// nvidia-smi or on a query error (the release wait then checks processes
// only).
func gpuBaseline(ctx context.Context, gpus []int) map[int]int {
	path := smiPath()
	if path == "" || len(gpus) == 0 {
		return nil
	}
	gs, err := queryGPUs(ctx, path)
	if err != nil {
		return nil
	}
	base := map[int]int{}
	for _, g := range gs {
		if slices.Contains(gpus, g.index) && g.usedMiB >= 0 {
			base[g.index] = g.usedMiB
		}
	}
	return base
}

// gpuPoll is the interval between nvidia-smi queries while waiting.
var gpuPoll = 500 * time.Millisecond

// waitGPUsReleased waits until the GPUs run no compute process and their
// used memory is back within gpuSlackMiB of the baseline. No-op without
// nvidia-smi.
func waitGPUsReleased(ctx context.Context, gpus []int, baseline map[int]int, timeout time.Duration) error {
	path := smiPath()
	if path == "" || len(gpus) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var why error // the last reason the GPUs were not free
	for {
		st, err := snapshot(ctx, path, gpus)
		if err != nil {
			if ctx.Err() != nil && why != nil {
				// the query was cut by the deadline: report the last real reason
				return fmt.Errorf("GPUs %v not released: %w", gpus, why)
			}
			why = err
		} else if why = busyError(st, gpus); why == nil {
			for _, i := range gpus {
				b, ok := baseline[i]
				if g := st.gpus[i]; ok && g.usedMiB > b+gpuSlackMiB {
					why = fmt.Errorf("GPU %d still uses %d MiB (%d MiB before the launch)", i, g.usedMiB, b)
					break
				}
			}
		}
		if why == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("GPUs %v not released: %w", gpus, why)
		case <-time.After(gpuPoll):
		}
	}
}

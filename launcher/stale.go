package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KillTagged ends servers left behind by an earlier tuner process (one
// killed with -9 whose servers outlived Pdeathsig): it finds every process
// whose environment holds the exact entry tag ("KEY=VALUE", which the caller
// put into Spec.Env, e.g. "SGTUNE_TRIAL=<study>/<trial>"), SIGKILLs their
// process groups, and waits until those groups are gone. Matching an entry
// the launcher's caller chose, not a program name, cannot hit unrelated
// processes. It returns the process group ids killed. It skips the caller's
// own process group, and processes whose environment it may not read (other
// users). Linux only (/proc); elsewhere it returns nil, nil.
func KillTagged(ctx context.Context, tag string) ([]int, error) {
	if !strings.Contains(tag, "=") {
		return nil, fmt.Errorf("launcher: tag %q is not KEY=VALUE", tag)
	}
	d, err := os.Open("/proc")
	if err != nil {
		return nil, nil
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("launcher: list /proc: %w", err)
	}
	self, _ := syscall.Getpgid(0)
	want := append([]byte(tag), 0)
	var groups []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + n + "/environ")
		if err != nil || !bytes.HasPrefix(env, want) && !bytes.Contains(env, append([]byte{0}, want...)) {
			continue
		}
		pgid, err := syscall.Getpgid(pid)
		if err != nil || pgid == self || slices.Contains(groups, pgid) {
			continue
		}
		groups = append(groups, pgid)
	}
	var errs []error
	for _, g := range groups {
		_ = syscall.Kill(-g, syscall.SIGKILL)
	}
	for _, g := range groups {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := waitGroupGone(gctx, g); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	return groups, errors.Join(errs...)
}

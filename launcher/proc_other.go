//go:build unix && !linux

package launcher

import (
	"errors"
	"syscall"
)

// sysProcAttr puts the server in its own process group. Pdeathsig exists
// only on Linux: elsewhere a kill -9 of the tuner can orphan the server.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExitedNoReap is not available: the group kill then follows the reap.
func waitExitedNoReap(pid int) error { return nil }

// groupAlive reports whether any process of group pgid exists (zombies
// included: without /proc they cannot be told apart).
func groupAlive(pgid int) bool { return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) }

//go:build linux

package launcher

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// sysProcAttr puts the server in its own process group, so the whole tree
// can be signalled with kill(-pgid), and asks the kernel to SIGKILL it when
// the thread that started it dies (Pdeathsig), so a kill -9 of the tuner
// does not leave a server holding GPUs. Pdeathsig follows the creating
// thread, not the process: the caller starts the process from a goroutine
// locked to its OS thread that lives as long as the server (see launch).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExitedNoReap blocks until the child pid has exited, without reaping it
// (waitid WNOWAIT). While the zombie is unreaped its pid, and so its process
// group id, cannot be reused, which makes the group kill that follows safe.
func waitExitedNoReap(pid int) error {
	const (
		pPID    = 1         // P_PID
		wExited = 0x4       // WEXITED
		wNoWait = 0x1000000 // WNOWAIT
	)
	var info [128]byte // siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
}

// groupAlive reports whether a process of group pgid exists that is not a
// zombie. Zombies hold no memory, GPU context or port, and their reaping is
// up to init (slow in some containers, never when nobody reaps), so they do
// not count. Without /proc it falls back to kill(-pgid, 0).
func groupAlive(pgid int) bool {
	d, err := os.Open("/proc")
	if err != nil {
		return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	}
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		state, pgrp, ok := parseStat(string(b))
		if ok && pgrp == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// parseStat returns the state and process group of a /proc/PID/stat line:
// "pid (comm) state ppid pgrp ...", where comm may contain spaces and ')'.
func parseStat(s string) (state byte, pgrp int, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pg, true
}

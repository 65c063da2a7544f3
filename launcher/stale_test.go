package launcher

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestKillTagged(t *testing.T) {
	tag := fmt.Sprintf("SGTUNE_TEST_TRIAL=%d-%d", os.Getpid(), time.Now().UnixNano())
	// An orphan-like server: own group, no Pdeathsig, ignores SIGTERM.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "--", "sleep")
	cmd.Env = append(os.Environ(), helperEnv+"=1", tag)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killGroup(t, cmd.Process.Pid)
	go cmd.Wait() // reap; ends when the process dies
	// An untagged process with a similar tag must survive.
	other := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "--", "sleep")
	other.Env = append(os.Environ(), helperEnv+"=1", tag+"0")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	killGroup(t, other.Process.Pid)
	go other.Wait()
	time.Sleep(50 * time.Millisecond) // the exec has replaced the environment

	groups, err := KillTagged(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(groups, []int{cmd.Process.Pid}) {
		t.Errorf("killed groups %v, want [%d]", groups, cmd.Process.Pid)
	}
	if !groupGone(t, cmd.Process.Pid) {
		t.Error("tagged group still alive")
	}
	if !pidAlive(other.Process.Pid) {
		t.Error("a process with a different tag was killed")
	}
	if _, err := KillTagged(context.Background(), "no-equals"); err == nil {
		t.Error("a tag without = was accepted")
	}
}

package search

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sgtune/sgtune/engine"
	"github.com/sgtune/sgtune/launcher"
	"github.com/sgtune/sgtune/storage"
)

// TestStudyLogDir: a study writes its logs to base/NAME unless another
// study's logs are there, whose trial-N.log files it would overwrite.
func TestStudyLogDir(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mark    string // the mark already in base/s ("" none)
		logs    bool   // trial logs already in base/s
		dirLog  bool   // a directory named as a trial log there
		resumed bool
		want    string
	}{
		{name: "new directory", want: "s"},
		{name: "its own mark", mark: "aaaa", logs: true, want: "s"},
		{name: "another study's mark", mark: "bbbb", logs: true, resumed: true, want: "s-aaaa"},
		{name: "unmarked logs, a new study", logs: true, want: "s-aaaa"},
		{name: "unmarked logs, a study with trials", logs: true, resumed: true, want: "s"},
		{name: "unmarked and empty", want: "s"},
		{name: "unmarked, no log but a directory", dirLog: true, want: "s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir := filepath.Join(base, "s")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.mark != "" {
				if err := os.WriteFile(filepath.Join(dir, studyLogMark), []byte(tc.mark+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.logs {
				if err := os.WriteFile(filepath.Join(dir, "trial-0.log"), []byte("log\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.dirLog {
				if err := os.Mkdir(filepath.Join(dir, "trial-0.log"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			got, err := studyLogDir(base, "s", "aaaa", tc.resumed)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(base, tc.want); got != want {
				t.Errorf("got %s, want %s", got, want)
			}
			if fi, err := os.Stat(got); err != nil || !fi.IsDir() {
				t.Errorf("%s: not made (%v)", got, err)
			}
			// The directory it took is marked as its own.
			if tc.want == "s" {
				if b, err := os.ReadFile(filepath.Join(dir, studyLogMark)); err != nil || strings.TrimSpace(string(b)) != "aaaa" {
					t.Errorf("mark %q (%v), want aaaa", b, err)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, studyLogMark+"-*")); len(left) > 0 {
				t.Errorf("temporary marks left: %v", left)
			}
		})
	}
}

// TestTwoStoresOneLogDir: two databases in one directory holding studies
// of the same name (one log directory by default) keep their trials' logs
// apart; before, trial 0 of the second overwrote the first's log.
func TestTwoStoresOneLogDir(t *testing.T) {
	st, storeA, path := openFake(t, "trials: 6", "trials: 1")
	storeB, err := storage.Open(filepath.Join(filepath.Dir(path), "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storeB.Close() })
	logs := t.TempDir()
	var paths []string
	for i, store := range []*storage.Store{storeA, storeB, storeA} {
		sum, err := Run(context.Background(), Options{Study: st, Store: store, Backend: &fakeBackend{}, LogDir: logs, Parallel: 1,
			Trials: 1 + i/2, Getenv: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, sum.Records[len(sum.Records)-1].LogPath)
	}
	if paths[0] == paths[1] {
		t.Errorf("both studies' trial 0 log to %s", paths[0])
	}
	if want := filepath.Join(logs, "unit", "trial-0.log"); paths[0] != want {
		t.Errorf("the first study's log: got %s, want %s", paths[0], want)
	}
	if want := filepath.Join(logs, "unit", "trial-1.log"); paths[2] != want {
		t.Errorf("the first study resumed: its trial 1 logs to %s, want %s", paths[2], want)
	}
}

// TestStudyLogDirWithoutHardLinks: a log directory on a filesystem without
// hard links (vfat, some network mounts) is marked in place; the run
// failed with "log dir: link ...".
func TestStudyLogDirWithoutHardLinks(t *testing.T) {
	defer func(f func(string, string) error) { linkFile = f }(linkFile)
	linkFile = func(oldname, newname string) error {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.EPERM}
	}
	base := t.TempDir()
	got, err := studyLogDir(base, "s", "aaaa", false)
	if err != nil || got != filepath.Join(base, "s") {
		t.Fatalf("got %s, %v; want %s", got, err, filepath.Join(base, "s"))
	}
	if b, err := os.ReadFile(filepath.Join(got, studyLogMark)); err != nil || strings.TrimSpace(string(b)) != "aaaa" {
		t.Errorf("mark %q (%v), want aaaa", b, err)
	}
	if again, err := studyLogDir(base, "s", "bbbb", false); err != nil || again != filepath.Join(base, "s-bbbb") {
		t.Errorf("another study: %s, %v", again, err)
	}
}

// startFailBackend fails every start with an OOM whose log could not be
// written either.
type startFailBackend struct{ logErr error }

func (b startFailBackend) Start(context.Context, launcher.Spec) (Running, error) {
	return nil, &launcher.Failure{Class: engine.ClassOOM, ExitCode: 1, Reason: "torch.OutOfMemoryError", LogErr: b.logErr}
}

// TestLogErrorReported: a trial whose server log could not be written (a
// full disk) keeps its outcome, and the user learns it: a line naming the
// trial and the log, and the error stored on the trial. Before, the log
// just stopped, with no word anywhere.
func TestLogErrorReported(t *testing.T) {
	logErr := fmt.Errorf("launcher: write log: %w", syscall.ENOSPC)
	for _, tc := range []struct {
		name  string
		b     Backend
		state string
	}{
		{"measured", &fakeBackend{logErr: logErr}, StateComplete},
		{"crashed", &fakeBackend{logErr: logErr, crash: func(string) *launcher.Failure {
			return &launcher.Failure{Class: engine.ClassIllegalMemoryAccess, ExitCode: 1, Reason: "CUDA error"}
		}}, StateFailed},
		{"failed start", startFailBackend{logErr: logErr}, StateFailed},
		{"whole log", &fakeBackend{}, StateComplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, store, _ := openFake(t, "trials: 6,", "trials: 2,")
			sum, err, evs := runFake(t, context.Background(), st, store, tc.b, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Records) == 0 {
				t.Fatal("no trials")
			}
			for _, r := range sum.Records {
				if r.State != tc.state {
					t.Errorf("trial %d is %s, want %s", r.Number, r.State, tc.state)
				}
				want := ""
				if tc.name != "whole log" {
					want = logErr.Error()
				}
				if r.LogError != want {
					t.Errorf("trial %d: stored log error %q, want %q", r.Number, r.LogError, want)
				}
				var lines []string
				for _, ev := range evs {
					if ev.Kind == EventNote && ev.Trial == r.Number && strings.Contains(ev.Text, "server log") {
						lines = append(lines, ev.Text)
					}
				}
				switch {
				case want == "" && len(lines) > 0:
					t.Errorf("trial %d: warned of a whole log: %q", r.Number, lines)
				case want != "" && (len(lines) != 1 || !strings.Contains(lines[0], fmt.Sprintf("trial %d ", r.Number)) ||
					!strings.Contains(lines[0], r.LogPath) || !strings.Contains(lines[0], "no space left on device")):
					t.Errorf("trial %d: warning lines %q, want one naming the trial, %s and the error", r.Number, lines, r.LogPath)
				}
			}
		})
	}
}

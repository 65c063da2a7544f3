package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/c-bata/goptuna"
)

// A study in a directory this user cannot write (a teammate's run, a
// read-only mount) is read read-only: with SQLite's side files where a
// writer has them open, as an immutable file where none has. Writes fail. As root, permissions bind nobody, so the
// reader runs as user nobody.
func TestOpenReadUnwritableDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "study.db")
	s, err := Open(path)
	must(t, err)
	_, err = goptuna.CreateStudy("ro", goptuna.StudyOptionStorage(s), goptuna.StudyOptionLogger(nil))
	must(t, err)
	must(t, s.Close())
	for _, writing := range []bool{false, true} {
		t.Run(fmt.Sprintf("writer open %v", writing), func(t *testing.T) {
			if writing { // a run holds the database: -wal and -shm exist
				w, err := Open(path)
				must(t, err)
				defer w.Close()
				_, err = w.CreateNewStudy("while-open")
				must(t, err)
			}
			out, err := readAsOther(t, dir, path)
			if err != nil {
				t.Fatalf("read a study in an unwritable directory: %v\n%s", err, out)
			}
			// With no run writing it, the view is frozen: status --watch
			// opens it again to see a run that starts.
			want := "studies ro\nfrozen true"
			if writing {
				want = "studies ro,while-open\nfrozen false"
			}
			if !strings.Contains(out, want) || !strings.Contains(out, "write refused") {
				t.Errorf("reader said %q; want %q and a refused write", out, want)
			}
		})
	}
}

// readAsOther runs the "read" helper on path as a user who cannot write
// dir: nobody when this is root (the test binary copied where nobody may
// run it), else this user with dir made read-only.
func readAsOther(t *testing.T, dir, path string) (string, error) {
	t.Helper()
	cmd := helperCmd(t, "read", path)
	if os.Geteuid() == 0 {
		bin := filepath.Join(t.TempDir(), "storage.test")
		copyExecutable(t, os.Args[0], bin)
		for d := filepath.Dir(bin); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			must(t, os.Chmod(d, 0o755))
		}
		for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
				must(t, os.Chmod(d, fi.Mode().Perm()|0o005))
			}
		}
		must(t, os.Chmod(path, 0o644))
		cmd.Path, cmd.Args[0] = bin, bin
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: 65534, Gid: 65534}
		cmd.Dir = "/"
	} else {
		// The user owns the files: the database and its side files must
		// be read-only too, as someone else's are.
		for _, f := range []string{path, path + "-wal", path + "-shm"} {
			if err := os.Chmod(f, 0o444); err == nil {
				t.Cleanup(func() { _ = os.Chmod(f, 0o644) })
			}
		}
		must(t, os.Chmod(dir, 0o555))
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	must(t, err)
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	must(t, err)
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	must(t, dst.Close())
}

// helperRead opens args[0] with OpenRead, prints its study names and tries
// one write.
func helperRead(args []string) error {
	s, err := OpenRead(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	names, err := s.StudyNames()
	if err != nil {
		return err
	}
	fmt.Printf("studies %s\nfrozen %v\n", strings.Join(names, ","), s.Frozen())
	// Opened read-only, or opened as usual (a writer's side files let
	// SQLite read, and the schema is current): a write fails either way.
	if _, err = s.CreateNewStudy("not-allowed"); !errors.Is(err, ErrReadOnly) && !cannotWrite(err) {
		return fmt.Errorf("a write to a store in an unwritable directory: %v", err)
	}
	fmt.Println("write refused")
	return nil
}

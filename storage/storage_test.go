package storage

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/mattn/go-sqlite3"
)

func newStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "sgtune.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestParsePath(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  string
	}{
		{in: "sgtune.db", want: "sgtune.db"},
		{in: "/tmp/x/sgtune.db", want: "/tmp/x/sgtune.db"},
		{in: "sqlite:sgtune.db", want: "sgtune.db"},
		{in: "sqlite:///sgtune.db", want: "sgtune.db"},
		{in: "sqlite:////abs/sgtune.db", want: "/abs/sgtune.db"},
		{in: "sqlite:///a.db?timeout=5", want: "a.db"},
		{in: "file:sgtune.db", want: "sgtune.db"},
		{in: "file:/abs/s.db?mode=rwc", want: "/abs/s.db"},
		{in: "file:///abs/s%20b.db", want: "/abs/s b.db"},
		{in: "file://localhost/abs/s.db", want: "/abs/s.db"},
		{in: "", wantErr: "empty"},
		{in: ":memory:", wantErr: "in-memory"},
		{in: "file::memory:?mode=memory", wantErr: "in-memory"},
		{in: "sqlite://host/x.db", wantErr: "sqlite:///"},
		{in: "sqlite:", wantErr: "names no file"},
		{in: "file://otherhost/x.db", wantErr: "remote"},
		{in: "postgres://u@h/db", wantErr: "only SQLite"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParsePath(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParsePath(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParsePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"a.db", "sqlite:///a.db", "file:/x?y=1", "sqlite://", "file://h/x", "x://y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParsePath(in)
		if err == nil && p == "" {
			t.Fatalf("ParsePath(%q) returned an empty path without error", in)
		}
	})
}

func TestOpenForms(t *testing.T) {
	dir := t.TempDir()
	abs := filepath.Join(dir, "we?ird #name%.db")
	t.Chdir(dir)
	for _, arg := range []string{abs, "sqlite:////" + strings.TrimPrefix(abs, "/"), "rel.db", "sqlite:///rel.db", "file:rel.db"} {
		s, err := Open(arg)
		if err != nil {
			t.Fatalf("Open(%q): %v", arg, err)
		}
		if _, err := s.CreateNewStudy(""); err != nil {
			t.Fatalf("Open(%q): create study: %v", arg, err)
		}
		s.Close()
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("escaped path not created literally: %v", err)
	}
	s, err := Open("sqlite:///rel.db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	names, err := s.StudyNames()
	if err != nil || len(names) != 3 {
		t.Fatalf("rel.db reached through 3 forms should hold 3 studies, got %v, %v", names, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("this is not a database file\n", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	db, err := sql.Open("sqlite3", foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE other (x)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	newer := filepath.Join(dir, "newer.db")
	db, _ = sql.Open("sqlite3", newer)
	if _, err := db.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	tests := []struct {
		name, path, want string
	}{
		{"missing dir", filepath.Join(dir, "nope", "x.db"), "no such file or directory"},
		{"directory", dir, "is a directory"},
		{"not sqlite", garbage, "not an SQLite database"},
		{"foreign tables", foreign, "not an sgtune database"},
		{"newer schema", newer, "newer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.path)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded", tc.path)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open(%s) = %v; want %q", tc.path, err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created a missing parent directory")
	}
}

// Several openers of a fresh file race to migrate; each must succeed and the
// schema must be applied once.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "race.db")
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			s, err := Open(path)
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := s.rdb.QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("user_version = %d, %v; want %d", v, err, SchemaVersion)
	}
	var mode string
	if err := s.rdb.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v", mode, err)
	}
	if err := s.IntegrityCheck(); err != nil {
		t.Fatal(err)
	}
}

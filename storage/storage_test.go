package storage

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/mattn/go-sqlite3"
)

// newStore opens a fresh SQLite store (benchmarks and SQLite-only tests;
// the suite runs on every backend through backend.open).
func newStore(t testing.TB) *Store {
	t.Helper()
	return sqliteBackend().open(t)
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
		{in: "postgres://u@h/db", wantErr: "PostgreSQL URL"},
		{in: "mysql://u@h/db", wantErr: "only SQLite files"},
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

// Several openers of a fresh database race to migrate; each must succeed and
// the schema must be applied once.
func testConcurrentOpenMigratesOnce(t *testing.T, b *backend) {
	path := b.newDSN(t)
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
	var n, v int
	if err := queryRow(s, "SELECT count(*), MAX(version) FROM schema_migrations").Scan(&n, &v); err != nil || n != SchemaVersion || v != SchemaVersion {
		t.Fatalf("schema_migrations: %d rows, version %d, %v; want %d", n, v, err, SchemaVersion)
	}
	if b.d == dialectSQLite {
		if err := queryRow(s, "PRAGMA user_version").Scan(&v); err != nil || v != SchemaVersion {
			t.Fatalf("user_version = %d, %v; want %d", v, err, SchemaVersion)
		}
		var mode string
		if err := queryRow(s, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
			t.Fatalf("journal_mode = %q, %v", mode, err)
		}
	}
	if err := s.IntegrityCheck(); err != nil {
		t.Fatal(err)
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:secret@db:5432/tuner?sslmode=disable", "postgres://u:xxxxx@db:5432/tuner?sslmode=disable"},
		{"postgres://u@db/tuner", "postgres://u@db/tuner"},
		{"postgresql://db/tuner?password=secret&sslmode=disable", "postgresql://db/tuner?password=xxxxx&sslmode=disable"},
		{"postgres://u:secret@db:bad port/x", "postgres://(unparsable URL)"},
	}
	for _, tc := range tests {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestWithoutPassword(t *testing.T) {
	tests := []struct {
		in, want string
		removed  bool
	}{
		{"postgres://u:secret@db:5432/tuner?sslmode=disable", "postgres://u@db:5432/tuner?sslmode=disable", true},
		{"postgresql://db/tuner?password=secret&sslmode=disable", "postgresql://db/tuner?sslmode=disable", true},
		{"postgres://u@db/tuner?sslmode=disable", "postgres://u@db/tuner?sslmode=disable", false},
		{"postgres://u:secret@db:bad port/x", "postgres://(unparsable URL)", true},
		{"runs/glm.db", "runs/glm.db", false},
	}
	for _, tc := range tests {
		if got, removed := WithoutPassword(tc.in); got != tc.want || removed != tc.removed {
			t.Errorf("WithoutPassword(%q) = %q, %v; want %q, %v", tc.in, got, removed, tc.want, tc.removed)
		}
	}
}

// Open names a PostgreSQL server it cannot use, without its password, and
// does not wait long for one that does not answer.
func TestOpenPostgresErrors(t *testing.T) {
	tests := []struct{ name, dsn, want string }{
		{"refused", "postgres://u:secret@127.0.0.1:1/tuner?sslmode=disable&connect_timeout=5", "127.0.0.1:1"},
		{"bad URL", "postgres://u:secret@127.0.0.1:notaport/tuner", "postgres://"},
		{"bad option", "postgres://u:secret@127.0.0.1:1/tuner?sslmode=sometimes", "sslmode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.dsn)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded", tc.dsn)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
				t.Fatalf("Open error = %v; want it to contain %q and no password", err, tc.want)
			}
		})
	}
	if !IsPostgres("PostgreSQL://h/db") || IsPostgres("sqlite:///x.db") || IsPostgres("postgres.db") {
		t.Fatal("IsPostgres misclassifies")
	}
}

// TestIsFull: a write the database has no room for, PostgreSQL's disk_full
// and a file's ENOSPC are told apart from other errors (main says what to
// do next).
func TestIsFull(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "full.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The write connection may grow the file by a few pages only.
	if _, err := s.wdb.Exec("PRAGMA max_page_count = 200"); err != nil {
		t.Fatal(err)
	}
	id, err := s.CreateNewStudy("full")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	for i := 0; ; i++ {
		err = s.SetStudyUserAttr(id, fmt.Sprintf("k%d", i), big)
		if err != nil {
			break
		}
		if i > 1000 {
			t.Fatal("1000 writes of 64 KiB into a database of 200 pages")
		}
	}
	if !IsFull(err) {
		t.Errorf("write into a full database: IsFull(%v) = false", err)
	}
	for _, e := range []error{fmt.Errorf("write log: %w", syscall.ENOSPC), &pgconn.PgError{Code: "53100"}} {
		if !IsFull(e) {
			t.Errorf("IsFull(%v) = false", e)
		}
	}
	for _, e := range []error{errors.New("database or disk is full"), &pgconn.PgError{Code: "23505"}, syscall.EACCES} {
		if IsFull(e) {
			t.Errorf("IsFull(%v) = true", e)
		}
	}
}

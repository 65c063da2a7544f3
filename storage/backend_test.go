package storage

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// The storage contract runs as one suite against each backend: TestSQLite
// and TestPostgres run every entry of suite as a subtest
// (go test -run 'TestPostgres/Leases').
var suite = []struct {
	name string
	run  func(t *testing.T, b *backend)
}{
	{"TrialRoundTrip", testTrialRoundTrip},
	{"FinishedTrialSettersFail", testFinishedTrialSettersFail},
	{"SetTrialStateTransitions", testSetTrialStateTransitions},
	{"GetBestTrial", testGetBestTrial},
	{"Studies", testStudies},
	{"EnsureStudy", testEnsureStudy},
	{"EnsureStudySystemAttr", testEnsureStudySystemAttr},
	{"ConcurrentFinish", testConcurrentFinish},
	{"InterruptRerunAfterOtherEnded", testInterruptRerunAfterOtherEnded},
	{"PointsRoundTrip", testPointsRoundTrip},
	{"HeartbeatAndStale", testHeartbeatAndStale},
	{"KeepAlive", testKeepAlive},
	{"GoptunaStudyEndToEnd", testGoptunaStudyEndToEnd},
	{"GoroutinesShareOneStore", testGoroutinesShareOneStore},
	{"ConcurrentOpenMigratesOnce", testConcurrentOpenMigratesOnce},
	{"Migrations", testMigrations},
	{"Leases", testLeases},
	{"LaunchBudget", testLaunchBudget},
	{"GoroutinesLeaseAndBudget", testGoroutinesLeaseAndBudget},
	{"ConcurrentEnsureAndNumbering", testConcurrentEnsureAndNumbering},
	{"KilledInsideTransaction", testKilledInsideTransaction},
	{"MultiProcessTPE", testMultiProcessTPE},
	{"KilledWriterLeavesConsistentDB", testKilledWriterLeavesConsistentDB},
	{"MultiProcessLeaseAndBudget", testMultiProcessLeaseAndBudget},
	{"MultiProcessReapAndClaim", testMultiProcessReapAndClaim},
}

// backend makes fresh, empty databases of one kind.
type backend struct {
	name string
	d    dialect
	// newDSN returns the storage argument of a fresh, empty database.
	newDSN func(t testing.TB) string
}

// open opens a fresh database, closed when the test ends.
func (b *backend) open(t testing.TB) *Store {
	t.Helper()
	return openDSN(t, b.newDSN(t))
}

func openDSN(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func runSuite(t *testing.T, b *backend) {
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
	}
}

func sqliteBackend() *backend {
	return &backend{name: "sqlite", d: dialectSQLite, newDSN: func(t testing.TB) string {
		return filepath.Join(t.TempDir(), "sgtune.db")
	}}
}

// TestSQLite runs the storage suite on SQLite files.
func TestSQLite(t *testing.T) { runSuite(t, sqliteBackend()) }

// TestPostgres runs the storage suite on PostgreSQL: on the server named by
// SGTUNE_TEST_POSTGRES (a postgres:// URL), or else on a throwaway cluster
// that scripts/pg-up.sh starts in a temporary directory and
// scripts/pg-down.sh stops when the test ends. It skips only when neither a
// server URL nor PostgreSQL's binaries are there.
func TestPostgres(t *testing.T) {
	runSuite(t, postgresBackend(t))
}

// newNamespace numbers the PostgreSQL schemas this process creates.
var newNamespace atomic.Int64

func postgresBackend(t *testing.T) *backend {
	base := os.Getenv("SGTUNE_TEST_POSTGRES")
	if base == "" {
		base = startPostgres(t)
	} else if !IsPostgres(base) {
		t.Fatalf("SGTUNE_TEST_POSTGRES=%q: want a postgres:// URL", base)
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL at %s: %v", redactURL(base), err)
	}
	// Each database of the suite is a schema of its own, picked through
	// search_path, so a shared server keeps nothing of a test run.
	return &backend{name: "postgres", d: dialectPostgres, newDSN: func(t testing.TB) string {
		schema := fmt.Sprintf("sgtune_test_%d_%d", os.Getpid(), newNamespace.Add(1))
		if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
				t.Errorf("drop test schema %s: %v", schema, err)
			}
		})
		return withParam(base, "search_path", schema)
	}}
}

func withParam(dsn, key, value string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + key + "=" + value
}

// pgBinDir finds PostgreSQL's server binaries the way scripts/pg-up.sh
// does: $PGBIN, pg_config --bindir, or the newest /usr/lib/postgresql/*/bin.
func pgBinDir() string {
	if d := os.Getenv("PGBIN"); d != "" {
		return d
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); fileExists(filepath.Join(d, "initdb")) {
			return d
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if fileExists(filepath.Join(dirs[i], "initdb")) {
			return dirs[i]
		}
	}
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startPostgres starts a throwaway cluster for this test and returns its URL.
func startPostgres(t *testing.T) string {
	bin := pgBinDir()
	if bin == "" {
		t.Skip("PostgreSQL half of the storage suite skipped: no PostgreSQL server binaries (initdb) " +
			"in $PGBIN, pg_config --bindir or /usr/lib/postgresql/*/bin; install them " +
			"(Debian: apt-get install -y postgresql) or set SGTUNE_TEST_POSTGRES=postgres://...")
	}
	up, down := filepath.Join("..", "scripts", "pg-up.sh"), filepath.Join("..", "scripts", "pg-down.sh")
	for _, s := range []string{up, down} {
		if !fileExists(s) {
			t.Fatalf("%s is missing", s)
		}
	}
	tmp := t.TempDir()
	// As root the scripts run PostgreSQL as user postgres, which must be
	// able to reach its directory: let it traverse ours.
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(tmp, "pg")
	var out bytes.Buffer
	var err error
	for attempt := 0; attempt < 3; attempt++ { // a free port can be taken before the server binds it
		out.Reset()
		cmd := exec.Command("bash", up, dir, fmt.Sprint(freePort(t)))
		cmd.Env = append(os.Environ(), "PGBIN="+bin)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err = cmd.Run(); err == nil {
			break
		}
		os.RemoveAll(dir)
	}
	if err != nil {
		t.Fatalf("scripts/pg-up.sh: %v\n%s", err, out.String())
	}
	t.Cleanup(func() {
		cmd := exec.Command("bash", down, dir)
		cmd.Env = append(os.Environ(), "PGBIN="+bin)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("scripts/pg-down.sh: %v\n%s", err, b)
		}
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dsn := lines[len(lines)-1]
	if !IsPostgres(dsn) {
		t.Fatalf("scripts/pg-up.sh printed no URL:\n%s", out.String())
	}
	t.Logf("throwaway PostgreSQL cluster (%s) at %s", bin, dsn)
	return dsn
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// execSQL runs a statement on the store's database, behind its back: tests
// use it to stand in for the passage of time.
func execSQL(t testing.TB, s *Store, query string, args ...any) {
	t.Helper()
	if _, err := s.wdb.Exec(s.d.rebind(query), args...); err != nil {
		t.Fatal(err)
	}
}

// queryRow reads one row from the store's database.
func queryRow(s *Store, query string, args ...any) *sql.Row {
	return s.rdb.QueryRow(s.d.rebind(query), args...)
}

package storage

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/c-bata/goptuna"
)

// rawDB opens a database behind Store's back.
func rawDB(t *testing.T, b *backend, dsn string) *sql.DB {
	t.Helper()
	driver := "sqlite3"
	if b.d == dialectPostgres {
		driver = "pgx"
	}
	db, err := sql.Open(driver, dsn)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func testMigrations(t *testing.T, b *backend) {
	dsn := b.newDSN(t)
	s := openDSN(t, dsn)
	type row struct {
		version int
		name    string
		applied int64
	}
	read := func(s *Store) []row {
		rows, err := s.rdb.Query("SELECT version, name, applied_ns FROM schema_migrations ORDER BY version")
		must(t, err)
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			must(t, rows.Scan(&r.version, &r.name, &r.applied))
			out = append(out, r)
		}
		must(t, rows.Err())
		return out
	}
	first := read(s)
	if len(first) != SchemaVersion {
		t.Fatalf("schema_migrations = %+v; want %d rows", first, SchemaVersion)
	}
	for i, r := range first {
		if r.version != i+1 || r.name != migrations[i].name || r.applied == 0 {
			t.Fatalf("schema_migrations row %d = %+v", i, r)
		}
	}
	must(t, s.Close())
	// Reopening applies nothing again.
	s = openDSN(t, dsn)
	if again := read(s); !reflect.DeepEqual(again, first) {
		t.Fatalf("reopen changed schema_migrations: %+v, was %+v", again, first)
	}
	must(t, s.IntegrityCheck())

	// A newer schema is refused, and left alone.
	execSQL(t, s, "INSERT INTO schema_migrations(version, name, applied_ns) VALUES (?, 'from the future', 1)", SchemaVersion+1)
	if s2, err := Open(dsn); err == nil || !strings.Contains(err.Error(), "newer") {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("Open of a newer schema = %v; want an error saying it is newer", err)
	}
	if err := s.IntegrityCheck(); err == nil && b.d == dialectPostgres {
		t.Fatal("IntegrityCheck passed on a schema of another version")
	}

	// A database holding someone else's tables is refused, untouched.
	foreign := b.newDSN(t)
	db := rawDB(t, b, foreign)
	if _, err := db.Exec("CREATE TABLE other (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if s3, err := Open(foreign); err == nil || !strings.Contains(err.Error(), "not an sgtune database") {
		if s3 != nil {
			s3.Close()
		}
		t.Fatalf("Open of a foreign database = %v", err)
	}
	var n int
	if err := db.QueryRow(b.d.rebind("SELECT count(*) FROM other")).Scan(&n); err != nil {
		t.Fatalf("the foreign table is gone: %v", err)
	}
}

func TestMigrationStatements(t *testing.T) {
	for _, d := range []dialect{dialectSQLite, dialectPostgres} {
		for i, m := range migrations {
			sts := m.statements(d)
			if len(sts) == 0 {
				t.Fatalf("%s migration %d renders no statement", d, i+1)
			}
			for _, st := range sts {
				if strings.Contains(st, "{{") {
					t.Fatalf("%s migration %d: unrendered token in %q", d, i+1, st)
				}
				if strings.HasSuffix(st, ";") {
					t.Fatalf("%s migration %d: statements not split: %q", d, i+1, st)
				}
			}
		}
	}
	// Migration 1 on SQLite is the schema sgtune wrote before migrations
	// were numbered in schema_migrations (testdata/schema_v1.sql, copied
	// from that release): databases made then were made with exactly it.
	old, err := os.ReadFile(filepath.Join("testdata", "schema_v1.sql"))
	must(t, err)
	if got := strings.Join(migrations[0].statements(dialectSQLite), ";\n") + ";"; got != strings.TrimSpace(string(old)) {
		t.Fatalf("migration 1 for SQLite differs from the released schema:\n%s", got)
	}
}

func TestRebind(t *testing.T) {
	tests := []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"SELECT a FROM t WHERE x = ? AND y = ?", "SELECT a FROM t WHERE x = $1 AND y = $2"},
		{"SELECT '?' FROM t WHERE x = ?", "SELECT '?' FROM t WHERE x = $1"},
		{"INSERT INTO t VALUES (?, (SELECT MAX(n) FROM t WHERE s = ?), ?)", "INSERT INTO t VALUES ($1, (SELECT MAX(n) FROM t WHERE s = $2), $3)"},
	}
	for _, tc := range tests {
		if got := dialectPostgres.rebind(tc.in); got != tc.want {
			t.Errorf("rebind(%q) = %q; want %q", tc.in, got, tc.want)
		}
		if got := dialectSQLite.rebind(tc.in); got != tc.in {
			t.Errorf("SQLite rebind(%q) = %q", tc.in, got)
		}
	}
}

// A database written by sgtune before schema_migrations (PRAGMA
// user_version 1, testdata/schema_v1.sql, rows as that release inserted
// them) opens, upgrades in place and keeps every row; trials it counted as
// launched count against the budget.
func TestLegacySQLiteUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := sql.Open("sqlite3", path)
	must(t, err)
	schema, err := os.ReadFile(filepath.Join("testdata", "schema_v1.sql"))
	must(t, err)
	legacy := string(schema) + `
PRAGMA user_version = 1;
INSERT INTO studies(study_id, name, direction, created_ns) VALUES (1, 'old', 'maximize', 1000);
INSERT INTO study_attrs VALUES (1, 'system', 'sgtune.uid', 'abcd1234');
INSERT INTO trials(trial_id, study_id, number, state, value, start_ns, complete_ns, heartbeat_ns) VALUES
	(1, 1, 0, 'COMPLETE', 1500.5, 2000, 3000, 2500),
	(2, 1, 1, 'PRUNED', 0, 4000, 5000, 4500),
	(3, 1, 2, 'PRUNED', 0, 6000, 6001, NULL),
	(4, 1, 3, 'FAIL', 0, 7000, 8000, 7500),
	(5, 1, 4, 'RUNNING', NULL, 9000, NULL, 9500);
INSERT INTO trial_params VALUES (1, 'mem', 0.85, '{"name":"UniformDistribution","attributes":{"low":0.5,"high":0.95}}');
INSERT INTO trial_values VALUES (1, 0, 1400);
INSERT INTO trial_attrs VALUES
	(1, 'user', 'sgtune.state', 'complete'),
	(2, 'user', 'sgtune.state', 'failed'),
	(3, 'user', 'sgtune.state', 'infeasible'),
	(4, 'user', 'sgtune.state', 'interrupted'),
	(5, 'system', 'sgtune.owner', 'host:1');
INSERT INTO points(trial_id, seq, phase, concurrency, repeat, context, state, status, requested, issued, completed,
	failed, output_tokens, duration_s, output_tok_s, requests_s, ttft_p50_s, ttft_p99_s, latency_p50_s, latency_p99_s,
	itl_p50_s, json) VALUES (1, 0, '', 16, 0, 0, 'passed', '', 128, 128, 128, 0, 32768, 10, 3276.8, 12.8, 0.1, 0.3,
	2, 3, 0.01, '{"concurrency":16,"state":"passed","output_tok_s":3276.8}');
INSERT INTO requests VALUES (1, 0, '', 16, 0, 0, 0, 0.1, 2.0, 256, 1, '');
`
	if _, err := db.Exec(legacy); err != nil {
		t.Fatal(err)
	}
	must(t, db.Close())

	s, err := Open(path)
	must(t, err)
	defer s.Close()
	must(t, s.IntegrityCheck())
	var v, n int
	must(t, queryRow(s, "PRAGMA user_version").Scan(&v))
	must(t, queryRow(s, "SELECT count(*) FROM schema_migrations").Scan(&n))
	if v != SchemaVersion || n != SchemaVersion {
		t.Fatalf("after upgrade: user_version %d, %d migrations recorded; want %d", v, n, SchemaVersion)
	}
	study, err := s.GetStudyIDFromName("old")
	must(t, err)
	all, err := s.GetAllTrials(study)
	must(t, err)
	if len(all) != 5 || all[0].Value != 1500.5 || all[0].Params["mem"] != 0.85 || all[0].IntermediateValues[0] != 1400 ||
		all[4].State != goptuna.TrialStateRunning || all[4].SystemAttrs[AttrOwner] != "host:1" || all[3].UserAttrs[AttrState] != StateInterrupted {
		t.Fatalf("legacy trials after upgrade: %+v", all)
	}
	if sa, _ := s.GetStudySystemAttrs(study); sa[AttrUID] != "abcd1234" {
		t.Fatalf("study attrs after upgrade: %v", sa)
	}
	if pts, err := s.Points(1); err != nil || len(pts) != 1 || pts[0].OutputTokS != 3276.8 {
		t.Fatalf("points after upgrade: %+v, %v", pts, err)
	}
	if rs, err := s.Requests(1); err != nil || len(rs) != 1 || !rs[0].OK {
		t.Fatalf("requests after upgrade: %+v, %v", rs, err)
	}
	// Launched then: complete, failed, and the one in flight.
	ctx := context.Background()
	for id, want := range map[int]bool{1: true, 2: true, 3: false, 4: false, 5: true} {
		if l, err := s.Launched(ctx, id); err != nil || l != want {
			t.Fatalf("Launched(trial %d) = %v, %v; want %v", id, l, err, want)
		}
	}
	// The new tables work, and numbering continues.
	if ok, err := s.AcquireLease(ctx, study, "gpus@h:0", "h:1", 60e9); err != nil || !ok {
		t.Fatalf("AcquireLease on an upgraded database = %v, %v", ok, err)
	}
	id := mustTrial(t, s, study)
	if num, _ := s.GetTrialNumberFromID(id); num != 5 {
		t.Fatalf("new trial number %d; want 5", num)
	}
	if ok, err := s.ClaimLaunch(ctx, id, 4); err != nil || !ok {
		t.Fatalf("ClaimLaunch with room = %v, %v", ok, err)
	}
	if ok, err := s.ClaimLaunch(ctx, mustTrial(t, s, study), 4); err != nil || ok {
		t.Fatalf("ClaimLaunch over the budget = %v, %v", ok, err)
	}
}

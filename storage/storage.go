// Package storage keeps studies, trials, sweep points and request records in
// SQL: an SQLite file on one host, or PostgreSQL for workers on many hosts.
// Store implements goptuna.Storage; both backends share its code and schema
// (see schema.go for the numbered migrations both run).
//
// Concurrency model: several goroutines and several processes (on several
// hosts with PostgreSQL) may share one database, and every write method is
// one transaction that is atomic across all of them.
//
// SQLite: every write runs in a BEGIN IMMEDIATE transaction on a
// single-connection write pool (WAL journal, busy timeout), so writers queue
// on the database's one write lock instead of failing with "database is
// locked" on a read-to-write upgrade, and a transaction sees no concurrent
// change. Reads run in deferred transactions on a separate pool and see one
// consistent WAL snapshot without blocking writers. The file must live on a
// local filesystem (WAL needs shared memory; never NFS).
//
// PostgreSQL: writes run at READ COMMITTED and take row locks on what they
// check before they change it: a method that reads a trial's state locks the
// trial's row (FOR NO KEY UPDATE), one that numbers a new trial or counts a
// study's launches locks the study's row, and ClaimWaitingTrial and
// ReapStale lock their candidates with SKIP LOCKED so concurrent claimers
// and reapers take disjoint trials without waiting. Locks are always taken
// trial rows first, then the study row. Row locks were chosen over
// SERIALIZABLE because the contended paths (numbering trials, claiming
// WAITING trials, reaping, the launch budget) then queue or skip instead of
// aborting and retrying; writes still retry on a serialization failure or
// deadlock (SQLSTATE 40001, 40P01), which only a concurrent DeleteStudy can
// cause. Reads run in READ ONLY REPEATABLE READ transactions: one snapshot,
// like SQLite's WAL reads.
package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/c-bata/goptuna"
	sqlite3 "github.com/mattn/go-sqlite3"
)

var _ goptuna.Storage = (*Store)(nil)

// ErrStudyNotFound is returned (wrapped) when no study has the given name.
var ErrStudyNotFound = errors.New("study not found")

// ErrDuplicateStudy is returned (wrapped) by CreateNewStudy when a study of
// that name exists. Processes racing to create one study should LoadStudy
// again on this error (goptuna.CreateStudy with StudyOptionLoadIfExists
// followed by a retry does exactly that).
var ErrDuplicateStudy = errors.New("study already exists")

// busyTimeout is how long SQLite waits for another writer's lock. Writes are
// short (milliseconds), so this only bounds pathological stalls.
const busyTimeout = 15 * time.Second

// Store is a goptuna.Storage on database/sql with sgtune's own tables.
// It is safe for concurrent use by several goroutines and processes.
type Store struct {
	path string  // SQLite file, or the PostgreSQL URL without its password
	d    dialect // which backend
	wdb  *sql.DB // SQLite: one connection, BEGIN IMMEDIATE; PostgreSQL: the pool
	rdb  *sql.DB // SQLite: read pool, deferred and query_only; PostgreSQL: wdb
	// frozen: read-only as an immutable file (see Frozen); wdb is nil.
	frozen bool
	// outageWait is OutageWait in nanoseconds, 0 until SetOutageWait;
	// atomic, as the store's goroutines read it while it may be set.
	outageWait atomic.Int64
}

// Open opens (creating and migrating if needed) the storage named by arg.
// A "postgres://" or "postgresql://" URL opens that PostgreSQL database (see
// IsPostgres); anything else names an SQLite file: a plain path,
// "sqlite:PATH", "sqlite:///PATH" (SQLAlchemy/Optuna style, so
// "sqlite:////abs/x.db" is absolute) or a "file:PATH" URL (its query
// parameters are ignored: Store sets its own). An SQLite file's parent
// directory must exist; it is not created.
func Open(arg string) (*Store, error) {
	if IsPostgres(arg) {
		return openPostgres(arg)
	}
	return openSQLite(arg)
}

// IsPostgres reports whether arg is a PostgreSQL URL that Open opens as
// such (postgres:// or postgresql://, any case), rather than an SQLite path.
func IsPostgres(arg string) bool {
	a := strings.ToLower(arg)
	return strings.HasPrefix(a, "postgres://") || strings.HasPrefix(a, "postgresql://")
}

func openSQLite(path string) (*Store, error) {
	p, err := ParsePath(path)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(p)
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("storage: directory of %s: %w", p, err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("storage: %s is not a directory", dir)
	}
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		return nil, fmt.Errorf("storage: %s is a directory, not a database file (%w)", p, ErrNotStudyDB)
	}

	wdb, err := sql.Open("sqlite3", dsn(p, true))
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", p, err)
	}
	wdb.SetMaxOpenConns(1) // writers queue in Go, not in SQLite's busy loop
	wdb.SetMaxIdleConns(1)
	wdb.SetConnMaxIdleTime(0)
	s := &Store{path: p, d: dialectSQLite, wdb: wdb}
	if err := s.init(); err != nil {
		wdb.Close()
		return nil, err
	}
	rdb, err := sql.Open("sqlite3", dsn(p, false))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("storage: open %s: %w", p, err)
	}
	rdb.SetMaxOpenConns(4)
	rdb.SetMaxIdleConns(4)
	s.rdb = rdb
	return s, nil
}

// ParsePath turns an SQLite storage argument (plain path, sqlite: or file:
// URL) into a filesystem path. A PostgreSQL URL is an error here: check
// IsPostgres first.
func ParsePath(arg string) (string, error) {
	switch {
	case arg == "":
		return "", errors.New("storage: empty path")
	case arg == ":memory:" || strings.Contains(arg, "mode=memory"):
		return "", errors.New("storage: in-memory databases are not supported; use a file (t.TempDir() in tests)")
	case strings.HasPrefix(arg, "sqlite:"):
		rest := strings.TrimPrefix(arg, "sqlite:")
		if strings.HasPrefix(rest, "///") {
			rest = rest[3:]
		} else if strings.HasPrefix(rest, "//") {
			return "", fmt.Errorf("storage: %q: write sqlite:///relative.db or sqlite:////absolute.db", arg)
		}
		if i := strings.IndexByte(rest, '?'); i >= 0 {
			rest = rest[:i]
		}
		if rest == "" {
			return "", fmt.Errorf("storage: %q names no file", arg)
		}
		return rest, nil
	case strings.HasPrefix(arg, "file:"):
		u, err := url.Parse(arg)
		if err != nil {
			return "", fmt.Errorf("storage: %q: %w", arg, err)
		}
		p := u.Opaque
		if p == "" {
			p = u.Path
		} else if q, err := url.PathUnescape(p); err == nil {
			p = q
		}
		if u.Host != "" && u.Host != "localhost" {
			return "", fmt.Errorf("storage: %q: remote file URLs are not supported", arg)
		}
		if p == "" {
			return "", fmt.Errorf("storage: %q names no file", arg)
		}
		return p, nil
	case IsPostgres(arg):
		return "", fmt.Errorf("storage: %q is a PostgreSQL URL, not an SQLite file (Open takes it as is)", arg)
	case strings.Contains(arg, "://"):
		return "", fmt.Errorf("storage: %q: only SQLite files (plain path, sqlite:///PATH or file:PATH) and postgres:// URLs are supported", arg)
	}
	return arg, nil
}

// dsn builds the mattn/go-sqlite3 DSN for a file, for the write
// connection or the read pool.
func dsn(path string, write bool) string {
	return sqliteURI(path, dsnQuery(write))
}

// sqliteURI is the SQLite URI of a file with query q. The path is escaped
// so names with '?', '#' or '%' work.
func sqliteURI(path string, q url.Values) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + r.Replace(path) + "?" + q.Encode()
}

// dsnQuery is the query of dsn.
func dsnQuery(write bool) url.Values {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	q.Set("_foreign_keys", "on")
	if write {
		q.Set("_journal_mode", "WAL")
		q.Set("_txlock", "immediate")
		// NORMAL in WAL mode survives a killed process (not power loss of
		// the last commits) and avoids an fsync per commit.
		q.Set("_synchronous", "NORMAL")
	} else {
		q.Set("_txlock", "deferred")
		q.Set("_query_only", "on")
	}
	return q
}

// init checks the file is an SQLite database in WAL mode and migrates it.
func (s *Store) init() error {
	// Switching a fresh file to WAL (done by the driver on connect) needs an
	// exclusive lock and does not wait on the busy handler, so processes
	// opening a new database at once retry here.
	var mode string
	deadline := time.Now().Add(busyTimeout)
	for attempt := 1; ; attempt++ {
		err := s.wdb.QueryRow("PRAGMA journal_mode").Scan(&mode)
		if err == nil {
			break
		}
		if !isBusy(err) || time.Now().After(deadline) {
			return s.openErr(err)
		}
		time.Sleep(time.Duration(min(attempt, 20)) * 5 * time.Millisecond)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("storage: %s: journal mode is %q, not WAL (is it on a network or read-only filesystem?)", s.path, mode)
	}
	if err := s.migrate(); err != nil {
		return s.openErr(err)
	}
	return nil
}

// ErrNotStudyDB: the storage names a file or database that is not
// sgtune's (another program's tables, a file that is not SQLite).
var ErrNotStudyDB = errors.New("not an sgtune database")

func (s *Store) openErr(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && se.Code == sqlite3.ErrNotADB {
		return fmt.Errorf("storage: %s is not an SQLite database (%w): %w", s.path, ErrNotStudyDB, err)
	}
	return fmt.Errorf("storage: %s: %w", s.path, err)
}

// Path returns the SQLite database file's path, or the PostgreSQL URL with
// its password redacted.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error {
	var errs []error
	if s.rdb != nil && s.rdb != s.wdb {
		errs = append(errs, s.rdb.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	return errors.Join(errs...)
}

// write runs fn in one write transaction (see the package comment),
// retrying the whole transaction a few times when the backend reports a
// transient conflict: SQLite still busy after the busy timeout, or a
// PostgreSQL serialization failure or deadlock. fn must be safe to re-run.
func (s *Store) write(fn func(tx *txn) error) error {
	return s.writeCtx(context.Background(), fn)
}

func (s *Store) writeCtx(ctx context.Context, fn func(tx *txn) error) error {
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		err = s.tryWrite(ctx, fn)
		if !s.retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("storage: %w (after: %w)", ctx.Err(), err)
		case <-time.After(time.Duration(25*(attempt+1)) * time.Millisecond):
		}
	}
	return err
}

// errUnreachable marks a transaction that could not begin because the
// PostgreSQL server could not be reached (restarting, a network cut).
var errUnreachable = errors.New("database unreachable")

// maxOutageWait is the default and longest OutageWait: a PostgreSQL
// restart or a short network cut must not end a worker that holds a
// measured trial, yet the worker must not wait past the default lease time
// (launch.stale_after, 2 minutes), after which other workers take the
// trial over.
const maxOutageWait = time.Minute

// OutageWait is how long a transaction waits, in all, for a PostgreSQL
// server that cannot be reached before it fails: a minute unless
// SetOutageWait shortened it.
func (s *Store) OutageWait() time.Duration {
	if d := time.Duration(s.outageWait.Load()); d > 0 {
		return d
	}
	return maxOutageWait
}

// SetOutageWait sets OutageWait to d, at most a minute (0 or less: the
// minute). A study run sets it inside the study's lease time, so that a
// worker cut off from the server gives its trial up before other workers
// take it over. It may be called while the store is in use.
func (s *Store) SetOutageWait(d time.Duration) {
	s.outageWait.Store(int64(min(max(d, 0), maxOutageWait)))
}

// minBeginTry is the least time a try to begin a transaction gets, so that
// the try at the end of OutageWait can still reach a server that is back.
const minBeginTry = time.Second

// errTryTimedOut ends a try to begin a transaction that took the outage
// wait left (see beginTry).
var errTryTimedOut = errors.New("try timed out")

// begin begins a transaction on db. While the PostgreSQL server cannot be
// reached it tries again (the transaction never began, so nothing of it
// was applied), backing off from 250 ms to 10 s, for OutageWait in all;
// each try is bounded by the wait left (at least minBeginTry): a cut that
// drops packets would hold a connection attempt for pgConnectTimeout. The
// caller calls end once the transaction is committed or rolled back. what
// names the transaction in errors ("begin", "begin read").
func (s *Store) begin(ctx context.Context, db *sql.DB, opts *sql.TxOptions, what string) (*sql.Tx, func(), error) {
	if s.d != dialectPostgres {
		tx, err := db.BeginTx(ctx, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("storage: %s: %w", what, err)
		}
		return tx, func() {}, nil
	}
	start, wait, outage := time.Now(), 250*time.Millisecond, s.OutageWait()
	var last error // the last try's error, for the message
	for {
		tx, end, err := beginTry(ctx, db, opts, max(outage-time.Since(start), minBeginTry))
		if err == nil {
			return tx, end, nil
		}
		if ctx.Err() != nil || !s.unreachable(err) {
			return nil, nil, fmt.Errorf("storage: %s: %w", what, err)
		}
		if errors.Is(err, errTryTimedOut) {
			err = fmt.Errorf("storage: %s: %w: the server could not be reached within the %v wait", what, errUnreachable, outage)
			if last != nil {
				err = fmt.Errorf("%w (before: %w)", err, last)
			}
			return nil, nil, err
		}
		last = err
		err = fmt.Errorf("storage: %s: %w: %w", what, errUnreachable, err)
		left := outage - time.Since(start)
		if left <= 0 {
			return nil, nil, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("storage: %w (after: %w)", ctx.Err(), err)
		case <-time.After(min(wait, left)): // the last try comes at the end of the wait, not past it
		}
		wait = min(2*wait, 10*time.Second)
	}
}

// beginTry begins a transaction on db, giving up with errTryTimedOut after
// d: waiting for a pooled connection, its liveness ping, dialing a new one
// and the BEGIN all count. The try runs under a child of ctx that a timer
// cancels, not under a deadline: database/sql rolls a transaction back once
// the context it began under is done, so the timer is stopped as BeginTx
// returns and end, called after the transaction ended, cancels the child.
// (A deadline on db.Conn or PingContext alone would bound connecting, not
// the BEGIN.)
func beginTry(ctx context.Context, db *sql.DB, opts *sql.TxOptions, d time.Duration) (*sql.Tx, func(), error) {
	tctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(d, cancel)
	tx, err := db.BeginTx(tctx, opts)
	if !timer.Stop() { // tctx is cancelled, or about to be
		if tx != nil {
			_ = tx.Rollback() // begun too late, rolled back with tctx anyway
		}
		cancel()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, errTryTimedOut
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return tx, cancel, nil
}

// unreachable reports whether err, from beginning a transaction on
// PostgreSQL, may be tried again: the transaction never began, so nothing
// of it was applied. Beside a refused or cut connection that includes a
// pooled connection the server closed (57P01 after a restart, an
// unexpected EOF), which database/sql does not replace by itself, and a
// connection attempt that ran out of its connect_timeout (an error wrapping
// context.DeadlineExceeded: begin checks its own ctx first).
func (s *Store) unreachable(err error) bool {
	return s.d == dialectPostgres && err != nil
}

func (s *Store) retryable(err error) bool {
	if err == nil {
		return false
	}
	if s.d == dialectPostgres {
		return isPgRetryable(err)
	}
	return isBusy(err)
}

func (s *Store) tryWrite(ctx context.Context, fn func(tx *txn) error) error {
	if s.wdb == nil {
		return fmt.Errorf("storage: %s: %w", s.path, ErrReadOnly)
	}
	tx, end, err := s.begin(ctx, s.wdb, nil, "begin")
	if err != nil {
		return err
	}
	defer end() // after the commit or rollback below
	if err := fn(&txn{tx: tx, ctx: ctx, d: s.d, write: true}); err != nil {
		_ = tx.Rollback() // the error that made us roll back is what matters
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storage: commit: %w", err)
	}
	return nil
}

// read runs fn in one snapshot transaction: deferred on SQLite's read pool,
// READ ONLY REPEATABLE READ on PostgreSQL.
func (s *Store) read(fn func(tx *txn) error) error {
	return s.readCtx(context.Background(), fn)
}

func (s *Store) readCtx(ctx context.Context, fn func(tx *txn) error) error {
	var opts *sql.TxOptions
	if s.d == dialectPostgres {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	tx, end, err := s.begin(ctx, s.rdb, opts, "begin read")
	if err != nil {
		return err
	}
	defer end()
	defer tx.Rollback() //nolint:errcheck // read-only; nothing to keep
	return fn(&txn{tx: tx, ctx: ctx, d: s.d})
}

func isBusy(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) {
		return se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked
	}
	// Errors from the driver's connection setup are not always typed.
	return err != nil && strings.Contains(err.Error(), "database is locked")
}

// IntegrityCheck returns an error describing any problem it finds. On
// SQLite it runs PRAGMA integrity_check and PRAGMA foreign_key_check. On
// PostgreSQL, whose server enforces the constraints and has no built-in
// equivalent, it checks that the schema is at SchemaVersion with every
// table present.
func (s *Store) IntegrityCheck() error {
	if s.d == dialectPostgres {
		return s.pgIntegrityCheck()
	}
	return s.read(func(tx *txn) error {
		rows, err := tx.Query("PRAGMA integrity_check")
		if err != nil {
			return fmt.Errorf("storage: integrity_check: %w", err)
		}
		var msgs []string
		for rows.Next() {
			var m string
			if err := rows.Scan(&m); err != nil {
				rows.Close()
				return err
			}
			if m != "ok" {
				msgs = append(msgs, m)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		fk, err := tx.Query("PRAGMA foreign_key_check")
		if err != nil {
			return fmt.Errorf("storage: foreign_key_check: %w", err)
		}
		for fk.Next() {
			var table, parent string
			var rowid sql.NullInt64
			var idx int
			if err := fk.Scan(&table, &rowid, &parent, &idx); err != nil {
				fk.Close()
				return err
			}
			msgs = append(msgs, fmt.Sprintf("foreign key: %s row %d -> %s", table, rowid.Int64, parent))
		}
		fk.Close()
		if len(msgs) > 0 {
			return fmt.Errorf("storage: %s failed the integrity check: %s", s.path, strings.Join(msgs, "; "))
		}
		return fk.Err()
	})
}

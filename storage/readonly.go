package storage

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mattn/go-sqlite3"
)

// Frozen reports whether the Store reads its database as it was when
// opened (OpenRead's immutable fallback): a run that writes it later is
// seen only by opening it again.
func (s *Store) Frozen() bool { return s.frozen }

// ErrReadOnly marks a write to a Store that OpenRead opened read-only.
var ErrReadOnly = errors.New("opened read-only")

// OpenRead opens a storage for commands that only read (status, best,
// report, export). It opens as Open does where it can. An SQLite database
// in a directory this user cannot write (a teammate's run directory, a
// read-only mount) cannot be opened that way: SQLite creates its side
// files (-wal, -shm) beside the database, even to read. OpenRead then
// opens it read-only: through those side files where they exist (a run is
// writing it), else as an immutable file (no run is: the last writer folded
// its log into the file). Such a Store refuses writes with ErrReadOnly, and
// cannot upgrade an older schema.
func OpenRead(arg string) (*Store, error) {
	s, err := Open(arg)
	if err == nil || IsPostgres(arg) || !cannotWrite(err) {
		return s, err
	}
	p, perr := ParsePath(arg)
	if perr != nil {
		return nil, err
	}
	ro, rerr := openSQLiteReadOnly(p)
	if rerr != nil {
		return nil, fmt.Errorf("%w; read-only: %w", err, rerr)
	}
	return ro, nil
}

// cannotWrite reports an open that failed for want of write access.
func cannotWrite(err error) bool {
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrReadonly || se.Code == sqlite3.ErrCantOpen || se.Code == sqlite3.ErrPerm) {
		return true
	}
	return errors.Is(err, fs.ErrPermission)
}

func openSQLiteReadOnly(p string) (*Store, error) {
	q := dsnQuery(false) // the read pool's, on a file opened read-only
	q.Set("mode", "ro")
	frozen := false
	if _, err := os.Stat(p + "-wal"); errors.Is(err, fs.ErrNotExist) {
		q.Set("immutable", "1")
		frozen = true
	}
	db, err := sql.Open("sqlite3", sqliteURI(p, q))
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", p, err)
	}
	db.SetMaxOpenConns(4)
	s := &Store{path: p, d: dialectSQLite, rdb: db, frozen: frozen}
	var have int
	if err := db.QueryRow("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&have); err != nil {
		db.Close()
		return nil, s.openErr(err)
	}
	switch {
	case have > len(migrations):
		db.Close()
		return nil, fmt.Errorf("storage: %s: %w", p, newerErr(have))
	case have < len(migrations):
		db.Close()
		return nil, fmt.Errorf("storage: %s: schema version %d is older than this sgtune's (%d), and %s is not writable to upgrade it: open it once with `sgtune run` as a user who can write there",
			p, have, len(migrations), filepath.Dir(p))
	}
	return s, nil
}

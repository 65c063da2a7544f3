package storage

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"sync"
)

// dialect is the SQL backend a Store talks to. The queries are written once,
// with '?' placeholders and SQL both backends accept (ON CONFLICT upserts,
// RETURNING); txn rebinds the placeholders for PostgreSQL and adds its row
// locks, which SQLite needs no equivalent of (every write transaction holds
// the database's single write lock).
type dialect int

const (
	dialectSQLite dialect = iota
	dialectPostgres
)

func (d dialect) String() string {
	if d == dialectPostgres {
		return "postgres"
	}
	return "sqlite"
}

// rebound caches rebind's output: the queries are a fixed set.
var rebound sync.Map // string -> string

// rebind turns '?' placeholders into PostgreSQL's $1, $2, ... (none of the
// queries has a '?' inside a string literal; quoted text is skipped anyway).
func (d dialect) rebind(q string) string {
	if d != dialectPostgres || !strings.Contains(q, "?") {
		return q
	}
	if r, ok := rebound.Load(q); ok {
		return r.(string)
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	r := b.String()
	rebound.Store(q, r)
	return r
}

// txn is one transaction on a Store's backend: it rebinds placeholders and
// knows whether it may take row locks.
type txn struct {
	tx    *sql.Tx
	ctx   context.Context
	d     dialect
	write bool
}

func (t *txn) Exec(query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(t.ctx, t.d.rebind(query), args...)
}

func (t *txn) Query(query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(t.ctx, t.d.rebind(query), args...)
}

func (t *txn) QueryRow(query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(t.ctx, t.d.rebind(query), args...)
}

func (t *txn) Prepare(query string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(t.ctx, t.d.rebind(query))
}

// lock is the locking clause a write transaction appends to a SELECT of the
// rows it is about to change: on PostgreSQL (READ COMMITTED) the row lock
// makes check-then-write sequences atomic, and a locked row is re-read at
// its latest committed version. NO KEY UPDATE does not block the key-share
// locks that foreign-key checks of child inserts take. Empty on SQLite and
// in read transactions.
func (t *txn) lock() string {
	if t.write && t.d == dialectPostgres {
		return " FOR NO KEY UPDATE"
	}
	return ""
}

// lockSkip is lock for claiming one of several candidate rows: rows another
// transaction holds are skipped instead of waited for.
func (t *txn) lockSkip() string {
	if t.write && t.d == dialectPostgres {
		return " FOR NO KEY UPDATE SKIP LOCKED"
	}
	return ""
}

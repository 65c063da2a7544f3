package storage

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// pgConnectTimeout bounds Open's first connection when the URL sets no
// connect_timeout: an unreachable server is reported, not waited on.
const pgConnectTimeout = 15 * time.Second

// pgMaxConns is each Store's pool size: a worker runs a few trials at once
// and each write is one short transaction.
const pgMaxConns = 8

// openPostgres opens a PostgreSQL database through pgx's database/sql driver
// and migrates its schema. Tables live in the connection's current schema
// (the first of search_path, "public" by default; a "search_path" query
// parameter in the URL picks another), which must hold only sgtune's tables.
func openPostgres(dsn string) (*Store, error) {
	name := redactURL(dsn)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("storage: %s: %w", name, err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(pgMaxConns)
	db.SetMaxIdleConns(pgMaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{path: name, d: dialectPostgres, wdb: db, rdb: db}
	ctx, cancel := context.WithTimeout(context.Background(), pgConnectTimeout+5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("storage: %s: %w", name, err)
	}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("storage: %s: %w", name, err)
	}
	return s, nil
}

// redactURL hides the password of a PostgreSQL URL (in its user info or a
// password query parameter) for messages and Path.
func redactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		// Never echo an unparsable URL: it may hold a password.
		return "postgres://(unparsable URL)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// WithoutPassword returns a PostgreSQL URL without its password (in the
// user info or a password query parameter), for commands printed to be
// pasted: the driver then reads the password from $PGPASSWORD or
// ~/.pgpass. removed says whether there was one. Anything else comes back
// as it was.
func WithoutPassword(dsn string) (out string, removed bool) {
	if !IsPostgres(dsn) {
		return dsn, false
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return redactURL(dsn), true
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.User(u.User.Username())
		removed = true
	}
	if q := u.Query(); q.Has("password") {
		q.Del("password")
		u.RawQuery = q.Encode()
		removed = true
	}
	if !removed {
		return dsn, false
	}
	return u.String(), true
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// isPgRetryable reports a PostgreSQL serialization failure or deadlock: the
// transaction was rolled back and may simply be run again.
func isPgRetryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// pgIntegrityCheck checks the schema version and that every table exists.
func (s *Store) pgIntegrityCheck() error {
	return s.read(func(tx *txn) error {
		v, err := appliedVersion(tx)
		if err != nil {
			return err
		}
		if v != SchemaVersion {
			return fmt.Errorf("storage: %s: schema version %d, want %d", s.path, v, SchemaVersion)
		}
		var missing []string
		for _, t := range tables {
			ok, err := tableExists(tx, t)
			if err != nil {
				return err
			}
			if !ok {
				missing = append(missing, t)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("storage: %s failed the integrity check: missing tables %s", s.path, strings.Join(missing, ", "))
		}
		return nil
	})
}

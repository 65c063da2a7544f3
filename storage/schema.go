package storage

import (
	"database/sql"
	"fmt"
)

// migrations are applied in order; migration i (0-based) brings the
// database to PRAGMA user_version i+1. Never edit a released migration:
// append a new one.
var migrations = []string{
	// 1: studies, trials (goptuna), points and requests (sgtune).
	`
CREATE TABLE studies (
	study_id   INTEGER PRIMARY KEY AUTOINCREMENT,
	name       TEXT NOT NULL UNIQUE,
	direction  TEXT NOT NULL DEFAULT 'minimize' CHECK (direction IN ('minimize', 'maximize')),
	created_ns INTEGER NOT NULL
);
CREATE TABLE study_attrs (
	study_id INTEGER NOT NULL REFERENCES studies(study_id) ON DELETE CASCADE,
	kind     TEXT NOT NULL CHECK (kind IN ('user', 'system')),
	key      TEXT NOT NULL,
	value    TEXT NOT NULL,
	PRIMARY KEY (study_id, kind, key)
) WITHOUT ROWID;
CREATE TABLE trials (
	trial_id     INTEGER PRIMARY KEY AUTOINCREMENT,
	study_id     INTEGER NOT NULL REFERENCES studies(study_id) ON DELETE CASCADE,
	number       INTEGER NOT NULL,
	state        TEXT NOT NULL CHECK (state IN ('RUNNING', 'COMPLETE', 'PRUNED', 'FAIL', 'WAITING')),
	value        REAL,
	start_ns     INTEGER,
	complete_ns  INTEGER,
	heartbeat_ns INTEGER,
	UNIQUE (study_id, number)
);
CREATE INDEX trials_by_state ON trials(study_id, state);
CREATE TABLE trial_params (
	trial_id     INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
	name         TEXT NOT NULL,
	value        REAL NOT NULL,
	distribution TEXT NOT NULL,
	PRIMARY KEY (trial_id, name)
) WITHOUT ROWID;
CREATE TABLE trial_values (
	trial_id INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
	step     INTEGER NOT NULL,
	value    REAL NOT NULL,
	PRIMARY KEY (trial_id, step)
) WITHOUT ROWID;
CREATE TABLE trial_attrs (
	trial_id INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
	kind     TEXT NOT NULL CHECK (kind IN ('user', 'system')),
	key      TEXT NOT NULL,
	value    TEXT NOT NULL,
	PRIMARY KEY (trial_id, kind, key)
) WITHOUT ROWID;
CREATE TABLE points (
	trial_id      INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
	seq           INTEGER NOT NULL,
	phase         TEXT NOT NULL,
	concurrency   INTEGER NOT NULL,
	repeat        INTEGER NOT NULL,
	context       INTEGER NOT NULL,
	state         TEXT NOT NULL,
	status        TEXT NOT NULL,
	requested     INTEGER NOT NULL,
	issued        INTEGER NOT NULL,
	completed     INTEGER NOT NULL,
	failed        INTEGER NOT NULL,
	output_tokens INTEGER NOT NULL,
	duration_s    REAL NOT NULL,
	output_tok_s  REAL NOT NULL,
	requests_s    REAL NOT NULL,
	ttft_p50_s    REAL NOT NULL,
	ttft_p99_s    REAL NOT NULL,
	latency_p50_s REAL NOT NULL,
	latency_p99_s REAL NOT NULL,
	itl_p50_s     REAL NOT NULL,
	json          TEXT NOT NULL,
	PRIMARY KEY (trial_id, seq)
) WITHOUT ROWID;
CREATE TABLE requests (
	trial_id      INTEGER NOT NULL REFERENCES trials(trial_id) ON DELETE CASCADE,
	seq           INTEGER NOT NULL,
	phase         TEXT NOT NULL,
	concurrency   INTEGER NOT NULL,
	repeat        INTEGER NOT NULL,
	context       INTEGER NOT NULL,
	idx           INTEGER NOT NULL,
	ttft_s        REAL NOT NULL,
	latency_s     REAL NOT NULL,
	output_tokens INTEGER NOT NULL,
	ok            INTEGER NOT NULL,
	error         TEXT NOT NULL,
	PRIMARY KEY (trial_id, seq)
) WITHOUT ROWID;
`,
}

// SchemaVersion is the PRAGMA user_version this build writes and reads.
var SchemaVersion = len(migrations)

// migrate brings the schema to SchemaVersion inside one IMMEDIATE
// transaction, so concurrent openers migrate exactly once.
func (s *Store) migrate() error {
	return s.write(func(tx *sql.Tx) error {
		var v int
		if err := tx.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		if v > len(migrations) {
			return fmt.Errorf("schema version %d is newer than this sgtune understands (%d); upgrade sgtune", v, len(migrations))
		}
		if v == 0 {
			var n int
			if err := tx.QueryRow("SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'").Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("not an sgtune database (it holds %d other tables)", n)
			}
		}
		for i := v; i < len(migrations); i++ {
			if _, err := tx.Exec(migrations[i]); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
		if v != len(migrations) {
			// PRAGMA takes no bind parameters; the value is our own int.
			if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", len(migrations))); err != nil {
				return err
			}
		}
		return nil
	})
}

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

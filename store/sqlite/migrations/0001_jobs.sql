-- redrive schema v1: jobs (with their history as a JSON array) and counters.
-- Times are Unix microseconds (UTC).

CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    payload          BLOB    NOT NULL,
    state            TEXT    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    policy           BLOB,
    idem_key         TEXT,
    dependency       TEXT    NOT NULL DEFAULT '',
    reprocessable    INTEGER NOT NULL DEFAULT 1,
    created_at       INTEGER NOT NULL,
    run_at           INTEGER NOT NULL,
    attempted_at     INTEGER,
    finished_at      INTEGER,
    lease_until      INTEGER,
    worker           TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    retry_count      INTEGER NOT NULL DEFAULT 0,
    last_error       TEXT    NOT NULL DEFAULT '',
    last_error_class TEXT    NOT NULL DEFAULT '',
    last_failed_at   INTEGER,
    dead_at          INTEGER,
    dead_reason      TEXT    NOT NULL DEFAULT '',
    fingerprint      TEXT    NOT NULL DEFAULT '',
    redriven         INTEGER NOT NULL DEFAULT 0,
    history          BLOB
);

-- Idempotent enqueue: the unique constraint decides, no check-then-insert.
CREATE UNIQUE INDEX jobs_idem_key ON jobs (idem_key) WHERE idem_key IS NOT NULL;
-- Fetch: due jobs of a queue, oldest first. Partial, so it holds only waiting jobs.
CREATE INDEX jobs_due ON jobs (queue, run_at, id) WHERE state IN ('pending', 'scheduled');
-- DLQ listing by time and grouping by cause.
CREATE INDEX jobs_dead ON jobs (dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_fingerprint ON jobs (fingerprint, dead_at) WHERE state = 'dead';
-- Rescue of expired leases: only running jobs are in it.
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE state = 'running';

-- Jobs per queue and state, kept exactly by the store in the transaction
-- of every state change. (An index on state would give the same counts at
-- the price of two B-tree updates per transition: half the writer's work.)
CREATE TABLE job_counts (
    queue TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, state)
) WITHOUT ROWID;

CREATE TABLE counters (
    queue TEXT    NOT NULL,
    name  TEXT    NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (queue, name)
) WITHOUT ROWID;

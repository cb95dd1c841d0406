-- redrive SQLite schema v6.
--
-- Idempotency keys outlive their jobs: when retention or a purge deletes a
-- job that held a key, the key stays taken here (a tombstone) until it is
-- older than the key retention, so a duplicate enqueued later is answered
-- with what became of the first job instead of doing the work again.
CREATE TABLE idem_keys (
    key         TEXT    NOT NULL PRIMARY KEY,
    job_id      INTEGER NOT NULL,
    queue       TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL, -- the job's enqueue time (Unix microseconds)
    finished_at INTEGER,
    deleted_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX idem_keys_created ON idem_keys (created_at);

-- The worker processes on the store: each registers at start, heartbeats
-- while it runs, and is marked stopped when it stops cleanly or another
-- worker finds it gone. Times are Unix microseconds.
CREATE TABLE workers (
    id           TEXT    NOT NULL PRIMARY KEY,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    instance     TEXT    NOT NULL,
    version      TEXT    NOT NULL,
    queues       TEXT    NOT NULL, -- JSON object: queue -> concurrency
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    stopped_at   INTEGER,
    stop_reason  TEXT    NOT NULL DEFAULT ''
) WITHOUT ROWID;

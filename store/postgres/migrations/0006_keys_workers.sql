-- redrive PostgreSQL schema v6.
--
-- Idempotency keys outlive their jobs: when retention or a purge deletes a
-- job that held a key, the key stays taken here (a tombstone) until it is
-- older than the key retention, so a duplicate enqueued later is answered
-- with what became of the first job instead of doing the work again.
CREATE TABLE idem_keys (
    key         text        PRIMARY KEY,
    job_id      bigint      NOT NULL,
    queue       text        NOT NULL,
    kind        text        NOT NULL,
    state       text        NOT NULL,
    created_at  timestamptz NOT NULL, -- the job's enqueue time
    finished_at timestamptz,
    deleted_at  timestamptz NOT NULL
);
CREATE INDEX idem_keys_created ON idem_keys (created_at);

-- The worker processes on the store: each registers at start, heartbeats
-- while it runs, and is marked stopped when it stops cleanly or another
-- worker finds it gone.
CREATE TABLE workers (
    id           text        PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    instance     text        NOT NULL,
    version      text        NOT NULL,
    queues       jsonb       NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at   timestamptz,
    stop_reason  text        NOT NULL DEFAULT ''
);

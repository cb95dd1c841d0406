-- redrive PostgreSQL schema v9: durable bulk operations (replay, redrive,
-- purge, export), and the job a replayed job replays.

-- replay_of is the id of the job a replay copied (NULL for other jobs).
ALTER TABLE jobs ADD COLUMN replay_of bigint;
CREATE INDEX jobs_replay_of ON jobs (replay_of) WHERE replay_of IS NOT NULL;

-- An operation works through the jobs with cursor < id <= max_id that
-- match its filter (in params), batch by batch; each batch commits with
-- the advance of cursor. A runner holds it with a lease fenced by worker.
CREATE TABLE operations (
    id          text        PRIMARY KEY,
    kind        text        NOT NULL,
    state       text        NOT NULL
        CHECK (state IN ('pending', 'running', 'paused', 'done', 'failed', 'canceled')),
    params      jsonb       NOT NULL, -- store.OperationParams
    progress    jsonb       NOT NULL, -- store.OperationProgress
    cursor      bigint      NOT NULL DEFAULT 0,
    max_id      bigint      NOT NULL,
    worker      text,
    lease_until timestamptz,
    error       text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL,
    started_at  timestamptz,
    updated_at  timestamptz NOT NULL,
    finished_at timestamptz
);
-- Listing, newest first.
CREATE INDEX operations_created ON operations (created_at, id);
-- Claiming: pending operations, and running ones whose lease may end.
CREATE INDEX operations_runnable ON operations (created_at) WHERE state IN ('pending', 'running');

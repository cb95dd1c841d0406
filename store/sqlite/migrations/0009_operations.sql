-- redrive schema v9: durable bulk operations (replay, redrive, purge,
-- export), and the job a replayed job replays.

-- replay_of is the id of the job a replay copied (NULL for other jobs).
ALTER TABLE jobs ADD COLUMN replay_of INTEGER;
CREATE INDEX jobs_replay_of ON jobs (replay_of) WHERE replay_of IS NOT NULL;

-- An operation works through the jobs with cursor < id <= max_id that
-- match its filter (in params), batch by batch; each batch commits with
-- the advance of cursor. A runner holds it with a lease fenced by worker.
CREATE TABLE operations (
    id          TEXT    PRIMARY KEY,
    kind        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    params      BLOB    NOT NULL, -- JSON of store.OperationParams
    progress    BLOB    NOT NULL, -- JSON of store.OperationProgress
    cursor      INTEGER NOT NULL DEFAULT 0,
    max_id      INTEGER NOT NULL,
    worker      TEXT,
    lease_until INTEGER,
    error       TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    updated_at  INTEGER NOT NULL,
    finished_at INTEGER
);
-- Listing, newest first.
CREATE INDEX operations_created ON operations (created_at, id);
-- Claiming: pending operations, and running ones whose lease may end.
CREATE INDEX operations_runnable ON operations (created_at) WHERE state IN ('pending', 'running');

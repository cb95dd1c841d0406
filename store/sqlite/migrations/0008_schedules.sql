-- redrive SQLite schema v8: the schedules of periodic jobs. One row per
-- schedule name: its spec as last declared (JSON the engine encodes),
-- whether it is paused, and its cursor: every occurrence at or before it
-- is decided. The engine moves the cursor with a compare-and-set. Times
-- are Unix microseconds (UTC).

CREATE TABLE schedules (
    name        TEXT    NOT NULL PRIMARY KEY,
    spec        TEXT    NOT NULL,
    paused      INTEGER NOT NULL DEFAULT 0,
    -- When the schedule was paused; NULL while it is not paused.
    paused_at   INTEGER,
    cursor_at   INTEGER NOT NULL,
    -- The latest occurrence enqueued and its job; NULL before the first.
    last_run    INTEGER,
    last_job_id INTEGER,
    next_run    INTEGER,
    created_at  INTEGER NOT NULL,
    declared_at INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    CHECK ((paused = 0 AND paused_at IS NULL) OR (paused = 1 AND paused_at IS NOT NULL))
) WITHOUT ROWID;

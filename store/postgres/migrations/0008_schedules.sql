-- redrive PostgreSQL schema v8: the schedules of periodic jobs. One row
-- per schedule name: its spec as last declared (JSON the engine encodes),
-- whether it is paused, and its cursor: every occurrence at or before it
-- is decided. The engine moves the cursor with a compare-and-set.

CREATE TABLE schedules (
    name        text        PRIMARY KEY,
    spec        jsonb       NOT NULL,
    paused      boolean     NOT NULL DEFAULT false,
    -- When the schedule was paused; NULL while it is not paused.
    paused_at   timestamptz,
    cursor_at   timestamptz NOT NULL,
    -- The latest occurrence enqueued and its job; NULL before the first.
    last_run    timestamptz,
    last_job_id bigint,
    next_run    timestamptz,
    created_at  timestamptz NOT NULL,
    declared_at timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    CHECK (paused = (paused_at IS NOT NULL))
);

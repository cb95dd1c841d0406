-- redrive PostgreSQL schema v10.
--
-- Circuit breakers shared by the processes using the store: one row per
-- dependency, changed by the transitions of store.Apply* under a row lock
-- (SELECT ... FOR UPDATE); every change of state is announced on the
-- channel "<schema>_breaker".
CREATE TABLE breakers (
    name        text        PRIMARY KEY,
    state       text        NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    since       timestamptz NOT NULL,
    opened_by   text        NOT NULL DEFAULT '',
    opened_at   timestamptz,
    ready_at    timestamptz,
    forced      boolean     NOT NULL DEFAULT false,
    probe_by    text        NOT NULL DEFAULT '',
    probe_until timestamptz,
    window_us   bigint      NOT NULL DEFAULT 0,
    counts      jsonb       NOT NULL DEFAULT '[]',
    trips       bigint      NOT NULL DEFAULT 0,
    version     bigint      NOT NULL,
    updated_at  timestamptz NOT NULL
);

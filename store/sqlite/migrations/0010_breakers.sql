-- redrive SQLite schema v10.
--
-- Circuit breakers shared by the processes using the store: one row per
-- dependency, changed by the transitions of store.Apply* in the writer's
-- transaction, and polled by every process. Times are Unix microseconds.
CREATE TABLE breakers (
    name        TEXT    NOT NULL PRIMARY KEY,
    state       TEXT    NOT NULL,           -- closed, open or half_open
    since       INTEGER NOT NULL,
    opened_by   TEXT    NOT NULL DEFAULT '',
    opened_at   INTEGER,
    ready_at    INTEGER,
    forced      INTEGER NOT NULL DEFAULT 0,
    probe_by    TEXT    NOT NULL DEFAULT '',
    probe_until INTEGER,
    window_us   INTEGER NOT NULL DEFAULT 0,
    counts      TEXT    NOT NULL DEFAULT '[]', -- JSON array of store.BreakerCount
    trips       INTEGER NOT NULL DEFAULT 0,
    version     INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- redrive schema v3: the statistics history, one snapshot of the counters
-- a minute. Minutes are Unix microseconds (UTC) of a whole minute.

-- One row per recorded minute, so that a snapshot of a store whose
-- counters are all zero is recorded too, and so that the first snapshot
-- of a minute wins (INSERT ... ON CONFLICT DO NOTHING).
CREATE TABLE stat_minutes (
    minute INTEGER PRIMARY KEY
);

-- The counters of each recorded minute; zero counters are not stored.
CREATE TABLE stat_snapshots (
    minute INTEGER NOT NULL,
    queue  TEXT    NOT NULL,
    name   TEXT    NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (minute, queue, name)
) WITHOUT ROWID;

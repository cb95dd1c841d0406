-- redrive PostgreSQL schema v3: the statistics history, one snapshot of
-- the counters a minute.

-- One row per recorded minute, so that a snapshot of a store whose
-- counters are all zero is recorded too, and so that the first snapshot
-- of a minute wins: a concurrent second one waits on this primary key
-- and then does nothing (INSERT ... ON CONFLICT DO NOTHING).
CREATE TABLE stat_minutes (
    minute timestamptz PRIMARY KEY
);

-- The counters of each recorded minute, summed over their shards; zero
-- counters are not stored.
CREATE TABLE stat_snapshots (
    minute timestamptz NOT NULL,
    queue  text        NOT NULL,
    name   text        NOT NULL,
    n      bigint      NOT NULL,
    PRIMARY KEY (minute, queue, name)
);

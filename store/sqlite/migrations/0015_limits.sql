-- redrive SQLite schema: fleet-wide concurrency limits (store.Limits).
--
-- A job under a limit names it (climit) and its group's key (ckey). A
-- slot is a running job: the fetch counts the running jobs of a group
-- with jobs_limit_running, read in the writer's transaction, so the count
-- is the jobs' own state and cannot drift. Jobs without a limit have
-- climit NULL and are in neither limit index below: they pay nothing.
ALTER TABLE jobs ADD COLUMN climit TEXT;
ALTER TABLE jobs ADD COLUMN ckey TEXT NOT NULL DEFAULT '';

CREATE TABLE conc_limits (
    name        TEXT    PRIMARY KEY,
    max_running INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- The waiting jobs are split in two disjoint indexes: jobs_ready (of
-- migration 0014), rebuilt to hold only the jobs without a limit (the
-- usual fetch's walk, which therefore never steps over jobs waiting on a
-- slot), and jobs_limit_due, those under one.
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL;
-- The waiting jobs under a limit, with jobs_ready's key: the fetch's
-- limited path reads them the same way, one priority at a time, highest
-- first, each a range of due jobs. It covers the columns that path reads.
CREATE INDEX jobs_limit_due ON jobs (queue, priority, run_at, id, state, climit, ckey) WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL;
-- The slots taken: running jobs per group.
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE state = 'running' AND climit IS NOT NULL;

-- limit_gen counts the changes that can let a waiting limited job start:
-- a limited job leaving running (a slot freed), becoming due or changing
-- its due time or its priority (which can bring it into the fetch's
-- window), being put under a limit, and a limit set. A fetch whose
-- selection of limited jobs leased none remembers the count, and skips
-- the selection until it changes (or a later job comes due): while jobs
-- wait on full groups, the fetches of the others pay one read of it.
CREATE TABLE limit_gen (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT INTO limit_gen (id, n) VALUES (1, 0);
CREATE TRIGGER jobs_limit_gen AFTER UPDATE OF state, climit, run_at, priority ON jobs
    WHEN new.climit IS NOT NULL AND new.state <> 'running'
        AND (old.state <> new.state OR old.climit IS NOT new.climit OR old.run_at <> new.run_at OR old.priority <> new.priority)
BEGIN
    UPDATE limit_gen SET n = n + 1 WHERE id = 1;
END;
CREATE TRIGGER conc_limits_gen_insert AFTER INSERT ON conc_limits
BEGIN
    UPDATE limit_gen SET n = n + 1 WHERE id = 1;
END;
CREATE TRIGGER conc_limits_gen_update AFTER UPDATE ON conc_limits
BEGIN
    UPDATE limit_gen SET n = n + 1 WHERE id = 1;
END;

-- redrive PostgreSQL schema: fleet-wide concurrency limits (store.Limits).
--
-- A job under a limit names it (climit) and its group's key (ckey). A
-- slot is a running job: a fetch of limited jobs counts the running jobs
-- of a group through jobs_limit_running, holding a transaction-level
-- advisory lock that every fetch of limited jobs takes, so two fetches
-- never both see the same free slot. The count is the jobs' own state:
-- it cannot drift. Jobs without a limit have climit NULL and are in
-- neither index below. Adding nullable or constant-default columns
-- rewrites no row; the two limit indexes start empty.
ALTER TABLE jobs ADD COLUMN climit text;
ALTER TABLE jobs ADD COLUMN ckey text NOT NULL DEFAULT '';

CREATE TABLE conc_limits (
    name        text        PRIMARY KEY,
    max_running integer     NOT NULL CHECK (max_running > 0),
    updated_at  timestamptz NOT NULL
);

-- The waiting jobs are split in two disjoint indexes with one key,
-- (queue, priority, run_at, id): jobs_ready (of migration 0015), rebuilt
-- to hold only the jobs without a limit (the usual fetch's walk, which
-- therefore never steps over jobs waiting on a slot), and jobs_limit_due,
-- those under one, which the fetch's limited path reads the same way: one
-- priority at a time, highest first, each a range of due jobs. Rebuilding
-- jobs_ready holds writes to jobs for the time of the build (one pass
-- over the table).
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL;
CREATE INDEX jobs_limit_due ON jobs (queue, priority, run_at, id) INCLUDE (climit, ckey) WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL;

-- job_priorities (migration 0015) walks jobs_ready, which now holds only
-- the jobs without a limit; job_limit_priorities is its twin over
-- jobs_limit_due, for the limited path, NextDue and the queues'
-- latency. Both are loose scans, one probe a priority.
CREATE OR REPLACE FUNCTION job_priorities(q text) RETURNS SETOF smallint
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT AS $$
DECLARE
    p smallint;
BEGIN
    SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND queue = q
    ORDER BY priority DESC LIMIT 1;
    WHILE p IS NOT NULL LOOP
        RETURN NEXT p;
        SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND queue = q AND priority < p
        ORDER BY priority DESC LIMIT 1;
    END LOOP;
END $$;
CREATE FUNCTION job_limit_priorities(q text) RETURNS SETOF smallint
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT AS $$
DECLARE
    p smallint;
BEGIN
    SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = q
    ORDER BY priority DESC LIMIT 1;
    WHILE p IS NOT NULL LOOP
        RETURN NEXT p;
        SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL AND queue = q AND priority < p
        ORDER BY priority DESC LIMIT 1;
    END LOOP;
END $$;
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE state = 'running' AND climit IS NOT NULL;

-- limit_gen counts the changes that can let a waiting limited job start:
-- a limited job leaving running (a slot freed), becoming due or changing
-- its due time or its priority (which can bring it into the fetch's
-- window), being put under a limit, and a limit set. A fetch whose
-- selection of limited jobs leased none remembers the count, and skips
-- the selection (its transaction and lock) until the count changes or a
-- later job comes due: while jobs wait on full groups, the fetches of the
-- others pay one read of it. The row trigger's WHEN is false for a job
-- without a limit, which fires nothing.
CREATE TABLE limit_gen (
    id integer PRIMARY KEY CHECK (id = 1),
    n  bigint  NOT NULL
);
INSERT INTO limit_gen (id, n) VALUES (1, 0);
CREATE FUNCTION limit_gen_bump() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE limit_gen SET n = n + 1 WHERE id = 1;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_limit_gen AFTER UPDATE OF state, climit, run_at, priority ON jobs
    FOR EACH ROW WHEN (NEW.climit IS NOT NULL AND NEW.state <> 'running'
        AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.climit IS DISTINCT FROM NEW.climit OR OLD.run_at IS DISTINCT FROM NEW.run_at
            OR OLD.priority IS DISTINCT FROM NEW.priority))
    EXECUTE FUNCTION limit_gen_bump();
CREATE TRIGGER conc_limits_gen AFTER INSERT OR UPDATE ON conc_limits
    FOR EACH STATEMENT EXECUTE FUNCTION limit_gen_bump();

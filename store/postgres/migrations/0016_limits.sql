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

-- The due jobs are split in two disjoint indexes: jobs_due, the jobs
-- without a limit (the usual fetch's walk, which therefore never steps
-- over jobs waiting on a slot), and jobs_limit_due, those under one.
-- Rebuilding jobs_due holds writes to jobs for the time of the build
-- (one pass over the table).
DROP INDEX IF EXISTS jobs_due;
CREATE INDEX jobs_due ON jobs (queue, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL;
CREATE INDEX jobs_limit_due ON jobs (queue, run_at, id) INCLUDE (climit, ckey) WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL;
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE state = 'running' AND climit IS NOT NULL;

-- limit_gen counts the changes that can let a waiting limited job start:
-- a limited job leaving running (a slot freed), becoming due or changing
-- its due time, being put under a limit, and a limit set. A fetch whose
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
CREATE TRIGGER jobs_limit_gen AFTER UPDATE OF state, climit, run_at ON jobs
    FOR EACH ROW WHEN (NEW.climit IS NOT NULL AND NEW.state <> 'running'
        AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.climit IS DISTINCT FROM NEW.climit OR OLD.run_at IS DISTINCT FROM NEW.run_at))
    EXECUTE FUNCTION limit_gen_bump();
CREATE TRIGGER conc_limits_gen AFTER INSERT OR UPDATE ON conc_limits
    FOR EACH STATEMENT EXECUTE FUNCTION limit_gen_bump();

-- redrive PostgreSQL schema: fleet-wide concurrency limits (store.Limits).
--
-- A job under a limit names it (climit) and its group's key (ckey). A
-- slot is a running job: a fetch of limited jobs counts the running jobs
-- of a group through jobs_limit_running, holding a transaction-level
-- advisory lock that every fetch of limited jobs takes, so two fetches
-- never both see the same free slot. The count is the jobs' own state:
-- it cannot drift. Jobs without a limit have climit NULL and are in
-- neither index below. Adding nullable or constant-default columns
-- rewrites no row; the two partial indexes start empty.
ALTER TABLE jobs ADD COLUMN climit text;
ALTER TABLE jobs ADD COLUMN ckey text NOT NULL DEFAULT '';

CREATE TABLE conc_limits (
    name        text        PRIMARY KEY,
    max_running integer     NOT NULL CHECK (max_running > 0),
    updated_at  timestamptz NOT NULL
);

CREATE INDEX jobs_limit_due ON jobs (queue, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL;
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE state = 'running' AND climit IS NOT NULL;

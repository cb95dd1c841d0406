-- redrive SQLite schema: fleet-wide concurrency limits (store.Limits).
--
-- A job under a limit names it (climit) and its group's key (ckey). A
-- slot is a running job: the fetch counts the running jobs of a group
-- with jobs_limit_running, read in the writer's transaction, so the count
-- is the jobs' own state and cannot drift. Jobs without a limit have
-- climit NULL and are in neither index below: they pay nothing.
ALTER TABLE jobs ADD COLUMN climit TEXT;
ALTER TABLE jobs ADD COLUMN ckey TEXT NOT NULL DEFAULT '';

CREATE TABLE conc_limits (
    name        TEXT    PRIMARY KEY,
    max_running INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- The due jobs under a limit, oldest first: the fetch's limited path.
CREATE INDEX jobs_limit_due ON jobs (queue, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL;
-- The slots taken: running jobs per group.
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE state = 'running' AND climit IS NOT NULL;

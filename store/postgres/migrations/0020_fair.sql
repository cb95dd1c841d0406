-- redrive PostgreSQL schema: fair shares within a queue (see
-- docs/design.md, "Fair shares").
--
-- A job of a fair queue carries its fair key (fkey: the tenant, read from
-- the job at enqueue); a job of any other queue has fkey NULL and is in
-- neither index below: it pays nothing. The waiting jobs without a limit
-- are split in two: jobs_ready (rebuilt) holds those without a fair key,
-- the usual fetch's walk, which therefore never steps over a fair queue's
-- backlog; jobs_fair_due holds those with one, keyed by key within a
-- priority, so that a fetch takes each key's earliest due jobs in turn (a
-- loose scan over the keys, one probe a key). jobs_fair_first gives the
-- earliest due fair job of a queue in one probe (NextDue, the queues'
-- latency, the fetch's test for due fair jobs). Jobs under a concurrency
-- limit stay in jobs_limit_due, fair key or not. Adding a nullable column
-- rewrites no row; rebuilding jobs_ready holds writes to jobs for the time
-- of the build (one pass over the table).
ALTER TABLE jobs ADD COLUMN fkey text;

DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL;
CREATE INDEX jobs_fair_due ON jobs (queue, priority, fkey, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL;
CREATE INDEX jobs_fair_first ON jobs (queue, run_at) WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL;

-- job_priorities walks jobs_ready, which now holds only the jobs without
-- a limit or a fair key; job_fair_priorities is its twin over
-- jobs_fair_due, for the fair fetch. Both are loose scans, one probe a
-- priority.
CREATE OR REPLACE FUNCTION job_priorities(q text) RETURNS SETOF smallint
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT AS $$
DECLARE
    p smallint;
BEGIN
    SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = q
    ORDER BY priority DESC LIMIT 1;
    WHILE p IS NOT NULL LOOP
        RETURN NEXT p;
        SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL AND queue = q AND priority < p
        ORDER BY priority DESC LIMIT 1;
    END LOOP;
END $$;
CREATE FUNCTION job_fair_priorities(q text) RETURNS SETOF smallint
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT AS $$
DECLARE
    p smallint;
BEGIN
    SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL AND queue = q
    ORDER BY priority DESC LIMIT 1;
    WHILE p IS NOT NULL LOOP
        RETURN NEXT p;
        SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL AND queue = q AND priority < p
        ORDER BY priority DESC LIMIT 1;
    END LOOP;
END $$;

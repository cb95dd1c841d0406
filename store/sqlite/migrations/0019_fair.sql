-- redrive SQLite schema: fair shares within a queue (see docs/design.md,
-- "Fair shares").
--
-- A job of a fair queue carries its fair key (fkey: the tenant, read from
-- the job at enqueue); a job of any other queue has fkey NULL and is in
-- neither index below: it pays nothing. The waiting jobs without a limit
-- are now split in two: jobs_ready (rebuilt) holds those without a fair
-- key, the usual fetch's walk, which therefore never steps over a fair
-- queue's backlog; jobs_fair_due holds those with one, keyed by key
-- within a priority so that a fetch can take each key's earliest due jobs
-- in turn (a loose scan over the keys, one probe a key). jobs_fair_first
-- gives the earliest due fair job of a queue in one probe (NextDue, the
-- queues' latency, and the fetch's test for any due fair job). Jobs under
-- a concurrency limit stay in jobs_limit_due, fair key or not.
ALTER TABLE jobs ADD COLUMN fkey TEXT;

DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NULL;
CREATE INDEX jobs_fair_due ON jobs (queue, priority, fkey, run_at, id, state) WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL;
CREATE INDEX jobs_fair_first ON jobs (queue, run_at) WHERE state IN ('pending', 'scheduled') AND climit IS NULL AND fkey IS NOT NULL;

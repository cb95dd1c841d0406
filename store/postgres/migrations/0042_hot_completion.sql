-- redrive PostgreSQL schema: PROTOTYPE of the HOT completion (issue 29;
-- docs/BENCHMARKS.md, "The HOT completion, prototyped and counted").
--
-- PostgreSQL makes an update HOT (no index entry, the new version on the
-- old one's page) only when no column an index reads changes, predicates
-- included. A plain completion sets state, finished_at, last_duration,
-- cancel_requested, lease_until and worker; before this migration state
-- was in the predicate of eleven partial indexes, finished_at and
-- lease_until in the keys of jobs_finished and jobs_lease. Here:
--
-- * phase, a stored generated column, is what the partial indexes test
--   instead of state: 1 waiting (pending, scheduled), 2 dead, 3 running
--   under a concurrency limit, 4 canceled, 0 otherwise (a running job
--   without a limit, a completed one, a blocked one). A plain completion
--   moves it from 0 to 0. Statements test phase beside state (the store
--   adds the test where it reads state: sql.go, hot), so the planner
--   proves the predicates.
-- * jobs_finished (state, finished_at) is replaced by jobs_done
--   (attempted_at) over phase 0, which the lease enters, and
--   jobs_canceled (created_at) over phase 4 (no index may read
--   finished_at, which the completion sets); dead jobs are retained by
--   jobs_dead (dead_at).
-- * the plain completion leaves lease_until as the lease set it: the
--   job reads no lease once it is not running (the store reads
--   lease_until only of running jobs), and jobs_lease keeps the entries
--   of completed jobs until retention deletes them.
-- * fillfactor 70, room on each page for the new versions.
--
-- The migration runs in the store's one transaction, so its index builds
-- hold the table (no CONCURRENTLY): a prototype to count, not to ship.

ALTER TABLE jobs SET (fillfactor = 70);
ALTER TABLE jobs ADD COLUMN phase smallint GENERATED ALWAYS AS (
    CASE WHEN state IN ('pending', 'scheduled') THEN 1
         WHEN state = 'dead' THEN 2
         WHEN state = 'running' AND climit IS NOT NULL THEN 3
         WHEN state = 'canceled' THEN 4
         ELSE 0 END::smallint) STORED;

DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id)
    WHERE phase = 1 AND climit IS NULL AND fkey IS NULL;
DROP INDEX jobs_limit_due;
CREATE INDEX jobs_limit_due ON jobs (queue, priority, run_at, id) INCLUDE (climit, ckey)
    WHERE climit IS NOT NULL AND phase = 1;
DROP INDEX jobs_limit_running;
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE phase = 3;
DROP INDEX jobs_limit_group_due;
CREATE INDEX jobs_limit_group_due ON jobs (climit, ckey, queue, run_at)
    WHERE climit IS NOT NULL AND phase = 1;
DROP INDEX jobs_fair_due;
CREATE INDEX jobs_fair_due ON jobs (queue, priority, fkey, run_at, id)
    WHERE fkey IS NOT NULL AND climit IS NULL AND phase = 1;
DROP INDEX jobs_fair_first;
CREATE INDEX jobs_fair_first ON jobs (queue, run_at)
    WHERE fkey IS NOT NULL AND climit IS NULL AND phase = 1;

DROP INDEX jobs_dead;
CREATE INDEX jobs_dead ON jobs (dead_at, id) WHERE phase = 2;
DROP INDEX jobs_dead_fingerprint;
CREATE INDEX jobs_dead_fingerprint ON jobs (fingerprint, dead_at, id) WHERE phase = 2;
DROP INDEX jobs_dead_queue;
CREATE INDEX jobs_dead_queue ON jobs (queue, dead_at, id) WHERE phase = 2;
DROP INDEX jobs_dead_kind;
CREATE INDEX jobs_dead_kind ON jobs (kind, dead_at, id) WHERE phase = 2;
DROP INDEX jobs_dead_class;
CREATE INDEX jobs_dead_class ON jobs (last_error_class, dead_at, id) WHERE phase = 2;
DROP INDEX jobs_dead_reason;
CREATE INDEX jobs_dead_reason ON jobs (dead_reason, dead_at, id) WHERE phase = 2;

DROP INDEX jobs_finished;
CREATE INDEX jobs_done ON jobs (attempted_at, id) WHERE phase = 0;
CREATE INDEX jobs_canceled ON jobs (created_at, id) WHERE phase = 4;

-- The functions that read the waiting jobs by state, made again with
-- the test of phase beside it (their text otherwise unchanged).
DO $$
DECLARE
    f oid;
    def text;
BEGIN
    FOR f IN SELECT p.oid FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proname IN ('job_priorities', 'job_limit_priorities', 'job_fair_priorities', 'job_fair_fetch')
    LOOP
        def := pg_get_functiondef(f);
        def := regexp_replace(def, '(\m[a-z]+\.)?state IN \(''pending'', ''scheduled''\)',
            '(\1state IN (''pending'', ''scheduled'') AND \1phase = 1)', 'g');
        EXECUTE def;
    END LOOP;
END $$;

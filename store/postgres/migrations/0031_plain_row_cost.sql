-- redrive PostgreSQL schema: what an update of a job without a limit or a
-- fair key pays for limits and fair shares (see docs/BENCHMARKS.md, "The
-- plain fetch at one priority, made cheap").
--
-- Every lease and completion is an update that is not HOT (the lease
-- moves jobs_lease), so the new row version has the predicate of every
-- partial index of jobs evaluated, and the row triggers' WHEN. The limit
-- and fair indexes named `state` first: the text comparisons of
-- state IN ('pending', 'scheduled') ran for every leased and completed
-- job, five times, for a row that enters none of them. Their predicates
-- now test climit or fkey first, a null test that is false at once for a
-- job without a limit or a fair key; the indexes hold the same rows (a
-- predicate's conjuncts prove the same whatever their order: every
-- statement that reads them still matches them). Rebuilding them takes
-- one pass over the table each; they hold few rows.
DROP INDEX jobs_limit_due;
CREATE INDEX jobs_limit_due ON jobs (queue, priority, run_at, id) INCLUDE (climit, ckey)
    WHERE climit IS NOT NULL AND state IN ('pending', 'scheduled');
DROP INDEX jobs_limit_running;
CREATE INDEX jobs_limit_running ON jobs (climit, ckey) WHERE climit IS NOT NULL AND state = 'running';
DROP INDEX jobs_limit_group_due;
CREATE INDEX jobs_limit_group_due ON jobs (climit, ckey, queue, run_at)
    WHERE climit IS NOT NULL AND state IN ('pending', 'scheduled');
DROP INDEX jobs_fair_due;
CREATE INDEX jobs_fair_due ON jobs (queue, priority, fkey, run_at, id)
    WHERE fkey IS NOT NULL AND climit IS NULL AND state IN ('pending', 'scheduled');
DROP INDEX jobs_fair_first;
CREATE INDEX jobs_fair_first ON jobs (queue, run_at)
    WHERE fkey IS NOT NULL AND climit IS NULL AND state IN ('pending', 'scheduled');

-- jobs_limit_gen's WHEN read OLD and NEW: evaluating it deformed the old
-- row version, fetched for the trigger, up to climit (one of its last
-- columns) for every update of a job's state, limited or not. The WHEN
-- now reads only the new version (already in memory, built by the
-- update); the comparisons with the old one move into the function,
-- which runs only for a limited job leaving running or changed while
-- waiting, as before.
CREATE OR REPLACE FUNCTION limit_gen_bump_row() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    IF OLD.state IS DISTINCT FROM NEW.state OR OLD.climit IS DISTINCT FROM NEW.climit
        OR OLD.run_at IS DISTINCT FROM NEW.run_at OR OLD.priority IS DISTINCT FROM NEW.priority THEN
        UPDATE limit_gen SET n = n + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER jobs_limit_gen ON jobs;
CREATE TRIGGER jobs_limit_gen AFTER UPDATE OF state, climit, run_at, priority ON jobs
    FOR EACH ROW WHEN (NEW.climit IS NOT NULL AND NEW.state <> 'running')
    EXECUTE FUNCTION limit_gen_bump_row();

-- The priority's range and the state's values were two CHECK constraints,
-- each evaluated for every new row version: one now. Adding it validates
-- every row, one pass over the table with writes to jobs held.
ALTER TABLE jobs DROP CONSTRAINT jobs_priority_range, DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check
    CHECK (priority BETWEEN -100 AND 100 AND state IN ('pending', 'scheduled', 'running', 'completed', 'dead', 'canceled'));

-- An update compares, old version against new, every column an index of
-- jobs reads, to tell whether it may be HOT; a column that is null in
-- both is told apart by its null bit, one that is not by walking the row
-- from its start to it. ckey (the limit group's key, one of the row's
-- last columns) was '' for a job without a limit: it is null now, like
-- climit and fkey, for the jobs enqueued from now on. (The rows already
-- there keep ''; no statement reads the key of a job without a limit.)
ALTER TABLE jobs ALTER COLUMN ckey DROP NOT NULL, ALTER COLUMN ckey DROP DEFAULT;

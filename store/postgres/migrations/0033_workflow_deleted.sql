-- redrive PostgreSQL schema: a deleted workflow job releases nobody for
-- ever (docs/design.md, "Workflows").
--
-- A purge or the retention of a dead job of a workflow under on_dead
-- 'wait' left its blocked dependents waiting for a job that no longer
-- exists. The row trigger jobs_flow_deleted cancels them, in the
-- transaction that deletes the job, whichever statement does (Purge, a
-- purge operation, retention, a hand-written DELETE): the blocked jobs
-- whose edge from the deleted job is not done, as a cancel of the job
-- would. Each cancel fires jobs_flow (migration 0032), which cancels
-- their own blocked dependents down the graph, counts them in the
-- workflow (whose row lock serializes it with the workflow's other
-- moves) and fires its callbacks; job_counts follows by its statement
-- triggers, and the canceled counter here. A completed job's edges are
-- done, and a canceled job's dependents were canceled or released
-- already, so only a dead job (or one deleted by hand before it
-- finished) has any to cancel. A delete carries no time: the cancel is
-- stamped with the transaction's (now()). The WHEN clause is all the
-- deletion of a plain job pays; no insert or update fires this trigger.
CREATE FUNCTION jobs_flow_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    at timestamptz := now();
BEGIN
    WITH c AS (
        UPDATE jobs j SET state = 'canceled', finished_at = at,
            history = j.history || jsonb_build_array(jsonb_build_object('kind', 'canceled', 'attempt', 0,
                'at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
        WHERE j.id IN (SELECT job_id FROM job_deps WHERE dep_id = OLD.id AND NOT done) AND j.state = 'blocked'
        RETURNING j.queue
    )
    INSERT INTO counters AS x (queue, name, shard, n)
    SELECT c.queue, 'canceled', 0, count(*) FROM c GROUP BY c.queue ORDER BY c.queue
    ON CONFLICT (queue, name, shard) DO UPDATE SET n = x.n + excluded.n;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_flow_deleted AFTER DELETE ON jobs
    FOR EACH ROW WHEN (OLD.flow IS NOT NULL)
    EXECUTE FUNCTION jobs_flow_deleted();

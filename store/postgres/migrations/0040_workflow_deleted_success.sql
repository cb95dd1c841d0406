-- redrive PostgreSQL schema: a deleted job that never completed cancels
-- its workflow's success callback (docs/design.md, "Workflows").
--
-- jobs_flow_deleted (migrations 0033 to 0035) canceled the blocked
-- dependents of a deleted job, whose cancels canceled the success
-- callback (jobs_flow). A dead job no job waits for (a leaf, or any
-- dead job under on_dead 'run', whose dependents were released at its
-- death) canceled nobody: its deletion (a purge, the retention) left the
-- workflow unable to succeed, the job no longer there to be redriven,
-- and its success callback blocked for ever. The trigger now cancels
-- the callback, still blocked, when the deleted job had not completed,
-- as its cancel would, and counts it in the canceled counter (job_counts
-- follows by its statement triggers). A completed job's deletion changes
-- nothing: the workflow's count keeps it.
--
-- The workflows that lost a dead job before this migration (their dead
-- count above their dead jobs still there) have theirs canceled here.
CREATE OR REPLACE FUNCTION jobs_flow_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    at timestamptz := now();
    q  text;
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
    DELETE FROM job_deps WHERE dep_id = OLD.id;
    DELETE FROM job_deps WHERE job_id = OLD.id;
    DELETE FROM job_waits WHERE job_id = OLD.id;

    IF OLD.state <> 'completed' THEN
        -- The workflow cannot succeed any more: cancel its success callback.
        UPDATE jobs j SET state = 'canceled', finished_at = at,
            history = j.history || jsonb_build_array(jsonb_build_object('kind', 'canceled', 'attempt', 0,
                'at', to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
        WHERE j.id = (SELECT on_success FROM workflows WHERE id = OLD.flow) AND j.state = 'blocked'
        RETURNING j.queue INTO q;
        IF FOUND THEN
            INSERT INTO counters AS x (queue, name, shard, n) VALUES (q, 'canceled', 0, 1)
            ON CONFLICT (queue, name, shard) DO UPDATE SET n = x.n + excluded.n;
        END IF;
    END IF;
    RETURN NULL;
END $$;

WITH c AS (
    UPDATE jobs j SET state = 'canceled', finished_at = now()
    WHERE j.state = 'blocked' AND j.id IN (SELECT w.on_success FROM workflows w
        WHERE w.on_success IS NOT NULL AND w.dead > (SELECT count(*) FROM jobs d WHERE d.flow = w.id AND d.state = 'dead'))
    RETURNING j.queue
)
INSERT INTO counters AS x (queue, name, shard, n)
SELECT c.queue, 'canceled', 0, count(*) FROM c GROUP BY c.queue ORDER BY c.queue
ON CONFLICT (queue, name, shard) DO UPDATE SET n = x.n + excluded.n;

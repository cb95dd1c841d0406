-- redrive PostgreSQL schema: a dependent keeps a trace of its deleted
-- dependencies (docs/design.md, "Workflows").
--
-- jobs_flow_deleted (migrations 0035, 0040) deletes a job's edges with
-- it, so a dependency deleted by retention or a purge before its
-- dependent ran vanished from the dependent's DependencyResults, with
-- nothing saying it had been there. The function now writes, for each
-- dependent still to run (any state but completed and canceled: a dead
-- one may be redriven), the deleted dependency's id, name and state and
-- whether it had a result into job_deps_gone, which DependencyResults
-- reads beside the edges; the rows go with their dependent. The blocked
-- dependents the deletion cancels were canceled just before: they get
-- none. The edges deleted before this migration left no trace.
--
-- The function also locks the blocked dependents it cancels in id
-- order first (see CancelWorkflow, which locks a workflow's jobs in id
-- order before the workflow).
CREATE TABLE job_deps_gone (
    job_id     bigint  NOT NULL,
    dep_id     bigint  NOT NULL,
    node       text    NOT NULL,
    state      text    NOT NULL,
    had_result boolean NOT NULL,
    PRIMARY KEY (job_id, dep_id)
);

CREATE OR REPLACE FUNCTION jobs_flow_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    at timestamptz := now();
    q  text;
BEGIN
    -- The blocked dependents are locked in id order, as CancelWorkflow
    -- locks a workflow's jobs, before the workflow (their cancels'
    -- jobs_flow), so that a purge and a cancel of the workflow wait
    -- for each other rather than deadlock.
    PERFORM 1 FROM jobs j WHERE j.id IN (SELECT job_id FROM job_deps WHERE dep_id = OLD.id AND NOT done) AND j.state = 'blocked'
    ORDER BY j.id FOR UPDATE;
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
    INSERT INTO job_deps_gone (job_id, dep_id, node, state, had_result)
    SELECT d.job_id, OLD.id, coalesce(OLD.node, ''), OLD.state, OLD.result IS NOT NULL
    FROM job_deps d JOIN jobs j ON j.id = d.job_id
    WHERE d.dep_id = OLD.id AND j.state NOT IN ('completed', 'canceled')
    ON CONFLICT DO NOTHING;
    DELETE FROM job_deps WHERE dep_id = OLD.id;
    DELETE FROM job_deps WHERE job_id = OLD.id;
    DELETE FROM job_waits WHERE job_id = OLD.id;
    DELETE FROM job_deps_gone WHERE job_id = OLD.id;

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

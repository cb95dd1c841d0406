-- redrive PostgreSQL schema: a workflow job's edges and wait count go
-- with it (docs/design.md, "Workflows").
--
-- job_deps (migration 0032) and job_waits (0034) kept the rows of the
-- jobs a purge or the retention deleted: job_waits lost its row with
-- its job (jobs_flow_deleted), but the edges from and to a deleted job
-- stayed for ever, and the rows of the jobs deleted before 0034 too.
-- jobs_flow_deleted now deletes them, in the statement that deletes the
-- job, after the cancel of its blocked dependents (which reads its
-- edges not done): an edge from a deleted job holds nobody back (its
-- dependents were canceled, or released when the edge was marked done),
-- and an edge to a deleted job releases nobody. What reads the edges
-- loses nothing: a dependency's result and a workflow's graph read the
-- jobs at both ends. The index job_deps_job finds a job's edges from
-- its dependencies (the primary key, dep_id first, finds those to its
-- dependents), for this delete and for DependencyResults, which read
-- job_deps whole by job_id before. The rows left behind by the jobs
-- deleted so far are deleted here.
CREATE INDEX job_deps_job ON job_deps (job_id);
DELETE FROM job_deps d WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.dep_id);
DELETE FROM job_deps d WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.job_id);
DELETE FROM job_waits x WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = x.job_id);

CREATE OR REPLACE FUNCTION jobs_flow_deleted() RETURNS trigger LANGUAGE plpgsql
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
    DELETE FROM job_deps WHERE dep_id = OLD.id;
    DELETE FROM job_deps WHERE job_id = OLD.id;
    DELETE FROM job_waits WHERE job_id = OLD.id;
    RETURN NULL;
END $$;

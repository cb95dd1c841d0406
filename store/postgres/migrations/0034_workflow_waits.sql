-- redrive PostgreSQL schema: a count of the dependencies a workflow job
-- still waits for (docs/design.md, "Workflows").
--
-- Migration 0032 released a blocked job when the completion of one of
-- its dependencies left none of its edges not done: a NOT EXISTS over
-- job_deps, run by every completion under the workflow's row lock. Each
-- edge marked done leaves a dead version behind in job_deps and its
-- partial index until vacuum, so the check of a job with n dependencies
-- read up to n rows: a fan-in of 10,000 cost O(n²) in all, and its
-- final job started seconds after its last dependency completed.
--
-- job_waits holds, for each job enqueued with dependencies, n: the
-- number of its edges not done. The statement of jobs_flow that marks a
-- completed (or, under on_dead 'run', a dead or canceled) job's edges
-- done decrements the count of each dependent whose edge it marked, and
-- releases those at zero that are still blocked: one row read and
-- written a dependent, whatever the fan-in. The edges are marked done
-- nowhere else, so n stays the number of edges not done: a redrive
-- marks none (the dependents wait for the redriven job's completion),
-- an edge is never marked twice (a completion after a redrive under
-- 'run' finds it done), and a cancel or a deletion of a dependency
-- cancels its blocked dependents without touching their counts. The
-- workflow's row lock, which jobs_flow takes first, serializes the
-- decrements of one workflow, and the row of job_waits its own: the
-- last of two concurrent completions sees the other's decrement and
-- releases the job, exactly once. jobs_flow_deleted deletes a deleted
-- job's row. The partial index job_deps_waiting served only the NOT
-- EXISTS: it is dropped.
CREATE TABLE job_waits (
    job_id bigint  PRIMARY KEY,
    n      integer NOT NULL CHECK (n >= 0)
);
INSERT INTO job_waits (job_id, n)
SELECT job_id, count(*) FROM job_deps WHERE NOT done GROUP BY job_id;
DROP INDEX job_deps_waiting;

CREATE OR REPLACE FUNCTION jobs_flow_moved() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    w       workflows%ROWTYPE;
    now     timestamptz := coalesce(NEW.finished_at, NEW.run_at);
    channel text := TG_TABLE_SCHEMA || '_redrive';
    cb      bigint;
    q       text;
BEGIN
    UPDATE workflows SET
        completed = completed + (NEW.state = 'completed')::int - (OLD.state = 'completed')::int,
        dead = dead + (NEW.state = 'dead')::int - (OLD.state = 'dead')::int,
        canceled = canceled + (NEW.state = 'canceled')::int - (OLD.state = 'canceled')::int
    WHERE id = NEW.flow
    RETURNING * INTO w;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NEW.state NOT IN ('completed', 'dead', 'canceled') THEN
        RETURN NULL; -- a redrive: the dependents wait for its completion
    END IF;

    IF NEW.state = 'completed' OR w.on_dead = 'run' THEN
        FOR q IN
            WITH d AS (
                UPDATE job_deps SET done = true WHERE dep_id = NEW.id AND NOT done RETURNING job_id
            ), c AS (
                UPDATE job_waits x SET n = x.n - 1 FROM d WHERE x.job_id = d.job_id RETURNING x.job_id, x.n
            )
            UPDATE jobs j SET state = CASE WHEN j.run_at > now THEN 'scheduled' ELSE 'pending' END
            FROM c WHERE j.id = c.job_id AND c.n = 0 AND j.state = 'blocked'
            RETURNING j.queue
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
    ELSIF NEW.state = 'canceled' OR w.on_dead = 'cancel' THEN
        -- Each cancel fires this trigger again, down the graph.
        WITH c AS (
            UPDATE jobs j SET state = 'canceled', finished_at = now,
                history = j.history || jsonb_build_array(jsonb_build_object('kind', 'canceled', 'attempt', 0,
                    'at', to_char(now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                    'reason', 'dependency_' || NEW.state, 'note', 'job ' || NEW.id))
            WHERE j.id IN (SELECT job_id FROM job_deps WHERE dep_id = NEW.id) AND j.state = 'blocked'
            RETURNING j.queue
        )
        INSERT INTO counters AS x (queue, name, shard, n)
        SELECT c.queue, 'canceled', 0, count(*) FROM c GROUP BY c.queue ORDER BY c.queue
        ON CONFLICT (queue, name, shard) DO UPDATE SET n = x.n + excluded.n;
    END IF;

    -- Read the workflow again: the cascade changed its counts.
    SELECT * INTO w FROM workflows WHERE id = NEW.flow;
    IF NEW.state = 'canceled' AND w.on_success IS NOT NULL THEN
        -- A canceled job makes success impossible.
        UPDATE jobs SET state = 'canceled', finished_at = now WHERE id = w.on_success AND state = 'blocked' RETURNING queue INTO q;
        IF FOUND THEN
            INSERT INTO counters AS x (queue, name, shard, n) VALUES (q, 'canceled', 0, 1)
            ON CONFLICT (queue, name, shard) DO UPDATE SET n = x.n + excluded.n;
        END IF;
    END IF;
    FOREACH cb IN ARRAY ARRAY[
        CASE WHEN NEW.state = 'dead' THEN w.on_death END,
        CASE WHEN w.completed + w.dead + w.canceled = w.total THEN w.on_complete END,
        CASE WHEN w.completed = w.total THEN w.on_success END]
    LOOP
        IF cb IS NOT NULL THEN
            UPDATE jobs SET state = 'pending', run_at = greatest(run_at, now) WHERE id = cb AND state = 'blocked' RETURNING queue INTO q;
            IF FOUND THEN
                PERFORM pg_notify(channel, q);
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

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
    DELETE FROM job_waits WHERE job_id = OLD.id;
    RETURN NULL;
END $$;

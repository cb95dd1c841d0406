-- redrive PostgreSQL schema: a workflow takes jobs until it closes
-- (docs/design.md, "Workflows").
--
-- AddToWorkflow adds jobs to a workflow while it is open: neither
-- canceled nor closed. closed_at is set by jobs_flow, in the statement
-- that finishes the workflow's last unfinished job, the first time every
-- job of it finished (completed + dead + canceled = total: when its
-- complete callback fires): a callback fired cannot fire again, so a job
-- added then would be waited for by nobody. A redrive may make the
-- workflow active again; it stays closed. An add locks the workflow's
-- row (FOR UPDATE), which jobs_flow updates first: an add racing the
-- completion of the last job either takes the lock first, and the
-- completion then sees the grown total (no callback fires while a job
-- added waits), or waits for the completion's commit and sees
-- closed_at (the add is refused). Each member's state it reads under
-- the lock decides whether its edge to a job added is done; a move of
-- that member waiting for the lock sees the edge once the add commits,
-- and marks it done (or cancels the job) as for any dependent.
--
-- The workflows that finished before this migration are closed: those
-- whose jobs all finished, and those whose complete or success callback
-- fired (a redrive made them active again) or was deleted since.
ALTER TABLE workflows ADD COLUMN closed_at timestamptz;
UPDATE workflows w SET closed_at = now()
WHERE completed + dead + canceled = total
    OR (on_complete IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = w.on_complete AND j.state IN ('blocked', 'canceled')))
    OR (on_success IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = w.on_success AND j.state IN ('blocked', 'canceled')));

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
    IF w.closed_at IS NULL AND w.completed + w.dead + w.canceled = w.total THEN
        -- Every job finished for the first time: the workflow takes no
        -- more jobs (AddToWorkflow).
        UPDATE workflows SET closed_at = now WHERE id = NEW.flow;
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

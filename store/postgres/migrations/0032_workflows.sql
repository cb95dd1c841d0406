-- redrive PostgreSQL schema: workflows and batches (docs/design.md,
-- "Workflows").
--
-- A workflow's jobs are ordinary jobs with flow set (NULL for every other
-- job) and node their name in it. A job waiting for its dependencies is
-- in state 'blocked', which no fetch index holds. job_deps has one row
-- per dependency edge; done is set once the dependency no longer holds
-- its dependent back (it completed, or, under on_dead 'run', it died or
-- was canceled), so that a dependency completing after a redrive never
-- counts twice. result is what a completed job's handler recorded, kept
-- as its bytes.
--
-- The row trigger jobs_flow does every consequence of a workflow job's
-- move into or out of a final state (completed, dead, canceled), in the
-- transaction that moves it, whichever statement does: the workflow's
-- counts, the release of the dependents whose last dependency this was,
-- the cancel of the dependents when the policy says so (which fires the
-- trigger again, down the graph), and the callbacks (blocked jobs made
-- pending at most once). Its first statement updates the workflow's row,
-- whose lock serializes these consequences per workflow: a transaction
-- completing one dependency of a job waits there for another completing
-- the other one, then sees its commit, so that the last of them releases
-- the job, exactly once. Its WHEN clause is all a job outside a
-- workflow pays. job_counts follows by its own statement triggers.
-- The new state: the constraint (which also holds the priority's range,
-- since 0031) is swapped without a scan under the exclusive lock (NOT
-- VALID), then validated, which lets writes go on.
ALTER TABLE jobs DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check
    CHECK (priority BETWEEN -100 AND 100 AND state IN ('pending', 'scheduled', 'running', 'completed', 'dead', 'canceled', 'blocked')) NOT VALID;
ALTER TABLE jobs VALIDATE CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD COLUMN flow bigint;
ALTER TABLE jobs ADD COLUMN node text;
ALTER TABLE jobs ADD COLUMN result bytea;
CREATE INDEX jobs_flow ON jobs (flow, id) WHERE flow IS NOT NULL;

CREATE TABLE workflows (
    id          bigserial   PRIMARY KEY,
    name        text        NOT NULL DEFAULT '',
    idem_key    text        UNIQUE,
    on_dead     text        NOT NULL,
    created_at  timestamptz NOT NULL,
    canceled_at timestamptz,
    total       bigint      NOT NULL,
    completed   bigint      NOT NULL DEFAULT 0,
    dead        bigint      NOT NULL DEFAULT 0,
    canceled    bigint      NOT NULL DEFAULT 0,
    on_success  bigint,
    on_complete bigint,
    on_death    bigint
);

CREATE TABLE job_deps (
    dep_id bigint  NOT NULL,
    job_id bigint  NOT NULL,
    done   boolean NOT NULL DEFAULT false,
    PRIMARY KEY (dep_id, job_id)
);
CREATE INDEX job_deps_waiting ON job_deps (job_id) WHERE NOT done;

CREATE FUNCTION jobs_flow_moved() RETURNS trigger LANGUAGE plpgsql
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
        UPDATE job_deps SET done = true WHERE dep_id = NEW.id AND NOT done;
        FOR q IN
            UPDATE jobs j SET state = CASE WHEN j.run_at > now THEN 'scheduled' ELSE 'pending' END
            WHERE j.id IN (SELECT job_id FROM job_deps WHERE dep_id = NEW.id) AND j.state = 'blocked'
                AND NOT EXISTS (SELECT 1 FROM job_deps d WHERE d.job_id = j.id AND NOT d.done)
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

CREATE TRIGGER jobs_flow AFTER UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.flow IS NOT NULL AND OLD.state IS DISTINCT FROM NEW.state
        AND (NEW.state IN ('completed', 'dead', 'canceled') OR OLD.state IN ('completed', 'dead', 'canceled')))
    EXECUTE FUNCTION jobs_flow_moved();

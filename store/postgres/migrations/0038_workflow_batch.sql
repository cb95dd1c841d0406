-- redrive PostgreSQL schema: a transaction's completions of one workflow
-- applied together, at its commit (docs/design.md, "Workflows").
--
-- jobs_flow (migration 0032) did every consequence of a workflow job's
-- completion for its row: the workflow's count (an update of the
-- workflow's row, whose lock serializes them), the edges, the wait
-- counts of its dependents (0034), the callbacks. A Finish statement
-- completing 1,000 jobs of one workflow updated the workflow's row
-- 1,000 times, and the final job's wait count as often: each a new
-- version of one row in one transaction, none of them prunable before
-- it commits, so each update and read walked the versions before it,
-- O(n^2) in a statement, all under the workflow's lock, which held the
-- workflow's other completions back.
--
-- Now the row trigger only notes a job that moved into completed from a
-- state that is not final (the completions Finish writes: the bulk), in
-- the transaction-local setting redrive.flow_done (the table's oid, then
-- the ids), and the constraint trigger jobs_flow_batch, deferred to the
-- commit, takes the ids at its first firing (the others find the
-- setting empty) and does their consequences a workflow at a time, in
-- workflow id order: one update of the workflow's row (its lock first,
-- as before, then fresh snapshots: a job added to the workflow meanwhile
-- is seen), the edges of all its completed jobs marked done in one
-- statement, each dependent's count decremented once by the number of
-- its edges marked, those at zero released, the callbacks fired
-- (exactly once: the counts are read under the lock, as before). The
-- workflow's lock is taken at the commit, no longer held while the rest
-- of the statement runs. Every other move (a death, a cancel, a
-- redrive, a completion from a final state) is done for its row, as
-- before; a cancel or a death that meets counts without the
-- transaction's earlier completions leaves the callbacks to their
-- commit-time processing, which sees every count. A job noted for
-- another table (another schema's jobs in one transaction, which no
-- statement of the store writes) is done for its row, and so is a job
-- completed once the setting holds 16,384 characters (about 1,500 ids,
-- more than a Finish statement's 1,000): each note copies the setting,
-- and a transaction completing a million jobs by hand must not copy
-- megabytes a row. The WHEN clause (NEW.flow first) is all a job
-- outside a workflow pays for the second trigger. A transaction that
-- sets the constraint IMMEDIATE gets the consequences at the end of
-- each statement instead.

CREATE OR REPLACE FUNCTION jobs_flow_moved() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    w       workflows%ROWTYPE;
    now     timestamptz := coalesce(NEW.finished_at, NEW.run_at);
    channel text := TG_TABLE_SCHEMA || '_redrive';
    cb      bigint;
    q       text;
    noted   text;
BEGIN
    IF NEW.state = 'completed' AND OLD.state NOT IN ('completed', 'dead', 'canceled') THEN
        -- Noted for jobs_flow_batch, at the commit.
        noted := current_setting('redrive.flow_done', true);
        IF noted IS NULL OR noted = '' THEN
            PERFORM set_config('redrive.flow_done', TG_RELID || ':' || NEW.id, true);
            RETURN NULL;
        ELSIF starts_with(noted, TG_RELID || ':') AND length(noted) < 16384 THEN
            PERFORM set_config('redrive.flow_done', noted || ',' || NEW.id, true);
            RETURN NULL;
        END IF;
    END IF;
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

CREATE FUNCTION jobs_flow_batch() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    noted   text := current_setting('redrive.flow_done', true);
    channel text := TG_TABLE_SCHEMA || '_redrive';
    ids     bigint[];
    f       record;
    w       workflows%ROWTYPE;
    cb      bigint;
    q       text;
BEGIN
    IF noted IS NULL OR NOT starts_with(noted, TG_RELID || ':') THEN
        RETURN NULL; -- taken by an earlier firing, or another table's
    END IF;
    PERFORM set_config('redrive.flow_done', '', true);
    ids := string_to_array(substr(noted, length(TG_RELID::text) + 2), ',')::bigint[];
    FOR f IN
        SELECT j.flow, array_agg(j.id) AS ids, max(coalesce(j.finished_at, j.run_at)) AS at
        FROM jobs j WHERE j.id = ANY(ids) AND j.flow IS NOT NULL
        GROUP BY j.flow ORDER BY j.flow
    LOOP
        UPDATE workflows SET completed = completed + cardinality(f.ids)
        WHERE id = f.flow
        RETURNING * INTO w;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        IF w.closed_at IS NULL AND w.completed + w.dead + w.canceled = w.total THEN
            -- Every job finished for the first time: the workflow takes no
            -- more jobs (AddToWorkflow).
            UPDATE workflows SET closed_at = f.at WHERE id = f.flow;
        END IF;
        FOR q IN
            WITH d AS (
                UPDATE job_deps SET done = true WHERE dep_id = ANY(f.ids) AND NOT done RETURNING job_id
            ), g AS (
                SELECT job_id, count(*)::int AS k FROM d GROUP BY job_id
            ), c AS (
                UPDATE job_waits x SET n = x.n - g.k FROM g WHERE x.job_id = g.job_id RETURNING x.job_id, x.n
            ), r AS (
                UPDATE jobs j SET state = CASE WHEN j.run_at > f.at THEN 'scheduled' ELSE 'pending' END
                FROM c WHERE j.id = c.job_id AND c.n = 0 AND j.state = 'blocked'
                RETURNING j.queue
            )
            SELECT DISTINCT r.queue FROM r
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
        -- Releases fire nothing: w's counts are still the workflow's.
        FOREACH cb IN ARRAY ARRAY[
            CASE WHEN w.completed + w.dead + w.canceled = w.total THEN w.on_complete END,
            CASE WHEN w.completed = w.total THEN w.on_success END]
        LOOP
            IF cb IS NOT NULL THEN
                UPDATE jobs SET state = 'pending', run_at = greatest(run_at, f.at) WHERE id = cb AND state = 'blocked' RETURNING queue INTO q;
                IF FOUND THEN
                    PERFORM pg_notify(channel, q);
                END IF;
            END IF;
        END LOOP;
    END LOOP;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER jobs_flow_batch AFTER UPDATE OF state ON jobs
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.flow IS NOT NULL AND NEW.state = 'completed' AND OLD.state NOT IN ('completed', 'dead', 'canceled'))
    EXECUTE FUNCTION jobs_flow_batch();

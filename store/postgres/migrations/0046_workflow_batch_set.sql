-- redrive PostgreSQL schema: a transaction's completions of workflow
-- jobs applied at its commit by a few statements in all, not a few for
-- each workflow (docs/design.md, "Workflows").
--
-- jobs_flow_batch (migration 0038) did a Finish batch's consequences a
-- workflow at a time: for each workflow its row's update, then one
-- statement marking its edges done, decrementing its dependents' counts
-- and releasing those at zero. A Finish batch of a busy worker holds
-- completions of many workflows (1,000 workflows of 9 jobs run by 100
-- handlers: about ten in a batch of a dozen), so its commit ran three
-- statements a workflow, and the release's UPDATE of jobs fired the
-- job counts' statement trigger (two INSERTs and a random shard's row
-- locks of job_counts) once a workflow, even when it released nothing.
-- That doubled the time of a Finish of workflow jobs against plain ones,
-- and the final job of a workflow waits for the Finish of its last
-- dependency, and for the one before it (issue 32; docs/BENCHMARKS.md).
--
-- Now the workflows' rows are locked first, all of them, in id order
-- (as one after the other before: two transactions still take them in
-- the same order), then, under the locks and with fresh snapshots, one
-- statement updates every workflow's counts (and closed_at), one marks
-- every edge done and decrements every dependent's count once by its
-- edges marked, and only when some count reached zero one UPDATE of
-- jobs releases them (pg_notify once per queue). The callbacks are
-- fired as before, for the workflows whose counts reached their total,
-- in callback id order. A dependent and its dependencies are always
-- jobs of one workflow (EnqueueWorkflow, AddToWorkflow), so a released
-- job's due time is compared with the latest completion of its own
-- workflow, as before. Completions of a job whose workflow's row is gone
-- change nothing, as before.
CREATE OR REPLACE FUNCTION jobs_flow_batch() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    noted   text := current_setting('redrive.flow_done', true);
    channel text := TG_TABLE_SCHEMA || '_redrive';
    ids     bigint[];
    flows   bigint[];
    ns      bigint[];
    ats     timestamptz[];
    live    bigint[];
    ready   bigint[];
    c       record;
    q       text;
BEGIN
    IF noted IS NULL OR NOT starts_with(noted, TG_RELID || ':') THEN
        RETURN NULL; -- taken by an earlier firing, or another table's
    END IF;
    PERFORM set_config('redrive.flow_done', '', true);
    ids := string_to_array(substr(noted, length(TG_RELID::text) + 2), ',')::bigint[];
    -- Per workflow: its jobs completed, and the latest completion.
    SELECT array_agg(f.flow ORDER BY f.flow), array_agg(f.n ORDER BY f.flow), array_agg(f.at ORDER BY f.flow)
    INTO flows, ns, ats
    FROM (SELECT j.flow, count(*) AS n, max(coalesce(j.finished_at, j.run_at)) AS at
          FROM jobs j WHERE j.id = ANY(ids) AND j.flow IS NOT NULL GROUP BY j.flow) f;
    IF flows IS NULL THEN
        RETURN NULL;
    END IF;
    -- The workflows' locks, in id order; the statements below read fresh
    -- snapshots under them (a job added to a workflow meanwhile is seen).
    PERFORM 1 FROM workflows WHERE id = ANY(flows) ORDER BY id FOR UPDATE;
    WITH u AS (
        UPDATE workflows w SET completed = w.completed + f.n,
            closed_at = CASE WHEN w.closed_at IS NULL AND w.completed + f.n + w.dead + w.canceled = w.total
                THEN f.at ELSE w.closed_at END
        FROM unnest(flows, ns, ats) AS f(flow, n, at)
        WHERE w.id = f.flow
        RETURNING w.id
    )
    SELECT array_agg(u.id) INTO live FROM u;
    IF live IS NULL THEN
        RETURN NULL; -- every workflow's row is gone
    END IF;
    -- The edges from the completed jobs marked done, each dependent's
    -- count decremented once by the number of its edges marked.
    WITH d AS (
        UPDATE job_deps SET done = true
        WHERE dep_id = ANY(ids) AND NOT done
          AND (cardinality(live) = cardinality(flows)
               OR dep_id IN (SELECT id FROM jobs WHERE id = ANY(ids) AND flow = ANY(live)))
        RETURNING job_id
    ), g AS (
        SELECT job_id, count(*)::int AS k FROM d GROUP BY job_id
    ), cw AS (
        UPDATE job_waits x SET n = x.n - g.k FROM g WHERE x.job_id = g.job_id RETURNING x.job_id, x.n
    )
    SELECT array_agg(cw.job_id ORDER BY cw.job_id) INTO ready FROM cw WHERE cw.n = 0;
    IF ready IS NOT NULL THEN
        FOR q IN
            WITH r AS (
                UPDATE jobs j SET state = CASE WHEN j.run_at > f.at THEN 'scheduled' ELSE 'pending' END
                FROM unnest(flows, ats) AS f(flow, at)
                WHERE j.id = ANY(ready) AND j.state = 'blocked' AND f.flow = j.flow
                RETURNING j.queue
            )
            SELECT DISTINCT r.queue FROM r
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
    END IF;
    -- Releases fire nothing: the counts read here are the workflows'.
    FOR c IN
        SELECT cb.id, f.at FROM workflows w
        JOIN unnest(flows, ats) AS f(flow, at) ON f.flow = w.id
        CROSS JOIN LATERAL (VALUES
            (CASE WHEN w.completed + w.dead + w.canceled = w.total THEN w.on_complete END),
            (CASE WHEN w.completed = w.total THEN w.on_success END)) AS cb(id)
        WHERE w.id = ANY(live) AND cb.id IS NOT NULL
        ORDER BY cb.id
    LOOP
        UPDATE jobs SET state = 'pending', run_at = greatest(run_at, c.at) WHERE id = c.id AND state = 'blocked' RETURNING queue INTO q;
        IF FOUND THEN
            PERFORM pg_notify(channel, q);
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

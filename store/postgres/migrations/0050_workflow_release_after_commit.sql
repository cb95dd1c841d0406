-- redrive PostgreSQL schema: the jobs a Finish releases are announced
-- after its commit, not by a pg_notify inside it (docs/design.md,
-- "Workflows"; issue 32).
--
-- jobs_flow_batch (migrations 0038, 0046), deferred to the commit, sent
-- pg_notify for the queues of the jobs it released. PostgreSQL commits
-- the transactions that notify one at a time, in the whole cluster: each
-- takes a global lock before its commit record and keeps it until the
-- record is flushed (see store/postgres/group.go). A Finish releasing a
-- workflow's final job therefore waited, at its commit, for the
-- enqueues' notifying commits and their flushes, and made them wait for
-- its own (16% of a loaded Finish's samples in pg_stat_activity).
--
-- Now the store's Finish settles its completions itself, in its
-- transaction, right after its statement: jobs_flow_settle takes the
-- noted ids (as jobs_flow_batch does at the commit, which then finds
-- nothing) and returns the queues of the jobs released, which the store
-- announces once committed: at once to the workers of its process, and
-- to the others by one NOTIFY sent apart, in a transaction that writes
-- nothing else. jobs_flow_apply is the part both share: the workflows'
-- consequences of completed jobs (unchanged from migration 0046),
-- returning those queues instead of notifying them. A transaction that
-- does not settle (another writer of jobs, a process of an older
-- version) is still done by jobs_flow_batch at its commit, notifying as
-- before.
CREATE FUNCTION jobs_flow_apply(ids bigint[]) RETURNS text[] LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    flows   bigint[];
    ns      bigint[];
    ats     timestamptz[];
    live    bigint[];
    ready   bigint[];
    queues  text[] := '{}';
    c       record;
    q       text;
BEGIN
    -- Per workflow: its jobs completed, and the latest completion.
    SELECT array_agg(f.flow ORDER BY f.flow), array_agg(f.n ORDER BY f.flow), array_agg(f.at ORDER BY f.flow)
    INTO flows, ns, ats
    FROM (SELECT j.flow, count(*) AS n, max(coalesce(j.finished_at, j.run_at)) AS at
          FROM jobs j WHERE j.id = ANY(ids) AND j.flow IS NOT NULL GROUP BY j.flow) f;
    IF flows IS NULL THEN
        RETURN queues;
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
        RETURN queues; -- every workflow's row is gone
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
        WITH r AS (
            UPDATE jobs j SET state = CASE WHEN j.run_at > f.at THEN 'scheduled' ELSE 'pending' END
            FROM unnest(flows, ats) AS f(flow, at)
            WHERE j.id = ANY(ready) AND j.state = 'blocked' AND f.flow = j.flow
            RETURNING j.queue
        )
        SELECT coalesce(array_agg(DISTINCT r.queue), '{}') INTO queues FROM r;
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
        IF FOUND AND NOT q = ANY(queues) THEN
            queues := queues || q;
        END IF;
    END LOOP;
    RETURN queues;
END $$;

-- jobs_flow_batch: the completions noted by a transaction that did not
-- settle them, at its commit, their queues notified as before.
CREATE OR REPLACE FUNCTION jobs_flow_batch() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    noted   text := current_setting('redrive.flow_done', true);
    channel text := TG_TABLE_SCHEMA || '_redrive';
    q       text;
BEGIN
    IF noted IS NULL OR NOT starts_with(noted, TG_RELID || ':') THEN
        RETURN NULL; -- taken by an earlier firing or a settle, or another table's
    END IF;
    PERFORM set_config('redrive.flow_done', '', true);
    FOREACH q IN ARRAY jobs_flow_apply(string_to_array(substr(noted, length(TG_RELID::text) + 2), ',')::bigint[]) LOOP
        PERFORM pg_notify(channel, q);
    END LOOP;
    RETURN NULL;
END $$;

-- jobs_flow_settle applies the transaction's noted completions now and
-- returns the queues of the jobs they released (empty when none), for
-- the caller to announce after its commit; the commit then finds nothing
-- noted. It returns NULL when nothing was noted (no workflow job
-- completed), which the store takes as a hint that the queues hold
-- plain jobs. The note names the jobs table by its oid, as the triggers
-- write it.
CREATE FUNCTION jobs_flow_settle() RETURNS text[] LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    noted text := current_setting('redrive.flow_done', true);
    rel   text;
BEGIN
    IF noted IS NULL OR noted = '' THEN
        RETURN NULL; -- nothing noted: the common case, plain jobs
    END IF;
    rel := 'jobs'::regclass::oid::text;
    IF NOT starts_with(noted, rel || ':') THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('redrive.flow_done', '', true);
    RETURN jobs_flow_apply(string_to_array(substr(noted, length(rel) + 2), ',')::bigint[]);
END $$;

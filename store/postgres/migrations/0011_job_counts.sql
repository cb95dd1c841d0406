-- redrive PostgreSQL schema v11: exact job counts per queue and state,
-- kept by the database itself, in place of the jobs_state index.
--
-- The jobs_state (state, queue) index made every change of state insert
-- one more B-tree entry (and, with only a few distinct keys, triggered
-- bottom-up deletion passes), and Stats still counted it whole. Now three
-- statement-level triggers add what each INSERT, UPDATE or DELETE of jobs
-- changed to job_counts, in the same transaction, whatever the statement
-- (this code's, an older binary's, or a hand-written one): Stats and
-- Queues read a few rows instead of counting the jobs.

-- Held for the backfill: no job changes state between the count and the
-- triggers.
LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;

-- One row per (queue, state, shard); a statement adds to one shard picked
-- at random, as the counters do, so concurrent transactions rarely wait on
-- one row. The count of a queue and state is the sum of its shards.
CREATE TABLE job_counts (
    queue text     NOT NULL,
    state text     NOT NULL,
    shard smallint NOT NULL,
    n     bigint   NOT NULL,
    PRIMARY KEY (queue, state, shard)
);

INSERT INTO job_counts (queue, state, shard, n)
SELECT queue, state, 0, count(*) FROM jobs GROUP BY queue, state;

-- The functions run with the store's schema as their search_path (the
-- one this migration runs with), so they find job_counts whatever the
-- caller's path.
CREATE FUNCTION job_counts_inserted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    sh smallint := floor(random() * 16);
BEGIN
    INSERT INTO job_counts AS c (queue, state, shard, n)
    SELECT queue, state, sh, count(*) FROM new_rows
    GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    sh smallint := floor(random() * 16);
BEGIN
    INSERT INTO job_counts AS c (queue, state, shard, n)
    SELECT queue, state, sh, sum(d) FROM (
        SELECT queue, state, -1 AS d FROM old_rows
        UNION ALL
        SELECT queue, state, 1 FROM new_rows
    ) x
    GROUP BY queue, state HAVING sum(d) <> 0 ORDER BY queue, state
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE FUNCTION job_counts_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    sh smallint := floor(random() * 16);
BEGIN
    INSERT INTO job_counts AS c (queue, state, shard, n)
    SELECT queue, state, sh, -count(*) FROM old_rows
    GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION job_counts_inserted();
CREATE TRIGGER jobs_counted_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION job_counts_updated();
CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION job_counts_deleted();

-- TRUNCATE has no transition table: it empties the counts too.
CREATE FUNCTION job_counts_truncated() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_counts;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_counted_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION job_counts_truncated();

DROP INDEX jobs_state;

-- The rescue of expired leases, the running jobs of a worker, and the
-- workers' listing read the leased jobs: a partial index holds only them
-- (a job has a lease while, and only while, it runs). Its predicate is on
-- the lease, not on the state, so that the statements that change a
-- running job by id (finish, heartbeat, progress) are not planned through
-- it: entries of finished jobs stay in it until the next vacuum, and a
-- bitmap scan would visit them all each time. A heartbeat, which moves
-- the lease, is therefore no longer a HOT update; heartbeats are rare
-- beside the changes of state that no longer write a jobs_state entry.
CREATE INDEX jobs_lease ON jobs (lease_until, id) WHERE lease_until IS NOT NULL;

-- redrive PostgreSQL schema v14: the DLQ at depth.
--
-- Listing dead jobs pages by keyset on (dead_at, id), newest first. With
-- one filter, the jobs_dead index alone walks the DLQ past the jobs the
-- filter leaves out; so each filter of the DLQ has its own partial index
-- ending in the keyset order, and a page of any one filter is a range of
-- one index. They hold dead jobs only. A b-tree entry holds about 2.7 kB:
-- queues and kinds are at most 1,000 bytes (the store refuses longer
-- ones; the engine's names are at most 200), fingerprints are digested
-- past that, and dead reasons are now cut to their first 1,000 bytes
-- (those of the jobs already kept too, below).

-- Held for the backfill: no job dies or leaves the DLQ between the count
-- and the triggers.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

-- The number of dead jobs of each cause (fingerprint) and each of the
-- fields a DLQ filter names: groups and counts of the DLQ read these rows
-- instead of counting the jobs. The trigger functions that keep
-- job_counts (0011) keep it too, in the transaction of every statement
-- that changes jobs, whoever runs it. As job_counts, a key's count is
-- split over shards (one picked at random per statement) so that workers
-- burying jobs of one cause at once rarely wait for each other; the count
-- is the sum of its shards. The key is the md5 of the five fields (their
-- text may be long); retention deletes the shards whose count is zero.
CREATE TABLE dead_groups (
    k                text     NOT NULL,
    shard            smallint NOT NULL,
    fingerprint      text     NOT NULL,
    queue            text     NOT NULL,
    kind             text     NOT NULL,
    last_error_class text     NOT NULL,
    dead_reason      text     NOT NULL,
    n                bigint   NOT NULL,
    PRIMARY KEY (k, shard)
);

CREATE FUNCTION dead_group_key(fingerprint text, queue text, kind text, class text, reason text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN md5(md5(fingerprint) || md5(queue) || md5(kind) || md5(class) || md5(reason));

-- A reason kept longer is cut as the store cuts a new one (storedReason):
-- to the most characters that fit in 1,000 bytes, so that the jobs of
-- one reason dead before and after this migration keep one reason.
UPDATE jobs SET dead_reason = (
    SELECT left(dead_reason, n) FROM generate_series(1000, 250, -1) n
    WHERE octet_length(left(dead_reason, n)) <= 1000 ORDER BY n DESC LIMIT 1)
WHERE octet_length(dead_reason) > 1000;

DROP INDEX jobs_dead_fingerprint;
CREATE INDEX jobs_dead_fingerprint ON jobs (fingerprint, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_queue ON jobs (queue, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_kind ON jobs (kind, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_class ON jobs (last_error_class, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_reason ON jobs (dead_reason, dead_at, id) WHERE state = 'dead';

INSERT INTO dead_groups (k, shard, fingerprint, queue, kind, last_error_class, dead_reason, n)
SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason), 0,
       fingerprint, queue, kind, last_error_class, dead_reason, count(*)
FROM jobs WHERE state = 'dead'
GROUP BY fingerprint, queue, kind, last_error_class, dead_reason;

CREATE OR REPLACE FUNCTION job_counts_inserted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    sh smallint := floor(random() * 16);
BEGIN
    INSERT INTO job_counts AS c (queue, state, shard, n)
    SELECT queue, state, sh, count(*) FROM new_rows
    GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    INSERT INTO dead_groups AS g (k, shard, fingerprint, queue, kind, last_error_class, dead_reason, n)
    SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason), sh,
           fingerprint, queue, kind, last_error_class, dead_reason, count(*)
    FROM new_rows WHERE state = 'dead'
    GROUP BY fingerprint, queue, kind, last_error_class, dead_reason ORDER BY 1
    ON CONFLICT (k, shard) DO UPDATE SET n = g.n + excluded.n;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql
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
    INSERT INTO dead_groups AS g (k, shard, fingerprint, queue, kind, last_error_class, dead_reason, n)
    SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason), sh,
           fingerprint, queue, kind, last_error_class, dead_reason, sum(d) FROM (
        SELECT fingerprint, queue, kind, last_error_class, dead_reason, -1 AS d FROM old_rows WHERE state = 'dead'
        UNION ALL
        SELECT fingerprint, queue, kind, last_error_class, dead_reason, 1 FROM new_rows WHERE state = 'dead'
    ) x
    GROUP BY fingerprint, queue, kind, last_error_class, dead_reason HAVING sum(d) <> 0 ORDER BY 1
    ON CONFLICT (k, shard) DO UPDATE SET n = g.n + excluded.n;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION job_counts_deleted() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    sh smallint := floor(random() * 16);
BEGIN
    INSERT INTO job_counts AS c (queue, state, shard, n)
    SELECT queue, state, sh, -count(*) FROM old_rows
    GROUP BY queue, state ORDER BY queue, state
    ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n;
    INSERT INTO dead_groups AS g (k, shard, fingerprint, queue, kind, last_error_class, dead_reason, n)
    SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason), sh,
           fingerprint, queue, kind, last_error_class, dead_reason, -count(*)
    FROM old_rows WHERE state = 'dead'
    GROUP BY fingerprint, queue, kind, last_error_class, dead_reason ORDER BY 1
    ON CONFLICT (k, shard) DO UPDATE SET n = g.n + excluded.n;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION job_counts_truncated() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_counts;
    DELETE FROM dead_groups;
    RETURN NULL;
END $$;

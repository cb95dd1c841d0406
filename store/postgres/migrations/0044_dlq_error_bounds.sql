-- redrive PostgreSQL schema v44: bounds of each cause's errors.
--
-- dead_error_bounds keeps, for each cause of death (dead_groups' key k),
-- the least and the greatest key of jobs_dead_error (an error's first 200
-- characters in the "C" collation, '' for none) among the jobs that died
-- of it. A count or groups by an error prefix then sums the causes whose
-- bounds lie inside the prefix's range and skips those outside it,
-- without reading a job; only a cause whose bounds straddle an end of
-- the range has its jobs counted (docs/design.md, "The DLQ at depth"). A
-- cause without bounds is unknown, and counted from its jobs.
--
-- The bounds only widen, in the statement that buries a job (or changes
-- a dead job's error): a row that already covers the error is read, not
-- written, so workers burying one cause do not wait for each other. As
-- jobs leave they stay bounds, if loose; retention deletes the bounds of
-- causes with no dead job left under a SHARE lock of this table, which
-- waits for the statements that widen them (Store.DeleteFinished).

-- Held for the backfill: no job dies or leaves the DLQ between the
-- bounds and the triggers.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE dead_error_bounds (
    k        text              PRIMARY KEY,
    error_lo text COLLATE "C"  NOT NULL,
    error_hi text COLLATE "C"  NOT NULL
);

INSERT INTO dead_error_bounds (k, error_lo, error_hi)
SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason),
       min(left(coalesce(last_error, ''), 200) COLLATE "C"), max(left(coalesce(last_error, ''), 200) COLLATE "C")
FROM jobs WHERE state = 'dead'
GROUP BY fingerprint, queue, kind, last_error_class, dead_reason;

-- The functions of 0014, and the bounds of the causes of the rows that
-- are dead after the statement (only when there are: the statements of
-- jobs that never die skip it). Two statements: new causes are inserted,
-- then the rows that must widen are locked in key order (as dead_groups'
-- shards are written) and widened; the second reads the rows as they are
-- then, so that a cause another transaction inserted meanwhile is
-- widened after it commits. The bounds are not summed over a statement's
-- old rows: a dead job whose error changes widens them too.
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
    IF FOUND THEN
        INSERT INTO dead_error_bounds (k, error_lo, error_hi)
        SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason),
               min(left(coalesce(last_error, ''), 200) COLLATE "C"), max(left(coalesce(last_error, ''), 200) COLLATE "C")
        FROM new_rows WHERE state = 'dead'
        GROUP BY fingerprint, queue, kind, last_error_class, dead_reason ORDER BY 1
        ON CONFLICT (k) DO NOTHING;
        WITH x AS (
            SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason) AS k,
                   min(left(coalesce(last_error, ''), 200) COLLATE "C") AS lo,
                   max(left(coalesce(last_error, ''), 200) COLLATE "C") AS hi
            FROM new_rows WHERE state = 'dead'
            GROUP BY fingerprint, queue, kind, last_error_class, dead_reason
        ), locked AS (
            SELECT b.k FROM dead_error_bounds b JOIN x USING (k)
            WHERE x.lo < b.error_lo OR x.hi > b.error_hi
            ORDER BY b.k FOR UPDATE OF b
        )
        UPDATE dead_error_bounds b SET error_lo = least(b.error_lo, x.lo), error_hi = greatest(b.error_hi, x.hi)
        FROM x WHERE b.k = x.k AND b.k IN (SELECT k FROM locked);
    END IF;
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
    IF EXISTS (SELECT FROM new_rows WHERE state = 'dead') THEN
        INSERT INTO dead_error_bounds (k, error_lo, error_hi)
        SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason),
               min(left(coalesce(last_error, ''), 200) COLLATE "C"), max(left(coalesce(last_error, ''), 200) COLLATE "C")
        FROM new_rows WHERE state = 'dead'
        GROUP BY fingerprint, queue, kind, last_error_class, dead_reason ORDER BY 1
        ON CONFLICT (k) DO NOTHING;
        WITH x AS (
            SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason) AS k,
                   min(left(coalesce(last_error, ''), 200) COLLATE "C") AS lo,
                   max(left(coalesce(last_error, ''), 200) COLLATE "C") AS hi
            FROM new_rows WHERE state = 'dead'
            GROUP BY fingerprint, queue, kind, last_error_class, dead_reason
        ), locked AS (
            SELECT b.k FROM dead_error_bounds b JOIN x USING (k)
            WHERE x.lo < b.error_lo OR x.hi > b.error_hi
            ORDER BY b.k FOR UPDATE OF b
        )
        UPDATE dead_error_bounds b SET error_lo = least(b.error_lo, x.lo), error_hi = greatest(b.error_hi, x.hi)
        FROM x WHERE b.k = x.k AND b.k IN (SELECT k FROM locked);
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION job_counts_truncated() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_counts;
    DELETE FROM dead_groups;
    DELETE FROM dead_error_bounds;
    RETURN NULL;
END $$;

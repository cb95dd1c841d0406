-- redrive PostgreSQL schema: the job counts' update trigger reads each
-- transition table once.
--
-- job_counts_updated (migration 0044) ran for every UPDATE of jobs and
-- scanned its transition tables five times: the old and the new rows
-- once for job_counts, each again (filtered on state = 'dead') for
-- dead_groups, and the new rows once more to learn whether any job was
-- dead after the statement. A lease or a completion of 1,000 jobs, in
-- which no job is dead before or after, paid for the four scans that
-- found nothing: 7,700 server instructions a job in each, counted
-- under callgrind (docs/BENCHMARKS.md, "PostgreSQL server instructions
-- per job: cuts counted (issue 29)").
--
-- Now the old and the new rows are each read once, grouped by queue and
-- state (one row per group, not per job, goes on to the sum), and the
-- groups tell whether a dead job is among the old rows or the new ones:
-- only then are dead_groups and dead_error_bounds written, as before
-- and by the same statements. The counts stay exact under any writer:
-- the trigger and its firing are unchanged, only the function's body.

CREATE OR REPLACE FUNCTION job_counts_updated() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    sh smallint := floor(random() * 16);
    dead_before boolean;
    dead_after boolean;
BEGIN
    WITH moved AS (
        SELECT queue, state, -count(*) AS d FROM old_rows GROUP BY queue, state
        UNION ALL
        SELECT queue, state, count(*) FROM new_rows GROUP BY queue, state
    ), counted AS (
        INSERT INTO job_counts AS c (queue, state, shard, n)
        SELECT queue, state, sh, sum(d) FROM moved
        GROUP BY queue, state HAVING sum(d) <> 0 ORDER BY queue, state
        ON CONFLICT (queue, state, shard) DO UPDATE SET n = c.n + excluded.n
    )
    SELECT coalesce(bool_or(d < 0), false), coalesce(bool_or(d > 0), false) INTO dead_before, dead_after
    FROM moved WHERE state = 'dead';
    IF dead_before OR dead_after THEN
        INSERT INTO dead_groups AS g (k, shard, fingerprint, queue, kind, last_error_class, dead_reason, n)
        SELECT dead_group_key(fingerprint, queue, kind, last_error_class, dead_reason), sh,
               fingerprint, queue, kind, last_error_class, dead_reason, sum(d) FROM (
            SELECT fingerprint, queue, kind, last_error_class, dead_reason, -1 AS d FROM old_rows WHERE state = 'dead'
            UNION ALL
            SELECT fingerprint, queue, kind, last_error_class, dead_reason, 1 FROM new_rows WHERE state = 'dead'
        ) x
        GROUP BY fingerprint, queue, kind, last_error_class, dead_reason HAVING sum(d) <> 0 ORDER BY 1
        ON CONFLICT (k, shard) DO UPDATE SET n = g.n + excluded.n;
    END IF;
    IF dead_after THEN
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

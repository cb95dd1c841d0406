-- redrive PostgreSQL schema v15: job priorities.
--
-- A job's priority orders the waiting jobs of its queue: Fetch leases the
-- due jobs of the highest priority first, then by due time and id. The
-- store keeps priorities from -100 to 100 (store.MinPriority and
-- store.MaxPriority), 0 by default; the CHECK keeps anything else out.
-- Adding a NOT NULL column with a constant default rewrites no row (the
-- CHECK is validated by one scan of the table).
ALTER TABLE jobs ADD COLUMN priority smallint NOT NULL DEFAULT 0
    CONSTRAINT jobs_priority_range CHECK (priority BETWEEN -100 AND 100);

-- Fetch: the waiting jobs of a queue by priority, then due time. Fetch
-- walks the distinct priorities of the queue's waiting jobs, highest
-- first (one probe of this index each), and reads each as a range of due
-- jobs, so that jobs of a higher priority due later are never walked
-- past. It replaces jobs_due (queue, run_at, id): NextDue and the
-- queues' latency take the earliest due job of each priority from it,
-- and every enqueue and retry writes one index of waiting jobs, not two.
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled');
DROP INDEX jobs_due;

-- The distinct priorities of a queue's waiting jobs, highest first: a
-- loose scan of jobs_ready, one probe a priority. Fetch walks them and
-- reads each priority's due jobs as one range of the index. A function
-- rather than a recursive CTE in the fetch: the planner takes a
-- recursive CTE for a hundred rows, and a fetch planned generically on a
-- small table then joins its leased rows by a sequential scan; ROWS 1
-- keeps the join by primary key. (The whole walk runs before the first
-- row is used: as many probes as the queue has distinct priorities, two
-- when every job has one.)
CREATE FUNCTION job_priorities(q text) RETURNS SETOF smallint
LANGUAGE plpgsql STABLE ROWS 1
SET search_path FROM CURRENT AS $$
DECLARE
    p smallint;
BEGIN
    SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND queue = q
    ORDER BY priority DESC LIMIT 1;
    WHILE p IS NOT NULL LOOP
        RETURN NEXT p;
        SELECT priority INTO p FROM jobs WHERE state IN ('pending', 'scheduled') AND queue = q AND priority < p
        ORDER BY priority DESC LIMIT 1;
    END LOOP;
END $$;

-- redrive SQLite schema v14: job priorities.
--
-- A job's priority orders the waiting jobs of its queue: Fetch leases the
-- due jobs of the highest priority first, then by due time and id. The
-- store keeps priorities from -100 to 100 (store.MinPriority and
-- store.MaxPriority), 0 by default; the CHECK keeps anything else out.
-- Adding a column with a constant default rewrites no row.
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN -100 AND 100);

-- Fetch: the waiting jobs of a queue by priority, then due time. Fetch
-- reads one priority at a time (the highest first, found by one probe of
-- this index), each a range of due jobs, so that jobs of a higher
-- priority due later are never walked past. It replaces jobs_due (queue,
-- run_at, id): NextDue and the queues' latency take the earliest due job
-- of each priority from it, and every lease and enqueue keeps one index
-- of waiting jobs up to date, not two.
CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled');
DROP INDEX jobs_due;

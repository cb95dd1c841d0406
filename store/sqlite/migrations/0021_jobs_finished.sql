-- redrive SQLite schema: an index for retention.
--
-- The cleaner deletes, per finished state, the jobs that finished before
-- the retention cut-off (DeleteFinished: state = ? AND finished_at IS
-- NOT NULL AND finished_at < ?). Without an index on finished_at each
-- cleanup scanned the whole jobs table, which grows with the backlog of
-- pending jobs; this index (the same as PostgreSQL's jobs_finished) reads
-- only the expired rows of one state. Its predicate holds only for
-- finished jobs, so pending and running jobs cost it nothing.
CREATE INDEX jobs_finished ON jobs (state, finished_at) WHERE finished_at IS NOT NULL;

-- redrive SQLite schema v11: the lease token (store.Job.Lease).
--
-- Every Fetch that leases a job increments it, and nothing else changes
-- it: a snooze or a release gives the attempt back (attempt - 1), so the
-- next lease by the same worker had the same (attempt, worker) as the one
-- that ended, and an outcome still in flight for the old lease applied to
-- the new one. Outcomes, heartbeats and progress are fenced on the token
-- instead. Jobs leased before this migration keep 0 until their next
-- lease.
ALTER TABLE jobs ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;

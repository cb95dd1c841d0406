-- redrive PostgreSQL schema v4: how long the handler ran in a job's last
-- finished attempt (nanoseconds), so the attempt that completed a job is
-- recorded with its duration (its history holds failures and operator
-- actions only). NULL for jobs finished before this version.

ALTER TABLE jobs ADD COLUMN last_duration bigint;

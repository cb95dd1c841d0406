-- redrive SQLite schema v5: the delay the retry policy chose after a
-- job's last failed attempt (nanoseconds), from which decorrelated jitter
-- draws the next delay. NULL before the first retry and after a redrive.

ALTER TABLE jobs ADD COLUMN last_delay INTEGER;

-- redrive SQLite schema v7: the progress a running attempt's handler
-- reported (redrive.Progress): done units of total (0 or less: unknown),
-- and when its worker sent it (Unix microseconds). NULL when none was
-- reported; a completed job keeps the final values, every other end of
-- an attempt clears them.

ALTER TABLE jobs ADD COLUMN progress_done INTEGER;
ALTER TABLE jobs ADD COLUMN progress_total INTEGER;
ALTER TABLE jobs ADD COLUMN progress_at INTEGER;

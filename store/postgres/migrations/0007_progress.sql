-- redrive PostgreSQL schema v7: the progress a running attempt's handler
-- reported (redrive.Progress): done units of total (0 or less: unknown),
-- and when its worker sent it. NULL when none was reported; a completed
-- job keeps the final values, every other end of an attempt clears them.

ALTER TABLE jobs ADD COLUMN progress_done bigint,
    ADD COLUMN progress_total bigint,
    ADD COLUMN progress_at timestamptz;

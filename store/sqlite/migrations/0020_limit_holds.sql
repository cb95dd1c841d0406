-- redrive SQLite schema: holds on Retry-After (store.Outcome.HoldUntil).
--
-- hold_retry_after (0 or 1) says whether a rate_limited failure with a
-- Retry-After of one of the limit's jobs holds the job's group until the
-- Retry-After has passed. held_until (unix microseconds, 0: none) is
-- that hold, kept in the group's rate row (a limit without a rate keeps
-- rows for its holds only, tat 0). A fetch leases no job of a group held
-- at its time, as it leases none of a group its rate holds.
ALTER TABLE conc_limits ADD COLUMN hold_retry_after INTEGER NOT NULL DEFAULT 0;
ALTER TABLE limit_rates ADD COLUMN held_until INTEGER NOT NULL DEFAULT 0;

-- Turning the hold off ends the limit's holds, which a fetch's idle mark
-- must see: the flag is one of the columns that bump limit_gen.
DROP TRIGGER conc_limits_gen_update;
CREATE TRIGGER conc_limits_gen_update AFTER UPDATE OF max_running, rate_n, rate_per, rate_burst, hold_retry_after ON conc_limits
BEGIN
    UPDATE limit_gen SET n = n + 1 WHERE id = 1;
END;

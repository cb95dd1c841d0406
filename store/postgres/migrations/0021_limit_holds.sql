-- redrive PostgreSQL schema: holds on Retry-After (store.Outcome.HoldUntil).
--
-- hold_retry_after says whether a rate_limited failure with a
-- Retry-After of one of the limit's jobs holds the job's group until the
-- Retry-After has passed. held_until (unix microseconds, 0: none) is
-- that hold, kept in the group's rate row (a limit without a rate keeps
-- rows for its holds only, tat 0); the outcome writes it in its
-- statement. A fetch leases no job of a group held at its time, as it
-- leases none of a group its rate holds. Adding constant-default columns
-- rewrites no row.
ALTER TABLE conc_limits ADD COLUMN hold_retry_after boolean NOT NULL DEFAULT false;
ALTER TABLE limit_rates ADD COLUMN held_until bigint NOT NULL DEFAULT 0;

-- Turning the hold off ends the limit's holds, which a fetch's idle mark
-- must see: the flag is one of the columns that bump limit_gen.
DROP TRIGGER conc_limits_gen ON conc_limits;
CREATE TRIGGER conc_limits_gen AFTER INSERT OR UPDATE OF max_running, rate_n, rate_per, rate_burst, hold_retry_after ON conc_limits
    FOR EACH STATEMENT EXECUTE FUNCTION limit_gen_bump();

-- redrive SQLite schema: fleet-wide rate limits (store.LimitRate).
--
-- A limit may have a rate besides (or instead of) its max: rate_n jobs
-- per rate_per microseconds, in bursts of up to rate_burst (rate_n 0: no
-- rate). max_running 0 now means no cap on running jobs (a limit with
-- only a rate). throttled counts the starts the rate delayed.
ALTER TABLE conc_limits ADD COLUMN rate_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conc_limits ADD COLUMN rate_per INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conc_limits ADD COLUMN rate_burst INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conc_limits ADD COLUMN throttled INTEGER NOT NULL DEFAULT 0;

-- The rate state of a group: its GCRA theoretical arrival time, in unix
-- microseconds. The fetch that leases jobs of the group reads and moves
-- it in its transaction (the writer's: one at a time). A row whose tat
-- is past says no more than no row: the fetch deletes such rows.
CREATE TABLE limit_rates (
    name TEXT    NOT NULL,
    key  TEXT    NOT NULL,
    tat  INTEGER NOT NULL,
    PRIMARY KEY (name, key)
) WITHOUT ROWID;

-- The count of the throttled starts changes nothing a fetch selects: the
-- trigger of limit_gen fires only for the columns that do.
DROP TRIGGER conc_limits_gen_update;
CREATE TRIGGER conc_limits_gen_update AFTER UPDATE OF max_running, rate_n, rate_per, rate_burst ON conc_limits
BEGIN
    UPDATE limit_gen SET n = n + 1 WHERE id = 1;
END;

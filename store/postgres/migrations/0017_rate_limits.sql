-- redrive PostgreSQL schema: fleet-wide rate limits (store.LimitRate).
--
-- A limit may have a rate besides (or instead of) its max: rate_n jobs
-- per rate_per microseconds, in bursts of up to rate_burst (rate_n 0: no
-- rate). max_running 0 now means no cap on running jobs (a limit with
-- only a rate). throttled counts the starts the rate delayed. Adding
-- constant-default columns rewrites no row.
ALTER TABLE conc_limits DROP CONSTRAINT conc_limits_max_running_check;
ALTER TABLE conc_limits ADD CHECK (max_running >= 0);
ALTER TABLE conc_limits ADD COLUMN rate_n integer NOT NULL DEFAULT 0 CHECK (rate_n >= 0);
ALTER TABLE conc_limits ADD COLUMN rate_per bigint NOT NULL DEFAULT 0 CHECK (rate_per >= 0);
ALTER TABLE conc_limits ADD COLUMN rate_burst integer NOT NULL DEFAULT 0 CHECK (rate_burst >= 0);
ALTER TABLE conc_limits ADD COLUMN throttled bigint NOT NULL DEFAULT 0;

-- The rate state of a group: its GCRA theoretical arrival time, in unix
-- microseconds. Only a fetch of limited jobs reads or moves it, holding
-- the limited fetches' advisory lock, in the transaction that leases the
-- jobs. A row whose tat is past says no more than no row: the fetch
-- deletes such rows.
CREATE TABLE limit_rates (
    name text   NOT NULL,
    key  text   NOT NULL,
    tat  bigint NOT NULL,
    PRIMARY KEY (name, key)
);

-- The count of the throttled starts changes nothing a fetch selects: the
-- trigger of limit_gen fires only for the columns that do.
DROP TRIGGER conc_limits_gen ON conc_limits;
CREATE TRIGGER conc_limits_gen AFTER INSERT OR UPDATE OF max_running, rate_n, rate_per, rate_burst ON conc_limits
    FOR EACH STATEMENT EXECUTE FUNCTION limit_gen_bump();

-- redrive SQLite schema v44: bounds of each cause's errors.
--
-- Each row of dead_groups (one cause of death) also keeps the least and
-- the greatest key of jobs_dead_error (an error's first 200 characters,
-- '' for none) among the dead jobs it has counted. A count or groups by
-- an error prefix then sums the causes whose bounds lie inside the
-- prefix's range and skips those outside it, without reading a job;
-- only a cause whose bounds straddle an end of the range has its jobs
-- counted (docs/design.md, "The DLQ at depth"). The bounds widen as jobs
-- die and are kept as jobs leave (still bounds, if loose); the row, and
-- so its bounds, is deleted when its count falls to zero. NULL bounds
-- are unknown: such a cause is counted from its jobs.
ALTER TABLE dead_groups ADD COLUMN error_lo TEXT;
ALTER TABLE dead_groups ADD COLUMN error_hi TEXT;

UPDATE dead_groups SET (error_lo, error_hi) = (
    SELECT min(coalesce(substr(last_error, 1, 200), '')), max(coalesce(substr(last_error, 1, 200), ''))
    FROM jobs INDEXED BY jobs_dead_fingerprint
    WHERE state = 'dead' AND fingerprint = dead_groups.fingerprint AND queue = dead_groups.queue
      AND kind = dead_groups.kind AND last_error_class = dead_groups.last_error_class
      AND dead_reason = dead_groups.dead_reason);

DROP TRIGGER jobs_dead_inserted;
CREATE TRIGGER jobs_dead_inserted AFTER INSERT ON jobs WHEN new.state = 'dead'
BEGIN
    INSERT INTO dead_groups (fingerprint, queue, kind, last_error_class, dead_reason, n, error_lo, error_hi)
    VALUES (new.fingerprint, new.queue, new.kind, new.last_error_class, new.dead_reason, 1,
            coalesce(substr(new.last_error, 1, 200), ''), coalesce(substr(new.last_error, 1, 200), ''))
    ON CONFLICT (fingerprint, queue, kind, last_error_class, dead_reason) DO UPDATE SET n = n + 1,
        error_lo = min(error_lo, excluded.error_lo), error_hi = max(error_hi, excluded.error_hi);
END;

-- As in v13, and a dead job whose error changes counts again (out and
-- back in), widening its cause's bounds.
DROP TRIGGER jobs_dead_updated;
CREATE TRIGGER jobs_dead_updated
AFTER UPDATE OF state, fingerprint, queue, kind, last_error_class, dead_reason, last_error ON jobs
WHEN old.state = 'dead' OR new.state = 'dead'
BEGIN
    UPDATE dead_groups SET n = n - 1
    WHERE old.state = 'dead' AND fingerprint = old.fingerprint AND queue = old.queue AND kind = old.kind
      AND last_error_class = old.last_error_class AND dead_reason = old.dead_reason;
    DELETE FROM dead_groups
    WHERE old.state = 'dead' AND fingerprint = old.fingerprint AND queue = old.queue AND kind = old.kind
      AND last_error_class = old.last_error_class AND dead_reason = old.dead_reason AND n = 0;
    INSERT INTO dead_groups (fingerprint, queue, kind, last_error_class, dead_reason, n, error_lo, error_hi)
    SELECT new.fingerprint, new.queue, new.kind, new.last_error_class, new.dead_reason, 1,
           coalesce(substr(new.last_error, 1, 200), ''), coalesce(substr(new.last_error, 1, 200), '')
    WHERE new.state = 'dead'
    ON CONFLICT (fingerprint, queue, kind, last_error_class, dead_reason) DO UPDATE SET n = n + 1,
        error_lo = min(error_lo, excluded.error_lo), error_hi = max(error_hi, excluded.error_hi);
END;

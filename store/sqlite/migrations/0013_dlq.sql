-- redrive SQLite schema v13: the DLQ at depth.
--
-- Listing dead jobs pages by keyset on (dead_at, id), newest first. With
-- one filter, the jobs_dead index alone walks the whole DLQ past the jobs
-- the filter leaves out (and a selective filter finds its page only after
-- reading most of it); so each filter of the DLQ has its own partial index
-- ending in the keyset order, and a page of any one filter is a range of
-- one index. They hold dead jobs only: jobs that never die never touch
-- them.
DROP INDEX jobs_dead_fingerprint;
CREATE INDEX jobs_dead_fingerprint ON jobs (fingerprint, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_queue ON jobs (queue, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_kind ON jobs (kind, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_class ON jobs (last_error_class, dead_at, id) WHERE state = 'dead';
CREATE INDEX jobs_dead_reason ON jobs (dead_reason, dead_at, id) WHERE state = 'dead';

-- The number of dead jobs of each cause (fingerprint) and each of the
-- fields a DLQ filter names: groups and counts of the DLQ read these rows
-- instead of counting the jobs. Triggers keep it exact in the transaction
-- of every statement that changes jobs, whoever runs it; a row whose
-- count falls to zero is deleted.
CREATE TABLE dead_groups (
    fingerprint      TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    last_error_class TEXT    NOT NULL,
    dead_reason      TEXT    NOT NULL,
    n                INTEGER NOT NULL,
    PRIMARY KEY (fingerprint, queue, kind, last_error_class, dead_reason)
) WITHOUT ROWID;

INSERT INTO dead_groups (fingerprint, queue, kind, last_error_class, dead_reason, n)
SELECT fingerprint, queue, kind, last_error_class, dead_reason, count(*)
FROM jobs WHERE state = 'dead'
GROUP BY fingerprint, queue, kind, last_error_class, dead_reason;

CREATE TRIGGER jobs_dead_inserted AFTER INSERT ON jobs WHEN new.state = 'dead'
BEGIN
    INSERT INTO dead_groups (fingerprint, queue, kind, last_error_class, dead_reason, n)
    VALUES (new.fingerprint, new.queue, new.kind, new.last_error_class, new.dead_reason, 1)
    ON CONFLICT (fingerprint, queue, kind, last_error_class, dead_reason) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_dead_deleted AFTER DELETE ON jobs WHEN old.state = 'dead'
BEGIN
    UPDATE dead_groups SET n = n - 1
    WHERE fingerprint = old.fingerprint AND queue = old.queue AND kind = old.kind
      AND last_error_class = old.last_error_class AND dead_reason = old.dead_reason;
    DELETE FROM dead_groups
    WHERE fingerprint = old.fingerprint AND queue = old.queue AND kind = old.kind
      AND last_error_class = old.last_error_class AND dead_reason = old.dead_reason AND n = 0;
END;

-- Only the statements that set a column of the key run it, and only for
-- a job dead before or after.
CREATE TRIGGER jobs_dead_updated
AFTER UPDATE OF state, fingerprint, queue, kind, last_error_class, dead_reason ON jobs
WHEN old.state = 'dead' OR new.state = 'dead'
BEGIN
    UPDATE dead_groups SET n = n - 1
    WHERE old.state = 'dead' AND fingerprint = old.fingerprint AND queue = old.queue AND kind = old.kind
      AND last_error_class = old.last_error_class AND dead_reason = old.dead_reason;
    DELETE FROM dead_groups
    WHERE old.state = 'dead' AND fingerprint = old.fingerprint AND queue = old.queue AND kind = old.kind
      AND last_error_class = old.last_error_class AND dead_reason = old.dead_reason AND n = 0;
    INSERT INTO dead_groups (fingerprint, queue, kind, last_error_class, dead_reason, n)
    SELECT new.fingerprint, new.queue, new.kind, new.last_error_class, new.dead_reason, 1 WHERE new.state = 'dead'
    ON CONFLICT (fingerprint, queue, kind, last_error_class, dead_reason) DO UPDATE SET n = n + 1;
END;

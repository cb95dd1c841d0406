-- redrive schema v2: queues an operator paused or resumed. A queue with no
-- row here is not paused. Times are Unix microseconds (UTC).

CREATE TABLE queues (
    name      TEXT    NOT NULL PRIMARY KEY,
    paused    INTEGER NOT NULL DEFAULT 0,
    -- When the queue was paused; NULL while it is not paused.
    paused_at INTEGER,
    CHECK ((paused = 0 AND paused_at IS NULL) OR (paused = 1 AND paused_at IS NOT NULL))
) WITHOUT ROWID;

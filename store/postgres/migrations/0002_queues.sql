-- redrive PostgreSQL schema v2: queues an operator paused or resumed. A
-- queue with no row here is not paused.

CREATE TABLE queues (
    name      text        PRIMARY KEY,
    paused    boolean     NOT NULL DEFAULT false,
    -- When the queue was paused; NULL while it is not paused.
    paused_at timestamptz,
    CHECK (paused = (paused_at IS NOT NULL))
);

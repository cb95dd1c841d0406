-- redrive PostgreSQL schema v25: the rescue finds leases by fetch, not
-- by an index of leased jobs.
--
-- jobs_lease took one B-tree entry per lease (and per heartbeat, which it
-- kept from being a HOT update), 5-9% of the server's instructions per
-- job. Instead, each fetch records one row here: the worker, the job ids
-- it leased, and due, a time no later than the end of any of those jobs'
-- leases while the worker holds them. The rescue (Expired) reads the
-- batches whose due passed, finds which of their jobs the worker still
-- holds (running, by primary key), returns those whose lease ended, and
-- moves each batch's due to the earliest lease still held in it, or
-- deletes it when none is. A heartbeat only ever extends a lease, so due stays at or
-- before every lease of its batch: the rescue stays exact.
CREATE TABLE lease_batches (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker text        NOT NULL,
    due    timestamptz NOT NULL,
    ids    bigint[]    NOT NULL
);
-- The ids are mostly distinct integers: not worth compressing.
ALTER TABLE lease_batches ALTER COLUMN ids SET STORAGE EXTERNAL;
CREATE INDEX lease_batches_due ON lease_batches (due, id);

-- The jobs running now, one batch per worker.
INSERT INTO lease_batches (worker, due, ids)
SELECT coalesce(worker, ''), coalesce(min(lease_until), now()), array_agg(id ORDER BY id)
FROM jobs WHERE state = 'running' AND lease_until IS NOT NULL GROUP BY worker;

DROP INDEX jobs_lease;

-- redrive PostgreSQL schema: deleting shared breakers.
--
-- A breaker's record may be deleted once nothing uses it. Its version
-- must keep rising across the deletion: a process that applied version N
-- of the old record ignores any state not newer than N. The single row of
-- breaker_floor holds a version above every deleted record's: a missing
-- record reads as closed at this version, and a record created again
-- starts from it (read after the row's lock, so after any deletion of it
-- committed). It depends on no other migration than 0010 (breakers).
CREATE TABLE breaker_floor (
    id      integer NOT NULL PRIMARY KEY CHECK (id = 1),
    version bigint  NOT NULL
);
INSERT INTO breaker_floor (id, version) VALUES (1, 0);

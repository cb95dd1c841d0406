-- redrive PostgreSQL schema: deleting shared breakers.
--
-- A breaker's record may be deleted once nothing uses it. Its version
-- must keep rising across the deletion: a process that applied version N
-- of the old record ignores any state not newer than N. breaker_floor
-- keeps, per deleted name, a version above the deleted record's: a
-- missing record reads as closed at this version, and a record created
-- again starts from it (read after the row's lock, so after any deletion
-- of it committed). Per name, not one for all: a record created while
-- another is deleted must not read a floor above its own first version.
-- It depends on no other migration than 0010 (breakers).
CREATE TABLE breaker_floor (
    name    text   PRIMARY KEY,
    version bigint NOT NULL
);

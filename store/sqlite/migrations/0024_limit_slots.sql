-- redrive SQLite schema: fleet-wide concurrency slots of the broker
-- transports' consumers (store.Limits.TakeLimitSlot).
--
-- A row is one slot of a limit's group, held by one consumer process
-- until it releases it or its lease (until, unix microseconds) ends: a
-- slot whose until is past is free, whoever held it. token names the
-- holding (AUTOINCREMENT: never reused, so a holder whose lease ended
-- can neither renew nor release a slot taken since). Takes run in the
-- writer's transaction, one at a time for every process on the file.
CREATE TABLE limit_slots (
    token  INTEGER PRIMARY KEY AUTOINCREMENT,
    name   TEXT    NOT NULL,
    key    TEXT    NOT NULL,
    holder TEXT    NOT NULL,
    until  INTEGER NOT NULL
);
CREATE INDEX limit_slots_group ON limit_slots (name, key, until);

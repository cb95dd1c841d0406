-- redrive PostgreSQL schema: fleet-wide concurrency slots of the broker
-- transports' consumers (store.Limits.TakeLimitSlot).
--
-- A row is one slot of a limit's group, held by one consumer process
-- until it releases it or its lease (until, unix microseconds) ends: a
-- slot whose until is past is free, whoever held it. token names the
-- holding (an identity: never reused, so a holder whose lease ended can
-- neither renew nor release a slot taken since). A take holds the
-- group's transaction-scoped advisory lock, so two takes of one group
-- never count its slots at once.
CREATE TABLE limit_slots (
    token  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name   text   NOT NULL,
    key    text   NOT NULL,
    holder text   NOT NULL,
    until  bigint NOT NULL
);
CREATE INDEX limit_slots_group ON limit_slots (name, key, until);

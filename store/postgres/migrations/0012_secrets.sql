-- redrive PostgreSQL schema v12.
--
-- Random secrets shared by the processes using the store (store.Secrets),
-- one row per name: the key that signs the dashboard's session cookies,
-- replaced when someone signs out, so that every session ends in every
-- process, and stays ended across restarts.
CREATE TABLE secrets (
    name  text  PRIMARY KEY,
    value bytea NOT NULL
);

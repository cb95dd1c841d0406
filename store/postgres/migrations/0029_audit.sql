-- redrive PostgreSQL schema: the audit log.
--
-- One row per change made through the API, the dashboard or the
-- command-line tool on the store (enqueues aside). Rows are appended and
-- read; only retention deletes them (by at).
CREATE TABLE audit (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL,
    actor        text        NOT NULL,
    role         text        NOT NULL DEFAULT '',
    action       text        NOT NULL,
    target       text        NOT NULL DEFAULT '',
    count        bigint      NOT NULL DEFAULT 0,
    operation_id text        NOT NULL DEFAULT '',
    note         text        NOT NULL DEFAULT '',
    remote       text        NOT NULL DEFAULT '',
    status       integer     NOT NULL DEFAULT 0
);
CREATE INDEX audit_at ON audit (at);

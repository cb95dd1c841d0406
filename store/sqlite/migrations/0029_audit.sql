-- redrive SQLite schema: the audit log.
--
-- One row per change made through the API, the dashboard or the
-- command-line tool on the store (enqueues aside). Rows are appended and
-- read; only retention deletes them (by at).
CREATE TABLE audit (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at           INTEGER NOT NULL, -- unix microseconds
    actor        TEXT    NOT NULL,
    role         TEXT    NOT NULL DEFAULT '',
    action       TEXT    NOT NULL,
    target       TEXT    NOT NULL DEFAULT '',
    count        INTEGER NOT NULL DEFAULT 0,
    operation_id TEXT    NOT NULL DEFAULT '',
    note         TEXT    NOT NULL DEFAULT '',
    remote       TEXT    NOT NULL DEFAULT '',
    status       INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX audit_at ON audit (at);

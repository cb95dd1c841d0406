-- redrive SQLite schema v41: the DLQ's error prefix filter.
--
-- Filter.ErrorPrefix (error_prefix in the API) selects the dead jobs whose
-- last error starts with a text, case-sensitively. Its page is read from
-- this index: the range of keys (an error's first 200 characters, the
-- built-in substr, so that any SQLite can write the table) that start
-- with the text, sorted by the keyset order; or, when that range is
-- long, by walking jobs_dead newest first (docs/design.md, "The DLQ at
-- depth"). Dead jobs only, as the DLQ's other indexes.
CREATE INDEX jobs_dead_error ON jobs (substr(last_error, 1, 200), dead_at, id) WHERE state = 'dead';

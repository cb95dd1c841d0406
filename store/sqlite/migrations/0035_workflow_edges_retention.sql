-- redrive SQLite schema: a workflow job's edges go with it
-- (docs/design.md, "Workflows"). The number follows PostgreSQL's
-- migration of the same change; SQLite has no 0034 (its count of edges
-- not done, job_waits, is PostgreSQL's alone).
--
-- job_deps (migration 0032) kept the edges of the jobs a purge or the
-- retention deleted, for ever. jobs_flow_deleted now deletes them, in
-- the statement that deletes the job, after the cancel of its blocked
-- dependents (which reads its edges not done): an edge from a deleted
-- job holds nobody back (its dependents were canceled, or released when
-- the edge was marked done), and an edge to a deleted job releases
-- nobody. What reads the edges loses nothing: a dependency's result and
-- a workflow's graph read the jobs at both ends. The partial index of
-- the edges not done by dependent (job_deps_waiting) cannot find the
-- edges done of a deleted job: job_deps_job, on (job_id, done), finds
-- all of them, and still finds a dependent's edges not done, for the
-- release check of jobs_flow, with one short search. The edges left
-- behind by the jobs deleted so far are deleted here.
DROP INDEX job_deps_waiting;
CREATE INDEX job_deps_job ON job_deps (job_id, done);
DELETE FROM job_deps WHERE dep_id NOT IN (SELECT id FROM jobs) OR job_id NOT IN (SELECT id FROM jobs);

DROP TRIGGER jobs_flow_deleted;
CREATE TRIGGER jobs_flow_deleted AFTER DELETE ON jobs
WHEN OLD.flow IS NOT NULL
BEGIN
    UPDATE jobs SET state = 'canceled',
        finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000,
        history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
            'at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
    WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id = OLD.id AND done = 0) AND state = 'blocked';
    DELETE FROM job_deps WHERE dep_id = OLD.id;
    DELETE FROM job_deps WHERE job_id = OLD.id;
END;

-- redrive SQLite schema: a dependent keeps a trace of its deleted
-- dependencies (docs/design.md, "Workflows"). The number follows
-- PostgreSQL's migration of the same change.
--
-- jobs_flow_deleted (migrations 0035, 0040) deletes a job's edges with
-- it, so a dependency deleted by retention or a purge before its
-- dependent ran vanished from the dependent's DependencyResults, with
-- nothing saying it had been there. The trigger now writes, for each
-- dependent still to run (any state but completed and canceled: a dead
-- one may be redriven), the deleted dependency's id, name and state and
-- whether it had a result into job_deps_gone, which DependencyResults
-- reads beside the edges; the rows go with their dependent. The blocked
-- dependents the deletion cancels were canceled just before: they get
-- none. The edges deleted before this migration left no trace.
CREATE TABLE job_deps_gone (
    job_id     INTEGER NOT NULL,
    dep_id     INTEGER NOT NULL,
    node       TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    had_result INTEGER NOT NULL,
    PRIMARY KEY (job_id, dep_id)
) WITHOUT ROWID;

DROP TRIGGER jobs_flow_deleted;
CREATE TRIGGER jobs_flow_deleted AFTER DELETE ON jobs
WHEN OLD.flow IS NOT NULL
BEGIN
    UPDATE jobs SET state = 'canceled',
        finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000,
        history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
            'at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
    WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id = OLD.id AND done = 0) AND state = 'blocked';
    INSERT OR IGNORE INTO job_deps_gone (job_id, dep_id, node, state, had_result)
    SELECT d.job_id, OLD.id, coalesce(OLD.node, ''), OLD.state, OLD.result IS NOT NULL
    FROM job_deps d JOIN jobs j ON j.id = d.job_id
    WHERE d.dep_id = OLD.id AND j.state NOT IN ('completed', 'canceled');
    DELETE FROM job_deps WHERE dep_id = OLD.id;
    DELETE FROM job_deps WHERE job_id = OLD.id;
    DELETE FROM job_deps_gone WHERE job_id = OLD.id;

    -- The workflow cannot succeed any more: cancel its success callback.
    UPDATE jobs SET state = 'canceled',
        finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000,
        history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
            'at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
    WHERE id = (SELECT on_success FROM workflows WHERE id = OLD.flow) AND state = 'blocked' AND OLD.state <> 'completed';
END;

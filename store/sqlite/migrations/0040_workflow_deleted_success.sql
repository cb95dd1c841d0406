-- redrive SQLite schema: a deleted job that never completed cancels its
-- workflow's success callback (docs/design.md, "Workflows").
--
-- jobs_flow_deleted (migrations 0033, 0035) canceled the blocked
-- dependents of a deleted job, whose cancels canceled the success
-- callback (jobs_flow). A dead job no job waits for (a leaf, or any
-- dead job under on_dead 'run', whose dependents were released at its
-- death) canceled nobody: its deletion (a purge, the retention) left the
-- workflow unable to succeed, the job no longer there to be redriven,
-- and its success callback blocked for ever. The trigger now cancels
-- the callback, still blocked, when the deleted job had not completed,
-- as its cancel would; jobs_unblocked counts the move. A completed
-- job's deletion changes nothing: the workflow's count keeps it.
--
-- The workflows that lost a dead job before this migration (their dead
-- count above their dead jobs still there) have theirs canceled here.
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

    -- The workflow cannot succeed any more: cancel its success callback.
    UPDATE jobs SET state = 'canceled',
        finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000,
        history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
            'at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
    WHERE id = (SELECT on_success FROM workflows WHERE id = OLD.flow) AND state = 'blocked' AND OLD.state <> 'completed';
END;

UPDATE jobs SET state = 'canceled',
    finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000
WHERE state = 'blocked' AND id IN (SELECT w.on_success FROM workflows w
    WHERE w.on_success IS NOT NULL AND w.dead > (SELECT count(*) FROM jobs j WHERE j.flow = w.id AND j.state = 'dead'));

-- redrive SQLite schema: a deleted workflow job releases nobody for ever
-- (docs/design.md, "Workflows").
--
-- A purge or the retention of a dead job of a workflow under on_dead
-- 'wait' left its blocked dependents waiting for a job that no longer
-- exists. The trigger jobs_flow_deleted cancels them, in the statement
-- that deletes the job, whichever code does (Purge, a purge operation,
-- retention, a hand-written DELETE): the blocked jobs whose edge from
-- the deleted job is not done, as a cancel of the job would. Each
-- cancel fires jobs_flow (migration 0032), which cancels their own
-- blocked dependents down the graph, counts them in the workflow and
-- fires its callbacks; jobs_unblocked counts them in job_counts and the
-- canceled counter. A completed job's edges are done, and a canceled
-- job's dependents were canceled or released already, so only a dead
-- job (or one deleted by hand before it finished) has any to cancel.
-- A delete carries no time: the cancel is stamped with the database's
-- clock. The WHEN clause is all the deletion of a plain job pays.
CREATE TRIGGER jobs_flow_deleted AFTER DELETE ON jobs
WHEN OLD.flow IS NOT NULL
BEGIN
    UPDATE jobs SET state = 'canceled',
        finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000,
        history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
            'at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
    WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id = OLD.id AND done = 0) AND state = 'blocked';
END;

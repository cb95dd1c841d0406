-- redrive SQLite schema: a workflow takes jobs until it closes
-- (docs/design.md, "Workflows"). The number follows PostgreSQL's
-- migration of the same change.
--
-- AddToWorkflow adds jobs to a workflow while it is open: neither
-- canceled nor closed. closed_at is set by jobs_flow, in the statement
-- that finishes the workflow's last unfinished job, the first time every
-- job of it finished (completed + dead + canceled = total: when its
-- complete callback fires): a callback fired cannot fire again, so a job
-- added then would be waited for by nobody. A redrive may make the
-- workflow active again; it stays closed. The one writer serializes an
-- add with every move of the workflow's jobs.
--
-- The workflows that finished before this migration are closed: those
-- whose jobs all finished, and those whose complete or success callback
-- fired (a redrive made them active again) or was deleted since.
ALTER TABLE workflows ADD COLUMN closed_at INTEGER;
UPDATE workflows SET closed_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000
WHERE completed + dead + canceled = total
    OR (on_complete IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = workflows.on_complete AND j.state IN ('blocked', 'canceled')))
    OR (on_success IS NOT NULL AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = workflows.on_success AND j.state IN ('blocked', 'canceled')));

DROP TRIGGER jobs_flow;
CREATE TRIGGER jobs_flow AFTER UPDATE OF state ON jobs
WHEN NEW.flow IS NOT NULL AND OLD.state <> NEW.state
    AND (NEW.state IN ('completed', 'dead', 'canceled') OR OLD.state IN ('completed', 'dead', 'canceled'))
BEGIN
    UPDATE workflows SET
        completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
        dead = dead + (NEW.state = 'dead') - (OLD.state = 'dead'),
        canceled = canceled + (NEW.state = 'canceled') - (OLD.state = 'canceled')
    WHERE id = NEW.flow;

    -- Every job finished for the first time: the workflow takes no more
    -- jobs (AddToWorkflow).
    UPDATE workflows SET closed_at = coalesce(NEW.finished_at, NEW.run_at)
    WHERE id = NEW.flow AND closed_at IS NULL AND completed + dead + canceled = total;

    -- The edges this job no longer holds back.
    UPDATE job_deps SET done = 1
    WHERE dep_id = NEW.id AND done = 0 AND (NEW.state = 'completed'
        OR (NEW.state IN ('dead', 'canceled') AND (SELECT on_dead FROM workflows WHERE id = NEW.flow) = 'run'));

    -- Release the blocked dependents none of whose edges holds back:
    -- pending, or scheduled when they were enqueued for later.
    UPDATE jobs SET state = CASE WHEN run_at > coalesce(NEW.finished_at, NEW.run_at) THEN 'scheduled' ELSE 'pending' END
    WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id = NEW.id) AND state = 'blocked'
        AND NOT EXISTS (SELECT 1 FROM job_deps d WHERE d.job_id = jobs.id AND d.done = 0)
        AND NEW.state IN ('completed', 'dead', 'canceled');

    -- Cancel the blocked dependents of a canceled job (they would wait
    -- for ever), and of a dead one under on_dead 'cancel'; each cancel
    -- fires this trigger again, down the graph.
    UPDATE jobs SET state = 'canceled', finished_at = coalesce(NEW.finished_at, NEW.run_at),
        history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
            'at', strftime('%Y-%m-%dT%H:%M:%fZ', coalesce(NEW.finished_at, NEW.run_at) / 1000000.0, 'unixepoch'),
            'reason', 'dependency_' || NEW.state, 'note', 'job ' || NEW.id))
    WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id = NEW.id) AND state = 'blocked'
        AND ((NEW.state = 'canceled' AND (SELECT on_dead FROM workflows WHERE id = NEW.flow) <> 'run')
            OR (NEW.state = 'dead' AND (SELECT on_dead FROM workflows WHERE id = NEW.flow) = 'cancel'));

    -- A canceled job makes the success callback impossible: cancel it.
    UPDATE jobs SET state = 'canceled', finished_at = coalesce(NEW.finished_at, NEW.run_at)
    WHERE id = (SELECT on_success FROM workflows WHERE id = NEW.flow) AND state = 'blocked' AND NEW.state = 'canceled';

    -- The callbacks: each a blocked job made pending once.
    UPDATE jobs SET state = 'pending', run_at = max(run_at, coalesce(NEW.finished_at, NEW.run_at))
    WHERE id = (SELECT on_death FROM workflows WHERE id = NEW.flow AND NEW.state = 'dead') AND state = 'blocked';

    UPDATE jobs SET state = 'pending', run_at = max(run_at, coalesce(NEW.finished_at, NEW.run_at))
    WHERE id = (SELECT on_complete FROM workflows WHERE id = NEW.flow AND completed + dead + canceled = total) AND state = 'blocked';

    UPDATE jobs SET state = 'pending', run_at = max(run_at, coalesce(NEW.finished_at, NEW.run_at))
    WHERE id = (SELECT on_success FROM workflows WHERE id = NEW.flow AND completed = total) AND state = 'blocked';
END;

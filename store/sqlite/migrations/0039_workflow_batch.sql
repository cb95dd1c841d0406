-- redrive SQLite schema: a Finish batch's workflow completions applied
-- together (docs/design.md, "Workflows"). The number follows
-- PostgreSQL's migration 0038, which applies them at commit through a
-- deferred trigger; SQLite has neither deferred nor statement-level
-- triggers, so the store does it in Go.
--
-- jobs_flow (migration 0036) ran its nine statements for each completion
-- of a workflow's job: most of a completion's cost when a Finish batch
-- completes hundreds of them in one bulk statement. While the row of
-- flow_batch with job 0 exists (the store inserts it at the start of a
-- Finish of two completions or more, in its transaction, and deletes it
-- after the Finish's last move), a move from running to completed of a
-- workflow's job
-- skips jobs_flow: jobs_flow_batch records the job, its workflow and its
-- time in flow_batch instead, and the store then applies the recorded
-- completions with one statement per table (the workflows' counts and
-- closing, the edges done, the dependents released, the callbacks
-- fired), as jobs_flow would have one by one, and empties the table.
-- Every other move (a death, a cancel, a redrive, a completion outside
-- such a Finish, a hand-written UPDATE) runs jobs_flow as before: the table
-- is empty outside the store's bulk completions, and a transaction that
-- fails in between rolls the row back with the rest.
CREATE TABLE flow_batch (
    job  INTEGER PRIMARY KEY,
    flow INTEGER NOT NULL,
    at   INTEGER NOT NULL
);

CREATE TRIGGER jobs_flow_batch AFTER UPDATE OF state ON jobs
WHEN NEW.flow IS NOT NULL AND OLD.state = 'running' AND NEW.state = 'completed'
    AND EXISTS (SELECT 1 FROM flow_batch WHERE job = 0)
BEGIN
    INSERT INTO flow_batch (job, flow, at) VALUES (NEW.id, NEW.flow, coalesce(NEW.finished_at, NEW.run_at));
END;

DROP TRIGGER jobs_flow;
CREATE TRIGGER jobs_flow AFTER UPDATE OF state ON jobs
WHEN NEW.flow IS NOT NULL AND OLD.state <> NEW.state
    AND (NEW.state IN ('completed', 'dead', 'canceled') OR OLD.state IN ('completed', 'dead', 'canceled'))
    AND NOT (OLD.state = 'running' AND NEW.state = 'completed' AND EXISTS (SELECT 1 FROM flow_batch WHERE job = 0))
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

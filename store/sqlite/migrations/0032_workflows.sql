-- redrive SQLite schema: workflows and batches (docs/design.md, "Workflows").
--
-- A workflow's jobs are ordinary jobs with flow set (NULL for every other
-- job) and node their name in it. A job waiting for its dependencies is
-- in state 'blocked', which no fetch index holds. job_deps has one row
-- per dependency edge; done is set once the dependency no longer holds
-- its dependent back (it completed, or, under on_dead 'run', it died or
-- was canceled), so that a dependency completing after a redrive never
-- counts twice.
--
-- The trigger jobs_flow does every consequence of a state change of a
-- workflow's job, in the statement that changes it: the workflow's
-- counts, the release of the dependents whose last dependency this was,
-- the cancel of the dependents when the policy says so, and the firing
-- of the callbacks (blocked jobs made pending at most once). Its WHEN
-- clause is all a job outside a workflow pays. The connection runs with
-- recursive_triggers on, so that a cancel cascades down the graph.
--
-- The trigger jobs_unblocked keeps job_counts (and the canceled counter)
-- for every move out of 'blocked', whoever makes it: the code that moves
-- a blocked job (a cancel) leaves it to the trigger. A cascade may cancel
-- a job twice in one statement (as the dependent of two canceled jobs);
-- the second change, from canceled, counts nothing.
ALTER TABLE jobs ADD COLUMN flow INTEGER;
ALTER TABLE jobs ADD COLUMN node TEXT;
ALTER TABLE jobs ADD COLUMN result BLOB;
CREATE INDEX jobs_flow ON jobs (flow, id) WHERE flow IS NOT NULL;

CREATE TABLE workflows (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL DEFAULT '',
    idem_key    TEXT    UNIQUE,
    on_dead     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    canceled_at INTEGER,
    total       INTEGER NOT NULL,
    completed   INTEGER NOT NULL DEFAULT 0,
    dead        INTEGER NOT NULL DEFAULT 0,
    canceled    INTEGER NOT NULL DEFAULT 0,
    on_success  INTEGER,
    on_complete INTEGER,
    on_death    INTEGER
);

CREATE TABLE job_deps (
    dep_id INTEGER NOT NULL,
    job_id INTEGER NOT NULL,
    done   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (dep_id, job_id)
) WITHOUT ROWID;
CREATE INDEX job_deps_waiting ON job_deps (job_id) WHERE done = 0;

CREATE TRIGGER jobs_flow AFTER UPDATE OF state ON jobs
WHEN NEW.flow IS NOT NULL AND OLD.state <> NEW.state
    AND (NEW.state IN ('completed', 'dead', 'canceled') OR OLD.state IN ('completed', 'dead', 'canceled'))
BEGIN
    UPDATE workflows SET
        completed = completed + (NEW.state = 'completed') - (OLD.state = 'completed'),
        dead = dead + (NEW.state = 'dead') - (OLD.state = 'dead'),
        canceled = canceled + (NEW.state = 'canceled') - (OLD.state = 'canceled')
    WHERE id = NEW.flow;

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

CREATE TRIGGER jobs_unblocked AFTER UPDATE OF state ON jobs
WHEN OLD.state = 'blocked' AND NEW.state <> 'blocked'
BEGIN
    INSERT INTO job_counts (queue, state, n) VALUES (NEW.queue, 'blocked', -1), (NEW.queue, NEW.state, 1)
    ON CONFLICT (queue, state) DO UPDATE SET n = n + excluded.n;
    INSERT INTO counters (queue, name, n) SELECT NEW.queue, 'canceled', 1 WHERE NEW.state = 'canceled'
    ON CONFLICT (queue, name) DO UPDATE SET n = n + excluded.n;
END;

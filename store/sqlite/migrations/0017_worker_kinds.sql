-- redrive SQLite schema: the kinds each worker runs.
--
-- A worker records the job kinds it has handlers for when it registers,
-- as a JSON array of names; its handlers serve every queue it works, so
-- it runs each of these kinds in each of its queues. The enqueues of the
-- API and the CLI refuse a job whose kind no live worker of its queue
-- runs. NULL: a worker of a version that did not record its kinds (it
-- may run any kind, so nothing is refused on its account). It depends on
-- no other migration than 0006 (the workers table).
ALTER TABLE workers ADD COLUMN kinds TEXT;

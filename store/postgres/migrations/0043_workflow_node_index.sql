-- redrive PostgreSQL schema v43: a workflow's jobs indexed by name.
--
-- AddToWorkflow reads the members its jobs name (WHERE flow = $1 AND
-- node = ANY($2)) under the workflow's lock. Through jobs_flow (flow,
-- id) it read every job of the workflow and filtered them by name: 7 ms
-- and 250 buffers for a workflow of 10,000 jobs, more as it grows, the
-- workflow's completions waiting on the lock meanwhile. jobs_flow_node
-- (flow, node) reads only the jobs named (0.08 ms and 14 buffers there).
-- It replaces jobs_flow rather than joining it: every other read of a
-- workflow's jobs (GetWorkflow, its counts, CancelWorkflow, the cascades
-- of the trigger) selects by flow alone, which its first column serves,
-- and a second index on the workflow's jobs would take an entry for
-- each move of each of them (state is indexed, so no move of a job is a
-- heap-only update). GetWorkflow sorts its jobs by id, as it sorted
-- them with their dependencies before.
CREATE INDEX jobs_flow_node ON jobs (flow, node) WHERE flow IS NOT NULL;
DROP INDEX jobs_flow;

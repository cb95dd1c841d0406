-- redrive SQLite schema: the waiting jobs of each limit group.
--
-- A fetch says whether a due job of its queue waits on a full group's
-- slot (store.FetchParams.SlotWait) by probing, for each full group (read
-- from the running limited jobs), whether it has a due waiting job in the
-- queue: one probe of this index per full group, whatever the number of
-- due limited jobs before it (it read the first 1,000 before, and missed
-- a full group's job behind 1,000 that a rate held).
CREATE INDEX jobs_limit_group_due ON jobs (climit, ckey, queue, run_at) WHERE state IN ('pending', 'scheduled') AND climit IS NOT NULL;

-- redrive PostgreSQL schema: the jobs table's own autovacuum settings
-- (docs/architecture.md, "Vacuum of the jobs table"; issue 29).
--
-- Every job leaves several dead row versions in jobs: its lease, each
-- retry and its completion are updates that are not HOT (state and
-- lease_until are indexed), and retention deletes it. At 4,000 jobs/s
-- that is about 750,000 dead row versions a minute, while the table holds
-- some 280,000 live ones. The server's defaults vacuum a table once a
-- fifth of it is dead and pace the vacuum (a 2 ms sleep every 200 cost
-- units), which suits a table that changes slowly; the jobs table must be
-- vacuumed every autovacuum round, and each vacuum must finish before the
-- next minute's dead rows pile up, or the heap and the partial indexes
-- the fetch walks (jobs_ready) keep growing.
--
-- So, for this table only: a vacuum once 2% of it plus 1,000 rows are
-- dead, and no cost delay (the vacuum runs at the speed of the disk). The
-- server's settings stay as they are; these are storage parameters of
-- the table, which ALTER TABLE ... RESET undoes, and which an operator
-- may set otherwise. Setting them takes a SHARE UPDATE EXCLUSIVE lock,
-- which the workers' statements do not conflict with (an autovacuum of
-- the table running then is canceled by the server, and starts again).
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

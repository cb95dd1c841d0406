package postgres

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// A jobs table whose statistics describe far fewer rows than it holds
// (never analyzed, or analyzed when nearly empty) gets plans made for an
// empty table: after 100,000 fair jobs were enqueued into a new schema,
// the fair fetch's take of a key read every fair job of the queue and
// sorted it, and the first fetches took seconds each (25.2 s, 17.5 s,
// 4.3 s, ...) until autovacuum analyzed the table, up to a minute
// later (autovacuum_naptime). So a store that has enqueued analyzeEvery
// rows checks, in the background, whether the table's statistics are
// that stale, and analyzes it if so.
//
// Stale means the table holds more than twice the rows its statistics
// say (or was never analyzed), not that many rows changed: a busy queue's
// table changes by more rows than it holds every 10-20 seconds (each job
// is inserted, leased, finished and deleted) without its plans going
// wrong, and autovacuum's own analyze covers that churn. The first check
// did count the changes, so under steady work the store analyzed the
// table that often; and an ANALYZE waits for the lock of a vacuum of the
// table that is running, which makes the server cancel that autovacuum
// (a second after, deadlock_timeout): in a soak at 4,000 jobs/s no
// vacuum of the jobs table finished in 18 minutes and its dead row
// versions grew by 750,000 a minute (issue 29; docs/BENCHMARKS.md).
// The ANALYZE is SKIP_LOCKED too: while a vacuum or an analyze of the
// table runs, it is skipped, and the next check tries again.

// analyzeEvery is how many rows this store enqueues between two checks
// of the jobs table's statistics. A variable for the tests.
var analyzeEvery int64 = 10_000

// staleStatsSQL says whether the jobs table of schema $1 was never
// analyzed (reltuples -1) or holds more than twice the rows it held at
// its last analyze (n_live_tup, which the server counts as rows are
// inserted and deleted, against reltuples, which an analyze or a vacuum
// sets).
const staleStatsSQL = `SELECT c.reltuples < 0 OR coalesce(st.n_live_tup > 2 * c.reltuples, false)
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid
	WHERE n.nspname = $1 AND c.relname = 'jobs'`

// analyzer runs the checks, one at a time, and lets Close wait for the
// one running.
type analyzer struct {
	since   atomic.Int64 // rows enqueued since the last check
	running atomic.Bool
	mu      sync.Mutex // guards stopped, and orders a check's start with Close
	stopped bool
	wg      sync.WaitGroup
}

// noteEnqueued counts n rows enqueued and, every analyzeEvery rows,
// starts a check of the jobs table's statistics unless one runs.
func (s *Store) noteEnqueued(n int) {
	a := &s.analyze
	if a.since.Add(int64(n)) < analyzeEvery || !a.running.CompareAndSwap(false, true) {
		return
	}
	a.since.Store(0)
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		a.running.Store(false)
		return
	}
	a.wg.Add(1)
	a.mu.Unlock()
	go func() {
		defer a.wg.Done()
		defer a.running.Store(false)
		if _, err := s.analyzeIfStale(s.done); err != nil && s.done.Err() == nil {
			s.log.Warn("postgres: could not check or refresh the jobs table's statistics", "schema", s.schema, "error", err)
		}
	}()
}

// analyzeIfStale analyzes the jobs table if its statistics are stale
// (staleStatsSQL), and says whether it ran the ANALYZE. It waits for no
// lock (SKIP_LOCKED): while a vacuum or an analyze of the table holds
// one, the server skips the table with a warning and the next check
// tries again. Waiting would get a running autovacuum of the table
// canceled.
func (s *Store) analyzeIfStale(ctx context.Context) (bool, error) {
	var stale bool
	if err := s.pool.QueryRow(ctx, staleStatsSQL, s.schema).Scan(&stale); err != nil {
		return false, err
	}
	if !stale {
		return false, nil
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE (SKIP_LOCKED) `+pgx.Identifier{s.schema, "jobs"}.Sanitize()); err != nil {
		return false, err
	}
	s.log.Debug("postgres: ran ANALYZE (SKIP_LOCKED) on the jobs table, its statistics were stale", "schema", s.schema)
	return true, nil
}

// stopAnalyze starts no more checks and waits for the one running, if
// any (Close cancels its context first).
func (s *Store) stopAnalyze() {
	s.analyze.mu.Lock()
	s.analyze.stopped = true
	s.analyze.mu.Unlock()
	s.analyze.wg.Wait()
}

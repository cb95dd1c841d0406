package postgres

import (
	"context"
	"sync"
	"sync/atomic"
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

// analyzeEvery is how many rows this store enqueues between two checks
// of the jobs table's statistics. A variable for the tests.
var analyzeEvery int64 = 10_000

// staleStatsSQL says whether the jobs table of schema $1 was never
// analyzed (reltuples -1) or has changed by more rows since its last
// analyze than it had then.
const staleStatsSQL = `SELECT c.reltuples < 0 OR coalesce(st.n_mod_since_analyze > c.reltuples, false)
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
		if err := s.analyzeIfStale(s.done); err != nil && s.done.Err() == nil {
			s.log.Warn("postgres: could not check or refresh the jobs table's statistics", "schema", s.schema, "error", err)
		}
	}()
}

// analyzeIfStale analyzes the jobs table if its statistics are stale
// (staleStatsSQL).
func (s *Store) analyzeIfStale(ctx context.Context) error {
	var stale bool
	if err := s.pool.QueryRow(ctx, staleStatsSQL, s.schema).Scan(&stale); err != nil {
		return err
	}
	if !stale {
		return nil
	}
	_, err := s.pool.Exec(ctx, `ANALYZE `+s.schema+`.jobs`)
	if err == nil {
		s.log.Debug("postgres: analyzed the jobs table, its statistics were stale", "schema", s.schema)
	}
	return err
}

// stopAnalyze starts no more checks and waits for the one running, if
// any (Close cancels its context first).
func (s *Store) stopAnalyze() {
	s.analyze.mu.Lock()
	s.analyze.stopped = true
	s.analyze.mu.Unlock()
	s.analyze.wg.Wait()
}

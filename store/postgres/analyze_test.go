package postgres_test

import (
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestAnalyzeStaleJobs: a store that enqueued many rows into a jobs table
// that was never analyzed analyzes it (autovacuum is off for the table
// here, so nothing else does); enqueues below the threshold do not.
func TestAnalyzeStaleJobs(t *testing.T) {
	defer postgres.SetAnalyzeEvery(300)()
	s := openFresh(t)
	ctx := t.Context()
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+s.Schema()+`.jobs SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	reltuples := func() (n float64) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = ($1 || '.jobs')::regclass`, s.Schema()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := reltuples(); n >= 0 {
		t.Fatalf("a new schema's jobs table: reltuples %v, want -1 (never analyzed)", n)
	}
	enqueue := func(n int) {
		t.Helper()
		jobs := make([]store.NewJob, n)
		for i := range jobs {
			jobs[i] = store.NewJob{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}
		}
		if _, err := s.Enqueue(ctx, jobs, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(200)
	if n := reltuples(); n >= 0 {
		t.Fatalf("after 200 rows, below the threshold: reltuples %v, want it not analyzed", n)
	}
	enqueue(200)
	testwait.Until(t, "the jobs table analyzed", time.Minute, func() bool { return reltuples() >= 0 })
	if n := reltuples(); n != 400 {
		t.Errorf("reltuples %v after the analyze, want 400", n)
	}
}

// TestAnalyzeChurnNotStale: a jobs table that changed by more rows than
// it holds since its last analyze, but holds as many, is not analyzed
// again (a busy queue's table does that every few seconds; autovacuum's
// analyze covers it); one that grew to more than twice its rows is.
func TestAnalyzeChurnNotStale(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	jobs := s.Schema() + `.jobs`
	exec := func(sql string) {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER TABLE ` + jobs + ` SET (autovacuum_enabled = false)`)
	enqueue := func(n int) {
		t.Helper()
		batch := make([]store.NewJob, n)
		for i := range batch {
			batch[i] = store.NewJob{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}
		}
		if _, err := s.Enqueue(ctx, batch, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	// The server's counts of the table's rows.
	counts := func() (live, mod int64) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT n_live_tup, n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = $1::regclass`,
			jobs).Scan(&live, &mod); err != nil {
			t.Fatal(err)
		}
		return live, mod
	}
	reltuples := func() (n float64) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, jobs).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func() bool {
		t.Helper()
		ran, err := postgres.AnalyzeIfStale(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return ran
	}

	enqueue(1000)
	// A busy backend reports its counts to the server up to a minute
	// late; one that exits reports them at once. The analyze must come
	// after the inserts are counted, or they are counted again after it.
	s.Pool().Reset()
	testwait.Until(t, "the server counting the rows", time.Minute, func() bool {
		live, _ := counts()
		return live == 1000
	})
	exec(`ANALYZE ` + jobs)
	if n := reltuples(); n != 1000 {
		t.Fatalf("reltuples %v after ANALYZE, want 1000", n)
	}
	// Churn: 700 rows deleted and 700 enqueued, twice: 2,800 rows changed
	// since the analyze, 1,000 held.
	for range 2 {
		exec(`DELETE FROM ` + jobs + ` WHERE id IN (SELECT id FROM ` + jobs + ` ORDER BY id LIMIT 700)`)
		enqueue(700)
	}
	s.Pool().Reset()
	testwait.Until(t, "the server counting the churn", time.Minute, func() bool {
		live, mod := counts()
		return live == 1000 && mod >= 2800
	})
	if check() {
		t.Errorf("the table was analyzed after churn that left its size as it was (reltuples %v)", reltuples())
	}

	enqueue(1500)
	s.Pool().Reset()
	testwait.Until(t, "the server counting the new rows", time.Minute, func() bool {
		live, _ := counts()
		return live == 2500
	})
	if !check() {
		t.Fatal("the table, grown from 1,000 rows to 2,500, was not analyzed")
	}
	if n := reltuples(); n != 2500 {
		t.Errorf("reltuples %v after the analyze, want 2500", n)
	}
}

// TestAnalyzeSkipsLocked: the store's ANALYZE waits for no lock. While
// another transaction holds the lock a vacuum holds (SHARE UPDATE
// EXCLUSIVE), a check of a stale table returns without analyzing it
// instead of queueing behind it: waiting behind an autovacuum of the table
// gets that autovacuum canceled by the server. Once the lock is gone, the
// next check analyzes it.
func TestAnalyzeSkipsLocked(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	jobs := s.Schema() + `.jobs`
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE `+jobs+` SET (autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	reltuples := func() (n float64) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, jobs).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := reltuples(); n >= 0 {
		t.Fatalf("a new schema's jobs table: reltuples %v, want -1 (never analyzed)", n)
	}
	lock, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, `LOCK TABLE `+jobs+` IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		ran bool
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ran, err := postgres.AnalyzeIfStale(ctx, s)
		done <- outcome{ran, err}
	}()
	// A check that waited for the lock would not return before the
	// rollback below: the bound is only the test's liveness.
	var o outcome
	testwait.Until(t, "the check to return while the lock is held", time.Minute, func() bool {
		select {
		case o = <-done:
			return true
		default:
			return false
		}
	})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if n := reltuples(); n >= 0 {
		t.Errorf("reltuples %v while the lock was held, want -1 (skipped)", n)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if ran, err := postgres.AnalyzeIfStale(ctx, s); err != nil || !ran {
		t.Fatalf("after the lock: analyzed %v, error %v; want an analyze", ran, err)
	}
	if n := reltuples(); n != 0 {
		t.Errorf("reltuples %v after the analyze of the empty table, want 0", n)
	}
}

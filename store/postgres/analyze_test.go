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

package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// jobUpdates reads the updates of schema's jobs table the statistics
// collector has counted, and how many of them were HOT, once it has
// counted at least want.
func jobUpdates(t *testing.T, conn *pgx.Conn, schema string, want int64) (upd, hot int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // liveness bound: the server flushes its counts about every second
	for {
		if _, err := conn.Exec(t.Context(), `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(t.Context(), `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
			schema).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		if upd >= want || time.Now().After(deadline) {
			return upd, hot
		}
		time.Sleep(100 * time.Millisecond) // real time: waiting for the server's statistics
	}
}

// TestHeartbeatHOT: without an index on the lease's end (migration 0025),
// a heartbeat changes no indexed column, so the server can write it as a
// HOT update (no index entry) where the page has room; with jobs_lease,
// none was. (About 30 s: the server's statistics of an idle session
// are flushed after 10 s.) It logs how many completions were HOT too (none: a
// completion changes the state, which the partial indexes' predicates
// read).
func TestHeartbeatHOT(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const n = 200
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}
	}
	if _, err := s.Enqueue(ctx, jobs, t0); err != nil {
		t.Fatal(err)
	}
	leased, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: n, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"})
	if err != nil || len(leased) != n {
		t.Fatalf("Fetch: %d, %v", len(leased), err)
	}
	upd0, hot0 := jobUpdates(t, conn, schema, n)
	leases := make([]store.Lease, n)
	for i, j := range leased {
		leases[i] = store.LeaseOf(j)
	}
	if _, err := s.Heartbeat(ctx, "w", leases, t0.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	upd1, hot1 := jobUpdates(t, conn, schema, upd0+n)
	outs := make([]store.Outcome, n)
	for i, j := range leased {
		outs[i] = store.Outcome{JobID: j.ID, Lease: j.Lease, Attempt: j.Attempt, Worker: "w", Queue: "q", Kind: store.Complete, At: t0.Add(time.Minute)}
	}
	if _, err := s.Finish(ctx, outs); err != nil {
		t.Fatal(err)
	}
	upd2, hot2 := jobUpdates(t, conn, schema, upd1+n)
	t.Logf("lease: %d updates, %d HOT; heartbeat: %d, %d HOT; completion: %d, %d HOT", upd0, hot0, upd1-upd0, hot1-hot0, upd2-upd1, hot2-hot1)
	// Not all: a lease writes each job's new version where it finds
	// room, and fills pages doing so.
	if upd1-upd0 != n || hot1-hot0 == 0 {
		t.Errorf("heartbeat of %d leases: %d updates, %d HOT; want %d, some HOT", n, upd1-upd0, hot1-hot0, n)
	}
}

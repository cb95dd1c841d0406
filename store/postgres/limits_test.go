package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestLimitedFetchLocks: a fetch of limited jobs waits for the schema's
// limits lock, so that two such fetches never count a group's slots at
// once (two fetches of different snapshots could otherwise each see a
// free slot and lease different jobs into it); a fetch of a queue
// without limited jobs does not wait for it.
func TestLimitedFetchLocks(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	now := time.Now()
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "lim", Kind: "k", Limit: "l", LimitMax: 1}, {Queue: "free", Kind: "k"}}, now); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, postgres.LimitLockKey(s)); err != nil {
		t.Fatal(err)
	}
	// The unlimited queue is not held up.
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "free", Limit: 5, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if err != nil || len(got) != 1 {
		t.Fatalf("Fetch of the unlimited queue = %d jobs, %v; want 1", len(got), err)
	}
	done := make(chan []*store.Job, 1)
	go func() {
		got, err := s.Fetch(ctx, store.FetchParams{Queue: "lim", Limit: 5, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	testwait.Until(t, "the limited fetch to wait for the limits lock", 30*time.Second, func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND classid::bigint = ($1::bigint >> 32) & 4294967295 AND objid::bigint = $1::bigint & 4294967295`, postgres.LimitLockKey(s)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	select {
	case got := <-done:
		t.Fatalf("the limited fetch returned %d jobs while the lock was held", len(got))
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-done; len(got) != 1 {
		t.Fatalf("the limited fetch leased %d jobs once the lock was free, want 1", len(got))
	}
}

// TestEnqueueTxLimited: jobs enqueued under a limit in the caller's
// transaction, with and without idempotency keys, are under it once
// committed.
func TestEnqueueTxLimited(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	now := time.Now()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	jobs := []store.NewJob{
		{Queue: "q", Kind: "k", Limit: "one", LimitKey: "a", LimitMax: 1},
		{Queue: "q", Kind: "k", Limit: "one", LimitKey: "a", LimitMax: 1, IdempotencyKey: "key"},
		{Queue: "q", Kind: "k", Limit: "one", LimitKey: "a", LimitMax: 1},
	}
	if _, err := s.EnqueueTx(ctx, tx, jobs[:1], now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, jobs[1:], now); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	p := store.FetchParams{Queue: "q", Limit: 10, Now: now.Add(time.Second), LeaseUntil: now.Add(time.Minute), Worker: "w"}
	got, err := s.Fetch(ctx, p)
	if err != nil || len(got) != 1 {
		t.Fatalf("Fetch = %d jobs, %v; want 1 (the group's one slot)", len(got), err)
	}
	ls, err := s.ListLimits(ctx, now.Add(time.Second))
	if err != nil || len(ls) != 1 || ls[0].InUse != 1 || ls[0].Waiting != 2 {
		t.Fatalf("ListLimits = %+v, %v; want one in use, two waiting", ls, err)
	}
}

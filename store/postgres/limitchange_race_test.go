package postgres_test

import (
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// TestChangeLimitRacesEnqueue: a change of a limit the store does not
// keep yet, made while an enqueue creates that limit (with its client's
// max) in a transaction not committed yet, applies on top of the
// enqueue's limit once it commits: the limit keeps the enqueue's max and
// gets the change's rate. It must not overwrite the max with the 0 of a
// limit it believed new, which would take the cap off the limit
// fleet-wide.
func TestChangeLimitRacesEnqueue(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	now := time.Now()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := s.EnqueueTx(ctx, tx, []store.NewJob{{Queue: "q", Kind: "k", Limit: "crm", LimitKey: "a", LimitMax: 5}}, now); err != nil {
		t.Fatal(err)
	}
	var enqueuer int32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&enqueuer); err != nil {
		t.Fatal(err)
	}
	rate := store.LimitRate{N: 10, Per: time.Second, Burst: 1}
	type result struct {
		st  store.LimitState
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := s.ChangeLimit(ctx, "crm", store.LimitChange{Rate: &rate}, now)
		done <- result{st, err}
	}()
	// The change waits for the enqueue's row of the limit.
	testwait.Until(t, "the change to wait for the enqueue's transaction", 30*time.Second, func() bool {
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, enqueuer).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	ls, err := s.ListLimits(ctx, now)
	if err != nil || len(ls) != 1 {
		t.Fatalf("ListLimits = %+v, %v", ls, err)
	}
	if ls[0].Max != 5 || ls[0].Rate == nil || ls[0].Rate.N != 10 {
		t.Errorf("after the enqueue and the change: max %d, rate %v; want max 5 (the enqueue's) and rate 10/s (the change's)", ls[0].Max, ls[0].Rate)
	}
}

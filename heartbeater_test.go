package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestHeartbeaterExtendsAndStops: a heartbeat asked for (beatNow)
// extends the lease of a running job to a lease from the clock's now,
// and cancels with ErrLeaseLost the handler of a job whose lease another
// worker took.
func TestHeartbeaterExtendsAndStops(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{LeaseDuration: time.Hour})
	ctx := t.Context()
	for range 2 {
		if _, err := c.Enqueue(ctx, "k", nil, InQueue("q")); err != nil {
			t.Fatal(err)
		}
	}
	kept := lease(t, st, clk, "q", w.id, time.Minute)
	lost := lease(t, st, clk, "q", w.id, time.Second)
	keptCtx, keptCancel := context.WithCancelCause(ctx)
	lostCtx, lostCancel := context.WithCancelCause(ctx)
	w.running[store.LeaseOf(kept)] = runningEntry{job: kept, ctx: keptCtx, cancel: keptCancel}
	w.running[store.LeaseOf(lost)] = runningEntry{job: lost, ctx: lostCtx, cancel: lostCancel}
	// The second lease expires and is taken by another worker.
	clk.add(2 * time.Second)
	if _, err := st.Finish(ctx, []store.Outcome{w.exec.Release(lost, clk.now())}); err != nil {
		t.Fatal(err)
	}
	lease(t, st, clk, "q", "other", time.Hour)
	clk.add(10 * time.Second)

	sig := startLoop(t, &w.heartbeater.loop, w.heartbeater.start)
	w.heartbeatNow()
	if !sig.wait(loopLiveness) {
		t.Fatal("no heartbeat")
	}
	j, err := c.Get(ctx, kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.now().Add(time.Hour); j.LeaseUntil == nil || !j.LeaseUntil.Equal(want) {
		t.Fatalf("lease until %v, want %v", j.LeaseUntil, want)
	}
	if keptCtx.Err() != nil {
		t.Fatal("the handler of a kept lease was canceled")
	}
	if !errors.Is(context.Cause(lostCtx), ErrLeaseLost) {
		t.Fatalf("the handler of a lost lease: cause %v, want ErrLeaseLost", context.Cause(lostCtx))
	}
}

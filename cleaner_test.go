package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestCleanerAppliesRetention: the cleaner's first round (its first
// wait shortened) deletes a completed job older than CompletedRetention
// by the clock and keeps a younger one; a worker that does not lead
// maintenance deletes nothing.
func TestCleanerAppliesRetention(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{CompletedRetention: time.Hour, CleanupInterval: time.Hour})
	w.HandleFunc("k", func(context.Context, *Job) error { return nil })
	ctx := t.Context()
	complete := func() int64 {
		if _, err := c.Enqueue(ctx, "k", nil, InQueue("q")); err != nil {
			t.Fatal(err)
		}
		j := lease(t, st, clk, "q", w.id, time.Minute)
		if _, err := st.Finish(ctx, []store.Outcome{w.exec.Execute(ctx, j)}); err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	old := complete()
	clk.add(2 * time.Hour)
	young := complete()

	leading := false
	w.leading = func() bool { return leading }
	w.cleaner.first = 0
	sig := newTestSignal()
	w.cleaner.signal = sig
	w.cleaner.start(ctx)
	if !sig.wait(loopLiveness) {
		t.Fatal("no cleanup round")
	}
	w.cleaner.stop()
	if _, err := c.Get(ctx, old); err != nil {
		t.Fatalf("a worker that does not lead cleaned up: %v", err)
	}

	leading = true
	again := cleaner{w: w, first: 0} // a loop runs once: a new one for the next run
	sig = startLoop(t, &again.loop, again.start)
	if !sig.wait(loopLiveness) {
		t.Fatal("no cleanup round")
	}
	if _, err := c.Get(ctx, old); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the old completed job: %v, want it deleted", err)
	}
	if _, err := c.Get(ctx, young); err != nil {
		t.Fatalf("the young completed job: %v", err)
	}
}

// TestCleanupDeletesOldAuditEntries: retention deletes the audit log's
// entries older than AuditRetention by the clock, and keeps the others.
func TestCleanupDeletesOldAuditEntries(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clk := clockAt(now)
	w, _, st := loopWorker(t, clk, WorkerOptions{AuditRetention: 24 * time.Hour})
	ctx := t.Context()
	for _, age := range []time.Duration{48 * time.Hour, 25 * time.Hour, 23 * time.Hour, time.Minute} {
		if _, err := st.AppendAudit(ctx, store.AuditEntry{At: now.Add(-age), Actor: "local", Action: "dlq purge"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	left, _, err := st.ListAudit(ctx, store.AuditFilter{}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 {
		t.Fatalf("%d entries left, want the 2 younger than a day", len(left))
	}
	for _, e := range left {
		if now.Sub(e.At) > 24*time.Hour {
			t.Errorf("entry of %v kept", e.At)
		}
	}
}

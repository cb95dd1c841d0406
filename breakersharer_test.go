package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
)

// TestBreakerSharerSyncs: the breaker sharer's first round adopts a
// breaker another process tripped in the store, and a later round one
// tripped since; with LocalBreakers the loop ends on its own, at once,
// and adopts nothing.
func TestBreakerSharerSyncs(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, _, st := loopWorker(t, clk, WorkerOptions{})
	other := breaker.NewRegistry(breaker.Config{Failures: 2, CountOnly: true, BreakDuration: time.Hour})
	f := newFleetBreakers(context.Background(), st, other, "other", quietLog())
	other.Share(f)
	f.sync(t.Context())
	trip := func(name string) {
		t.Helper()
		b := other.Get(name)
		for range 2 {
			tok, err := b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			b.Record(tok, errors.New("boom"))
		}
		if b.State() != breaker.Open {
			t.Fatalf("the other process's breaker %s: %v, want open", name, b.State())
		}
	}
	trip("dep")

	local, _, _ := loopWorker(t, clk, WorkerOptions{LocalBreakers: true})
	local.store = st
	local.breakerSharer.start(t.Context())
	// Not stopped: a sharer that ran would sync, and never end on its own.
	select {
	case <-local.breakerSharer.loop.run.Done():
	case <-time.After(loopLiveness):
		t.Fatalf("the breaker sharer of a worker with LocalBreakers still runs after %v", loopLiveness)
	}
	if got := local.exec.Breakers().Get("dep").State(); got != breaker.Closed {
		t.Fatalf("a worker with LocalBreakers adopted the fleet's breaker: %v", got)
	}

	sig := startLoop(t, &w.breakerSharer.loop, w.breakerSharer.start)
	if !sig.wait(loopLiveness) {
		t.Fatal("no sync of the breaker sharer")
	}
	if got := w.exec.Breakers().Get("dep").State(); got != breaker.Open {
		t.Fatalf("after the first sync: the worker's breaker %v, want open (tripped by the other process)", got)
	}
	trip("dep2") // after the first sync: a later round adopts it
	waitRounds(t, sig, "a later sync to adopt the breaker dep2 tripped by the other process", func() bool {
		return w.exec.Breakers().Get("dep2").State() == breaker.Open
	})
}

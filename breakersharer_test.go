package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/breaker"
)

// TestBreakerSharerSyncs: the breaker sharer's first round adopts a
// breaker another process tripped in the store; with LocalBreakers the
// loop ends at once and adopts nothing.
func TestBreakerSharerSyncs(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, _, st := loopWorker(t, clk, WorkerOptions{})
	other := breaker.NewRegistry(breaker.Config{Failures: 2, CountOnly: true, BreakDuration: time.Hour})
	f := newFleetBreakers(context.Background(), st, other, "other", quietLog())
	other.Share(f)
	f.sync(t.Context())
	dep := other.Get("dep")
	for range 2 {
		tok, err := dep.Allow()
		if err != nil {
			t.Fatal(err)
		}
		dep.Record(tok, errors.New("boom"))
	}
	if dep.State() != breaker.Open {
		t.Fatalf("the other process's breaker: %v, want open", dep.State())
	}

	local, _, _ := loopWorker(t, clk, WorkerOptions{LocalBreakers: true})
	local.store = st
	local.breakerSharer.start(t.Context())
	local.breakerSharer.stop() // returns: the loop ended at once
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
}

package redrive

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// flakyFinish is a store whose Finish fails while failing is set.
type flakyFinish struct {
	store.Store
	failing atomic.Bool
	// failed is sent on after each failed call.
	failed testSignal
}

func (s *flakyFinish) Finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	if s.failing.Load() {
		defer s.failed.send()
		return nil, errors.New("disk full")
	}
	return s.Store.Finish(ctx, outs)
}

// TestCompleterWritesAndHoldsOutcomes: an outcome submitted is written
// by the completer's next round; while the store refuses it, its lease
// stays among the unsettled ones (the heartbeats keep extending it) until
// a retry writes it.
func TestCompleterWritesAndHoldsOutcomes(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{})
	flaky := &flakyFinish{Store: st, failed: newTestSignal()}
	w.store = flaky
	w.HandleFunc("k", func(context.Context, *Job) error { return nil })
	ctx := t.Context()
	if _, err := c.Enqueue(ctx, "k", nil, InQueue("q")); err != nil {
		t.Fatal(err)
	}
	j := lease(t, st, clk, "q", w.id, time.Minute)
	flaky.failing.Store(true)
	sig := startLoop(t, &w.completer.loop, w.completer.start)
	w.completer.submit(w.queues[0], w.exec.Execute(ctx, j))
	// The first write fails: the outcome is held, unsettled.
	if !flaky.failed.wait(loopLiveness) {
		t.Fatal("the completer did not try to write")
	}
	if got := w.completer.unsettled(); len(got) != 1 || got[0] != store.LeaseOf(j) {
		t.Fatalf("unsettled %v, want the job's lease", got)
	}
	flaky.failing.Store(false)
	if !sig.wait(loopLiveness) {
		t.Fatal("no write round")
	}
	got, err := c.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.Completed || len(w.completer.unsettled()) != 0 {
		t.Fatalf("state %s, unsettled %v", got.State, w.completer.unsettled())
	}
}

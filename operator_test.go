package redrive

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestOperatorRunsOperations: a worker that does not lead claims no
// operation; the leader's first round claims a pending one and runs it
// to its end.
func TestOperatorRunsOperations(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, _ := loopWorker(t, clk, WorkerOptions{PollInterval: time.Hour})
	ctx := t.Context()
	for range 3 {
		if _, err := c.Enqueue(ctx, "doc", nil, InQueue("q")); err != nil {
			t.Fatal(err)
		}
	}
	op, err := c.StartOperation(ctx, OperationRequest{Kind: OperationReplay, Filter: Filter{Kind: "doc"}, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	state := func() *Operation {
		cur, err := c.Operation(ctx, op.ID)
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	var leading atomic.Bool
	w.leading = leading.Load

	sig := startLoop(t, &w.operator.loop, w.operator.start)
	if !sig.wait(loopLiveness) {
		t.Fatal("no round of the operator")
	}
	w.operator.stop()
	if cur := state(); cur.State != OperationPending {
		t.Fatalf("a worker that does not lead ran the operation: %s", cur.State)
	}

	leading.Store(true)
	again := operator{w: w} // a loop runs once: a new one for the next run
	sig = startLoop(t, &again.loop, again.start)
	waitRounds(t, sig, "the operation done", func() bool { return state().State == OperationDone })
	if cur := state(); cur.Progress.Replayed != 3 {
		t.Fatalf("progress %+v, want 3 replayed", cur.Progress)
	}
}

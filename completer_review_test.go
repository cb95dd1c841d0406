package redrive

import (
	"testing"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// TestCompleterDrainTakesTheLineWhole: once Run drains the completer at
// shutdown (its handlers have ended: none waits on the bound any more),
// the outcomes waiting in line join the next batch whole, not a bound's
// worth at a time. With the store down, the completer gives each batch
// up only after its own two minutes of retries at shutdown: a line cut
// into batches of the bound made Run return that much later for each.
func TestCompleterDrainTakesTheLineWhole(t *testing.T) {
	const n = 6
	w, c, gs, jobs, outs := gatedCompleter(t, n)
	ctx := t.Context()
	q := w.queues[0]
	w.completer.submit(q, outs[1]) // pending 1, writing 1: the bound
	// Run's shutdown: the handlers are let go, and end; their outcomes
	// wait in line.
	w.completer.unhold()
	for i := 2; i < n; i++ {
		w.completer.submit(q, outs[i])
	}
	if got := lineLen(w.completer); got != n-2 {
		t.Fatalf("%d outcomes in line, want %d", got, n-2)
	}
	w.completer.stopping.Store(true) // as Run does once the handlers ended
	drained := make(chan struct{}, 1)
	go func() {
		w.completer.drain()
		drained <- struct{}{}
	}()
	gs.gate <- struct{}{}
	if got := testwait.Recv(t, "the second batch's Finish", loopLiveness, gs.entered); got != n-1 {
		t.Fatalf("second batch of %d outcomes, want %d: the line was not taken whole at the drain", got, n-1)
	}
	gs.gate <- struct{}{}
	testwait.Recv(t, "the drain", loopLiveness, drained)
	for _, j := range jobs {
		got, err := c.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.Completed {
			t.Fatalf("job %d is %s", j.ID, got.State)
		}
	}
}

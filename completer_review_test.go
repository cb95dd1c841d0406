package redrive

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// batchGate is a store whose Finish calls each send their batch's size on
// entered, then wait for a token on gate.
type batchGate struct {
	store.Store
	gate    chan struct{}
	entered chan int
}

func (s *batchGate) Finish(ctx context.Context, outs []store.Outcome) ([]bool, error) {
	s.entered <- len(outs)
	<-s.gate
	return s.Store.Finish(ctx, outs)
}

// TestCompleterDrainTakesTheLineWhole: once Run drains the completer at
// shutdown (its handlers have ended: none waits on the bound any more),
// the outcomes waiting in line join the next batch whole, not a bound's
// worth at a time. With the store down, the completer gives each batch
// up only after its own two minutes of retries at shutdown: a line cut
// into batches of the bound made Run return that much later for each.
func TestCompleterDrainTakesTheLineWhole(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{})
	w.completer.max = 2
	gs := &batchGate{Store: st, gate: make(chan struct{}), entered: make(chan int, 64)}
	w.store = gs
	w.HandleFunc("k", func(context.Context, *Job) error { return nil })
	ctx := t.Context()
	const n = 6
	for range n {
		if _, err := c.Enqueue(ctx, "k", nil, InQueue("q")); err != nil {
			t.Fatal(err)
		}
	}
	jobs := make([]*Job, n)
	outs := make([]store.Outcome, n)
	for i := range jobs {
		jobs[i] = lease(t, st, clk, "q", w.id, time.Minute)
		outs[i] = w.exec.Execute(ctx, jobs[i])
	}
	startLoop(t, &w.completer.loop, w.completer.start)
	t.Cleanup(func() { close(gs.gate) }) // before the loop stops: a failed test's writes go through
	q := w.queues[0]
	w.completer.submit(q, outs[0])
	if got := testwait.Recv(t, "the first batch's Finish", loopLiveness, gs.entered); got != 1 {
		t.Fatalf("first batch of %d outcomes, want 1", got)
	}
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

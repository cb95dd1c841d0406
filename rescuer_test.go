package redrive

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestRescuerFailsExpiredLeases: the rescuer's first round, at its
// start, turns the attempt of a job whose lease expired (its worker
// gone) into a failed attempt, lease_expired; a job this worker still
// runs, its lease lapsed too, is left alone; and a worker that does not
// lead maintenance rescues nothing.
func TestRescuerFailsExpiredLeases(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, c, st := loopWorker(t, clk, WorkerOptions{RescueInterval: time.Hour})
	ctx := t.Context()
	for range 2 {
		if _, err := c.Enqueue(ctx, "k", nil, InQueue("q")); err != nil {
			t.Fatal(err)
		}
	}
	lost := lease(t, st, clk, "q", "gone", time.Second)
	mine := lease(t, st, clk, "q", w.id, time.Second)
	_, cancel := context.WithCancelCause(ctx)
	w.running[store.LeaseOf(mine)] = runningEntry{job: mine, cancel: cancel}
	clk.add(time.Minute)

	leading := false
	w.leading = func() bool { return leading }
	w.rescuer.rescue(ctx)
	if j, _ := c.Get(ctx, lost.ID); j.State != store.Running {
		t.Fatalf("a worker that does not lead rescued: state %s", j.State)
	}
	leading = true
	sig := startLoop(t, &w.rescuer.loop, w.rescuer.start)
	if !sig.wait(loopLiveness) {
		t.Fatal("no rescue round")
	}
	j, err := c.Get(ctx, lost.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State == store.Running || !strings.Contains(j.LastError, "lease expired") {
		t.Fatalf("the expired lease was not rescued: state %s, error %q", j.State, j.LastError)
	}
	if j, _ := c.Get(ctx, mine.ID); j.State != store.Running {
		t.Fatalf("a job this worker holds was rescued: state %s", j.State)
	}
}

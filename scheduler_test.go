package redrive

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// TestSchedulerEnqueuesDue: a worker that does not lead declares its
// schedule and enqueues nothing; the leader's first round enqueues the
// occurrences due by the clock, one job each, and a later round the one
// the clock reached since. A worker without schedules ends its loop at
// once.
func TestSchedulerEnqueuesDue(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 30, 0, time.UTC))
	w, _, st := loopWorker(t, clk, WorkerOptions{})
	ps, err := compilePeriodic([]Periodic{{Name: "tick", Every: time.Minute, Kind: "tick", Grace: 5 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	var leading atomic.Bool
	w.leading = leading.Load
	jobs := func() string { return strings.Join(periodicJobs(t, st), " ") }

	sig := startLoop(t, &w.scheduler.loop, func(ctx context.Context) { w.scheduler.start(ctx, ps) })
	if !sig.wait(loopLiveness) {
		t.Fatal("no round of the scheduler")
	}
	if _, err := st.GetSchedule(t.Context(), "tick"); err != nil {
		t.Fatalf("the schedule was not declared: %v", err)
	}
	clk.add(2 * time.Minute) // 12:02:30: the occurrences of 12:01 and 12:02 are due
	sig.drain()
	if !sig.wait(loopLiveness) {
		t.Fatal("no round of the scheduler")
	}
	w.scheduler.stop()
	if got := jobs(); got != "" {
		t.Fatalf("a worker that does not lead enqueued %s", got)
	}

	leading.Store(true)
	again := scheduler{w: w} // a loop runs once: a new one for the next run
	sig = startLoop(t, &again.loop, func(ctx context.Context) { again.start(ctx, ps) })
	if !sig.wait(loopLiveness) {
		t.Fatal("no round of the scheduler")
	}
	if got := jobs(); got != "12:01:00.000 12:02:00.000" {
		t.Fatalf("after the leader's first round: %s, want the occurrences of 12:01 and 12:02", got)
	}
	clk.add(time.Minute)
	waitRounds(t, sig, "the occurrence of 12:03", func() bool { return jobs() == "12:01:00.000 12:02:00.000 12:03:00.000" })

	none := scheduler{w: w}
	none.start(t.Context(), nil)
	select { // not stopped: the loop ends on its own
	case <-none.loop.run.Done():
	case <-time.After(loopLiveness):
		t.Fatalf("the scheduler of a worker without schedules still runs after %v", loopLiveness)
	}
	if _, err := st.GetSchedule(t.Context(), "other"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetSchedule of an undeclared schedule: %v", err)
	}
}

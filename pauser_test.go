package redrive

import (
	"testing"
	"time"
)

// TestPauserAppliesOtherProcessesPauses: a pause and a resume made
// through another Client of the store (another process) apply to the
// queue's fetcher at the pauser's next round.
func TestPauserAppliesOtherProcessesPauses(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, _, st := loopWorker(t, clk, WorkerOptions{PollInterval: time.Millisecond})
	other := NewClient(st, ClientOptions{Logger: w.log})
	q := w.queues[0]
	ctx := t.Context()
	sig := startLoop(t, &w.pauser.loop, w.pauser.start)
	if _, err := other.PauseQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	// A round under way may have read the store before the pause: the
	// one after sees it.
	sig.drain()
	for range 2 {
		if !sig.wait(loopLiveness) {
			t.Fatal("no refresh")
		}
	}
	if !q.paused.Load() {
		t.Fatal("the pause of another process was not applied")
	}
	if _, err := other.ResumeQueue(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	sig.drain()
	for range 2 {
		if !sig.wait(loopLiveness) {
			t.Fatal("no refresh")
		}
	}
	if q.paused.Load() {
		t.Fatal("the resume of another process was not applied")
	}
}

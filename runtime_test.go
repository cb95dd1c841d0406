package redrive_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
)

// waitFinal polls the job until it is completed, dead or canceled (or
// fails the test after a generous liveness bound), and returns it.
func (e *env) waitFinal(id int64) *redrive.Job {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		switch j.State {
		case redrive.Completed, redrive.Dead, redrive.Canceled:
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %d stuck in %s (attempt %d), want a final state", id, j.State, j.Attempt)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCancelWinsOverSnoozeAndOpenBreaker checks that a handler canceled
// while it runs ends its job canceled even when it answers with a snooze
// or meets an open breaker: either would put the job back, and its next
// run would complete it.
func TestCancelWinsOverSnoozeAndOpenBreaker(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"snooze", func() error { return redrive.Snooze(time.Millisecond) }},
		{"open breaker", func() error { return &breaker.OpenError{Name: "dep", ReadyAt: time.Now()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, redrive.WorkerOptions{LeaseDuration: time.Minute})
			var runs atomic.Int32
			started := make(chan struct{})
			e.worker.HandleFunc("cancelme", func(ctx context.Context, j *redrive.Job) error {
				if runs.Add(1) > 1 {
					return nil // a second run completes at once
				}
				close(started)
				<-ctx.Done()
				return tc.err()
			})
			e.start()
			job, err := e.client.Enqueue(context.Background(), "cancelme", nil)
			if err != nil {
				t.Fatal(err)
			}
			<-started
			if _, err := e.client.Cancel(context.Background(), job.ID); err != nil {
				t.Fatal(err)
			}
			if j := e.waitFinal(job.ID); j.State != redrive.Canceled {
				t.Fatalf("job ended %s after %d runs, want canceled", j.State, runs.Load())
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
}

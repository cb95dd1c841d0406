package redrive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// TestLeaseEndStopsHandlerWhileStalled: a worker that cannot heartbeat
// (its database unreachable, a partition) stops a handler once its lease
// ends, without waiting for a heartbeat to succeed: other processes
// rescue the job at that point and may start it, or another job of its
// concurrency-limit group, elsewhere; a handler still running would then
// overlap it (a limit of 1 exceeded) for as long as the partition lasts.
func TestLeaseEndStopsHandlerWhileStalled(t *testing.T) {
	ctx := context.Background()
	st := &stallingStore{Store: openStore(t)}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "one", Kind: "long", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	p := fastPolicy(3)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 4}, Policy: &p, Logger: quietLogger(),
		LeaseDuration: 300 * time.Millisecond, RescueInterval: time.Hour, PollInterval: 20 * time.Millisecond})
	runs := make(chan context.Context, 4)
	w.HandleFunc("long", func(ctx context.Context, j *redrive.Job) error {
		runs <- ctx
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e := &env{t: t, store: st, client: c, worker: w}
	e.start()
	if _, err := c.Enqueue(ctx, "long", nil); err != nil {
		t.Fatal(err)
	}
	r1 := within(t, runs, "attempt 1 to start")
	st.stalled.Store(true) // stays stalled: no heartbeat succeeds again
	select {
	case <-r1.Done():
	case <-time.After(20 * time.Second): // liveness bound, far beyond the 300ms lease
		t.Fatal("the handler still runs long after its lease ended with every heartbeat failing")
	}
	if cause := context.Cause(r1); !errors.Is(cause, redrive.ErrLeaseLost) {
		t.Errorf("handler canceled with cause %v, want ErrLeaseLost", cause)
	}
}

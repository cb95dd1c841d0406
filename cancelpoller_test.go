package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// cancelList is a store.CancelChecker that reports the leases in
// canceled, of those asked about.
type cancelList struct{ canceled chan store.Lease }

func (c *cancelList) CancelRequested(_ context.Context, _ string, leases []store.Lease) ([]store.Lease, error) {
	select {
	case l := <-c.canceled:
		return []store.Lease{l}, nil
	default:
		return nil, nil
	}
}

// TestCancelPollerCancelsRequested: a cancellation the store reports
// for a running job cancels its handler with ErrJobCanceled.
func TestCancelPollerCancelsRequested(t *testing.T) {
	clk := clockAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	w, _, _ := loopWorker(t, clk, WorkerOptions{})
	l := store.Lease{JobID: 7, Token: 1}
	ctx, cancel := context.WithCancelCause(t.Context())
	w.running[l] = runningEntry{job: &Job{ID: 7}, ctx: ctx, cancel: cancel}
	cc := &cancelList{canceled: make(chan store.Lease, 1)}
	sig := startLoop(t, &w.cancelPoller.loop, func(ctx context.Context) { w.cancelPoller.start(ctx, cc) })
	if !sig.wait(loopLiveness) {
		t.Fatal("no poll")
	}
	if ctx.Err() != nil {
		t.Fatal("canceled with no request")
	}
	cc.canceled <- l
	sig.drain()
	if !sig.wait(loopLiveness) {
		t.Fatal("no poll")
	}
	if !errors.Is(context.Cause(ctx), ErrJobCanceled) {
		t.Fatalf("cause %v, want ErrJobCanceled", context.Cause(ctx))
	}
}

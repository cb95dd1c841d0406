package redrive_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// memEnqueue is a store that only enqueues, in memory: a benchmark of the
// engine's own work on an enqueue and an attempt, without a database's.
type memEnqueue struct {
	store.Store
	ids atomic.Int64
}

func (s *memEnqueue) Enqueue(_ context.Context, jobs []store.NewJob, now time.Time) ([]*store.Job, error) {
	out := make([]*store.Job, len(jobs))
	for i := range jobs {
		nj := &jobs[i]
		j := &store.Job{ID: s.ids.Add(1), Queue: nj.Queue, Kind: nj.Kind, Payload: nj.Payload, State: store.Pending,
			MaxRetries: nj.MaxRetries, CreatedAt: now, RunAt: now, Reprocessable: true}
		keepTrace(j, nj)
		out[i] = j
	}
	return out, nil
}

// BenchmarkEnqueueAttempt measures one enqueue and one attempt of the
// job (a handler that succeeds) through the engine, without a store, as
// a program that configures no tracer runs them: with OpenTelemetry's
// global provider, a no-op (see docs/BENCHMARKS.md, "Tracing").
func BenchmarkEnqueueAttempt(b *testing.B) {
	benchEnqueueAttempt(b, redrive.ClientOptions{Logger: quietLogger()}, redrive.ExecutorOptions{Logger: quietLogger(), DisableRetryBudget: true})
}

func benchEnqueueAttempt(b *testing.B, copts redrive.ClientOptions, eopts redrive.ExecutorOptions) {
	c := redrive.NewClient(&memEnqueue{}, copts)
	exec := redrive.NewExecutor(eopts)
	exec.HandleFunc("k", func(context.Context, *redrive.Job) error { return nil })
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("bench"))
		if err != nil {
			b.Fatal(err)
		}
		j.State, j.Attempt = store.Running, 1
		if o := exec.Execute(ctx, j); o.Kind != store.Complete {
			b.Fatalf("outcome %v", o.Kind)
		}
	}
}

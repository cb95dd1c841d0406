package redrive

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

type countingObserver struct{ n int }

func (c *countingObserver) ObserveAttempt(a AttemptInfo) { c.n += a.Attempt }

// BenchmarkObserve is what the worker adds to an attempt when an Observer
// is set: building the report and the interface call, here to an observer
// that does nothing.
func BenchmarkObserve(b *testing.B) {
	obs := &countingObserver{}
	w := &Executor{opts: ExecutorOptions{Observer: obs}}
	now := time.Now()
	j := &Job{ID: 1, Queue: "default", Kind: "http", Attempt: 2, RunAt: now.Add(-time.Millisecond)}
	o := store.Outcome{Kind: store.Retry}
	b.ReportAllocs()
	for b.Loop() {
		w.observe(context.Background(), j, &o, nil, now, now.Add(time.Millisecond))
	}
	if obs.n == 0 {
		b.Fatal("not observed")
	}
}

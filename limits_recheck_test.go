package redrive_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// fetchCounter is a store that counts its fetches.
type fetchCounter struct {
	store.Store
	n atomic.Int64
}

func (f *fetchCounter) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	f.n.Add(1)
	return f.Store.Fetch(ctx, p)
}

// TestRateHeldQueueSleeps: a queue whose due jobs only a rate holds (1/h,
// its group's start used) sleeps until the rate allows the next start
// instead of fetching every 20 ms (on SQLite each fetch is a write
// transaction). Real time passing is what is tested: for one second the
// worker may fetch a few times (a wake-up from the completed job's
// outcome, the poll interval is a minute), never the ~50 times a 20 ms
// recheck makes; the bound of 5 is generous for a loaded machine.
func TestRateHeldQueueSleeps(t *testing.T) {
	st := &fetchCounter{Store: openStore(t)}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "slow", Kind: "call", Rate: "1/h"}}); err != nil {
		t.Fatal(err)
	}
	p := fastPolicy(3)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 4}, Policy: &p, Logger: quietLogger(),
		PollInterval: time.Minute})
	e := &env{t: t, store: st, client: c, worker: w, rounds: redrive.EngineSignal(w), ops: redrive.OperationsSignal(w)}
	redrive.Handle(w, "call", func(ctx context.Context, j *redrive.Job, p struct{}) error { return nil })
	e.start()
	jobs, err := c.EnqueueMany(t.Context(), []redrive.Request{{Kind: "call"}, {Kind: "call"}})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "one job to complete", 20*time.Second, func() bool {
		for _, j := range jobs {
			if got, err := c.Get(t.Context(), j.ID); err == nil && got.State == redrive.Completed {
				return true
			}
		}
		return false
	})
	// The wake-ups of the first job's start and outcome may still come
	// in the second measured: the bound counts them.
	before := st.n.Load()
	time.Sleep(time.Second) // real time passing is what is tested
	if n := st.n.Load() - before; n > 5 {
		t.Errorf("%d fetches in a second while the queue's only due job waits an hour on its rate, want at most 5", n)
	}
	ls, err := c.LimitStates(t.Context())
	if err != nil || len(ls) != 1 || ls[0].Waiting != 1 {
		t.Errorf("LimitStates = %+v, %v; want one job waiting on the rate", ls, err)
	}
}

// TestRateHeldQueueStartsScheduledJob: while a rate holds a queue's due
// job for an hour, another job of the queue (no limit) scheduled for a
// second from now starts when it becomes due, not at the next poll (a
// minute: the worker sleeps until the next job's due time, whatever a
// rate holds). The job is enqueued before the worker runs, as another
// process would, so no wake-up announces it. The bound is a liveness
// guard, far under the poll interval.
func TestRateHeldQueueStartsScheduledJob(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	if err := c.SetLimits([]redrive.ConcurrencyLimit{{Name: "slow", Kind: "call", Rate: "1/h"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueMany(t.Context(), []redrive.Request{{Kind: "call"}, {Kind: "call"}}); err != nil {
		t.Fatal(err)
	}
	later, err := c.Enqueue(t.Context(), "later", struct{}{}, redrive.At(time.Now().Add(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	p := fastPolicy(3)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 4}, Policy: &p, Logger: quietLogger(),
		PollInterval: time.Minute})
	e := &env{t: t, store: st, client: c, worker: w, rounds: redrive.EngineSignal(w), ops: redrive.OperationsSignal(w)}
	redrive.Handle(w, "call", func(ctx context.Context, j *redrive.Job, p struct{}) error { return nil })
	redrive.Handle(w, "later", func(ctx context.Context, j *redrive.Job, p struct{}) error { return nil })
	e.start()
	testwait.Until(t, "the scheduled job to complete", 20*time.Second, func() bool {
		got, err := c.Get(t.Context(), later.ID)
		return err == nil && got.State == redrive.Completed
	})
}

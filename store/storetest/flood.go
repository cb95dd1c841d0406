package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// FloodResult is what Flood measured.
type FloodResult struct {
	// Due is how many jobs of queue "work" were due, fetched and
	// finished; Batch how many one fetch asked for.
	Due, Batch int
	// Producers enqueued PerCall jobs of queue "flood" per call, Calls
	// calls acknowledged in all, CallsWhileBusy of them before the worker
	// finished its last job.
	Producers, PerCall    int
	Calls, CallsWhileBusy int64
}

// Flood floods s with enqueues from many goroutines while one worker
// fetches and finishes the jobs already due, and checks, by counting: the
// worker gets and finishes every due job, and the store counts every job
// of every acknowledged enqueue. A store's own test wraps it with its
// hooks to check how its writes shared the store between the two (see
// the stores' TestEnqueueFloodYieldsToWork); the conformance suite runs
// it as EnqueueFlood.
func Flood(t *testing.T, s store.Store) FloodResult {
	t.Helper()
	ctx := t.Context()
	r := FloodResult{Due: 2000, Batch: 100, Producers: 32, PerCall: 50}
	jobs := make([]store.NewJob, r.Due)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "work", Kind: "k", Payload: []byte(fmt.Sprint(i))}
	}
	if _, err := s.Enqueue(ctx, jobs, time.Now()); err != nil {
		t.Fatal(err)
	}

	// More producers than a write would need to crowd out the worker's
	// requests if they were served in arrival order.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var flood sync.WaitGroup
	var calls atomic.Int64
	floodErr := make(chan error, r.Producers)
	for range r.Producers {
		flood.Go(func() {
			reqs := make([]store.NewJob, r.PerCall)
			for i := range reqs {
				reqs[i] = store.NewJob{Queue: "flood", Kind: "k"}
			}
			for fctx.Err() == nil {
				// The test's context, not fctx: a call canceled midway
				// could be written without its caller knowing.
				if _, err := s.Enqueue(ctx, reqs, time.Now()); err != nil {
					floodErr <- err
					return
				}
				calls.Add(1)
			}
		})
	}
	// Let the flood reach the store before the worker starts.
	for calls.Load() < int64(r.Producers) {
		time.Sleep(time.Millisecond)
	}

	fetched, finished := 0, 0
	for fetched < r.Due {
		now := time.Now()
		got, err := s.Fetch(ctx, store.FetchParams{Queue: "work", Limit: r.Batch, Now: now,
			LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatalf("fetch found no due job after %d of %d", fetched, r.Due)
		}
		fetched += len(got)
		outs := make([]store.Outcome, len(got))
		for i, j := range got {
			outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "w",
				Kind: store.Complete, At: time.Now()}
		}
		applied, err := s.Finish(ctx, outs)
		if err != nil {
			t.Fatal(err)
		}
		for _, ok := range applied {
			if ok {
				finished++
			}
		}
	}
	r.CallsWhileBusy = calls.Load()
	stop()
	flood.Wait()
	close(floodErr)
	for err := range floodErr {
		t.Fatalf("flood enqueue: %v", err)
	}
	r.Calls = calls.Load()
	if fetched != r.Due || finished != r.Due {
		t.Fatalf("fetched %d and finished %d of %d due jobs", fetched, finished, r.Due)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Jobs["work"][store.Completed]; n != int64(r.Due) {
		t.Errorf("store counts %d completed jobs in queue work, want %d", n, r.Due)
	}
	if n, want := st.Jobs["flood"][store.Pending], r.Calls*int64(r.PerCall); n != want {
		t.Errorf("store counts %d pending flood jobs, want %d (every acknowledged enqueue)", n, want)
	}
	return r
}

// testEnqueueFlood: under a flood of enqueues, a worker still gets every
// due job, and every acknowledged enqueue is kept.
func testEnqueueFlood(h *h) {
	Flood(h.t, h.s)
}

package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestEnqueueFloodYieldsToWork floods the store with enqueues from many
// goroutines while one worker fetches and finishes the jobs already due,
// and checks, by counting: the worker gets and finishes every due job;
// while it is busy, no enqueue write carries more than BusyGroupJobs
// jobs (the flood's calls are smaller); the flood still makes progress,
// and the store counts every acknowledged job.
func TestEnqueueFloodYieldsToWork(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()

	var mu sync.Mutex
	var busyWrites, bigBusyWrites, idleWrites int
	postgres.OnGroupWrite(s, func(jobs, writers int, busy bool) {
		mu.Lock()
		defer mu.Unlock()
		if !busy {
			idleWrites++
			return
		}
		busyWrites++
		if jobs > postgres.BusyGroupJobs {
			bigBusyWrites++
		}
	})

	const due, batch = 2000, 100
	jobs := make([]store.NewJob, due)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "work", Kind: "k", Payload: []byte(fmt.Sprint(i))}
	}
	if _, err := s.Enqueue(ctx, jobs, time.Now()); err != nil {
		t.Fatal(err)
	}

	const producers, perCall = 32, 50
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var flood sync.WaitGroup
	var floodCalls atomic.Int64
	floodErr := make(chan error, producers)
	for range producers {
		flood.Go(func() {
			reqs := make([]store.NewJob, perCall)
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
				floodCalls.Add(1)
			}
		})
	}
	for floodCalls.Load() < producers {
		time.Sleep(time.Millisecond)
	}

	fetched, finished := 0, 0
	for fetched < due {
		got, err := s.Fetch(ctx, store.FetchParams{Queue: "work", Limit: batch, Now: time.Now(),
			LeaseUntil: time.Now().Add(time.Minute), Worker: "w"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			t.Fatalf("fetch found no due job after %d of %d", fetched, due)
		}
		fetched += len(got)
		outs := make([]store.Outcome, len(got))
		for i, j := range got {
			outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: "w",
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
	callsWhileBusy := floodCalls.Load()
	stop()
	flood.Wait()
	close(floodErr)
	for err := range floodErr {
		t.Fatalf("flood enqueue: %v", err)
	}
	if fetched != due || finished != due {
		t.Fatalf("fetched %d and finished %d of %d due jobs", fetched, finished, due)
	}
	mu.Lock()
	defer mu.Unlock()
	if bigBusyWrites > 0 {
		t.Errorf("%d of %d enqueue writes while the worker was busy carried more than %d jobs",
			bigBusyWrites, busyWrites, postgres.BusyGroupJobs)
	}
	if busyWrites == 0 || callsWhileBusy <= producers {
		t.Errorf("the flood made no progress while the worker ran: %d writes, %d calls", busyWrites, callsWhileBusy)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Jobs["work"][store.Completed]; n != due {
		t.Errorf("store counts %d completed jobs in queue work, want %d", n, due)
	}
	if n, want := st.Jobs["flood"][store.Pending], floodCalls.Load()*perCall; n != want {
		t.Errorf("store counts %d pending flood jobs, want %d (every acknowledged enqueue)", n, want)
	}
}

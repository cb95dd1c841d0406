package postgres_test

import (
	"sync"
	"testing"

	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/storetest"
)

// TestEnqueueFloodYieldsToWork floods the store with enqueues from many
// goroutines while one worker fetches and finishes the jobs already due,
// and checks, by counting: the worker gets and finishes every due job
// (storetest.Flood); while it is busy, no enqueue write carries more than BusyGroupJobs
// jobs (the flood's calls are smaller); the flood still makes progress,
// and the store counts every acknowledged job.
func TestEnqueueFloodYieldsToWork(t *testing.T) {
	s := openFresh(t)

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

	r := storetest.Flood(t, s)
	mu.Lock()
	defer mu.Unlock()
	if bigBusyWrites > 0 {
		t.Errorf("%d of %d enqueue writes while the worker was busy carried more than %d jobs",
			bigBusyWrites, busyWrites, postgres.BusyGroupJobs)
	}
	if busyWrites == 0 || r.CallsWhileBusy <= int64(r.Producers) {
		t.Errorf("the flood made no progress while the worker ran: %d writes, %d calls", busyWrites, r.CallsWhileBusy)
	}
}

package postgres

import (
	"sync"
	"sync/atomic"
	"time"
)

// Enqueues yield to the workers.
//
// A flood of enqueues (a bulk import, producers calling EnqueueMany as
// fast as they can) competes with the workers' Fetch and Finish for the
// database: for its CPU (two cores here, shared by every backend), its
// WAL flushes, and the cluster-wide lock under which notifying
// transactions commit one at a time (see group.go). Left alone, two
// group writers inserting 1,000 jobs each, back to back, keep a backend
// busy for most of the time a fetch needs, and the jobs already due are
// leased at a fraction of the burn-down rate.
//
// So while the workers of this process are busy (a Fetch or Finish ran
// within the last busyFor), enqueue writes shrink and wait their turn:
//
//   - one group writer at a time, and a merged write of at most
//     busyGroupJobs jobs (a single larger call is still written whole,
//     in one statement, as its caller asked);
//   - before each write of at least bigWrite jobs waiting, the writer
//     waits until the work statements under way end (at most maxYield),
//     so that enqueues fill the gaps between fetches and finishes instead
//     of running beside them; a few single jobs (API calls) do not wait.
//
// Enqueue callers wait longer: the backpressure that makes an import
// slow down rather than the work. Workers in other processes are not
// seen; each process protects its own.

const (
	// busyFor is how long the workers count as busy after a Fetch or
	// Finish.
	busyFor = 100 * time.Millisecond
	// busyGroupJobs bounds a merged enqueue write while the workers are
	// busy.
	busyGroupJobs = 200
	// maxYield bounds how long one enqueue write waits for the work
	// statements under way.
	maxYield = 5 * time.Millisecond
)

// workGate tracks the store's work statements (Fetch, Finish) for the
// enqueue writers.
type workGate struct {
	inFlight atomic.Int32
	lastEnd  atomic.Int64 // unix nanoseconds of the last work statement's start or end

	mu   sync.Mutex
	idle chan struct{} // closed when inFlight drops to 0; nil while none waits
}

// begin marks a work statement under way; end must follow.
func (g *workGate) begin() {
	g.inFlight.Add(1)
	g.lastEnd.Store(time.Now().UnixNano())
}

// end marks the end of a work statement.
func (g *workGate) end() {
	g.lastEnd.Store(time.Now().UnixNano())
	if g.inFlight.Add(-1) == 0 {
		g.mu.Lock()
		if g.idle != nil {
			close(g.idle)
			g.idle = nil
		}
		g.mu.Unlock()
	}
}

// busy reports whether a work statement is under way or ended within
// busyFor.
func (g *workGate) busy() bool {
	return g.inFlight.Load() > 0 || time.Since(time.Unix(0, g.lastEnd.Load())) < busyFor
}

// yield waits until no work statement is under way, for at most
// maxYield.
func (g *workGate) yield() {
	if g.inFlight.Load() == 0 {
		return
	}
	g.mu.Lock()
	if g.inFlight.Load() == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	t := time.NewTimer(maxYield)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// groupLimits returns the group writers' limits now: how many may run
// at once and how many jobs one merged write may take, and whether the
// workers are busy.
func (g *workGate) groupLimits() (writers, jobs int, busy bool) {
	if g.busy() {
		return 1, busyGroupJobs, true
	}
	return maxGroupWrites, maxGroupJobs, false
}

// yieldToWork is called by an enqueue writer before each write: when at
// least bigWrite jobs wait to be written (a flood, or a bulk call), it
// waits for the work statements under way (workGate.yield). A few single
// jobs, such as API calls, are written at once.
func (g *enqueueGroup) yieldToWork() {
	g.mu.Lock()
	n := 0
	for _, c := range g.queue {
		if !c.abandoned {
			n += len(c.jobs)
		}
	}
	g.mu.Unlock()
	if n >= bigWrite {
		g.work.yield()
	}
}

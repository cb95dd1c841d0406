package redrive

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/store"
)

// completer records outcomes in batches: every outcome submitted while a
// batch is being written joins the next one.
//
// The outcomes pending (submitted, not yet written: the batch being
// written and the next one) are bounded by max. A handler's slot is freed
// when its handler returns, so handlers of short jobs would otherwise end
// faster than their outcomes are written, and the next batch would grow
// to thousands of outcomes: a job released by an outcome (a workflow's
// dependent) would wait for the whole batch's commit, and the fetches
// would take the store from the writes. Past the bound, an outcome waits
// in line (its lease still extended by the heartbeats), and so does its
// submitter, which holds the handler's slot: the queue's fetches slow to
// the rate the outcomes are written. The line joins the pending
// outcomes, in order, as each batch is written.
type completer struct {
	loop
	w  *Worker
	mu sync.Mutex
	// max bounds len(pending)+len(writing); 0 means no bound.
	max int
	// pending are the outcomes submitted, pendingQ their queues.
	pending  []store.Outcome
	pendingQ []*queueRunner
	// writing is the batch being written (its jobs' leases are still
	// extended by heartbeats until it is).
	writing []store.Outcome
	// waiting are the outcomes submitted while the bound was reached, in
	// order: they join pending as batches are written.
	waiting []waitingOutcome
	// unheld is set once the worker shuts down: a submitter no longer
	// waits for its outcome to join pending (the outcome still waits).
	unheld bool
	// closed is set once the loop ends: an outcome submitted then joins
	// pending at once (nothing writes it any more).
	closed bool
	// spare and spareQ are the buffers of the batch written before, kept
	// for the next pending ones: a batch's buffers are allocated once,
	// not grown again outcome by outcome for every batch.
	spare  []store.Outcome
	spareQ []*queueRunner
	// submitted tells the loop that outcomes were submitted.
	submitted chan struct{}
	busy      bool
	stopping  atomic.Bool // set once the worker is shutting down
}

// waitingOutcome is an outcome submitted past the bound.
type waitingOutcome struct {
	o store.Outcome
	q *queueRunner
	// joined, when not nil, is closed once the outcome joins pending (or
	// the submitter is let go): its submitter waits on it.
	joined chan struct{}
}

// unsettled returns the leases of the jobs whose outcomes are not
// written yet: they must not expire meanwhile.
func (c *completer) unsettled() []store.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	leases := make([]store.Lease, 0, len(c.pending)+len(c.writing)+len(c.waiting))
	for _, b := range [][]store.Outcome{c.pending, c.writing} {
		for i := range b {
			if b[i].Worker == c.w.id {
				leases = append(leases, store.Lease{JobID: b[i].JobID, Token: b[i].Lease})
			}
		}
	}
	for i := range c.waiting {
		if o := &c.waiting[i].o; o.Worker == c.w.id {
			leases = append(leases, store.Lease{JobID: o.JobID, Token: o.Lease})
		}
	}
	return leases
}

// maxSpareOutcomes bounds the outcomes the completer's spare buffer holds.
const maxSpareOutcomes = 4096

func newCompleter(w *Worker, bound int) *completer {
	return &completer{w: w, max: bound, submitted: make(chan struct{}, 1)}
}

// pendingPerSlot and minPending make the default bound of the outcomes
// pending: pendingPerSlot times the worker's slots (the sum of its
// queues' concurrency), at least minPending. See docs/BENCHMARKS.md,
// "The completer's bound".
const (
	pendingPerSlot = 2
	minPending     = 64
)

// defaultMaxPending is the bound of the outcomes pending of a worker with
// slots handler slots.
func defaultMaxPending(slots int) int { return max(pendingPerSlot*slots, minPending) }

// submit hands an outcome to the completer. Past the bound it returns
// once the outcome joined the pending ones (or the worker shuts down):
// the caller, a handler goroutine, keeps its slot meanwhile.
func (c *completer) submit(q *queueRunner, o store.Outcome) { c.add(q, o, true) }

// submitNoWait hands an outcome to the completer without waiting.
func (c *completer) submitNoWait(q *queueRunner, o store.Outcome) { c.add(q, o, false) }

func (c *completer) add(q *queueRunner, o store.Outcome, wait bool) {
	c.mu.Lock()
	var joined chan struct{}
	if c.max > 0 && !c.closed && (len(c.waiting) > 0 || len(c.pending)+len(c.writing) >= c.max) {
		if wait && !c.unheld {
			joined = make(chan struct{})
		}
		c.waiting = append(c.waiting, waitingOutcome{o: o, q: q, joined: joined})
	} else {
		c.pending = append(c.pending, o)
		c.pendingQ = append(c.pendingQ, q)
	}
	c.mu.Unlock()
	select {
	case c.submitted <- struct{}{}:
	default:
	}
	if joined != nil {
		<-joined
	}
}

// admitLocked moves the waiting outcomes, in order, to pending while the
// bound allows (all of them once Run drains the completer or the loop
// ended), and lets their submitters go. At the drain the handlers have
// ended, so the bound holds nobody back any more, and a line cut into
// batches of the bound would, with the store down, be given up a batch
// at a time, each after its own retries (see flush).
func (c *completer) admitLocked() {
	all := c.closed || c.max <= 0 || c.stopping.Load()
	n := 0
	for ; n < len(c.waiting) && (all || len(c.pending)+len(c.writing) < c.max); n++ {
		wo := &c.waiting[n]
		c.pending = append(c.pending, wo.o)
		c.pendingQ = append(c.pendingQ, wo.q)
		if wo.joined != nil {
			close(wo.joined)
		}
	}
	if n == 0 {
		return
	}
	m := copy(c.waiting, c.waiting[n:])
	clear(c.waiting[m:])
	c.waiting = c.waiting[:m]
}

// unhold lets every submitter waiting in line go, and those to come not
// wait: the worker is shutting down, and its handlers must end. Their
// outcomes keep their place in line.
func (c *completer) unhold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unheld = true
	for i := range c.waiting {
		if wo := &c.waiting[i]; wo.joined != nil {
			close(wo.joined)
			wo.joined = nil
		}
	}
}

// start starts the completer's loop: it writes the outcomes submitted
// until ctx ends or stop, then writes those left.
func (c *completer) start(ctx context.Context) { c.startWith(ctx, c.writeLoop) }

func (c *completer) writeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			c.mu.Lock()
			c.closed = true
			c.admitLocked()
			c.mu.Unlock()
			c.flush(context.Background())
			c.loop.signal.send()
			return
		case <-c.submitted:
		}
		c.flush(ctx)
		c.loop.signal.send()
	}
}

// drain waits until every submitted outcome is written.
func (c *completer) drain() {
	c.mu.Lock()
	for len(c.pending) > 0 || len(c.waiting) > 0 || c.busy {
		c.mu.Unlock()
		select {
		case c.submitted <- struct{}{}:
		default:
		}
		time.Sleep(time.Millisecond)
		c.mu.Lock()
	}
	c.mu.Unlock()
}

func (c *completer) flush(ctx context.Context) {
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.mu.Unlock()
			return
		}
		outs, queues := c.pending, c.pendingQ
		c.pending, c.pendingQ = c.spare[:0], c.spareQ[:0]
		c.spare, c.spareQ = nil, nil
		c.writing = outs
		c.busy = true
		c.mu.Unlock()
		var applied []bool
		for attempt := 1; ; attempt++ {
			var err error
			applied, err = c.w.store.Finish(ctx, outs)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				ctx = context.Background() // shutting down: the outcomes must still be written
			}
			d := storeBackoff(attempt)
			if attempt <= 3 || attempt%30 == 0 {
				c.w.log.Error("recording job outcomes failed; retrying (their leases are kept meanwhile)", "jobs", len(outs),
					"attempt", attempt, "delay", d, "error", err)
			}
			// While the worker runs, outcomes are retried until the store
			// takes them (a full disk, an outage), their jobs' leases
			// extended by the heartbeats: a rescue would run them again.
			// Only a shutdown gives up, after two minutes.
			if attempt >= 120 && c.stopping.Load() {
				c.w.log.Error("giving up recording job outcomes at shutdown; their leases will expire and be rescued", "jobs", len(outs))
				applied = make([]bool, len(outs))
				break
			}
			time.Sleep(d)
		}
		// An outcome ends a running job: a slot of its limit may be free
		// for a queue that waits on one. The count goes first: a fetch
		// under way that will say it waits on a slot reads it after, and
		// looks again at once (fetcher.go), so the wake is never lost
		// between its fetch and its slotWait.
		c.w.outcomeGen.Add(1)
		for _, q := range c.w.queues {
			if q.slotWait.Load() {
				q.wake(time.Now())
			}
		}
		if c.w.afterOutcomes != nil {
			c.w.afterOutcomes()
		}
		for i := range outs {
			o := &outs[i]
			if !applied[i] {
				c.w.log.Warn("outcome discarded: the job is no longer leased by this worker", "job_id", o.JobID,
					"attempt", o.Attempt, "worker", o.Worker)
				continue
			}
			switch o.Kind {
			case store.Retry, store.Snooze, store.Release:
				at := o.RunAt
				if o.Kind == store.Release {
					at = o.At
				}
				c.w.client.wake(queues[i].name, at)
			}
		}
		c.mu.Lock()
		c.busy = false
		c.writing = nil
		// The buffers are kept for the next batch (unless a backlog made
		// them large), cleared so as not to hold the outcomes' events and
		// counters.
		if cap(outs) <= maxSpareOutcomes {
			clear(outs)
			clear(queues)
			c.spare, c.spareQ = outs[:0], queues[:0]
		}
		c.admitLocked()
		c.mu.Unlock()
	}
}

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
type completer struct {
	loop
	w  *Worker
	mu sync.Mutex
	// pending are the outcomes submitted, pendingQ their queues.
	pending  []store.Outcome
	pendingQ []*queueRunner
	// writing is the batch being written (its jobs' leases are still
	// extended by heartbeats until it is).
	writing []store.Outcome
	// spare and spareQ are the buffers of the batch written before, kept
	// for the next pending ones: a batch's buffers are allocated once,
	// not grown again outcome by outcome for every batch.
	spare  []store.Outcome
	spareQ []*queueRunner
	// submitted tells the loop that outcomes were submitted.
	submitted chan struct{}
	idle      sync.Cond
	busy      bool
	stopping  atomic.Bool // set once the worker is shutting down
}

// unsettled returns the leases of the jobs whose outcomes are not
// written yet: they must not expire meanwhile.
func (c *completer) unsettled() []store.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	leases := make([]store.Lease, 0, len(c.pending)+len(c.writing))
	for _, b := range [][]store.Outcome{c.pending, c.writing} {
		for i := range b {
			if b[i].Worker == c.w.id {
				leases = append(leases, store.Lease{JobID: b[i].JobID, Token: b[i].Lease})
			}
		}
	}
	return leases
}

// maxSpareOutcomes bounds the outcomes the completer's spare buffer holds.
const maxSpareOutcomes = 4096

func newCompleter(w *Worker) *completer {
	c := &completer{w: w, submitted: make(chan struct{}, 1)}
	c.idle.L = &c.mu
	return c
}

func (c *completer) submit(q *queueRunner, o store.Outcome) {
	c.mu.Lock()
	c.pending = append(c.pending, o)
	c.pendingQ = append(c.pendingQ, q)
	c.mu.Unlock()
	select {
	case c.submitted <- struct{}{}:
	default:
	}
}

// start starts the completer's loop: it writes the outcomes submitted
// until ctx ends or stop, then writes those left.
func (c *completer) start(ctx context.Context) { c.startWith(ctx, c.writeLoop) }

func (c *completer) writeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
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
	for len(c.pending) > 0 || c.busy {
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
		c.mu.Unlock()
	}
}

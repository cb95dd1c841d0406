package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Group commit of Enqueue calls.
//
// Every enqueue notifies its queue (pg_notify) in its transaction, and
// PostgreSQL serializes the commits of all the transactions that notify,
// in the whole cluster: before it writes its commit record, such a
// transaction takes a global lock (PreCommit_Notify locks the shared
// object "database 0"; pg_stat_activity shows the waiters as wait event
// Lock/object) and keeps it until its commit is flushed to disk. Enqueues
// written one call per transaction therefore commit one fsync after
// another, whatever the pool size, and concurrent commits never share a
// WAL flush. So concurrent Enqueue calls are written together, as the
// SQLite store's writer does: the calls waiting when a write starts are
// merged into one batch, written by one statement (or one transaction,
// when some jobs have idempotency keys), with one commit and one
// notification per queue for them all.
//
// Unless workers are busy, nothing waits on purpose: a call that finds no
// write running is written at once, alone, on its own goroutine; the
// calls arriving during a write are merged into the next one. One write
// runs at a time, which makes the batches as large as the load allows; a
// second one may start beside a write of at least bigWrite jobs, so that
// single jobs do not wait behind a large batch. While the process's
// workers are busy, enqueues yield to them: one writer, smaller merged
// writes, each waiting for the work statements under way (see fair.go).
//
// A merged batch gives each call exactly what writing it alone right then
// would have given: its jobs get ids in call order, and a key taken by an
// earlier call of the batch answers later ones with that call's job, as
// within one call. When a merged write fails, each of its calls is
// written again alone, so that a call's failure (such as a kept key of a
// deleted job, which withKeptKeys handles per call) stays its own.

const (
	// maxGroupWrites bounds the writes running at once.
	maxGroupWrites = 2
	// bigWrite is the size, in jobs, of a running write beside which a
	// second write may start.
	bigWrite = 100
	// maxGroupJobs bounds the jobs of a merged write; a single call with
	// more is written alone.
	maxGroupJobs = 1000
)

// enqueueGroup queues the Enqueue calls for the writers.
type enqueueGroup struct {
	mu      sync.Mutex
	queue   []*groupCall
	writers int // running writers, at most maxGroupWrites
	writing int // jobs of the calls the running writers took
	// work tracks the workers' statements, to which enqueues yield
	// (fair.go).
	work workGate
	// onWrite, when set (by tests, under mu), is called by take with each
	// write's jobs, the writers running and whether the workers were busy.
	onWrite func(jobs, writers int, busy bool)
}

// groupCall is one Enqueue call (one round of withKeptKeys) waiting to be
// written.
type groupCall struct {
	ctx  context.Context
	jobs []store.NewJob
	b    *enqueueBatch

	out  []*store.Job
	err  error
	done chan struct{} // closed once out and err are set

	// taken (under enqueueGroup.mu) is set when a writer takes the call;
	// abandoned when its caller gave up before that.
	taken, abandoned bool
}

// enqueue writes the validated batch b of jobs, merged with the calls
// that wait at the same time, and returns the jobs as Store.Enqueue does.
// A call whose ctx ends while it waits for a writer returns ctx.Err()
// without being written; once a writer took it, it waits for the write,
// so that a caller never hears of a failure for jobs that were committed.
// The write itself is canceled when the store closes, or when the
// contexts of all its calls have ended.
func (g *enqueueGroup) enqueue(ctx context.Context, s *Store, jobs []store.NewJob, b *enqueueBatch) ([]*store.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &groupCall{ctx: ctx, jobs: jobs, b: b, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	maxWriters, _, _ := g.work.groupLimits()
	lead := g.writers == 0 || g.writers < maxWriters && g.writing >= bigWrite
	if lead {
		g.writers++
	}
	g.mu.Unlock()
	if lead {
		g.lead(s, c)
		return c.out, c.err
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if !c.taken {
		c.abandoned = true
		g.mu.Unlock()
		return nil, ctx.Err()
	}
	g.mu.Unlock()
	<-c.done
	return c.out, c.err
}

// lead makes the goroutine of call c a writer until c is answered: it
// writes the waiting calls, c among them, then leaves the calls that came
// meanwhile to a writer goroutine.
func (g *enqueueGroup) lead(s *Store, c *groupCall) {
	wrote := 0
	for {
		g.yieldToWork()
		calls, n := g.take(wrote, false)
		if len(calls) == 0 {
			// c was answered by take, or another writer took it and
			// answers it when its write ends.
			<-c.done
			return
		}
		s.writeCalls(calls)
		wrote = n
		select {
		case <-c.done:
			if _, more := g.take(wrote, true); more > 0 {
				go g.write(s)
			}
			return
		default:
		}
	}
}

// write is a writer goroutine: it writes the waiting calls, in merged
// batches, until none is left.
func (g *enqueueGroup) write(s *Store) {
	wrote := 0
	for {
		g.yieldToWork()
		calls, n := g.take(wrote, false)
		if len(calls) == 0 {
			return
		}
		s.writeCalls(calls)
		wrote = n
	}
}

// take ends the writer's previous write (of wrote jobs) and removes the
// calls of its next write from the queue: up to maxGroupJobs jobs, at
// least one call. It returns them and their number of jobs; with none
// left, it returns none and the writer ends. Calls whose context has
// ended are answered here. With peek, it takes nothing and returns how
// many calls wait; when none does, the writer ends.
func (g *enqueueGroup) take(wrote int, peek bool) ([]*groupCall, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writing -= wrote
	if peek {
		if len(g.queue) == 0 {
			g.writers--
		}
		return nil, len(g.queue)
	}
	_, maxJobs, busy := g.work.groupLimits()
	var calls []*groupCall
	n, i := 0, 0
	for ; i < len(g.queue); i++ {
		c := g.queue[i]
		if c.abandoned {
			continue
		}
		if len(calls) > 0 && n+len(c.jobs) > maxJobs {
			break
		}
		c.taken = true
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		calls = append(calls, c)
		n += len(c.jobs)
	}
	rest := copy(g.queue, g.queue[i:])
	clear(g.queue[rest:])
	g.queue = g.queue[:rest]
	if len(calls) == 0 {
		g.writers--
	} else if g.onWrite != nil {
		g.onWrite(n, g.writers, busy)
	}
	g.writing += n
	return calls, n
}

// writeCalls writes the calls, merged into one batch when there are
// several, and answers each.
func (s *Store) writeCalls(calls []*groupCall) {
	if len(calls) == 1 {
		// Its caller's context is the write's: it alone waits for it.
		c := calls[0]
		c.out, c.err = s.enqueueAlone(c.ctx, c.jobs, c.b)
		close(c.done)
		return
	}
	ctx, stop := writeContext(s.done, calls)
	defer stop()
	jobs, b := mergeCalls(calls)
	out, err := s.enqueueAlone(ctx, jobs, b)
	switch {
	case err == nil:
		off := 0
		for _, c := range calls {
			n := len(c.jobs)
			c.out = out[off : off+n : off+n]
			off += n
			close(c.done)
		}
	case ctx.Err() != nil || unavailability(err) != nil:
		// Closed, abandoned by every caller or the database is
		// unavailable: writing each call alone would fail the same.
		for _, c := range calls {
			c.err = err
			close(c.done)
		}
	default:
		// Nothing was written: each call on its own, so that the
		// failure goes to the call that caused it.
		for _, c := range calls {
			c.out, c.err = s.enqueueAlone(ctx, c.jobs, c.b)
			close(c.done)
		}
	}
}

// writeContext is the context of a write of calls: canceled when done
// is (the store closes), or when the contexts of all the calls have
// ended, since nobody then waits for the result.
func writeContext(done context.Context, calls []*groupCall) (context.Context, func()) {
	ctx, cancel := context.WithCancel(done)
	var mu sync.Mutex
	left := len(calls)
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// mergeCalls concatenates the batches of the calls into one, in call
// order. A key is new only at its first job in the merged batch, so that
// a later call repeating a key of an earlier one gets that call's job,
// as with a key repeated within one call.
func mergeCalls(calls []*groupCall) ([]store.NewJob, *enqueueBatch) {
	n := 0
	for _, c := range calls {
		n += len(c.jobs)
	}
	jobs := make([]store.NewJob, 0, n)
	m := &enqueueBatch{
		queues: make([]string, 0, n), kinds: make([]string, 0, n), states: make([]string, 0, n), keys: make([]string, 0, n),
		deps: make([]string, 0, n), payloads: make([][]byte, 0, n), policies: make([][]byte, 0, n), maxRetries: make([]int32, 0, n),
		reproc: make([]bool, 0, n), isNew: make([]bool, 0, n), runAts: make([]time.Time, 0, n), nows: make([]time.Time, 0, n),
		priorities: make([]int16, 0, n), traces: make([]string, 0, n), packed: make([][]byte, 0, n),
	}
	seen := map[string]bool{}
	for _, c := range calls {
		b := c.b
		jobs = append(jobs, c.jobs...)
		m.queues = append(m.queues, b.queues...)
		m.kinds = append(m.kinds, b.kinds...)
		m.states = append(m.states, b.states...)
		m.keys = append(m.keys, b.keys...)
		m.deps = append(m.deps, b.deps...)
		m.payloads = append(m.payloads, b.payloads...)
		m.policies = append(m.policies, b.policies...)
		m.maxRetries = append(m.maxRetries, b.maxRetries...)
		m.reproc = append(m.reproc, b.reproc...)
		m.runAts = append(m.runAts, b.runAts...)
		m.nows = append(m.nows, b.nows...)
		m.priorities = append(m.priorities, b.priorities...)
		m.traces = append(m.traces, b.traces...)
		m.packed = append(m.packed, b.packed...)
		for _, k := range b.keys {
			m.isNew = append(m.isNew, k == "" || !seen[k])
			if k != "" {
				seen[k] = true
				m.hasKeys = true
			}
		}
	}
	return jobs, m
}

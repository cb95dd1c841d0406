package redrive

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/store"
)

// queueRunner is the fetcher of one queue: its loop fetches the queue's
// due jobs as slots free up and dispatches them to its handler
// goroutines, sleeping until the next due job, a wake-up or the poll
// interval.
type queueRunner struct {
	loop
	w           *Worker
	name        string
	concurrency int
	batch       int

	active atomic.Int64
	// The handler goroutines and the jobs waiting for one (see dispatch),
	// under hmu.
	hmu sync.Mutex
	// ready holds the jobs dispatched that no goroutine took yet, oldest
	// first from readyHead.
	ready     []*Job
	readyHead int
	// parked holds the idle goroutines, each by the channel that wakes
	// it, the most recently idle last.
	parked []chan struct{}
	// searching counts the goroutines woken (or started) to take a job
	// that have not looked yet; handlers counts the goroutines.
	searching, handlers int
	stopped             bool // the goroutines are told to exit
	wakeC               chan struct{}
	freeC               chan struct{}
	hint                atomic.Int64 // earliest due time (unix nanos) announced by a wake-up, 0 = none

	// paused is the queue's cached pause state. The loop holds fetchMu
	// from its check of paused through its Fetch, so that a pause, once
	// applied, knows no fetch is still under way.
	paused  atomic.Bool
	fetchMu sync.Mutex

	// slotWait is set while the queue's last fetch left due jobs waiting
	// on a full group's slot: the completer then wakes the loop when it
	// records outcomes, which may free such a slot.
	slotWait atomic.Bool
}

// setPaused applies a pause or a resume to the loop. A pause returns once
// no fetch is under way; a resume wakes the loop, so that due jobs start
// at once. It reports whether the state changed.
func (q *queueRunner) setPaused(paused bool) bool {
	if paused {
		was := q.paused.Swap(true)
		q.fetchMu.Lock()
		//lint:ignore SA2001 the empty critical section waits for a fetch under way
		q.fetchMu.Unlock()
		return !was
	}
	if !q.paused.Swap(false) {
		return false
	}
	q.wake(time.Now())
	return true
}

// wake tells the loop that work due at t was added.
func (q *queueRunner) wake(t time.Time) {
	n := t.UnixNano()
	for {
		old := q.hint.Load()
		if old != 0 && old <= n {
			break
		}
		if q.hint.CompareAndSwap(old, n) {
			break
		}
	}
	select {
	case q.wakeC <- struct{}{}:
	default:
	}
}

// dispatch hands a leased job to the queue's handler goroutines. They
// live as long as the worker, so their stacks, once grown, are reused
// rather than grown again per job, and there are never more of them than
// the queue's concurrency.
//
// The job waits in the ready list for the first goroutine that looks: one
// that just finished a job takes the next waiting one at once. One idle
// goroutine is woken (the one idle last) or started, unless one woken
// before has not looked yet; a goroutine that takes a job and leaves
// others waiting wakes the next. So every job waiting has a goroutine on
// its way, and when jobs are short a few goroutines run them all, one
// after the other, while the others stay parked. Before, each job was
// handed to a goroutine of its own, every goroutine in turn: each waited
// through garbage collections between two jobs, which shrink the stack
// of a waiting goroutine, and grew its stack again on its next job (a
// stack copy per job), and each job cost a switch to a parked goroutine.
func (q *queueRunner) dispatch(j *Job) {
	q.hmu.Lock()
	q.ready = append(q.ready, j)
	q.wakeLocked()
	q.hmu.Unlock()
}

// wakeLocked makes sure a goroutine will look at the ready jobs: one
// woken before and not yet looking, else the idle one parked last, else a
// new one.
func (q *queueRunner) wakeLocked() {
	if q.searching > 0 || q.readyHead == len(q.ready) {
		return
	}
	if n := len(q.parked); n > 0 {
		c := q.parked[n-1]
		q.parked = q.parked[:n-1]
		q.searching++
		c <- struct{}{} // buffered: a parked goroutine's channel is empty
		return
	}
	if q.handlers < q.concurrency {
		// Never more than the concurrency: jobs waiting are counted in
		// q.active, so with every goroutine running a job none waits.
		q.handlers++
		q.searching++
		go q.handlerLoop()
	}
}

// takeLocked returns the oldest ready job, or nil.
func (q *queueRunner) takeLocked() *Job {
	if q.readyHead == len(q.ready) {
		return nil
	}
	j := q.ready[q.readyHead]
	q.ready[q.readyHead] = nil
	q.readyHead++
	if q.readyHead == len(q.ready) {
		q.ready, q.readyHead = q.ready[:0], 0
	}
	return j
}

// handlerLoop is a handler goroutine: it runs ready jobs until none is
// left, then parks until woken.
func (q *queueRunner) handlerLoop() {
	wake := make(chan struct{}, 1)
	searching, finished := true, false
	// running is true while a job runs: if the goroutine exits then, its
	// handler called runtime.Goexit (the job's outcome was submitted by
	// execute's deferred calls). Its slot is freed and another goroutine
	// takes its place for the jobs waiting.
	running := false
	defer func() {
		if running {
			q.hmu.Lock()
			q.handlers--
			q.wakeLocked()
			q.hmu.Unlock()
			q.release()
		}
	}()
	for {
		q.hmu.Lock()
		if searching {
			q.searching--
			searching = false
		}
		j := q.takeLocked()
		if j != nil {
			q.wakeLocked() // for the jobs still waiting, if any
		} else if !q.stopped {
			q.parked = append(q.parked, wake)
		}
		stopped := q.stopped
		q.hmu.Unlock()
		// The slot of the job finished is freed once this goroutine has
		// taken another or counts as idle, so that the loop's next
		// fetch finds it available.
		if finished {
			q.release()
		}
		if j == nil {
			if stopped {
				return
			}
			if _, ok := <-wake; !ok {
				return
			}
			searching, finished = true, false
			continue
		}
		running = true
		q.w.execute(q, j)
		running, finished = false, true
	}
}

// stopHandlers ends the handler goroutines, once no job will be
// dispatched any more.
func (q *queueRunner) stopHandlers() {
	q.hmu.Lock()
	defer q.hmu.Unlock()
	q.stopped = true
	for _, c := range q.parked {
		close(c)
	}
	q.parked = nil
}

func (q *queueRunner) release() {
	q.active.Add(-1)
	select {
	case q.freeC <- struct{}{}:
	default:
	}
}

// start starts the queue's fetch loop, until ctx ends.
func (q *queueRunner) start(ctx context.Context) { q.startWith(ctx, q.fetchLoop) }

// fetchLoop fetches and dispatches the queue's jobs until ctx ends.
func (q *queueRunner) fetchLoop(ctx context.Context) {
	w := q.w
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	// recheck is how soon the loop looks again for a slot of a full
	// group: limitRecheck after a fetch that leased jobs, doubling with
	// every fetch that leased none, up to maxLimitRecheck.
	recheck := w.recheck
	backoff := func() time.Duration {
		d := recheck
		recheck = min(2*recheck, w.maxRecheck)
		return d
	}
	for ctx.Err() == nil {
		free := q.concurrency - int(q.active.Load())
		if free <= 0 {
			select {
			case <-q.freeC:
			case <-ctx.Done():
			}
			// Slots free up one by one as handlers finish; a fetch per slot
			// would pay a commit per job. Let a few more finish first (an
			// idle queue, with every slot free, fetches at once).
			if free := q.concurrency - int(q.active.Load()); free < q.batch/2 && w.opts.FetchCooldown > 0 {
				timer.Reset(w.opts.FetchCooldown)
				select {
				case <-timer.C:
				case <-ctx.Done():
					timer.Stop()
				}
			}
			continue
		}
		q.fetchMu.Lock()
		if q.paused.Load() {
			// A paused queue fetches nothing: wait for its resume (which
			// wakes the loop) or the end.
			q.fetchMu.Unlock()
			select {
			case <-q.wakeC:
			case <-ctx.Done():
			}
			continue
		}
		q.hint.Store(0)
		now := w.client.now()
		limit := min(free, q.batch)
		// The fetch is not interrupted by the shutdown: a fetch whose
		// commit succeeded but whose call returned the context's error
		// would leave its jobs leased and never run, until their leases
		// expired and were rescued as failed attempts. The jobs of a
		// fetch that ends after the shutdown began are dispatched, and
		// run or are released like the others. It is bounded by the
		// lease, so that a store that hangs does not hold up the
		// shutdown for ever.
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.LeaseDuration)
		var nextStart time.Time
		var slotWait bool
		gen := w.outcomeGen.Load()
		jobs, err := w.store.Fetch(fctx, store.FetchParams{Queue: q.name, Limit: limit, Now: now,
			DueBy: now.Add(w.opts.Lookahead), LeaseUntil: now.Add(w.opts.LeaseDuration), Worker: w.id, NextStart: &nextStart, Clock: w.client.now,
			SlotWait:    &slotWait,
			FairWeights: w.client.fairWeights(q.name)})
		fcancel()
		q.fetchMu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := storeBackoff(failures)
			w.log.Error("fetch failed; retrying", "queue", q.name, "error", err, "attempt", failures, "delay", d)
			q.sleep(ctx, timer, d)
			continue
		}
		failures = 0
		q.slotWait.Store(slotWait)
		if len(jobs) > 0 {
			recheck = w.recheck
		}
		for _, j := range jobs {
			q.active.Add(1)
			w.active.Add(1)
			q.dispatch(j)
		}
		if len(jobs) == limit {
			continue // there may be more due right now
		}
		if slotWait && w.outcomeGen.Load() != gen {
			// Outcomes were recorded while the fetch ran: one may have
			// freed the slot it found full, and the completer, which
			// read slotWait before it was set, did not wake the loop.
			// Look again now. (An outcome recorded after this read sees
			// slotWait set, and wakes the loop.) A wake-up already sent
			// is covered by that fetch: drop it, lest it make one more.
			select {
			case <-q.wakeC:
			default:
			}
			recheck = w.recheck
			continue
		}
		if !nextStart.IsZero() {
			// Due jobs wait on a rate limit (or a hold on Retry-After):
			// the next may start at nextStart. Sleep until then (it starts
			// within a timer's precision of it); a rate's start is never
			// polled for. Only due jobs waiting on a full group's slot,
			// which another process may free at any time, are looked for
			// sooner (recheck). A wake-up (an enqueue, a retry, a local
			// outcome while slots are awaited) ends the sleep early.
			// The queue's next job to become due (a job the fetch did not
			// see) wakes the loop too: NextDue would be the held job.
			if d := nextStart.Sub(w.client.now()); d > 0 {
				wait := min(d, w.opts.PollInterval)
				if slotWait {
					wait = min(wait, backoff())
				}
				if next, ok, err := w.store.NextDueAfter(ctx, q.name, now.Add(w.opts.Lookahead)); err == nil && ok {
					wait = min(wait, time.Until(next)-w.opts.Lookahead)
				}
				if wait > 0 {
					q.sleep(ctx, timer, wait)
				}
			}
			continue
		}
		// Nothing more is due: sleep until the next due job, a wake-up, or
		// the poll interval.
		wait := w.opts.PollInterval
		if next, ok, err := w.store.NextDue(ctx, q.name); err == nil && ok {
			wait = min(wait, time.Until(next)-w.opts.Lookahead)
		}
		if h := q.hint.Load(); h != 0 {
			wait = min(wait, time.Until(time.Unix(0, h))-w.opts.Lookahead)
		}
		if wait <= 0 {
			if len(jobs) == 0 {
				// Jobs are due but none could be leased: they wait on a
				// concurrency limit's slot (or another process's fetch
				// holds them). Look again shortly rather than spin, less
				// often the longer nothing frees.
				q.sleep(ctx, timer, min(w.opts.PollInterval, backoff()))
			}
			continue
		}
		q.sleep(ctx, timer, wait)
	}
}

// limitRecheck is how soon a queue whose due jobs wait on a full group
// of a concurrency limit first looks again for a free slot; each look
// that finds none doubles the wait, up to maxLimitRecheck. A slot freed
// by another process is taken within about maxLimitRecheck once a group
// has been full for a while; one freed here at once (the completer wakes
// the loop when it records outcomes while the queue waits on slots).
// Jobs held only by a rate or a hold on Retry-After are not polled for:
// the loop sleeps until the fetch's NextStart.
const (
	limitRecheck    = 20 * time.Millisecond
	maxLimitRecheck = 160 * time.Millisecond
)

// sleep waits for d, a wake-up or the end of ctx.
func (q *queueRunner) sleep(ctx context.Context, timer *time.Timer, d time.Duration) {
	timer.Reset(d)
	select {
	case <-timer.C:
	case <-q.wakeC:
		if h := q.hint.Load(); h != 0 {
			if wait := time.Until(time.Unix(0, h)) - q.w.opts.Lookahead; wait > 0 {
				// Work announced for later: keep sleeping until then (or the
				// original deadline, whichever is first).
				q.hint.Store(0)
				if wait < d {
					timer.Stop()
					q.sleepUntilWake(ctx, timer, wait)
					return
				}
				q.sleepUntilWake(ctx, timer, d)
				return
			}
		}
		timer.Stop()
	case <-ctx.Done():
		timer.Stop()
	}
}

func (q *queueRunner) sleepUntilWake(ctx context.Context, timer *time.Timer, d time.Duration) {
	timer.Reset(d)
	select {
	case <-timer.C:
	case <-q.wakeC:
		timer.Stop()
	case <-ctx.Done():
		timer.Stop()
	}
}

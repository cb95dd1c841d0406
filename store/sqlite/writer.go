package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/redrivehq/redrive/store"
)

// The writer and its two lanes.
//
// Every write runs on the one writer connection, in transactions that
// group the requests of many callers (group commit). Requests arrive on
// two lanes: ops carries the work (Fetch, Finish, Heartbeat, Progress and
// every other write) and bulk carries Enqueue. With one lane, first come
// first served, a flood of enqueues starved the workers: four producers
// calling EnqueueMany(100) as fast as they could put four enqueue
// requests (400 inserted rows) in every transaction for each fetch of
// the one worker, whose next fetch then waited behind the next 400 rows,
// so the jobs already due were leased at a fraction of the burn-down rate
// while the backlog grew.
//
// So the work goes first, and enqueues slow down instead:
//
//   - a transaction takes every work request waiting (up to MaxBatch);
//   - while the workers are busy (a transaction carried work within the
//     last busyFor), it takes at most one enqueue request, and none when
//     it carries work and the transaction before it carried an enqueue:
//     at least every other transaction is the workers' alone, and their
//     next fetch waits behind at most one enqueue request;
//   - otherwise it takes enqueue requests until they add EnqueueRows jobs
//     (the first one whole, whatever its size).
//
// An enqueue is never starved: of two transactions in a row, one takes an
// enqueue request if one is waiting. A caller's enqueue waits longer under load, and that is the
// backpressure: producers block in EnqueueMany rather than fill the
// database faster than the workers drain it.
//
// A fetch that leased all it asked for is followed at once by its
// caller's next fetch: a worker fetches for as many slots as are free, and
// one that got them all looks again for the slots its jobs freed while the
// fetch ran. The writer begins a transaction as soon as one request
// waits, so that next fetch used to miss the transaction the jobs'
// outcomes (the completer's Finish, sent as the fetch returned) went in,
// and wait for one of its own: two transactions, two commits (two fsyncs
// under synchronous=full) per fetch, the fetches and the finishes taking
// turns. In the soak (producers, retries and retention at once) a fetch
// of 100 slots leased about 50 jobs, one transaction in two, which bounded
// what a worker drained whatever the writer could do.
//
// So after a transaction whose fetch leased its full limit, the next one
// waits, up to fetchFollowWait, for a fetch to arrive, taking every work
// request that comes meanwhile: the next fetch and the outcomes of the
// jobs the last one leased share a transaction. When no fetch follows (its
// worker's slots are all busy) the wait costs one fetchFollowWait; a fetch
// that got fewer jobs than it asked for (the queue is drained) costs none.
// A caller that fetches and then writes in turn (a remote worker's lease
// through serve, a test's fetch then finish) would pay the wait on every
// cycle: so once fetchWaitMisses waits in a row ended with no fetch, the
// writer skips the waits of the next fetchWaitSkip full fetches, then
// tries one again. A single wait missed (a loaded machine's worker slow
// to send its next fetch) changes nothing.

// write runs fn in one of the writer's shared transactions (the work
// lane) and waits for the commit. fn must not keep a reference to tx.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Conn) error) error {
	return s.send(ctx, s.ops, &op{ctx: ctx, fn: fn, done: make(chan error, 1)})
}

// writeFetch is write for a Fetch, which ends the writer's wait for the
// next fetch (see above).
func (s *Store) writeFetch(ctx context.Context, fn func(tx *sql.Conn) error) error {
	return s.send(ctx, s.ops, &op{ctx: ctx, fn: fn, done: make(chan error, 1), fetch: true})
}

// writeEnqueue is write for an enqueue of rows jobs: it goes on the bulk
// lane, which yields to the work lane.
func (s *Store) writeEnqueue(ctx context.Context, rows int, fn func(tx *sql.Conn) error) error {
	return s.send(ctx, s.bulk, &op{ctx: ctx, fn: fn, done: make(chan error, 1), rows: max(rows, 1)})
}

func (s *Store) send(ctx context.Context, lane chan *op, o *op) error {
	if s.readOnly {
		return ErrReadOnly
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return store.ErrClosed
	}
	select {
	case lane <- o:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	// Once queued, the write happens: waiting for it keeps callers from
	// believing a write failed that in fact committed.
	return <-o.done
}

// busyFor is how long the workers count as busy after a transaction
// that carried work: while they are, their next fetch or finish is about
// to come, and enqueues keep out of its way.
const busyFor = 100 * time.Millisecond

// fetchFollowWait bounds how long the writer waits for the next fetch
// after a transaction whose fetch leased all it asked for (see above): the
// time its caller takes to read the jobs back, hand them to its handlers
// and send the next fetch, with room for a loaded machine's scheduling.
const fetchFollowWait = time.Millisecond

// fetchWaitMisses is how many waits in a row must end with no fetch
// before the writer skips the next fetchWaitSkip; a caller that never
// follows a fetch with another then pays one wait in fetchWaitSkip+1.
const (
	fetchWaitMisses = 8
	fetchWaitSkip   = 15
)

// writer is the single goroutine that owns the write connection. It forms
// each transaction from the waiting requests of both lanes (work first,
// see above), runs them and commits once. It returns once both lanes are
// closed and drained.
func (s *Store) writer() {
	defer close(s.done)
	ops, bulk := s.ops, s.bulk
	batch := make([]*op, 0, s.maxB)
	var lastWork time.Time // when the last transaction with work ran
	lastEnqueued := false  // the last transaction carried an enqueue
	skip := 0              // full fetches not to wait after (fetchWaitSkip)
	misses := 0            // waits in a row that ended with no fetch
	// held is an enqueue request taken from its lane but kept for the
	// next transaction (work arrived beside it when it had to wait).
	var held *op
	for ops != nil || bulk != nil || held != nil {
		batch = batch[:0]
		// The transaction before leased a fetch's full limit: this one
		// waits for the next fetch (see above).
		awaitFetch := s.fetchedFull
		s.fetchedFull = false
		// The first request: work if any is waiting, else the held
		// enqueue, else whichever comes.
		var first *op
		select {
		case o, ok := <-ops:
			if !ok {
				ops = nil
				continue // the loop ends if bulk is closed too
			}
			first = o
		default:
		}
		if first == nil && held != nil {
			first, held = held, nil
		}
		if first == nil {
			select {
			case o, ok := <-ops:
				if !ok {
					ops = nil
					continue
				}
				first = o
			case o, ok := <-bulk:
				if !ok {
					bulk = nil
					continue
				}
				first = o
			}
		}
		batch = append(batch, first)
		work, enqueues, rows := 0, 0, 0
		if first.rows == 0 {
			work++
		} else {
			enqueues, rows = 1, first.rows
		}
		// Every work request waiting.
	drainWork:
		for len(batch) < s.maxB {
			select {
			case o, ok := <-ops:
				if !ok {
					ops = nil
					break drainWork
				}
				batch = append(batch, o)
				work++
			default:
				break drainWork
			}
		}
		if awaitFetch && ops != nil && len(batch) < s.maxB && !hasFetch(batch) {
			if skip > 0 {
				skip--
			} else {
				var came bool
				ops, came = s.awaitFetch(ops, &batch, &work)
				if misses++; came {
					misses = 0
				} else if misses >= fetchWaitMisses {
					skip = fetchWaitSkip
				}
			}
		}
		// Enqueues, within their share: while the workers are busy, one
		// request per transaction, and none beside work right after a
		// transaction that carried one (so that at least every other
		// transaction is the workers' alone); otherwise up to EnqueueRows
		// jobs.
		limit, take := s.bulkRows, true
		if busy := work > 0 || time.Since(lastWork) < busyFor; busy {
			limit = 0
			take = !(work > 0 && lastEnqueued)
			if !take && enqueues > 0 {
				// The first request was an enqueue and work came beside
				// it: the enqueue waits for the next transaction.
				held = batch[0]
				batch = append(batch[:0], batch[1:]...)
				enqueues, rows = 0, 0
			}
		}
		if take && held != nil && len(batch) < s.maxB {
			batch = append(batch, held)
			enqueues++
			rows += held.rows
			held = nil
		}
	drainBulk:
		for take && len(batch) < s.maxB && (enqueues == 0 || rows < limit) {
			select {
			case o, ok := <-bulk:
				if !ok {
					bulk = nil
					break drainBulk
				}
				batch = append(batch, o)
				enqueues++
				rows += o.rows
			default:
				break drainBulk
			}
		}
		if work > 0 {
			lastWork = time.Now()
		}
		lastEnqueued = enqueues > 0
		if s.onBatch != nil {
			s.onBatch(work, enqueues, rows)
		}
		s.runBatch(batch)
	}
}

// hasFetch reports whether batch holds a fetch.
func hasFetch(batch []*op) bool {
	for _, o := range batch {
		if o.fetch {
			return true
		}
	}
	return false
}

// awaitFetch adds to batch the work requests that arrive within
// nextFetchWait, until one is a fetch or batch is full, counting them in
// work. It returns ops (nil once ops is closed), and whether a fetch came
// or the batch filled before the wait's end.
func (s *Store) awaitFetch(ops chan *op, batch *[]*op, work *int) (chan *op, bool) {
	t := time.NewTimer(time.Duration(s.nextFetchWait.Load()))
	defer t.Stop()
	if s.onAwaitFetch != nil {
		s.onAwaitFetch(len(*batch))
	}
	for len(*batch) < s.maxB {
		select {
		case o, ok := <-ops:
			if !ok {
				return nil, true
			}
			*batch = append(*batch, o)
			*work++
			if o.fetch {
				return ops, true
			}
		case <-t.C:
			return ops, false
		}
	}
	return ops, true
}

package breaker

import (
	"math"
	"sync/atomic"
	"time"
)

// numBuckets is how many time buckets a ratio-mode window is cut into. The
// window slides in steps of Window/numBuckets: a sum covers between
// (numBuckets-1)/numBuckets of the window and all of it.
const numBuckets = 20

// bucket counts the calls completed during one epoch (one bucket-wide slice of
// time). Counters are atomic so that successes are counted without a lock;
// moving a bucket on to a new epoch (roll) happens under the breaker's lock.
type bucket struct {
	epoch atomic.Int64
	reqs  atomic.Int64
	fails atomic.Int64
}

// maxBatch is the most successes a window lets gather before it places them
// in its buckets (see fold).
const maxBatch = 64

// window is the ratio-mode counter set of one closed period. A breaker
// replaces it with a fresh one whenever it closes, so a late Record from an
// earlier period lands in a window nobody reads any more.
//
// Failures are placed in their bucket at once. Successes are counted
// without reading the clock, in pending, and placed in batches (fold): when
// batch of them have gathered, when a failure is recorded and when the
// status is read. batch adapts to the call rate so that a fold comes about
// four times per bucket: 1 at low rates, where every success is placed at
// once and exactly, up to maxBatch at high rates, where one clock read
// serves many calls. A batch is placed from the previous fold on, at the
// rate the previous batch came at, so that the tail of a burst followed by
// silence is counted in the burst, not spread over the silence.
type window struct {
	width   int64 // nanoseconds per bucket, at least 1
	buckets [numBuckets]bucket
	// pending counts the successes not yet placed; batch is how many may
	// gather before the recording goroutine folds them.
	pending atomic.Int64
	batch   atomic.Int64
	// folded is when the last fold happened (relative ns), noFold before
	// the first; gap is the time per success of the last batch, negative
	// before one was measured. Both under the breaker's lock.
	folded int64
	gap    float64
	// placed counts every success folded so far (under the breaker's
	// lock): a failure that finds it unchanged since the previous failure
	// follows it with no success in between (Breaker.streak).
	placed int64
}

// noFold is window.folded before the first fold.
const noFold = math.MinInt64

func newWindow(d time.Duration) *window {
	w := &window{width: max(int64(d)/numBuckets, 1), folded: noFold, gap: -1}
	for i := range w.buckets {
		w.buckets[i].epoch.Store(math.MinInt64) // matches no epoch
	}
	w.batch.Store(1)
	return w
}

// fold places the pending successes in the buckets of the epochs they came
// in, as well as the window can tell (see window), the share that falls
// before the window dropped, and sets the next batch size from the rate they
// came at. It returns the relative time the window now stands at: rel, or
// the previous fold's if the clock went back. The caller holds the
// breaker's lock.
func (w *window) fold(rel int64) int64 {
	rel = max(rel, w.folded)
	from := w.folded
	if from == noFold {
		from = rel
	}
	w.folded = rel
	p := w.pending.Swap(0)
	if p <= 0 {
		return rel
	}
	w.placed += p
	span := rel - from
	end := rel
	if w.gap >= 0 {
		if est := from + int64(float64(p)*w.gap); est < end {
			end = est
		}
	}
	w.gap = float64(span) / float64(p)

	// Spread p evenly over the epochs from..end, keeping those within the
	// window that ends with rel's epoch.
	e0, e1, now := w.epochOf(from), w.epochOf(end), w.epochOf(rel)
	lo := max(e0, now-numBuckets+1)
	if lo <= e1 {
		k, in := e1-e0+1, e1-lo+1
		share := p
		if k > in {
			share = int64(float64(p) * float64(in) / float64(k))
		}
		per, rem := share/in, share%in
		for i := range in {
			n := per
			if i < rem {
				n++ // the remainder to the newest epochs
			}
			if n == 0 {
				break
			}
			e := e1 - i
			if bk := w.at(e); bk.roll(e) {
				bk.reqs.Add(n)
			}
		}
	}

	// About four folds per bucket at the rate this batch came at.
	batch := int64(maxBatch)
	if span > 0 {
		batch = int64(min(max(float64(w.width)/(4*w.gap), 1), maxBatch))
	}
	w.batch.Store(batch)
	return rel
}

// epochOf returns the epoch of rel, nanoseconds since the breaker's creation.
func (w *window) epochOf(rel int64) int64 {
	return max(rel, 0) / w.width
}

func (w *window) at(epoch int64) *bucket {
	return &w.buckets[epoch%numBuckets]
}

// roll makes bk count epoch e, clearing it if it held an older epoch. It
// reports false when bk already holds a later epoch: the caller's clock
// reading is a whole window old and the call is not counted. The caller holds
// the breaker's lock.
func (bk *bucket) roll(e int64) bool {
	cur := bk.epoch.Load()
	switch {
	case cur == e:
		return true
	case cur > e:
		return false
	}
	bk.reqs.Store(0)
	bk.fails.Store(0)
	bk.epoch.Store(e) // published last: lock-free adders wait for it
	return true
}

// sum returns the calls and failures in the window ending with epoch e.
func (w *window) sum(e int64) (reqs, fails int64) {
	for i := range w.buckets {
		bk := &w.buckets[i]
		if ep := bk.epoch.Load(); ep <= e && ep > e-numBuckets {
			reqs += bk.reqs.Load()
			fails += bk.fails.Load()
		}
	}
	return reqs, fails
}

package breaker

import (
	"math"
	"sync"
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

// window is the ratio-mode counter set of one closed period. A breaker
// replaces it with a fresh one whenever it closes, so a late Record from an
// earlier period lands in a window nobody reads any more.
//
// Every outcome is counted at once in the bucket of the time it was
// recorded: a success reads the clock and, when its bucket already holds
// the current epoch, adds to it lock-free; the first call of a new epoch
// rolls the bucket under the breaker's lock. Failures are placed under the
// lock. The counts are therefore exact at bucket granularity, whatever the
// call rate and however long the quiet spells between calls.
type window struct {
	width   int64 // nanoseconds per bucket, at least 1
	buckets [numBuckets]bucket
	// latest is the latest relative time a failure or a read placed the
	// window at, so that a clock that goes back does not move the window
	// back. Written under the breaker's lock; successes read it lock-free
	// and are counted no earlier (see addSuccess).
	latest atomic.Int64
}

func newWindow(d time.Duration) *window {
	w := &window{width: max(int64(d)/numBuckets, 1)}
	w.latest.Store(math.MinInt64)
	for i := range w.buckets {
		w.buckets[i].epoch.Store(math.MinInt64) // matches no epoch
	}
	return w
}

// advance moves the window to rel, or keeps it where it is if the clock
// went back, and returns the relative time it now stands at. The caller
// holds the breaker's lock.
func (w *window) advance(rel int64) int64 {
	if l := w.latest.Load(); rel < l {
		return l
	}
	w.latest.Store(rel)
	return rel
}

// addSuccess counts a success recorded at rel, or at the window's latest
// time if the clock reads earlier (it went back, or a failure read it
// later and was counted first): a success recorded after a failure is
// never dated before it, so it breaks the run of failures in a row
// (succeededSince) and stays in the window as long as the failure. It
// takes no lock when the bucket already holds the success's epoch, and
// lock (the breaker's) to roll the bucket on to a new epoch. (An adder that
// stalls for a whole window between its epoch check and its add counts in
// the bucket's new epoch: a miscount of one call that needs a stall of the
// window's length.)
func (w *window) addSuccess(rel int64, lock *sync.Mutex) {
	e := w.epochOf(max(rel, w.latest.Load()))
	bk := w.at(e)
	if bk.epoch.Load() == e {
		bk.reqs.Add(1)
		return
	}
	lock.Lock()
	if bk.roll(e) {
		bk.reqs.Add(1)
	}
	lock.Unlock()
}

// addFailure counts a failure recorded at rel (after advance). The caller
// holds the breaker's lock.
func (w *window) addFailure(rel int64) {
	e := w.epochOf(rel)
	if bk := w.at(e); bk.roll(e) {
		bk.reqs.Add(1)
		bk.fails.Add(1)
	}
}

// successes returns how many successes epoch e's bucket holds (0 when the
// bucket holds another epoch). Failures are counted under the breaker's
// lock, so a caller holding it reads a consistent difference.
func (w *window) successes(e int64) int64 {
	bk := w.at(e)
	if bk.epoch.Load() != e {
		return 0
	}
	return bk.reqs.Load() - bk.fails.Load()
}

// succeededSince reports whether a success was counted after a mark taken
// when epoch e's bucket held ok successes, up to epoch now. It reports true
// when it cannot tell: the mark's bucket has left the window (or the
// window stands before it). The caller holds the breaker's lock.
func (w *window) succeededSince(e, ok, now int64) bool {
	if now < e || now-e >= numBuckets {
		return true
	}
	if w.successes(e) > ok {
		return true
	}
	for x := e + 1; x <= now; x++ {
		if w.successes(x) > 0 {
			return true
		}
	}
	return false
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

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

// window is the ratio-mode counter set of one closed period. A breaker
// replaces it with a fresh one whenever it closes, so a late Record from an
// earlier period lands in a window nobody reads any more.
type window struct {
	width   int64 // nanoseconds per bucket, at least 1
	buckets [numBuckets]bucket
}

func newWindow(d time.Duration) *window {
	w := &window{width: max(int64(d)/numBuckets, 1)}
	for i := range w.buckets {
		w.buckets[i].epoch.Store(math.MinInt64) // matches no epoch
	}
	return w
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

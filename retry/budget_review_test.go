package retry

import (
	"testing"
	"time"
)

// TestBudgetBoundAnyWindow checks the bound the budget documents on a span
// of one window that does not start on a bucket's edge: a full budget spent
// at the end of one bucket, then a full budget spent just after that bucket
// left the window, 9.01 s later. Over windows of whole buckets at most
// allowed retries pass unchanged; over this span, which straddles bucket
// edges, twice that, and no more.
func TestBudgetBoundAnyWindow(t *testing.T) {
	const allowed = 100
	const window = 10 * time.Second
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 1e-9, MinRetries: allowed, Window: window, Now: clock.Now})
	var unchanged []time.Duration // when each unchanged retry was scheduled
	schedule := func(at time.Duration) {
		clock.ns.Store(newFakeClock().ns.Load() + int64(at))
		for range allowed + 10 {
			if d := b.Retry(time.Second); d == time.Second {
				unchanged = append(unchanged, at)
			}
		}
	}
	schedule(990 * time.Millisecond) // the end of the first bucket
	schedule(window)                 // that bucket has just left the window
	schedule(window + 500*time.Millisecond)
	count := func(from, to time.Duration) int {
		n := 0
		for _, at := range unchanged {
			if at >= from && at < to {
				n++
			}
		}
		return n
	}
	for from := time.Duration(0); from <= window; from += window / budgetBuckets {
		if n := count(from, from+window); n > allowed {
			t.Fatalf("%d retries passed unchanged in the window of whole buckets from %v, want at most %d", n, from, allowed)
		}
	}
	// The documented worst case, reached: a span of one window (here
	// 9.01 s) holds twice the budget.
	if n := count(990*time.Millisecond, 990*time.Millisecond+window); n != 2*allowed {
		t.Fatalf("%d retries passed unchanged within one window straddling bucket edges, want %d (the documented worst case)", n, 2*allowed)
	}
}

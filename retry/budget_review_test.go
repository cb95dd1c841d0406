package retry

import (
	"testing"
	"time"
)

// TestBudgetBoundAnyWindow checks the bound the budget documents (budget.go,
// docs/design.md: "over any window at most allowed retries pass
// unchanged") on a window that does not start on a bucket's edge: a full
// budget spent at the end of one bucket, then a full budget spent just
// after that bucket left the window, 9.02 s later.
func TestBudgetBoundAnyWindow(t *testing.T) {
	const allowed = 100
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 1e-9, MinRetries: allowed, Window: 10 * time.Second, Now: clock.Now})
	var unchanged []time.Duration // when each unchanged retry was scheduled
	at := time.Duration(0)
	schedule := func() {
		for range allowed {
			if d := b.Retry(time.Second); d == time.Second {
				unchanged = append(unchanged, at)
			}
		}
	}
	at = 990 * time.Millisecond // the end of the first bucket
	clock.Advance(at)
	schedule()
	clock.Advance(10*time.Second - at) // that bucket has just left the window
	at = 10 * time.Second
	schedule()
	// Every unchanged retry was scheduled within [0.99s, 10s]: one window.
	if n := len(unchanged); n > allowed {
		t.Fatalf("%d retries passed unchanged within %v (a window is %v), want at most %d", n, at-990*time.Millisecond, 10*time.Second, allowed)
	}
}

package redrivetest

import (
	"sync"
	"time"
)

// DefaultStart is the time a Clock made by NewClock with a zero start
// reads: a fixed instant, so that times in test output do not change
// from one run to the next.
var DefaultStart = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock: it reads the same time until a test moves it.
// Pass its Now method where redrive takes a clock (ExecutorOptions.Now,
// retry.BudgetConfig.Now). A Clock is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start, or DefaultStart when start is
// zero.
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = DefaultStart
	}
	return &Clock{now: start}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (a negative d moves it back) and
// returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// advanceTo moves the clock to t if t is later than its time, and
// returns the time it reads then.
func (c *Clock) advanceTo(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	return c.now
}

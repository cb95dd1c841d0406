package redrive_test

import (
	"sync/atomic"
	"time"
)

// heldClock is a breaker clock that stands still until released, then
// runs again, ahead by ahead. A test that trips a breaker before the
// worker starts holds its clock, so that the break cannot be over before
// a loaded machine first fetched the job (the job would then run at once,
// never deferred); once the test has seen the deferral, it releases the
// clock past the break.
type heldClock struct {
	at       time.Time
	ahead    time.Duration
	released atomic.Bool
}

func newHeldClock(ahead time.Duration) *heldClock { return &heldClock{at: time.Now(), ahead: ahead} }

// Now is the breaker's clock (breaker.Config.Now).
func (c *heldClock) Now() time.Time {
	if !c.released.Load() {
		return c.at
	}
	return time.Now().Add(c.ahead)
}

// release lets the clock run again, ahead of real time.
func (c *heldClock) release() { c.released.Store(true) }

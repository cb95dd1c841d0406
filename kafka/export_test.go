package kafka

import (
	"context"
	"time"
)

// SetEndTimeout shortens how long an exactly-once transaction's produces,
// and then its end, may take.
func SetEndTimeout(c *Consumer, d time.Duration) { c.endTimeout = d }

// HoldCounter takes the lock of q's record counter, as a Count reading
// the DLT through holds it, until release is called.
func HoldCounter(q *DLT) (release func()) {
	if err := q.count.lock(context.Background()); err != nil {
		panic(err)
	}
	return q.count.unlock
}

// OnSessionFailed has f called with the error that made an exactly-once
// session of c unusable (its transaction could not begin or end), as it
// happens: the session is then replaced. Set before Run.
func OnSessionFailed(c *Consumer, f func(error)) { c.sessionFailed = f }

package redrive

import "time"

// SetClock sets the clock of c and of the workers created from it: the
// times they write (run_at, lease_until, outcomes) and compare with
// (leases expired, jobs due). The loops still wait on real timers. Call
// it before starting a worker.
func SetClock(c *Client, now func() time.Time) { c.nowFunc = now }

package redrive

import "time"

// SetStatsClock sets the clock of the statistics history (the minutes of
// the worker's snapshots and of Series' live point) of c and of the
// workers created from it. Call it before starting a worker.
func SetStatsClock(c *Client, now func() time.Time) { c.statsClock = now }

package kafka

import "time"

// SetEndTimeout shortens how long an exactly-once transaction's produces,
// and then its end, may take.
func SetEndTimeout(c *Consumer, d time.Duration) { c.endTimeout = d }

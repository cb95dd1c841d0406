package postgres

import "time"

// SetListenIdle sets how long Listen waits before pinging an idle
// connection, and returns a function restoring the previous value.
func SetListenIdle(d time.Duration) (restore func()) {
	old := listenIdle.Swap(int64(d))
	return func() { listenIdle.Store(old) }
}

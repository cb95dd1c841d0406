// Package testwait is how redrive's tests wait for the code under test:
// for a condition to hold, or for a value on a channel, with a generous
// bound on how long, and a failure that says what was waited for. It
// takes the place of time.Sleep in tests, which waits too long on a fast
// machine and not long enough on a loaded one.
package testwait

import (
	"testing"
	"time"
)

// Interval is how often Until checks its condition.
const Interval = 5 * time.Millisecond

// Until waits until cond returns true, checking it every Interval, and
// fails t if it has not within the bound within; what says what was
// waited for ("job 3 dead", "the consumer's first delivery"), for the
// failure message. cond runs on the caller's goroutine.
func Until(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	Watch(t, what, within, func() (bool, string) { return cond(), "" })
}

// Recv waits for a value on ch and returns it, failing t if none comes
// within the bound within, or if ch is closed; what says what was waited
// for.
func Recv[T any](t testing.TB, what string, within time.Duration, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("waiting for %s: the channel was closed", what)
		}
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
	var zero T
	return zero
}

// Watch is Until for a condition that can say where it stands: cond
// returns whether it holds and a description of the state it saw, which
// a failure reports ("timed out after 20s waiting for X; last seen: Y").
func Watch(t testing.TB, what string, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	var last string
	check := func() bool {
		var ok bool
		ok, last = cond()
		return ok
	}
	if check() {
		return
	}
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case <-tick.C:
			if check() {
				return
			}
		case <-deadline.C:
			if check() {
				return
			}
			if last == "" {
				t.Fatalf("timed out after %v waiting for %s", within, what)
			} else {
				t.Fatalf("timed out after %v waiting for %s; last seen: %s", within, what, last)
			}
			return
		}
	}
}

// Progress waits until measure reports done, for as long as the work it
// measures moves: it fails t only when the value measure returns has not
// risen for the bound stall (a stall, not slowness: a loaded machine may
// take any time in all, but not a stall that long). measure returns a
// count that rises as the work goes (jobs processed, records seen), and
// whether the wait is over; what says what was waited for.
func Progress(t testing.TB, what string, stall time.Duration, measure func() (value int64, done bool)) {
	t.Helper()
	last, done := measure()
	if done {
		return
	}
	moved := time.Now()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for range tick.C {
		v, done := measure()
		if done {
			return
		}
		if v > last {
			last, moved = v, time.Now()
			continue
		}
		if time.Since(moved) > stall {
			t.Fatalf("waiting for %s: no progress for %v (stuck at %d)", what, stall, v)
		}
	}
}

package main

import (
	"testing"
	"time"
)

// waitUntil is the tests' one wait for the engine: it checks check every
// few milliseconds until it returns nil, and fails the test after bound
// with what it waited for and the last answer of check (the state it
// saw). bound is a liveness guard, never a timing assertion: pick it
// generous, a loaded machine is slow.
func waitUntil(t testing.TB, bound time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s: %v", bound, what, err)
		}
		<-tick.C
	}
}

// errNotYet is what a check answers when it has nothing to say of the
// state but that it is not there yet.
type errNotYet struct{}

func (errNotYet) Error() string { return "not yet" }

// holds adapts a condition to waitUntil.
func holds(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet{}
	}
}

// eventually waits until cond holds, within e2eWait twice over.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, 2*e2eWait, what, holds(cond))
}

// within waits until cond holds, within bound (longer than eventually's
// for a test that restarts a broker, which is slow on a busy machine).
func within(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, bound, what, holds(cond))
}

// settles waits until cond holds or bound passes, and reports whether it
// held: for cleanups, which must not fail the test for a slow teardown.
func settles(bound time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

package redrive

import (
	"context"
	"time"

	"github.com/redrivehq/redrive/internal/lifecycle"
)

// loop is the life of one of a Worker's background loops (the rescuer,
// the cleaner, the heartbeater, a queue's fetcher...): Run starts each
// once and stops it at shutdown. Each loop is a type of its own file,
// with its own test.
type loop struct {
	run lifecycle.Once
	// signal, when a test set it, is sent on after each round of the
	// loop's work (see testSignal).
	signal testSignal
}

// startWith runs body on its own goroutine until ctx ends or stop.
func (l *loop) startWith(ctx context.Context, body func(ctx context.Context)) {
	// A Worker runs once (see Run), and so does each of its loops.
	_ = l.run.Go(ctx, body)
}

// stop ends the loop and waits for it; a loop that was not started is
// not waited for.
func (l *loop) stop() { _ = l.run.Stop(context.Background()) }

// running reports whether the loop runs.
func (l *loop) running() bool { return l.run.Running() }

// testSignal is how a test waits for a loop's round of work rather than
// sleeping: the loop sends on it after each round (never blocking: a
// round nobody waits for is dropped once the buffer is full). Nil, as
// outside tests, it costs a nil check.
type testSignal chan struct{}

// newTestSignal returns a signal that holds a few rounds.
func newTestSignal() testSignal { return make(testSignal, 64) }

// send reports a round done.
func (s testSignal) send() {
	if s == nil {
		return
	}
	select {
	case s <- struct{}{}:
	default:
	}
}

// drain forgets the rounds done so far: the next wait is for a round
// that ends after it.
func (s testSignal) drain() {
	for {
		select {
		case <-s:
		default:
			return
		}
	}
}

// wait waits for the next round, up to a generous liveness bound, and
// reports whether it came.
func (s testSignal) wait(bound time.Duration) bool {
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-s:
		return true
	case <-t.C:
		return false
	}
}

// Package lifecycle gives a component that runs in the background its
// shape: it starts once (a second start is an error), stops with a
// deadline, reports whether it runs, and can be waited for. The worker's
// loops and the broker transports' Run methods use it instead of each
// writing its own guard and shutdown drain.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrAlreadyRunning is what Start returns after the first call: a
// component runs once, whether its run still goes on or has ended. Callers
// prefix it with their name ("amqp: consumer already running").
var ErrAlreadyRunning = errors.New("already running")

// ErrStopped is the cause of a run's context canceled by Stop.
var ErrStopped = errors.New("stopped")

// State is where a component is in its life.
type State int

// The states of a component: Idle until Start, Running until its run
// ends (the finish function Start returned is called), then Done.
const (
	Idle State = iota
	Running
	Done
)

// String names the state.
func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Running:
		return "running"
	case Done:
		return "done"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Once is the life of a component that runs once. The zero value is
// ready to use; a Once must not be copied after first use.
type Once struct {
	mu     sync.Mutex
	state  State
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// doneLocked returns the channel closed when the run ends.
func (o *Once) doneLocked() chan struct{} {
	if o.done == nil {
		o.done = make(chan struct{})
	}
	return o.done
}

// Start begins the run: the first call returns ctx's child that Stop
// cancels (cause ErrStopped) and the function to call once the run has
// ended (it may be called more than once). Every later call returns
// ErrAlreadyRunning.
func (o *Once) Start(ctx context.Context) (context.Context, func(), error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state != Idle {
		return nil, nil, ErrAlreadyRunning
	}
	o.state = Running
	ctx, o.cancel = context.WithCancelCause(ctx)
	done := o.doneLocked()
	var once sync.Once
	finish := func() {
		once.Do(func() {
			o.mu.Lock()
			o.state = Done
			o.mu.Unlock()
			o.cancel(nil)
			close(done)
		})
	}
	return ctx, finish, nil
}

// Go starts the run as f on its own goroutine; it ends when f returns.
// It returns ErrAlreadyRunning after the first call, as Start does.
func (o *Once) Go(ctx context.Context, f func(ctx context.Context)) error {
	ctx, finish, err := o.Start(ctx)
	if err != nil {
		return err
	}
	go func() {
		defer finish()
		f(ctx)
	}()
	return nil
}

// Stop cancels the run's context and waits for the run to end or ctx to
// end first (then it returns ctx's error, and the run goes on until it
// sees the cancellation). A component not started is not running: Stop
// returns nil at once, and does not keep a later Start from running it.
func (o *Once) Stop(ctx context.Context) error {
	o.mu.Lock()
	if o.state == Idle {
		o.mu.Unlock()
		return nil
	}
	o.cancel(ErrStopped)
	done := o.done
	o.mu.Unlock()
	return waitFor(ctx, done, "stop")
}

// waitFor waits for done or ctx's end; an ended run wins over an ended
// ctx, so that the answer does not depend on which select case is taken.
func waitFor(ctx context.Context, done <-chan struct{}, op string) error {
	select {
	case <-done:
		return nil
	default:
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lifecycle: %s: %w", op, ctx.Err())
	}
}

// State returns where the component is in its life.
func (o *Once) State() State {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.state
}

// Running reports whether the run started and has not ended.
func (o *Once) Running() bool { return o.State() == Running }

// Done returns a channel closed once the run has ended (never, when it
// does not start).
func (o *Once) Done() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.doneLocked()
}

// Wait waits for the run to end, or for ctx to end first (then it
// returns ctx's error).
func (o *Once) Wait(ctx context.Context) error { return waitFor(ctx, o.Done(), "wait") }

// Drain waits at shutdown for done to close: first for up to grace; if
// it has not closed by then, it calls expire (which tells the work still
// running to stop at once) and waits again, for up to after when after
// is positive, else for as long as it takes. It reports whether done
// closed.
func Drain(done <-chan struct{}, grace time.Duration, expire func(), after time.Duration) bool {
	// An ended run wins over a passed grace, as in waitFor.
	if ended(done) {
		return true
	}
	t := time.NewTimer(grace)
	select {
	case <-done:
		t.Stop()
		return true
	case <-t.C:
	}
	if ended(done) {
		return true
	}
	expire()
	if after <= 0 {
		<-done
		return true
	}
	t.Reset(after)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return ended(done)
	}
}

// ended reports whether done is closed, without waiting.
func ended(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// WaitGroupDone returns a channel closed once wg's counter is zero.
func WaitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		wg.Wait()
		close(c)
	}()
	return c
}

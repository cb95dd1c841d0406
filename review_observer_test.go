package redrive_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
)

// blockingObserver blocks in its first report until released.
type blockingObserver struct {
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (o *blockingObserver) ObserveAttempt(redrive.AttemptInfo) {
	first := false
	o.once.Do(func() { first = true; close(o.entered) })
	if first {
		<-o.release
	}
}

// TestRunReturnsWithObserverStuck checks that Run still returns when a
// handler's goroutine is stuck in the Observer at the shutdown: such an
// attempt is one that does not end, which Run gives up on after the
// shutdown timeout (and 5 s), as it does for a handler that ignores
// cancellation. Closing the Observer gate must not wait for it.
func TestRunReturnsWithObserverStuck(t *testing.T) {
	obs := &blockingObserver{entered: make(chan struct{}), release: make(chan struct{})}
	defer close(obs.release)
	e := newEnv(t, redrive.WorkerOptions{Observer: obs, ShutdownTimeout: 10 * time.Millisecond})
	e.worker.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.worker.Run(ctx) }()
	if _, err := e.client.Enqueue(context.Background(), "k", nil); err != nil {
		t.Fatal(err)
	}
	<-obs.entered
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // liveness bound; Run gives up after 10ms + 5s
		t.Fatal("Run did not return: the Observer gate waits for a report stuck in the Observer")
	}
}

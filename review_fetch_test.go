package redrive_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// hangingStore is a store whose Fetch, once hang is set, blocks until
// its context ends, as a query to an unreachable database does.
type hangingStore struct {
	store.Store
	hang    atomic.Bool
	entered chan struct{}
	once    sync.Once
}

func (s *hangingStore) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	if !s.hang.Load() {
		return s.Store.Fetch(ctx, p)
	}
	s.once.Do(func() { close(s.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestShutdownWithHangingFetch checks that a fetch that hangs at the
// shutdown holds up Run no longer than the shutdown timeout, not for a
// whole (long) lease: Run's documentation bounds its shutdown by
// ShutdownTimeout.
func TestShutdownWithHangingFetch(t *testing.T) {
	hs := &hangingStore{Store: openStore(t), entered: make(chan struct{})}
	hs.hang.Store(true)
	c := redrive.NewClient(hs, redrive.ClientOptions{Logger: quietLogger()})
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quietLogger(), LeaseDuration: time.Hour,
		ShutdownTimeout: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-hs.entered
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second): // liveness bound, far below the hour's lease
		t.Fatal("Run did not return: a hanging fetch holds up the shutdown for the whole LeaseDuration")
	}
}

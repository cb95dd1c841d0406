package redrive_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// countingFetch counts the store's fetches.
type countingFetch struct {
	store.Store
	fetches atomic.Int64
}

func (s *countingFetch) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	s.fetches.Add(1)
	return s.Store.Fetch(ctx, p)
}

// TestRemoteLongPollHerd: many remote workers long-poll one queue; one
// job enqueued wakes them all, and each makes a fetch (a write
// transaction on SQLite) for it: 200 fetches for one job here, 2,000
// with 2,000 workers waiting.
func TestRemoteLongPollHerd(t *testing.T) {
	t.Skip("FINDING (left to the lead): one enqueue wakes every long-poll of its queue, each fetching; " +
		"waking fewer trades against the lease-to-start latency (helper C's work)")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &countingFetch{Store: openStore(t)}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quietLogger(), PollInterval: time.Minute})
	const waiters = 200
	var started, got sync.WaitGroup
	var leased atomic.Int64
	started.Add(waiters)
	got.Add(waiters)
	for i := range waiters {
		go func() {
			defer got.Done()
			started.Done()
			jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: fmt.Sprintf("w-%d", i)},
				Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1, Wait: time.Minute})
			if err == nil {
				leased.Add(int64(len(jobs)))
			}
		}()
	}
	started.Wait()
	testwait.Until(t, "every long-poll waiting", 30*time.Second, func() bool { return st.fetches.Load() >= waiters })
	before := st.fetches.Load()
	if _, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the job leased", 30*time.Second, func() bool { return leased.Load() == 1 })
	// Let the woken long-polls make their fetches before counting them.
	time.Sleep(500 * time.Millisecond) // real time: the herd's fetches, which nothing signals
	n := st.fetches.Load() - before
	cancel()
	got.Wait()
	t.Logf("one job enqueued, %d long-polls waiting: %d fetches", waiters, n)
	if n > 10 {
		t.Fatalf("one enqueue made %d fetches, one per long-poll waiting", n)
	}
}

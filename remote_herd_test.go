package redrive_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	nextDue atomic.Int64
}

func (s *countingFetch) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	s.fetches.Add(1)
	return s.Store.Fetch(ctx, p)
}

// NextDue counts the long-polls' last look before they wait: a long-poll
// that looked before a job's enqueue and after its fetch would see the
// job due and look again soon, which is not the herd.
func (s *countingFetch) NextDue(ctx context.Context, queue string) (time.Time, bool, error) {
	defer s.nextDue.Add(1) // once answered
	return s.Store.NextDue(ctx, queue)
}

// TestRemoteLongPollHerd: many remote workers long-poll one queue; one
// job enqueued wakes one of them, not all (each woken one makes a fetch,
// a write transaction on SQLite: 200 fetches for one job here before).
func TestRemoteLongPollHerd(t *testing.T) {
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
	testwait.Until(t, "every long-poll waiting", 30*time.Second, func() bool { return st.nextDue.Load() >= waiters })
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

// TestRemoteLongPollWakesEnough: long-polls on random sets of three
// queues, each leasing once 1 to 3 jobs, while jobs are enqueued in
// random batches. Once the enqueues are done, every queue must end
// either with all its jobs leased or with none of its long-polls still
// waiting, without any long-poll's periodic look (a minute here): a
// long-poll left waiting on a queue that holds due jobs is a wake-up lost
// by waking only some of them.
func TestRemoteLongPollWakesEnough(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quietLogger(), PollInterval: time.Minute})
	queues := []string{"a", "b", "c"}
	const waiters = 40
	var mu sync.Mutex
	leased := map[string]int{}
	watching := map[string]int{} // long-polls still waiting, by queue
	var started, fetchers sync.WaitGroup
	for i := range waiters {
		var qs []string
		for _, q := range queues {
			if rng.IntN(2) == 0 {
				qs = append(qs, q)
			}
		}
		if len(qs) == 0 {
			qs = []string{queues[rng.IntN(len(queues))]}
		}
		max := 1 + rng.IntN(3)
		mu.Lock()
		for _, q := range qs {
			watching[q]++
		}
		mu.Unlock()
		started.Add(1)
		fetchers.Add(1)
		go func() {
			defer fetchers.Done()
			started.Done()
			jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: fmt.Sprintf("w-%d", i)},
				Queues: qs, Kinds: []string{"k"}, Max: max, Wait: 50 * time.Second})
			mu.Lock()
			defer mu.Unlock()
			for _, q := range qs {
				watching[q]--
			}
			if err == nil {
				for _, j := range jobs {
					leased[j.Queue]++
				}
			}
		}()
	}
	started.Wait()
	enqueued := map[string]int{}
	for range 12 {
		n := 1 + rng.IntN(15)
		reqs := make([]redrive.Request, n)
		q := queues[rng.IntN(len(queues))]
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: "k", Queue: q}
		}
		if _, err := c.EnqueueMany(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		enqueued[q] += n
	}
	settled := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, q := range queues {
			if leased[q] < enqueued[q] && watching[q] > 0 {
				return false
			}
		}
		return true
	}
	testwait.Until(t, fmt.Sprintf("every queue's jobs leased or its long-polls answered (seed %d)", seed), 30*time.Second, settled)
	cancel()
	fetchers.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("enqueued %v, leased %v", enqueued, leased)
	for _, q := range queues {
		if leased[q] > enqueued[q] {
			t.Errorf("queue %s: %d leased of %d", q, leased[q], enqueued[q])
		}
	}
}

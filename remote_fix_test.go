package redrive_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
)

// countingObserver counts the attempts an Executor reports, by job.
type countingObserver struct {
	mu    sync.Mutex
	seen  map[int64]int
	total int
}

func (o *countingObserver) ObserveAttempt(a redrive.AttemptInfo) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[int64]int{}
	}
	o.seen[a.JobID]++
	o.total++
}

func (o *countingObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total
}

// TestRemoteOutcomeRetriedCountedOnce: an outcome whose write failed is
// reported again by the worker. The attempt happened once: the retry
// budget must count one attempt and one retry, and the observer (the
// metrics and their histograms) one attempt, not one per try.
func TestRemoteOutcomeRetriedCountedOnce(t *testing.T) {
	for _, kind := range []redrive.RemoteOutcomeKind{redrive.RemoteFail, redrive.RemoteComplete} {
		t.Run(string(kind), func(t *testing.T) {
			ctx := context.Background()
			st := &finishFailsOnce{Store: openStore(t)}
			c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
			obs := &countingObserver{}
			p := retry.Policy{MaxRetries: 5, Initial: time.Minute, Multiplier: 1, MaxDelay: time.Minute, Jitter: retry.JitterNone}
			ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: &p, Logger: quietLogger(), Observer: obs,
				RetryBudget: retry.BudgetConfig{Window: time.Hour}})
			rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{Logger: quietLogger()})
			j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
			if err != nil {
				t.Fatal(err)
			}
			jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"},
				Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("lease: %d jobs, %v", len(jobs), err)
			}
			out := []redrive.RemoteOutcome{{ID: j.ID, Lease: jobs[0].Lease, Kind: kind}}
			if kind == redrive.RemoteFail {
				out[0].Class, out[0].Error = failure.Transient, "503"
			}
			if _, err := rw.Outcomes(ctx, "py-1@a", out); err == nil {
				t.Fatal("the first outcome's write did not fail")
			}
			res, err := rw.Outcomes(ctx, "py-1@a", out)
			if err != nil || res[0].Err != nil {
				t.Fatalf("retried outcome: %v %+v", err, res)
			}
			wantRetries := 0
			if kind == redrive.RemoteFail {
				wantRetries = 1
			}
			if b := redrive.RetryBudgetOf(ex, "q"); b.Attempts != 1 || b.Retries != wantRetries {
				t.Fatalf("FINDING: one attempt reported twice counts %d attempts and %d retries in the retry budget (want 1, %d)",
					b.Attempts, b.Retries, wantRetries)
			}
			if n := obs.count(); n != 1 {
				t.Fatalf("FINDING: one attempt reported twice was observed %d times (want 1)", n)
			}
		})
	}
}

// TestRemoteWatchedQueuesShrink: every queue a long-poll names gets a
// wake-up hook. A worker naming ever new queues (a client that makes up
// queue names) must not grow serve's memory for ever: a queue's hook
// goes with its last waiter, and a wake-up still reaches the waiters
// that stay.
func TestRemoteWatchedQueuesShrink(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Logger: quietLogger()})
	// No poll within a wait: only a wake-up ends it early.
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{PollInterval: time.Hour, Logger: quietLogger()})
	for i := range 50 {
		jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"},
			Queues: []string{fmt.Sprintf("random-%d", i)}, Kinds: []string{"k"}, Max: 1, Wait: time.Millisecond})
		if err != nil || len(jobs) != 0 {
			t.Fatalf("lease: %d jobs, %v", len(jobs), err)
		}
	}
	if hooked, waited := redrive.RemoteWatched(rw); hooked != 0 || waited != 0 {
		t.Fatalf("FINDING: after 50 long-polls on 50 queues, all ended, %d queues keep their hooks and %d their waiters (want 0)",
			hooked, waited)
	}

	// Two long-polls on q; one leaves, the other is still woken.
	type answer struct {
		jobs []*redrive.Job
		err  error
	}
	lease := func(ctx context.Context, worker string, queues ...string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: worker},
				Queues: queues, Kinds: []string{"k"}, Max: 1, Wait: redrive.MaxRemoteWait})
			ch <- answer{jobs, err}
		}()
		return ch
	}
	actx, cancelA := context.WithCancel(ctx)
	defer cancelA()
	a := lease(actx, "py-a@a", "q")
	b := lease(ctx, "py-b@b", "q", "x")
	testwait.Until(t, "both long-polls wait on q", 10*time.Second, func() bool { return redrive.RemoteWaiting(rw, "q") == 2 })
	cancelA()
	if got := testwait.Recv(t, "the canceled long-poll", 10*time.Second, a); got.err != nil || len(got.jobs) != 0 {
		t.Fatalf("canceled long-poll: %d jobs, %v", len(got.jobs), got.err)
	}
	j, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q"))
	if err != nil {
		t.Fatal(err)
	}
	got := testwait.Recv(t, "the long-poll that stayed, woken by the enqueue", 10*time.Second, b)
	if got.err != nil || len(got.jobs) != 1 || got.jobs[0].ID != j.ID {
		t.Fatalf("long-poll: %+v", got)
	}
	if hooked, waited := redrive.RemoteWatched(rw); hooked != 0 || waited != 0 {
		t.Fatalf("FINDING: with no long-poll left, %d queues keep their hooks and %d their waiters (want 0)", hooked, waited)
	}
}

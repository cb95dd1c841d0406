package redrive_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
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

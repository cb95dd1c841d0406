package redrive_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// TestRemoteInflightBoundedWithoutOutcomes: a worker that leases a job
// and dies before reporting (a poison job crashing every worker that
// takes it) leaves its attempt in RemoteWorkers' memory. With no outcome
// ever reported, those attempts must still be forgotten once their
// leases expired, or serve grows without bound.
func TestRemoteInflightBoundedWithoutOutcomes(t *testing.T) {
	ctx := context.Background()
	clock := &fencingClock{t: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)}
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	redrive.SetClock(c, clock.now)
	p := retry.Policy{MaxRetries: 1_000_000, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, Jitter: retry.JitterNone}
	ex := redrive.NewExecutor(redrive.ExecutorOptions{ID: "serve", Policy: &p, Logger: quietLogger(), Now: clock.now, DisableRetryBudget: true})
	const lease = 10 * time.Second
	rw := redrive.NewRemoteWorkers(c, ex, redrive.RemoteOptions{LeaseDuration: lease, Logger: quietLogger()})
	if _, err := c.Enqueue(ctx, "k", nil, redrive.InQueue("q")); err != nil {
		t.Fatal(err)
	}
	const rounds = 50
	for i := range rounds {
		jobs, err := rw.Lease(ctx, redrive.LeaseRequest{RemoteIdentity: redrive.RemoteIdentity{Worker: "py-1@a"},
			Queues: []string{"q"}, Kinds: []string{"k"}, Max: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 1 {
			t.Fatalf("round %d: leased %d jobs, want 1", i, len(jobs))
		}
		// The worker crashes; its lease expires and is rescued.
		clock.add(lease + time.Second)
		now := clock.now()
		expired, err := st.Expired(ctx, now, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range expired {
			o := ex.Fail(j, failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}, "lease expired", now, now)
			o.Worker, o.ExpiredBy = j.Worker, now
			if ok, err := st.Finish(ctx, []store.Outcome{o}); err != nil || !ok[0] {
				t.Fatalf("round %d: rescue: %v %v", i, ok, err)
			}
		}
		clock.add(2 * time.Second) // the retry becomes due
	}
	// Every attempt but the last few expired more than two leases ago.
	if n := redrive.RemoteInflight(rw); n > 4 {
		t.Fatalf("FINDING: %d attempts kept in memory after %d leases that all expired unreported (want at most 4)", n, rounds)
	}
}

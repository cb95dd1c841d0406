package postgres_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// leaseMixed enqueues and leases n jobs on s (worker "w1") and returns
// one outcome for each, as a soak's workers produce them: every 20th a
// retry, every 200th a death, the others plain completions.
func leaseMixed(tb testing.TB, s *postgres.Store, n int, t0 time.Time) []store.Outcome {
	tb.Helper()
	ctx := tb.Context()
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "mixed", Kind: "k", RunAt: t0}
	}
	for len(jobs) > 0 {
		k := min(len(jobs), 1000)
		if _, err := s.Enqueue(ctx, jobs[:k], t0); err != nil {
			tb.Fatalf("Enqueue: %v", err)
		}
		jobs = jobs[k:]
	}
	var outs []store.Outcome
	at := t0.Add(time.Second)
	for len(outs) < n {
		got, err := s.Fetch(ctx, store.FetchParams{Queue: "mixed", Limit: 1000, Now: t0, LeaseUntil: t0.Add(time.Hour), Worker: "w1"})
		if err != nil {
			tb.Fatalf("Fetch: %v", err)
		}
		if len(got) == 0 {
			tb.Fatalf("Fetch leased nothing with %d of %d jobs still due", n-len(outs), n)
		}
		for _, j := range got {
			o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, At: at, Kind: store.Complete,
				Counters: []store.Counter{{Queue: "mixed", Name: store.StatSucceeded, N: 1}}}
			switch k := len(outs); {
			case k%200 == 199:
				o.Kind, o.Class, o.DeadReason, o.Error, o.Counters = store.Bury, failure.Permanent, "poison", "dead", nil
			case k%20 == 19:
				o.Kind, o.Class, o.Error, o.RunAt, o.Counters = store.Retry, failure.Transient, "again", at.Add(time.Hour), nil
			}
			outs = append(outs, o)
		}
	}
	return outs
}

// TestFinishMixedBatchSplits: a batch of mostly plain completions with a
// few retries and deaths writes the completions by the statement of plain
// completions and only the others by the general statement, and no
// statement takes more than the batch bound. (Before, one retry in the
// batch sent every outcome through the general statement, in one
// statement however large, which took tens of seconds under a soak.)
func TestFinishMixedBatchSplits(t *testing.T) {
	s := openFresh(t)
	defer postgres.SetFinishBatch(100)()
	const n = 1000
	outs := leaseMixed(t, s, n, time.Now().UTC().Truncate(time.Second))
	other := 0
	for _, o := range outs {
		if o.Kind != store.Complete {
			other++
		}
	}
	var (
		mu              sync.Mutex
		plain, general  int
		largest, writes int
	)
	postgres.WatchFinish(s, func(complete bool, k int) {
		mu.Lock()
		defer mu.Unlock()
		writes++
		largest = max(largest, k)
		if complete {
			plain += k
		} else {
			general += k
		}
	})
	applied, err := s.Finish(t.Context(), outs)
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("outcome %d (job %d) was not applied", i, outs[i].JobID)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if general != other || plain != n-other {
		t.Errorf("the general statement took %d outcomes and the plain one %d, want %d and %d (only the retries and deaths through the general one)",
			general, plain, other, n-other)
	}
	if largest > 100 {
		t.Errorf("a Finish statement took %d outcomes, want at most the bound 100 (%d statements)", largest, writes)
	}
}

// BenchmarkFinishMixed times Finish of a soak-like batch (95% plain
// completions, 5% retries, 0.5% deaths) of each size, written whole
// (as before: the general statement for all) and split (plain
// completions apart, bounded statements). The two alternate within a
// size, so they share the machine's load. The leasing is not timed.
func BenchmarkFinishMixed(b *testing.B) {
	s := openFresh(b)
	for _, n := range []int{1000, 5000} {
		for _, mode := range []string{"whole", "split", "whole", "split"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, mode), func(b *testing.B) {
				defer postgres.SetFinishWhole(mode == "whole")()
				for b.Loop() {
					b.StopTimer()
					outs := leaseMixed(b, s, n, time.Now().UTC())
					b.StartTimer()
					if _, err := s.Finish(b.Context(), outs); err != nil {
						b.Fatalf("Finish: %v", err)
					}
				}
			})
		}
	}
}

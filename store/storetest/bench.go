package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// Bench runs store-level benchmarks as sub-benchmarks of b. open returns a
// new, empty store for each sub-benchmark (the benchmark closes it).
//
//   - Enqueue1: one Enqueue call of one job per iteration (an API call).
//   - Enqueue100: one Enqueue call of 100 jobs per iteration.
//   - FetchFinish100: one Fetch of 100 due jobs and one Finish completing
//     them per iteration.
//   - BurnDown: the store alone doing what a busy worker asks of it, as
//     the raw-SQL limits measure a bare queue: 1,000 due jobs per
//     iteration, enqueued untimed in batches of 1,000, then fetched 1,000 at
//     a time and completed by 4 concurrent loops until none is left.
//   - AddDead1000: one AddDead call of 1,000 dead jobs per iteration (3
//     queues, 20 causes), into a DLQ growing by as many: dead letters
//     arriving from a broker, or a DLQ filled for a test.
//   - FetchBury100: one Fetch of 100 due jobs and one Finish burying them
//     (7 causes) per iteration: the cost of a death on the hot path.
//   - PriorityLevels: a fetch's cost with the queue's waiting jobs at 1
//     or 201 priority levels (see benchPriorityLevels).
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	const batch = 100
	jobs := make([]store.NewJob, batch)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "bench", Kind: "noop", Payload: raw(fmt.Sprintf(`{"i":%d}`, i)), MaxRetries: -1}
	}

	b.Run("Enqueue1", func(b *testing.B) { benchEnqueue(b, open, jobs[:1]) })
	b.Run("Enqueue100", func(b *testing.B) { benchEnqueue(b, open, jobs) })

	b.Run("BurnDown", func(b *testing.B) {
		s := open(b)
		b.Cleanup(func() { s.Close() })
		ctx := b.Context()
		const per, loops = 1000, 4
		big := make([]store.NewJob, per)
		for i := range big {
			big[i] = store.NewJob{Queue: "bench", Kind: "noop", Payload: raw(`{"n":1}`), MaxRetries: -1}
		}
		enqueueUntimed(b, s, big)
		var wg sync.WaitGroup
		var done atomic.Int64
		for l := range loops {
			worker := fmt.Sprintf("bench-%d", l)
			wg.Go(func() {
				outs := make([]store.Outcome, 0, per)
				for i := 1; ; i++ {
					now := at(time.Duration(i) * time.Millisecond)
					got, err := s.Fetch(ctx, store.FetchParams{Queue: "bench", Limit: per, Now: now, LeaseUntil: now.Add(time.Minute), Worker: worker})
					if err != nil {
						b.Errorf("Fetch: %v", err)
						return
					}
					if len(got) == 0 {
						return
					}
					outs = completions(outs, got, now)
					if _, err := s.Finish(ctx, outs); err != nil {
						b.Errorf("Finish: %v", err)
						return
					}
					done.Add(int64(len(got)))
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		if n := done.Load(); n != int64(b.N*per) {
			b.Fatalf("completed %d jobs, want %d", n, b.N*per)
		}
		b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "jobs/s")
	})

	b.Run("AddDead1000", func(b *testing.B) {
		s := open(b)
		b.Cleanup(func() { s.Close() })
		ctx := b.Context()
		ds := make([]store.DeadJob, 1000)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			for k := range ds {
				c := (i / 3) % 20
				ds[k] = store.DeadJob{Queue: fmt.Sprintf("dlq-%d", i%3), Kind: fmt.Sprintf("kind%d", c%5), Payload: raw(`{"n":1}`),
					MaxRetries: -1, DeadAt: at(time.Duration(i) * time.Millisecond), Attempt: 3, DeadReason: "retries_exhausted",
					LastError: fmt.Sprintf("cause %d (job %d)", c, i), LastErrorClass: failure.Transient, Fingerprint: fmt.Sprintf("fp%d", c)}
				i++
			}
			if _, err := s.AddDead(ctx, ds, at(0)); err != nil {
				b.Fatalf("AddDead: %v", err)
			}
		}
		b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "jobs/s")
	})

	b.Run("FetchBury100", func(b *testing.B) {
		s := open(b)
		b.Cleanup(func() { s.Close() })
		ctx := b.Context()
		enqueueUntimed(b, s, jobs)
		outs := make([]store.Outcome, 0, batch)
		for i := range b.N {
			now := at(time.Duration(i+1) * time.Millisecond)
			got, err := s.Fetch(ctx, store.FetchParams{Queue: "bench", Limit: batch, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "bench"})
			if err != nil || len(got) != batch {
				b.Fatalf("Fetch: %d jobs, %v", len(got), err)
			}
			outs = outs[:0]
			for _, j := range got {
				outs = append(outs, buryOf(j, now, failure.Permanent, "permanent", fmt.Sprintf("fp%d", j.ID%7), fmt.Sprintf("boom %d", j.ID)))
			}
			applied, err := s.Finish(ctx, outs)
			if err != nil || len(applied) != batch {
				b.Fatalf("Finish: %d results, %v", len(applied), err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
	})

	b.Run("PriorityLevels", func(b *testing.B) { benchPriorityLevels(b, open) })

	b.Run("FetchFinish100", func(b *testing.B) {
		s := open(b)
		b.Cleanup(func() { s.Close() })
		ctx := b.Context()
		enqueueUntimed(b, s, jobs)
		outs := make([]store.Outcome, 0, batch)
		for i := range b.N {
			now := at(time.Duration(i+1) * time.Millisecond)
			got, err := s.Fetch(ctx, store.FetchParams{Queue: "bench", Limit: batch, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "bench"})
			if err != nil || len(got) != batch {
				b.Fatalf("Fetch: %d jobs, %v", len(got), err)
			}
			outs = completions(outs, got, now)
			applied, err := s.Finish(ctx, outs)
			if err != nil || len(applied) != batch {
				b.Fatalf("Finish: %d results, %v", len(applied), err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
	})
}

// enqueueUntimed enqueues jobs b.N times with the timer stopped, then
// starts it, reporting allocations.
func enqueueUntimed(b *testing.B, s store.Store, jobs []store.NewJob) {
	b.StopTimer()
	for range b.N {
		if _, err := s.Enqueue(b.Context(), jobs, at(0)); err != nil {
			b.Fatalf("Enqueue: %v", err)
		}
	}
	b.ReportAllocs()
	b.StartTimer()
}

// completions returns outs, emptied, with a successful completion of each
// job in got.
func completions(outs []store.Outcome, got []*store.Job, now time.Time) []store.Outcome {
	outs = outs[:0]
	for _, j := range got {
		o := completeOf(j, now)
		o.Counters = []store.Counter{{Queue: "bench", Name: store.StatSucceeded, N: 1}}
		outs = append(outs, o)
	}
	return outs
}

// benchEnqueue times one Enqueue call of jobs per iteration, on a store of
// its own; above one job it reports jobs/s.
func benchEnqueue(b *testing.B, open func(b *testing.B) store.Store, jobs []store.NewJob) {
	s := open(b)
	b.Cleanup(func() { s.Close() })
	ctx := b.Context()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		got, err := s.Enqueue(ctx, jobs, at(time.Duration(i)*time.Microsecond))
		if err != nil || len(got) != len(jobs) {
			b.Fatalf("Enqueue: %d jobs, %v", len(got), err)
		}
		i++
	}
	if len(jobs) > 1 {
		b.ReportMetric(float64(b.N*len(jobs))/b.Elapsed().Seconds(), "jobs/s")
	}
}

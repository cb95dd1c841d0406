package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// benchPriorityLevels runs the priority-level benchmarks: the cost of a
// fetch when the queue's waiting jobs spread over 1 or all 201 priority
// levels.
//
//   - PriorityLevels/N/Idle: a Fetch that finds nothing due and the
//     NextDue that follows it (an idle worker's poll), with 5 jobs due in
//     an hour at each of N levels.
//   - PriorityLevels/N/Lowest: a Fetch of 10 due jobs at the lowest
//     priority and a Finish completing them, with 5 jobs due in an hour at
//     each of the N-1 levels above it.
func benchPriorityLevels(b *testing.B, open func(b *testing.B) store.Store) {
	for _, levels := range []int{1, 201} {
		future := func(s store.Store) {
			var nj []store.NewJob
			for l := range levels {
				for range 5 {
					nj = append(nj, store.NewJob{Queue: "bench", Kind: "noop", MaxRetries: -1, RunAt: at(time.Hour),
						Priority: store.MaxPriority - l})
				}
			}
			if _, err := s.Enqueue(b.Context(), nj, at(0)); err != nil {
				b.Fatalf("Enqueue: %v", err)
			}
		}
		b.Run(fmt.Sprintf("%d/Idle", levels), func(b *testing.B) {
			s := open(b)
			b.Cleanup(func() { s.Close() })
			future(s)
			ctx := b.Context()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now := at(time.Duration(i+1) * time.Millisecond)
				got, err := s.Fetch(ctx, store.FetchParams{Queue: "bench", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "bench"})
				if err != nil || len(got) != 0 {
					b.Fatalf("Fetch: %d jobs, %v", len(got), err)
				}
				if _, ok, err := s.NextDue(ctx, "bench"); err != nil || !ok {
					b.Fatalf("NextDue: %v, %v", ok, err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("%d/Lowest", levels), func(b *testing.B) {
			s := open(b)
			b.Cleanup(func() { s.Close() })
			ctx := b.Context()
			future(s)
			const batch = 10
			due := make([]store.NewJob, batch)
			for i := range due {
				due[i] = store.NewJob{Queue: "bench", Kind: "noop", MaxRetries: -1, Priority: store.MinPriority}
			}
			enqueueUntimed(b, s, due)
			outs := make([]store.Outcome, 0, batch)
			for i := range b.N {
				now := at(time.Duration(i+1) * time.Millisecond)
				got, err := s.Fetch(ctx, store.FetchParams{Queue: "bench", Limit: batch, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "bench"})
				if err != nil || len(got) != batch {
					b.Fatalf("Fetch: %d jobs, %v", len(got), err)
				}
				outs = completions(outs, got, now)
				if _, err := s.Finish(ctx, outs); err != nil {
					b.Fatalf("Finish: %v", err)
				}
			}
		})
	}
}

package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// BenchmarkOneJobSync times what a job enqueued alone, while a worker
// waits, costs the store before a worker can start it: its enqueue (one
// transaction) and its lease (a Fetch of one job, another), under
// synchronous=full (serve's: an fsync a commit) and normal. The
// difference is the fsyncs' share of a remote worker's lease-to-start
// latency (docs/BENCHMARKS.md).
//
//	go test ./store/sqlite -run '^$' -bench OneJobSync -benchtime 2000x
func BenchmarkOneJobSync(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		b.Run(sync, func(b *testing.B) {
			ctx := context.Background()
			s, err := sqlite.Open(ctx, sqlitetest.Path(b), sqlite.Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var enq, lease time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, t0); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 100, Now: t1, LeaseUntil: t1.Add(time.Minute), Worker: "w"})
				if err != nil || len(got) != 1 {
					b.Fatalf("Fetch: %d jobs, %v", len(got), err)
				}
				t2 := time.Now()
				enq += t1.Sub(t0)
				lease += t2.Sub(t1)
			}
			b.ReportMetric(float64(enq.Microseconds())/float64(b.N), "enqueue-µs/job")
			b.ReportMetric(float64(lease.Microseconds())/float64(b.N), "lease-µs/job")
		})
	}
}

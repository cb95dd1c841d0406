package sqlite_test

import (
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per iteration since start as
// cpu-ns/op: what a shared machine's wall time hides.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkOpen times what opening a store costs: fresh (a new file, the
// migrations applied), existing (a file migrated before, as a CLI command
// or a restarted process opens it), and existing with one enqueue and one
// fetch (what a short-lived store does before it closes).
func BenchmarkOpen(b *testing.B) {
	opts := sqlite.Options{Logger: slog.New(slog.DiscardHandler)}
	b.Run("fresh", func(b *testing.B) {
		dir := b.TempDir()
		b.ReportAllocs()
		i := 0
		start := cpuTime(b)
		for b.Loop() {
			i++
			s, err := sqlite.Open(b.Context(), filepath.Join(dir, "db"+time.Duration(i).String()), opts)
			if err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
		reportCPU(b, start)
	})
	existing := func(b *testing.B, use func(b *testing.B, s *sqlite.Store)) {
		path := filepath.Join(b.TempDir(), "redrive.db")
		s, err := sqlite.Open(b.Context(), path, opts)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
		b.ReportAllocs()
		start := cpuTime(b)
		for b.Loop() {
			s, err := sqlite.Open(b.Context(), path, opts)
			if err != nil {
				b.Fatal(err)
			}
			if use != nil {
				use(b, s)
			}
			s.Close()
		}
		reportCPU(b, start)
	}
	b.Run("existing", func(b *testing.B) { existing(b, nil) })
	b.Run("existing+enqueue+fetch", func(b *testing.B) {
		existing(b, func(b *testing.B, s *sqlite.Store) {
			now := time.Now()
			if _, err := s.Enqueue(b.Context(), []store.NewJob{{Queue: "q", Kind: "k", RunAt: now, MaxRetries: -1}}, now); err != nil {
				b.Fatal(err)
			}
			jobs, err := s.Fetch(b.Context(), store.FetchParams{Queue: "q", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
			if err != nil || len(jobs) != 1 {
				b.Fatalf("Fetch: %d jobs, %v", len(jobs), err)
			}
		})
	})
}

// BenchmarkPoll times the calls an idle worker, the dashboard and the
// breakers repeat: NextDue, Queues and a fetch that finds nothing due, on
// a store with 100 jobs scheduled for later.
func BenchmarkPoll(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "redrive.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	now := time.Now()
	jobs := make([]store.NewJob, 100)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "q", Kind: "k", RunAt: now.Add(time.Hour), MaxRetries: -1}
	}
	if _, err := s.Enqueue(b.Context(), jobs, now); err != nil {
		b.Fatal(err)
	}
	b.Run("NextDue", func(b *testing.B) {
		b.ReportAllocs()
		start := cpuTime(b)
		for b.Loop() {
			if _, ok, err := s.NextDue(b.Context(), "q"); err != nil || !ok {
				b.Fatalf("NextDue: %v %v", ok, err)
			}
		}
		reportCPU(b, start)
	})
	b.Run("Queues", func(b *testing.B) {
		b.ReportAllocs()
		start := cpuTime(b)
		for b.Loop() {
			if qs, err := s.Queues(b.Context()); err != nil || len(qs) != 1 {
				b.Fatalf("Queues: %v %v", qs, err)
			}
		}
		reportCPU(b, start)
	})
	b.Run("FetchNoneDue", func(b *testing.B) {
		b.ReportAllocs()
		start := cpuTime(b)
		for b.Loop() {
			if got, err := s.Fetch(b.Context(), store.FetchParams{Queue: "q", Limit: 10, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}); err != nil || len(got) != 0 {
				b.Fatalf("Fetch: %d jobs, %v", len(got), err)
			}
		}
		reportCPU(b, start)
	})
}

package sqlite

import (
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/storetest"
)

// txShape is the composition of one write transaction, as the writer
// formed it.
type txShape struct{ work, enqueues, rows int }

// TestEnqueueFloodYieldsToWork floods the store with enqueues from many
// goroutines while one worker fetches and finishes the jobs already due,
// and checks, by counting, that the flood does not keep the work out: the
// worker gets every due job, each of its transactions carries at most one
// enqueue request, and a transaction with work never carries an enqueue
// right after one that did. The flood still makes progress (enqueues are
// slowed, not starved).
func TestEnqueueFloodYieldsToWork(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "redrive.db"),
		Options{Synchronous: "normal", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var mu sync.Mutex
	var shapes []txShape
	// Set before any request is sent: each send happens before the
	// writer's receive, and so before its read of the hook.
	s.onBatch = func(work, enqueues, rows int) {
		mu.Lock()
		shapes = append(shapes, txShape{work, enqueues, rows})
		mu.Unlock()
	}

	r := storetest.Flood(t, s)

	mu.Lock()
	defer mu.Unlock()
	var workTx, enqueueTx int
	for i, sh := range shapes {
		if sh.enqueues > 0 {
			enqueueTx++
		}
		if sh.work == 0 {
			continue
		}
		workTx++
		if sh.enqueues > 1 {
			t.Errorf("transaction %d carried work and %d enqueue requests (%d jobs), want at most 1", i, sh.enqueues, sh.rows)
		}
		if i > 0 && shapes[i-1].enqueues > 0 && sh.enqueues > 0 {
			t.Errorf("transactions %d and %d both carried an enqueue, and %d work", i-1, i, sh.work)
		}
	}
	// 20 fetches and 20 finishes: at least 40 work requests, in 20 or more
	// transactions; the flood got transactions of its own.
	if workTx < 2*r.Due/r.Batch/2 {
		t.Errorf("%d transactions carried work, want at least %d", workTx, 2*r.Due/r.Batch/2)
	}
	if enqueueTx == 0 || r.Calls <= int64(r.Producers) {
		t.Errorf("the flood made no progress: %d transactions with an enqueue, %d calls", enqueueTx, r.Calls)
	}
}

// TestCloseWhileBothLanesWrite closes stores while enqueues and work
// requests are under way on both lanes: Close returns every time (the
// writer ends once both lanes are closed, whichever it sees closed
// first), and every call either succeeds or reports the store closed.
func TestCloseWhileBothLanesWrite(t *testing.T) {
	dir := t.TempDir()
	for i := range 50 {
		s, err := Open(t.Context(), migratedPath(t, filepath.Join(dir, fmt.Sprintf("close-%d.db", i))),
			Options{Synchronous: "normal", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var done atomic.Int64 // calls that went through
		errs := make(chan error, 8)
		for g := range 4 {
			wg.Go(func() {
				for ; ; done.Add(1) {
					var err error
					if g%2 == 0 {
						_, err = s.Enqueue(t.Context(), []store.NewJob{{Queue: "q", Kind: "k"}}, time.Now())
					} else {
						_, err = s.Fetch(t.Context(), store.FetchParams{Queue: "q", Limit: 10, Now: time.Now(),
							LeaseUntil: time.Now().Add(time.Minute), Worker: "w"})
					}
					if errors.Is(err, store.ErrClosed) {
						return
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		// Close at a different point each time: after 0, 4, 8, 12 or 16
		// calls went through.
		after := int64(i%5) * 4
		testwait.Until(t, fmt.Sprintf("%d calls to go through", after), 30*time.Second, func() bool { return done.Load() >= after })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("store %d: %v", i, err)
		}
	}
}

// TestCloseIdle closes idle stores: the idle writer waits on both lanes,
// sees them closed in either order, and ends.
func TestCloseIdle(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		s, err := Open(t.Context(), migratedPath(t, filepath.Join(dir, fmt.Sprintf("idle-%d.db", i))),
			Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

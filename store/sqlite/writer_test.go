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

// openAwait opens a store whose writer waits for the next fetch for wait
// after a full fetch, recording each transaction's shape and telling
// awaiting each time the writer begins such a wait. The hooks are set
// before any request is sent.
func openAwait(t *testing.T, wait time.Duration) (s *Store, shapes func() []txShape, awaiting chan int) {
	t.Helper()
	s, err := Open(t.Context(), migratedPath(t, filepath.Join(t.TempDir(), "redrive.db")),
		Options{Synchronous: "normal", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.nextFetchWait.Store(int64(wait))
	var mu sync.Mutex
	var got []txShape
	s.onBatch = func(work, enqueues, rows int) {
		mu.Lock()
		got = append(got, txShape{work, enqueues, rows})
		mu.Unlock()
	}
	awaiting = make(chan int, 16)
	s.onAwaitFetch = func(held int) { awaiting <- held }
	shapes = func() []txShape {
		mu.Lock()
		defer mu.Unlock()
		return append([]txShape(nil), got...)
	}
	return s, shapes, awaiting
}

func awaitFetchParams(limit int) store.FetchParams {
	now := time.Now()
	return store.FetchParams{Queue: "q", Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}
}

func awaitEnqueue(t *testing.T, s *Store, n int) {
	t.Helper()
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "q", Kind: "k"}
	}
	if _, err := s.Enqueue(t.Context(), jobs, time.Now()); err != nil {
		t.Fatal(err)
	}
}

func completedOutcomes(jobs []*store.Job) []store.Outcome {
	out := make([]store.Outcome, len(jobs))
	for i, j := range jobs {
		out[i] = store.Outcome{Kind: store.Complete, Queue: j.Queue, JobID: j.ID, Lease: j.Lease, Worker: "w", Attempt: j.Attempt, At: time.Now()}
	}
	return out
}

// TestFullFetchAwaitsNextFetch: after a fetch that leased all it asked
// for, the outcomes of its jobs, sent before the next fetch, wait for that
// fetch and share its transaction (one commit, not two). The wait's bound
// is far beyond the test's: only the fetch's arrival can end it.
func TestFullFetchAwaitsNextFetch(t *testing.T) {
	s, shapes, awaiting := openAwait(t, time.Hour)
	ctx := t.Context()
	awaitEnqueue(t, s, 4)
	first, err := s.Fetch(ctx, awaitFetchParams(2))
	if err != nil || len(first) != 2 {
		t.Fatalf("first fetch: %d jobs, %v; want 2", len(first), err)
	}
	before := len(shapes())
	finished := make(chan error, 1)
	go func() {
		applied, err := s.Finish(ctx, completedOutcomes(first))
		if err == nil && (len(applied) != 2 || !applied[0] || !applied[1]) {
			err = fmt.Errorf("applied %v, want both", applied)
		}
		finished <- err
	}()
	if held := testwait.Recv(t, "the writer to wait for the next fetch", time.Minute, awaiting); held != 1 {
		t.Fatalf("the writer waits holding %d requests, want the finish alone", held)
	}
	second, err := s.Fetch(ctx, awaitFetchParams(2))
	if err != nil || len(second) != 2 {
		t.Fatalf("second fetch: %d jobs, %v; want 2", len(second), err)
	}
	if err := testwait.Recv(t, "the finish", time.Minute, finished); err != nil {
		t.Fatal(err)
	}
	if got := shapes()[before:]; len(got) != 1 || got[0].work != 2 {
		t.Fatalf("transactions after the first fetch: %+v, want one with the finish and the next fetch", got)
	}
	if n, err := s.Count(ctx, store.Filter{States: []store.State{store.Completed}}); err != nil || n != 2 {
		t.Fatalf("%d jobs completed (%v), want 2", n, err)
	}
}

// TestPartFetchAwaitsNothing: a fetch that leased fewer jobs than it asked
// for (the queue is drained) is not waited after: the next write runs at
// once, though the wait's bound is an hour.
func TestPartFetchAwaitsNothing(t *testing.T) {
	s, _, awaiting := openAwait(t, time.Hour)
	ctx := t.Context()
	awaitEnqueue(t, s, 1)
	got, err := s.Fetch(ctx, awaitFetchParams(2))
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %d jobs, %v; want 1", len(got), err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Finish(ctx, completedOutcomes(got))
		done <- err
	}()
	if err := testwait.Recv(t, "the finish after a partial fetch", time.Minute, done); err != nil {
		t.Fatal(err)
	}
	select {
	case held := <-awaiting:
		t.Fatalf("the writer waited for a fetch (holding %d requests) after one that leased fewer than it asked for", held)
	default:
	}
}

// TestFetchWaitBacksOff: with no fetch coming, the wait ends at its
// bound and the requests held run; once fetchWaitMisses waits in a row
// ended so, the writer does not wait after the next fetchWaitSkip full
// fetches (a caller that fetches and writes in turn pays one wait in
// fetchWaitSkip+1), and waits again after the one that follows them.
func TestFetchWaitBacksOff(t *testing.T) {
	s, _, awaiting := openAwait(t, time.Millisecond)
	ctx := t.Context()
	awaitEnqueue(t, s, 2*(fetchWaitMisses+fetchWaitSkip+2))
	fetchFinish := func(what string) chan error {
		t.Helper()
		got, err := s.Fetch(ctx, awaitFetchParams(2))
		if err != nil || len(got) != 2 {
			t.Fatalf("%s: fetch: %d jobs, %v; want 2", what, len(got), err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := s.Finish(ctx, completedOutcomes(got))
			done <- err
		}()
		return done
	}
	for i := range fetchWaitMisses {
		done := fetchFinish(fmt.Sprintf("fetch %d", i+1))
		testwait.Recv(t, "the writer to wait for the next fetch", time.Minute, awaiting)
		if err := testwait.Recv(t, "the finish, once the wait ended", time.Minute, done); err != nil {
			t.Fatal(err)
		}
	}
	// From now on a wait would outlast the test: only skipped waits let
	// the finishes through.
	s.nextFetchWait.Store(int64(time.Hour))
	for i := range fetchWaitSkip {
		what := fmt.Sprintf("full fetch %d after the wait", i+1)
		if err := testwait.Recv(t, "the finish of "+what, time.Minute, fetchFinish(what)); err != nil {
			t.Fatal(err)
		}
		select {
		case held := <-awaiting:
			t.Fatalf("%s: the writer waited for a fetch (holding %d requests)", what, held)
		default:
		}
	}
	done := fetchFinish("the fetch after the skipped ones")
	testwait.Recv(t, "the writer to wait again", time.Minute, awaiting)
	if got, err := s.Fetch(ctx, awaitFetchParams(2)); err != nil || len(got) != 2 {
		t.Fatalf("the fetch that ends the wait: %d jobs, %v; want 2", len(got), err)
	}
	if err := testwait.Recv(t, "the finish the fetch joined", time.Minute, done); err != nil {
		t.Fatal(err)
	}
}

// TestCloseWhileAwaitingFetch: Close while the writer waits for a fetch
// ends the wait; the requests it held are written and Close returns.
func TestCloseWhileAwaitingFetch(t *testing.T) {
	s, _, awaiting := openAwait(t, time.Hour)
	ctx := t.Context()
	awaitEnqueue(t, s, 2)
	got, err := s.Fetch(ctx, awaitFetchParams(2))
	if err != nil || len(got) != 2 {
		t.Fatalf("fetch: %d jobs, %v; want 2", len(got), err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Finish(ctx, completedOutcomes(got))
		done <- err
	}()
	testwait.Recv(t, "the writer to wait for the next fetch", time.Minute, awaiting)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if err := testwait.Recv(t, "the finish held at Close", time.Minute, done); err != nil {
		t.Fatalf("the finish held when the store closed: %v, want it written", err)
	}
	if err := testwait.Recv(t, "Close", time.Minute, closed); err != nil {
		t.Fatal(err)
	}
}

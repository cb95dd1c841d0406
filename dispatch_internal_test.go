package redrive

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store/sqlite"
)

// goid returns the id of the calling goroutine (tests only).
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// TestDispatchRunsWaitingJobsOnFinishedGoroutines dispatches more jobs
// than the queue's concurrency: the jobs beyond it wait, each is taken by
// a handler goroutine that finished its job (the first to finish takes
// the oldest), and no more goroutines than the concurrency ever run them.
// Before, every job dispatched without an idle goroutine started a new
// one: jobs short enough ran on a new goroutine (or a long-parked one)
// each, whose stack grew again.
func TestDispatchRunsWaitingJobsOnFinishedGoroutines(t *testing.T) {
	st, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := NewWorker(NewClient(st, ClientOptions{Logger: quietLog()}), WorkerOptions{Queues: map[string]int{"q": 2}, Logger: quietLog()})
	w.hardCtx = context.Background()

	type run struct {
		id      int64
		started chan uint64 // the goroutine that runs the job
		release chan struct{}
	}
	var mu sync.Mutex
	runs := map[int64]*run{}
	w.HandleFunc("k", func(ctx context.Context, j *Job) error {
		mu.Lock()
		r := runs[j.ID]
		mu.Unlock()
		r.started <- goid()
		<-r.release
		return nil
	})
	q := w.queues[0]
	dispatch := func(id int64) *run {
		r := &run{id: id, started: make(chan uint64, 1), release: make(chan struct{})}
		mu.Lock()
		runs[id] = r
		mu.Unlock()
		q.active.Add(1)
		w.active.Add(1)
		q.dispatch(&Job{ID: id, Queue: "q", Kind: "k", Attempt: 1, MaxRetries: -1})
		return r
	}
	started := func(r *run) uint64 {
		t.Helper()
		select {
		case g := <-r.started:
			return g
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d did not start", r.id)
			return 0
		}
	}
	notStarted := func(r *run) {
		t.Helper()
		select {
		case <-r.started:
			t.Fatalf("job %d started beyond the concurrency", r.id)
		case <-time.After(50 * time.Millisecond):
		}
	}

	a, b := dispatch(1), dispatch(2)
	ga, gb := started(a), started(b)
	c, d := dispatch(3), dispatch(4)
	notStarted(c)
	notStarted(d)
	close(b.release)
	if g := started(c); g != gb {
		t.Errorf("job 3 ran on goroutine %d, want %d (job 2's, which finished first)", g, gb)
	}
	notStarted(d)
	close(a.release)
	if g := started(d); g != ga {
		t.Errorf("job 4 ran on goroutine %d, want %d (job 1's)", g, ga)
	}
	close(c.release)
	close(d.release)
	w.active.Wait()
	// Each slot is freed (release) after its job's end: freeC tells of
	// each, after the count went down.
	for q.active.Load() != 0 {
		select {
		case <-q.freeC:
		case <-time.After(loopLiveness):
			t.Fatalf("%d slots still taken", q.active.Load())
		}
	}
	q.hmu.Lock()
	handlers := q.handlers
	q.hmu.Unlock()
	if handlers != 2 {
		t.Errorf("%d handler goroutines, want 2", handlers)
	}
	q.stopHandlers()
}

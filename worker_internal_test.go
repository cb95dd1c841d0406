package redrive

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store/sqlite"
)

// recordingObserver keeps the attempts reported, and whether any came
// after the worker's Run returned.
type recordingObserver struct {
	mu       sync.Mutex
	returned bool
	late     []AttemptInfo
}

func (r *recordingObserver) ObserveAttempt(a AttemptInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.returned {
		r.late = append(r.late, a)
	}
}

// TestNoReportAfterRunReturns runs a handler that ignores cancellation at
// shutdown: Run gives up on it (after ShutdownTimeout and the 5 s grace
// Run allows canceled handlers, which real time passing is part of) and
// returns; when the handler then returns, its attempt is not reported to
// the Observer.
func TestNoReportAfterRunReturns(t *testing.T) {
	st, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	obs := &recordingObserver{}
	c := NewClient(st, ClientOptions{Logger: quietLog()})
	w := NewWorker(c, WorkerOptions{Queues: map[string]int{"q": 1}, Logger: quietLog(), Observer: obs,
		ShutdownTimeout: time.Millisecond})
	started, unblock := make(chan struct{}), make(chan struct{})
	w.HandleFunc("stubborn", func(ctx context.Context, j *Job) error {
		close(started)
		<-unblock // ignores ctx
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	if _, err := c.Enqueue(context.Background(), "stubborn", nil, InQueue("q")); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	obs.returned = true
	obs.mu.Unlock()
	close(unblock)
	w.active.Wait() // the abandoned attempt has ended, its report made or not
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.late) > 0 {
		t.Fatalf("reported after Run returned: %+v", obs.late)
	}
}

package redrive

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// armedFetch is a store whose next fetch that says a due job waits on a
// slot (FetchParams.SlotWait), once armed, calls during() before it
// returns.
type armedFetch struct {
	store.Store
	mu     sync.Mutex
	during func()
}

func (a *armedFetch) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	jobs, err := a.Store.Fetch(ctx, p)
	if err == nil && p.SlotWait != nil && *p.SlotWait {
		a.mu.Lock()
		f := a.during
		a.during = nil
		a.mu.Unlock()
		if f != nil {
			f()
		}
	}
	return jobs, err
}

// TestSlotFreedDuringFetch: a job's outcome recorded while a fetch runs
// that finds the job's group full (the fetch counted the slot before the
// outcome freed it) is not lost: the loop looks again at once. The hooks
// make the interleaving: the fetch that says B waits on a slot lets A
// finish, and returns only once the completer has recorded A's outcome
// and woken the queues waiting on slots, which it did before the fetch
// set its slotWait (so, before, it woke none). The recheck is an hour,
// so only a wake or a look again starts B (before, it waited for the
// recheck: up to 160 ms); the 20 s bound is only for liveness.
func TestSlotFreedDuringFetch(t *testing.T) {
	sq, err := sqlite.Open(t.Context(), sqlitetest.Path(t), sqlite.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	st := &armedFetch{Store: sq}
	c := NewClient(st, ClientOptions{Logger: quietLog()})
	if err := c.SetLimits([]ConcurrencyLimit{{Name: "one", Kind: "call", Max: 1}}); err != nil {
		t.Fatal(err)
	}
	w := NewWorker(c, WorkerOptions{Queues: map[string]int{"q": 2}, Logger: quietLog(), PollInterval: time.Hour})
	w.recheck, w.maxRecheck = time.Hour, time.Hour
	outcomes := make(chan struct{}, 10)
	w.afterOutcomes = func() { outcomes <- struct{}{} }
	startedA, releaseA, doneB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	w.HandleFunc("call", func(ctx context.Context, j *Job) error {
		if string(j.Payload) == `"a"` {
			close(startedA)
			<-releaseA
			return nil
		}
		close(doneB)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	run := make(chan error, 1)
	go func() { run <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-run; err != nil {
			t.Error(err)
		}
	}()
	if _, err := c.Enqueue(t.Context(), "call", "a", InQueue("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-startedA:
	case <-time.After(20 * time.Second):
		t.Fatal("A did not start")
	}
	st.mu.Lock()
	st.during = func() {
		close(releaseA)
		select {
		case <-outcomes: // A's outcome recorded, the queues waiting on slots woken
		case <-time.After(20 * time.Second):
			t.Error("A's outcome was not recorded")
		}
	}
	st.mu.Unlock()
	if _, err := c.Enqueue(t.Context(), "call", "b", InQueue("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-doneB:
	case <-time.After(20 * time.Second):
		t.Fatal("B did not start once A's slot was free: the completer's wake was lost")
	}
}

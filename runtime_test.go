package redrive_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// waitFinal polls the job until it is completed, dead or canceled (or
// fails the test after a generous liveness bound), and returns it.
func (e *env) waitFinal(id int64) *redrive.Job {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		switch j.State {
		case redrive.Completed, redrive.Dead, redrive.Canceled:
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %d stuck in %s (attempt %d), want a final state", id, j.State, j.Attempt)
		}
		e.waitEngine()
	}
}

// TestCancelWinsOverSnoozeAndOpenBreaker checks that a handler canceled
// while it runs ends its job canceled even when it answers with a snooze
// or meets an open breaker: either would put the job back, and its next
// run would complete it.
func TestCancelWinsOverSnoozeAndOpenBreaker(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  func() error
	}{
		{"snooze", func() error { return redrive.Snooze(time.Millisecond) }},
		{"open breaker", func() error { return &breaker.OpenError{Name: "dep", ReadyAt: time.Now()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, redrive.WorkerOptions{LeaseDuration: time.Minute})
			var runs atomic.Int32
			started := make(chan struct{})
			e.worker.HandleFunc("cancelme", func(ctx context.Context, j *redrive.Job) error {
				if runs.Add(1) > 1 {
					return nil // a second run completes at once
				}
				close(started)
				<-ctx.Done()
				return tc.err()
			})
			e.start()
			job, err := e.client.Enqueue(context.Background(), "cancelme", nil)
			if err != nil {
				t.Fatal(err)
			}
			<-started
			if _, err := e.client.Cancel(context.Background(), job.ID); err != nil {
				t.Fatal(err)
			}
			if j := e.waitFinal(job.ID); j.State != redrive.Canceled {
				t.Fatalf("job ended %s after %d runs, want canceled", j.State, runs.Load())
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("handler ran %d times, want 1", n)
			}
		})
	}
}

// TestHandlerGoexitFailsItsAttempt checks that a handler that calls
// runtime.Goexit (as t.FailNow does) fails its attempt as a panic would:
// the job is retried, not left running for ever, and its slot is freed
// (with concurrency 1, the next job runs).
func TestHandlerGoexitFailsItsAttempt(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{LeaseDuration: time.Minute, Queues: map[string]int{redrive.DefaultQueue: 1}})
	var runs atomic.Int32
	e.worker.HandleFunc("goexit", func(ctx context.Context, j *redrive.Job) error {
		if runs.Add(1) == 1 {
			runtime.Goexit()
		}
		return nil
	})
	e.worker.HandleFunc("next", func(ctx context.Context, j *redrive.Job) error { return nil })
	e.start()
	job, err := e.client.Enqueue(context.Background(), "goexit", nil)
	if err != nil {
		t.Fatal(err)
	}
	next, err := e.client.Enqueue(context.Background(), "next", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(next.ID, redrive.Completed)
	j := e.waitState(job.ID, redrive.Completed)
	if j.Attempt != 2 {
		t.Fatalf("job completed at attempt %d, want 2", j.Attempt)
	}
	found := false
	for _, ev := range j.History {
		if strings.Contains(ev.Error, "runtime.Goexit") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no history event names runtime.Goexit: %+v", j.History)
	}
}

// TestWorkerRunsOnce checks that a second Run, after the first returned,
// says that a Worker runs once rather than that it is still running.
func TestWorkerRunsOnce(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.worker.Run(ctx); err != nil {
		t.Fatalf("first Run: %v", err)
	}
	err := e.worker.Run(context.Background())
	if !errors.Is(err, redrive.ErrWorkerRan) || !strings.Contains(err.Error(), "runs once") {
		t.Fatalf("second Run: %v, want ErrWorkerRan saying a Worker runs once", err)
	}
}

// TestLookaheadMustBeWellBelowLease checks that Run refuses a lookahead
// longer than a third of the lease: a job leased that far ahead of its
// due time would wait under a lease about to expire.
func TestLookaheadMustBeWellBelowLease(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{Lookahead: 2 * time.Second, LeaseDuration: 600 * time.Millisecond})
	// Bounded, so that a Run that accepts the options returns (nil).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := e.worker.Run(ctx)
	if !errors.Is(err, redrive.ErrInvalid) || !strings.Contains(err.Error(), "Lookahead") {
		t.Fatalf("Run: %v, want ErrInvalid naming Lookahead", err)
	}
}

// TestCancelDuringLookaheadWait cancels a job the worker leased ahead of
// its due time, while it waits for it: the job counts as running, so the
// cancellation reaches it and it ends canceled without its handler
// running. Before, it was not registered while it waited: its handler ran
// at its due time, and only a later heartbeat canceled it.
func TestCancelDuringLookaheadWait(t *testing.T) {
	// Heartbeats every 10 s: the cancellation is learnt of by a wake-up.
	e := newEnv(t, redrive.WorkerOptions{LeaseDuration: 30 * time.Second, Lookahead: 5 * time.Second})
	var ran atomic.Bool
	e.worker.HandleFunc("later", func(ctx context.Context, j *redrive.Job) error {
		ran.Store(true)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "later", nil, redrive.After(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, redrive.Running) // leased, waiting for its due time
	// The first request marks the job; each asks the worker to look at
	// once, and one of them comes after the job is registered.
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := e.client.Cancel(context.Background(), job.ID)
		if errors.Is(err, redrive.ErrConflict) {
			break // canceled
		}
		if err != nil {
			t.Fatal(err)
		}
		if j.State == redrive.Canceled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s", job.ID, j.State)
		}
		e.waitEngine()
	}
	if j := e.waitFinal(job.ID); j.State != redrive.Canceled {
		t.Fatalf("job ended %s, want canceled", j.State)
	}
	if ran.Load() {
		t.Fatal("the handler of a job canceled before its due time ran")
	}
}

// TestSecondClientWakesAndPausesAtOnce checks that an enqueue and a pause
// made through another Client of the worker's store in the same process
// reach the worker at once, as through its own Client: the poll interval
// is a minute, longer than the test waits.
func TestSecondClientWakesAndPausesAtOnce(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{PollInterval: time.Minute,
		Queues: map[string]int{redrive.DefaultQueue: 2, "other": 1}})
	other := redrive.NewClient(e.store, redrive.ClientOptions{Logger: quietLogger()})
	var pausedRan atomic.Bool
	e.worker.HandleFunc("noop", func(ctx context.Context, j *redrive.Job) error { return nil })
	e.worker.HandleFunc("paused", func(ctx context.Context, j *redrive.Job) error {
		pausedRan.Store(true)
		return nil
	})
	e.start()
	ctx := context.Background()
	// An enqueue through the other Client wakes the worker.
	job, err := other.Enqueue(ctx, "noop", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, redrive.Completed)
	// A pause through the other Client applies before PauseQueue returns:
	// a job enqueued after it (waking the worker) is not fetched, while a
	// job of another queue, enqueued after it, runs.
	if _, err := other.PauseQueue(ctx, redrive.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	held, err := e.client.Enqueue(ctx, "paused", nil)
	if err != nil {
		t.Fatal(err)
	}
	next, err := e.client.Enqueue(ctx, "noop", nil, redrive.InQueue("other"))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(next.ID, redrive.Completed)
	if j, err := e.client.Get(ctx, held.ID); err != nil || j.State != redrive.Pending || pausedRan.Load() {
		t.Fatalf("job of the paused queue: %v %+v (ran: %v), want pending", err, j, pausedRan.Load())
	}
	// And a resume through it applies at once too.
	if _, err := other.ResumeQueue(ctx, redrive.DefaultQueue); err != nil {
		t.Fatal(err)
	}
	e.waitState(held.ID, redrive.Completed)
}

// commitThenFailStore is a store whose Fetch, once it has leased jobs,
// waits for the test and then fails if its context ended meanwhile: as a
// PostgreSQL fetch whose commit succeeded while its call returned the
// context's error.
type commitThenFailStore struct {
	store.Store
	leased, release chan struct{}
	once            sync.Once
}

func (s *commitThenFailStore) Fetch(ctx context.Context, p store.FetchParams) ([]*store.Job, error) {
	jobs, err := s.Store.Fetch(ctx, p)
	if err != nil || len(jobs) == 0 {
		return jobs, err
	}
	s.once.Do(func() {
		close(s.leased)
		<-s.release
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return jobs, nil
}

// TestFetchAtShutdownLosesNoJob ends the worker's context while a fetch
// that leased a job is under way: the job must not stay leased to a
// worker that stopped (it would be rescued as a failed attempt once its
// lease expired), but run or go back to pending.
func TestFetchAtShutdownLosesNoJob(t *testing.T) {
	st := &commitThenFailStore{Store: openStore(t), leased: make(chan struct{}), release: make(chan struct{})}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: quietLogger(), LeaseDuration: time.Minute})
	w.HandleFunc("noop", func(ctx context.Context, j *redrive.Job) error { return nil })
	job, err := c.Enqueue(context.Background(), "noop", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-st.leased
	cancel()
	close(st.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j, err := c.Get(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State == redrive.Running {
		t.Fatalf("job %d left running (leased until %v) after Run returned", j.ID, j.LeaseUntil)
	}
}

// TestShutdownReleasesJobInLookaheadWait stops the worker while a job it
// leased ahead of its due time waits: at the shutdown timeout the job is
// released without its handler running, before Run returns, and without
// using an attempt.
func TestShutdownReleasesJobInLookaheadWait(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{LeaseDuration: 30 * time.Second, Lookahead: 5 * time.Second,
		ShutdownTimeout: time.Millisecond})
	var ran atomic.Bool
	e.worker.HandleFunc("later", func(ctx context.Context, j *redrive.Job) error {
		ran.Store(true)
		return context.Cause(ctx)
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "later", nil, redrive.After(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, redrive.Running) // leased, waiting for its due time
	e.stop()
	j, err := e.client.Get(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State == redrive.Running || j.Attempt != 0 || ran.Load() {
		t.Fatalf("job %s at attempt %d (handler ran: %v), want released before its handler ran", j.State, j.Attempt, ran.Load())
	}
}

package redrive_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// stallingStore is a store whose heartbeats fail while stalled is set, as
// when a worker cannot reach its database for a while.
type stallingStore struct {
	store.Store
	stalled atomic.Bool
}

func (s *stallingStore) Heartbeat(ctx context.Context, worker string, leases []store.Lease, until time.Time) (store.HeartbeatResult, error) {
	if s.stalled.Load() {
		return store.HeartbeatResult{}, errors.New("heartbeats stalled (test)")
	}
	return s.Store.Heartbeat(ctx, worker, leases, until)
}

// within waits for c, failing the test after a generous liveness bound
// (not a timing assertion).
func within[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// lateClock is the clock of the other process of the lease tests: past
// the end of any lease the test's worker holds (a few minutes at most),
// as a process sees it once real time brought that end, without the
// wait.
func lateClock() time.Time { return time.Now().Add(time.Hour) }

// rescueByClockAhead reads, as the other process does by lateClock, the
// expired lease of the job id.
func rescueByClockAhead(t *testing.T, st store.Store, id int64) *store.Job {
	t.Helper()
	jobs, err := st.Expired(t.Context(), lateClock(), 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("job %d has no expired lease by the clock of the other process", id)
	return nil
}

// TestLeaseLostStopsHandler: a worker whose heartbeats stalled loses a
// job's lease to a rescue by another process, then leases the job again
// (attempt 2) while attempt 1 still runs. The next heartbeat reports
// lease 1 lost and cancels attempt 1 (cause ErrLeaseLost); attempt 1's
// return does not unregister attempt 2, which stays heartbeated and
// cancelable.
func TestLeaseLostStopsHandler(t *testing.T) {
	ctx := context.Background()
	st := &stallingStore{Store: openStore(t)}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	p := fastPolicy(3)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 4}, Policy: &p, Logger: quietLogger(),
		LeaseDuration: 300 * time.Millisecond, RescueInterval: time.Hour, PollInterval: 20 * time.Millisecond})
	type run struct {
		ctx      context.Context
		returned chan struct{}
	}
	runs := make(chan run, 4)
	free1 := make(chan struct{})
	w.HandleFunc("long", func(ctx context.Context, j *redrive.Job) error {
		r := run{ctx: ctx, returned: make(chan struct{})}
		defer close(r.returned)
		runs <- r
		if j.Attempt == 1 {
			<-free1 // attempt 1 runs on, whatever its context says, until the test lets it return
			return nil
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e := &env{t: t, store: st, client: c, worker: w}
	e.start()
	job, err := c.Enqueue(ctx, "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	r1 := within(t, runs, "attempt 1 to start")

	// Heartbeats stall; another process, by a clock past the lease's end,
	// rescues it.
	st.stalled.Store(true)
	expired := rescueByClockAhead(t, st, job.ID)
	now := time.Now()
	applied, err := st.Finish(ctx, []store.Outcome{{JobID: expired.ID, Queue: expired.Queue, Attempt: expired.Attempt, Lease: expired.Lease,
		Worker: expired.Worker, Kind: store.Retry, At: now, RunAt: now, ExpiredBy: lateClock(), Class: failure.Transient, Error: "lease expired",
		Event: &store.Event{Kind: store.EventRetry, Attempt: expired.Attempt, At: now, Reason: "lease_expired"}}})
	if err != nil || !applied[0] {
		t.Fatalf("rescue by another process: %v, %v", applied, err)
	}
	st.stalled.Store(false)

	// The same worker leases the job again while attempt 1 runs.
	r2 := within(t, runs, "attempt 2 to start")
	within(t, r1.ctx.Done(), "attempt 1's handler to be canceled for its lost lease")
	if cause := context.Cause(r1.ctx); !errors.Is(cause, redrive.ErrLeaseLost) {
		t.Errorf("attempt 1 canceled with cause %v, want ErrLeaseLost", cause)
	}
	if r2.ctx.Err() != nil {
		t.Fatalf("attempt 2 canceled (%v) with attempt 1", context.Cause(r2.ctx))
	}
	close(free1)
	within(t, r1.returned, "attempt 1 to return")

	// Attempt 2 is still this worker's: a cancel reaches it.
	if c, err := c.Cancel(ctx, job.ID); err != nil || !c.CancelRequested {
		t.Fatalf("Cancel: %+v, %v", c, err)
	}
	within(t, r2.ctx.Done(), "attempt 2's handler to be canceled by the user's cancel")
	if cause := context.Cause(r2.ctx); !errors.Is(cause, redrive.ErrJobCanceled) {
		t.Errorf("attempt 2 canceled with cause %v, want ErrJobCanceled", cause)
	}
	j := e.waitState(job.ID, redrive.Canceled)
	if j.Attempt != 2 {
		t.Errorf("job canceled at attempt %d, want 2", j.Attempt)
	}
}

// attemptLog is an Observer that passes each report on a channel.
type attemptLog chan redrive.AttemptInfo

func (a attemptLog) ObserveAttempt(info redrive.AttemptInfo) { a <- info }

// TestLeaseLostSuccessNotCompleted: a handler that ignores the
// cancellation of its lost lease and returns nil afterwards did not
// complete the job (its outcome is stale, discarded by the store, and the
// job runs again elsewhere): the Observer must not be told the attempt
// completed, or metrics count a success the store never recorded.
func TestLeaseLostSuccessNotCompleted(t *testing.T) {
	ctx := context.Background()
	st := &stallingStore{Store: openStore(t)}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	p := fastPolicy(3)
	obs := make(attemptLog, 16)
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{redrive.DefaultQueue: 4}, Policy: &p, Logger: quietLogger(),
		LeaseDuration: 300 * time.Millisecond, RescueInterval: time.Hour, PollInterval: 20 * time.Millisecond, Observer: obs})
	started := make(chan context.Context, 4)
	free1 := make(chan struct{})
	w.HandleFunc("long", func(ctx context.Context, j *redrive.Job) error {
		started <- ctx
		if j.Attempt == 1 {
			<-free1 // ignores its context: runs on after its lease is lost
			return nil
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e := &env{t: t, store: st, client: c, worker: w}
	e.start()
	job, err := c.Enqueue(ctx, "long", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx1 := within(t, started, "attempt 1 to start")
	st.stalled.Store(true)
	expired := rescueByClockAhead(t, st, job.ID)
	now := time.Now()
	applied, err := st.Finish(ctx, []store.Outcome{{JobID: expired.ID, Queue: expired.Queue, Attempt: expired.Attempt, Lease: expired.Lease,
		Worker: expired.Worker, Kind: store.Retry, At: now, RunAt: now, ExpiredBy: lateClock(), Class: failure.Transient, Error: "lease expired",
		Event: &store.Event{Kind: store.EventRetry, Attempt: expired.Attempt, At: now, Reason: "lease_expired"}}})
	if err != nil || !applied[0] {
		t.Fatalf("rescue by another process: %v, %v", applied, err)
	}
	st.stalled.Store(false)
	within(t, started, "attempt 2 to start")
	within(t, ctx1.Done(), "attempt 1's handler to be canceled for its lost lease")
	close(free1)
	info := within(t, obs, "attempt 1's report")
	if info.Attempt != 1 {
		t.Fatalf("first report of attempt %d, want 1", info.Attempt)
	}
	if info.Outcome == redrive.OutcomeCompleted {
		t.Errorf("attempt 1, whose lease was lost, reported %s", info.Outcome)
	}
	if _, err := c.Cancel(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, redrive.Canceled)
}

package redrivetest

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// DefaultMaxAttempts bounds how many attempts WorkUntilDone runs before it
// fails the test: a handler that snoozes for ever would otherwise never
// let it return.
const DefaultMaxAttempts = 1000

// Options configure a Runner. The zero Options are a runner with
// redrive's defaults, a Clock at DefaultStart and jitter seeded with 0.
type Options struct {
	// Executor configures the engine that decides the outcomes, as
	// WorkerOptions configure a Worker's (policies, classifiers,
	// breakers, retry budget). Its Now, Rand and RetryBudget.Now are set
	// to the runner's clock and seeded source when nil; its Breakers,
	// when nil, to a registry of breaker.DefaultConfig reading that clock
	// (a registry of your own should set Config.Now to Clock.Now too, or
	// a deferred job waits on the real clock); its Logger, when nil,
	// discards the engine's logs. KeepProgress is always set, so that a
	// completed job keeps its progress as on a Worker. The retry budget stays on, as on a
	// Worker, and counts every attempt of the runner at the clock's
	// time: beyond 100 failed attempts without the clock moving 10s it
	// pushes retries out, as it would a Worker's; set
	// DisableRetryBudget to see the policy's delays alone.
	Executor redrive.ExecutorOptions
	// Client builds the jobs, with its validators and payload limit (see
	// Client.SetValidator); nil means a client with no store and none.
	Client *redrive.Client
	// Clock is the runner's clock; nil means NewClock(time.Time{}).
	Clock *Clock
	// Seed seeds the jitter: one seed gives the same delays on every run.
	Seed uint64
}

// Runner runs handlers inline on jobs, without a store: see the package
// documentation. Register handlers with HandleFunc, or with redrive.Handle
// as on a Worker. A Runner runs one attempt at a time; it is meant for
// one test.
type Runner struct {
	exec   *redrive.Executor
	clock  *Clock
	client *redrive.Client
	nextID int64
	seen   *observer
}

// observer keeps the report of the attempt the runner ran last, and
// passes it on to the user's Observer, if any.
type observer struct {
	mu   sync.Mutex
	last *redrive.AttemptInfo
	next redrive.Observer
}

func (o *observer) ObserveAttempt(info redrive.AttemptInfo) {
	o.mu.Lock()
	o.last = &info
	o.mu.Unlock()
	if o.next != nil {
		o.next.ObserveAttempt(info)
	}
}

// take returns the last report and forgets it.
func (o *observer) take() *redrive.AttemptInfo {
	o.mu.Lock()
	defer o.mu.Unlock()
	info := o.last
	o.last = nil
	return info
}

// NewRunner returns a Runner configured by opts.
func NewRunner(opts Options) *Runner {
	if opts.Clock == nil {
		opts.Clock = NewClock(time.Time{})
	}
	if opts.Client == nil {
		opts.Client = redrive.NewClient(nil, redrive.ClientOptions{})
	}
	eo := opts.Executor
	if eo.Now == nil {
		eo.Now = opts.Clock.Now
	}
	if eo.RetryBudget.Now == nil {
		eo.RetryBudget.Now = eo.Now
	}
	if eo.Breakers == nil {
		cfg := breaker.DefaultConfig()
		cfg.Now = eo.Now
		eo.Breakers = breaker.NewRegistry(cfg)
	}
	if eo.Rand == nil {
		eo.Rand = NewSource(opts.Seed)
	}
	if eo.Logger == nil {
		eo.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if eo.ID == "" {
		eo.ID = "redrivetest"
	}
	eo.KeepProgress = true // a completed job keeps its progress, as a Worker's does
	seen := &observer{next: eo.Observer}
	eo.Observer = seen
	return &Runner{exec: redrive.NewExecutor(eo), clock: opts.Clock, client: opts.Client, seen: seen}
}

// HandleFunc registers the handler of a job kind (see
// redrive.Executor.HandleFunc): a Runner is a redrive.Registrar.
func (r *Runner) HandleFunc(kind string, fn redrive.Handler, opts ...redrive.HandlerOption) {
	r.exec.HandleFunc(kind, fn, opts...)
}

// Executor returns the executor that decides the runner's outcomes (its
// breakers, the policy that applies to a job).
func (r *Runner) Executor() *redrive.Executor { return r.exec }

// Clock returns the runner's clock.
func (r *Runner) Clock() *Clock { return r.clock }

// Job builds a job of kind with payload and opts as Client.Enqueue would
// store it at the clock's time, pending (or scheduled, with At or After),
// with an id of its own. A request Enqueue would reject fails t.
func (r *Runner) Job(t testing.TB, kind string, payload any, opts ...redrive.Option) *redrive.Job {
	t.Helper()
	req := redrive.Request{Kind: kind, Payload: payload}
	for _, o := range opts {
		o(&req)
	}
	now := r.clock.Now()
	nj, err := r.client.Prepare(req, now)
	if err != nil {
		t.Fatalf("redrivetest: job of kind %q: %v", kind, err)
		return nil
	}
	r.nextID++
	j := &redrive.Job{ID: r.nextID, Queue: nj.Queue, Kind: nj.Kind, Payload: nj.Payload, State: redrive.Pending,
		MaxRetries: nj.MaxRetries, Policy: nj.Policy, IdempotencyKey: nj.IdempotencyKey, Dependency: nj.Dependency,
		Reprocessable: !nj.NotReprocessable, CreatedAt: now, RunAt: now, History: []redrive.Event{}}
	if !nj.RunAt.IsZero() {
		j.RunAt = nj.RunAt
	}
	j.State = dueState(j.RunAt, now)
	return j
}

// Result is one attempt a Runner ran.
type Result struct {
	// Attempt is the attempt's number, 1 for the first.
	Attempt int
	// At is when the attempt started, on the runner's clock.
	At time.Time
	// Err is the handler's error, as it returned it (for errors.Is and
	// errors.As): nil when it succeeded; a panic's or a timeout's error
	// as the engine saw it; for a job an open breaker deferred before
	// its handler ran, the breaker's refusal.
	Err error
	// Outcome is the engine's decision about the attempt.
	Outcome redrive.Outcome
	// Job is a copy of the job after the outcome was applied: its state,
	// RunAt, last error and class, dead reason and history.
	Job *redrive.Job
}

// State returns the job's state after the attempt: Completed, Scheduled
// (a retry or a snooze), Pending (released), Dead or Canceled.
func (res *Result) State() redrive.State { return res.Job.State }

// Delay returns how long after the attempt the job runs again (a retry
// or a snooze), 0 when it does not.
func (res *Result) Delay() time.Duration {
	switch res.Outcome.Kind {
	case store.Retry, store.Snooze:
		return res.Outcome.RunAt.Sub(res.Outcome.At)
	}
	return 0
}

// Error returns the error message the engine recorded for a failed
// attempt (cut to the executor's MaxErrorLength), "" for any other.
func (res *Result) Error() string { return res.Outcome.Error }

// Work builds a job (see Job) and runs its first attempt.
func (r *Runner) Work(t testing.TB, kind string, payload any, opts ...redrive.Option) *Result {
	t.Helper()
	return r.Attempt(t, r.Job(t, kind, payload, opts...))
}

// WorkUntilDone builds a job and runs its attempts, moving the clock to
// each retry, until it completes, dies or is canceled; it returns every
// attempt. It fails t after DefaultMaxAttempts attempts.
func (r *Runner) WorkUntilDone(t testing.TB, kind string, payload any, opts ...redrive.Option) []*Result {
	t.Helper()
	j := r.Job(t, kind, payload, opts...)
	var all []*Result
	for !done(j.State) {
		if len(all) == DefaultMaxAttempts {
			t.Fatalf("redrivetest: job %d of kind %q still %s after %d attempts", j.ID, j.Kind, j.State, len(all))
			return all
		}
		all = append(all, r.Attempt(t, j))
	}
	return all
}

// Attempt runs the next attempt of j: it moves the clock to j.RunAt if
// that is later, runs the handler of j's kind through the engine, applies
// the outcome to j as a store would (j is updated) and returns it. A job
// that has ended (completed, dead, canceled) fails t.
func (r *Runner) Attempt(t testing.TB, j *redrive.Job) *Result {
	t.Helper()
	if done(j.State) {
		t.Fatalf("redrivetest: job %d of kind %q is %s: it runs no more attempts", j.ID, j.Kind, j.State)
		return nil
	}
	start := r.clock.advanceTo(j.RunAt)
	j.Attempt++
	j.State = redrive.Running
	j.Progress = nil
	o := r.exec.Execute(contextOf(t), j)
	var err error
	if info := r.seen.take(); info != nil {
		err = info.Err
	}
	apply(j, &o)
	c := *j
	c.History = append([]redrive.Event(nil), j.History...)
	return &Result{Attempt: o.Attempt, At: start, Err: err, Outcome: o, Job: &c}
}

// contextOf returns t's context, or the background context for a t
// without one (a zero testing.T, as in examples).
func contextOf(t testing.TB) context.Context {
	if ctx := t.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// done reports whether a job in state s has ended.
func done(s redrive.State) bool {
	return s == redrive.Completed || s == redrive.Dead || s == redrive.Canceled
}

// dueState is the state of a job due at runAt, seen at now.
func dueState(runAt, now time.Time) redrive.State {
	if runAt.After(now) {
		return redrive.Scheduled
	}
	return redrive.Pending
}

// apply records the outcome o of j's attempt on j, as a store does.
func apply(j *redrive.Job, o *redrive.Outcome) {
	at := o.At
	if o.Event != nil {
		j.History = append(j.History, *o.Event)
	}
	j.LeaseUntil, j.Worker = nil, ""
	switch o.Kind {
	case store.Complete:
		j.State, j.FinishedAt, j.LastDuration = redrive.Completed, &at, o.Duration
		j.Progress = o.Progress
		j.FailedBeforeSuccess = j.LastError != ""
	case store.Retry:
		j.State, j.RunAt = dueState(o.RunAt, at), o.RunAt
		j.RetryCount++
		j.LastDelay, j.LastDuration = o.RetryDelay, o.Duration
		j.LastError, j.LastErrorClass, j.LastFailedAt = o.Error, o.Class, &at
	case store.Bury:
		j.State, j.FinishedAt, j.DeadAt, j.LastDuration = redrive.Dead, &at, &at, o.Duration
		j.DeadReason, j.Fingerprint = o.DeadReason, o.Fingerprint
		j.LastError, j.LastErrorClass, j.LastFailedAt = o.Error, o.Class, &at
	case store.Snooze:
		j.State, j.RunAt = dueState(o.RunAt, at), o.RunAt
		j.Attempt--
	case store.Release:
		j.State, j.RunAt = redrive.Pending, at
		j.Attempt--
	case store.Cancel:
		j.State, j.FinishedAt = redrive.Canceled, &at
	}
}

// NewSource returns a jitter source (retry.Source) seeded with seed:
// one seed draws the same numbers on every run. It is safe for
// concurrent use.
func NewSource(seed uint64) retry.Source {
	return &source{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

type source struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (s *source) Float64() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Float64()
}

package redrivetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// fakeTB is a testing.TB that records failures instead of failing the
// test, to check that the helpers fail a test when they should.
type fakeTB struct {
	testing.TB // the real test, for Context and TempDir

	mu     sync.Mutex
	failed bool
	msgs   []string
	fatal  bool
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.msgs = append(f.msgs, fmtf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.mu.Lock()
	f.fatal = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// message returns what the helper reported.
func (f *fakeTB) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

// runFake runs body with a fakeTB on a goroutine of its own, as the
// testing package runs a test, and returns the fakeTB once body has
// returned or stopped with Fatalf.
func runFake(t *testing.T, body func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(f)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the helper under test neither returned nor failed within a minute")
	}
	return f
}

// wantFailure fails t unless f recorded a fatal failure whose message
// holds every part.
func wantFailure(t *testing.T, f *fakeTB, parts ...string) {
	t.Helper()
	if !f.Failed() || !f.fatal {
		t.Fatalf("the helper did not fail the test")
	}
	for _, p := range parts {
		if !strings.Contains(f.message(), p) {
			t.Errorf("failure message %q does not say %q", f.message(), p)
		}
	}
}

type email struct {
	To string `json:"to"`
}

func TestWorkCompletes(t *testing.T) {
	r := NewRunner(Options{})
	var got email
	redrive.Handle(r, "email", func(ctx context.Context, job *redrive.Job, m email) error {
		got = m
		redrive.Record(ctx, "sent", "queued by the relay")
		return nil
	})
	res := r.Work(t, "email", email{To: "a@example.com"})
	if res.State() != redrive.Completed || res.Outcome.Kind != store.Complete || res.Attempt != 1 || res.Err != nil {
		t.Fatalf("state %s outcome %d attempt %d, want completed on attempt 1", res.State(), res.Outcome.Kind, res.Attempt)
	}
	if got.To != "a@example.com" {
		t.Errorf("handler got %+v", got)
	}
	if len(res.Job.History) != 1 || res.Job.History[0].Reason != "sent" {
		t.Errorf("history %+v, want the recorded completion", res.Job.History)
	}
}

// The delay of a retry is the one the retry policy draws from the
// runner's seeded source, and the same on every run.
func TestRetryDelayIsThePolicys(t *testing.T) {
	p := retry.DefaultPolicy()
	for _, seed := range []uint64{0, 1, 42} {
		r := NewRunner(Options{Seed: seed, Executor: redrive.ExecutorOptions{Policy: &p}})
		r.HandleFunc("sync", func(ctx context.Context, job *redrive.Job) error {
			return errors.New("connection reset")
		})
		res := r.Work(t, "sync", nil)
		want := p.Decide(retry.Input{Class: failure.Unknown, Attempt: 1}, NewSource(seed))
		if res.State() != redrive.Scheduled || res.Delay() != want.Delay {
			t.Fatalf("seed %d: state %s delay %v, want scheduled after %v", seed, res.State(), res.Delay(), want.Delay)
		}
		if !res.Job.RunAt.Equal(DefaultStart.Add(want.Delay)) {
			t.Errorf("run_at %v, want %v", res.Job.RunAt, DefaultStart.Add(want.Delay))
		}
		if res.Job.LastErrorClass != failure.Unknown || res.Error() != "connection reset" {
			t.Errorf("class %v error %q", res.Job.LastErrorClass, res.Error())
		}
	}
}

func TestRetryAfterIsObeyed(t *testing.T) {
	r := NewRunner(Options{})
	r.HandleFunc("api", func(ctx context.Context, job *redrive.Job) error {
		return redrive.RateLimited(errors.New("429 too many requests"), 30*time.Second)
	})
	res := r.Work(t, "api", nil)
	// Up to 10% of jitter, at most 1s, is added to what the server asked.
	if res.State() != redrive.Scheduled || res.Delay() < 30*time.Second || res.Delay() > 31*time.Second {
		t.Fatalf("state %s delay %v, want scheduled after 30s to 31s", res.State(), res.Delay())
	}
	if res.Job.LastErrorClass != failure.RateLimited {
		t.Errorf("class %v, want rate_limited", res.Job.LastErrorClass)
	}
}

var errDeclined = errors.New("card declined")

func TestPermanentDies(t *testing.T) {
	r := NewRunner(Options{})
	r.HandleFunc("charge", func(ctx context.Context, job *redrive.Job) error {
		return redrive.Permanent(errDeclined)
	})
	res := r.Work(t, "charge", nil)
	if !errors.Is(res.Err, errDeclined) {
		t.Errorf("Err %v, want the handler's error", res.Err)
	}
	if res.State() != redrive.Dead || res.Job.DeadReason != retry.ReasonPermanent || res.Attempt != 1 {
		t.Fatalf("state %s reason %q attempt %d, want dead (permanent) on attempt 1", res.State(), res.Job.DeadReason, res.Attempt)
	}
	if res.Job.Fingerprint == "" {
		t.Error("a dead job has no fingerprint")
	}
}

func TestUndecodablePayloadDies(t *testing.T) {
	r := NewRunner(Options{})
	redrive.Handle(r, "email", func(ctx context.Context, job *redrive.Job, m email) error { return nil })
	res := r.Work(t, "email", []byte(`[1, 2]`))
	if res.State() != redrive.Dead || res.Job.DeadReason != redrive.ReasonUndecodable {
		t.Fatalf("state %s reason %q, want dead (undecodable)", res.State(), res.Job.DeadReason)
	}
}

// WorkUntilDone steps the clock through every retry: the attempts start
// at the times the retries were scheduled for, and the job dies when its
// retries are exhausted.
func TestWorkUntilDoneStepsThroughRetries(t *testing.T) {
	r := NewRunner(Options{Seed: 7})
	var seen []time.Time
	r.HandleFunc("sync", func(ctx context.Context, job *redrive.Job) error {
		seen = append(seen, r.Clock().Now())
		return redrive.Transient(errors.New("upstream down"))
	})
	all := r.WorkUntilDone(t, "sync", nil, redrive.MaxRetries(2))
	if len(all) != 3 {
		t.Fatalf("%d attempts, want 3", len(all))
	}
	for i, res := range all {
		if res.Attempt != i+1 || !res.At.Equal(seen[i]) {
			t.Errorf("attempt %d: number %d at %v, handler saw %v", i+1, res.Attempt, res.At, seen[i])
		}
		if i > 0 && !res.At.Equal(all[i-1].Job.RunAt) {
			t.Errorf("attempt %d ran at %v, the retry was due at %v", i+1, res.At, all[i-1].Job.RunAt)
		}
	}
	last := all[2]
	if last.State() != redrive.Dead || last.Job.DeadReason != retry.ReasonExhausted || last.Job.RetryCount != 2 {
		t.Fatalf("last: state %s reason %q retries %d, want dead (exhausted) after 2 retries", last.State(), last.Job.DeadReason, last.Job.RetryCount)
	}
	if len(last.Job.History) != 3 {
		t.Errorf("history of %d events, want 3", len(last.Job.History))
	}
}

// A snooze uses no attempt; the next attempt runs at the snooze's end.
func TestSnoozeUsesNoAttempt(t *testing.T) {
	r := NewRunner(Options{})
	calls := 0
	r.HandleFunc("poll", func(ctx context.Context, job *redrive.Job) error {
		calls++
		if calls < 3 {
			return redrive.Snooze(time.Minute)
		}
		return nil
	})
	all := r.WorkUntilDone(t, "poll", nil)
	if len(all) != 3 || all[0].Outcome.Kind != store.Snooze || all[0].Delay() != time.Minute {
		t.Fatalf("%d attempts, first %d after %v; want 3, the first a 1m snooze", len(all), all[0].Outcome.Kind, all[0].Delay())
	}
	if got := all[2]; got.Attempt != 1 || got.State() != redrive.Completed || !got.At.Equal(DefaultStart.Add(2*time.Minute)) {
		t.Fatalf("last: attempt %d state %s at %v, want attempt 1 completed at start+2m", got.Attempt, got.State(), got.At)
	}
}

// A dependency's open breaker defers the job without running it.
func TestOpenBreakerDefers(t *testing.T) {
	r := NewRunner(Options{})
	calls := 0
	r.HandleFunc("pay", func(ctx context.Context, job *redrive.Job) error {
		calls++
		return errors.New("503")
	}, redrive.UsesDependency("payments"))
	br := r.Executor().Breakers().Get("payments")
	for br.ReadyAt().IsZero() {
		if calls > 1000 {
			t.Fatal("the breaker did not open after 1000 failures")
		}
		r.Work(t, "pay", nil)
	}
	before := calls
	res := r.Work(t, "pay", nil)
	if calls != before || res.Outcome.Kind != store.Snooze || !strings.HasPrefix(res.Outcome.Event.Reason, "breaker_open") {
		t.Fatalf("calls %d->%d outcome %d event %+v, want a deferral without a call", before, calls, res.Outcome.Kind, res.Outcome.Event)
	}
}

func TestJobScheduledWithAfter(t *testing.T) {
	r := NewRunner(Options{})
	r.HandleFunc("later", func(ctx context.Context, job *redrive.Job) error { return nil })
	j := r.Job(t, "later", nil, redrive.After(time.Hour))
	if j.State != redrive.Scheduled || !j.RunAt.Equal(DefaultStart.Add(time.Hour)) {
		t.Fatalf("state %s run_at %v, want scheduled in an hour", j.State, j.RunAt)
	}
	res := r.Attempt(t, j)
	if !res.At.Equal(DefaultStart.Add(time.Hour)) || res.State() != redrive.Completed {
		t.Fatalf("ran at %v, state %s; want completed an hour later", res.At, res.State())
	}
}

func TestJobFailsTestOnInvalidRequest(t *testing.T) {
	r := NewRunner(Options{})
	f := runFake(t, func(tb testing.TB) { r.Job(tb, "bad/kind", nil) })
	wantFailure(t, f, "bad/kind", "path separator")
	f = runFake(t, func(tb testing.TB) { r.Job(tb, "k", nil, redrive.MaxRetries(-1)) })
	wantFailure(t, f, "max retries")
}

func TestAttemptFailsTestOnEndedJob(t *testing.T) {
	r := NewRunner(Options{})
	r.HandleFunc("k", func(ctx context.Context, job *redrive.Job) error { return nil })
	j := r.Job(t, "k", nil)
	r.Attempt(t, j)
	f := runFake(t, func(tb testing.TB) { r.Attempt(tb, j) })
	wantFailure(t, f, "completed", "no more attempts")
}

func TestWorkUntilDoneFailsTestOnEndlessSnoozes(t *testing.T) {
	r := NewRunner(Options{})
	r.HandleFunc("k", func(ctx context.Context, job *redrive.Job) error { return redrive.Snooze(time.Second) })
	f := runFake(t, func(tb testing.TB) { r.WorkUntilDone(tb, "k", nil) })
	wantFailure(t, f, "after 1000 attempts")
}

func TestScheduleIsDeterministic(t *testing.T) {
	p := retry.DefaultPolicy()
	p.MaxRetries = 5
	a, b := Schedule(p, 10, 3), Schedule(p, 10, 3)
	if !slices.Equal(a, b) {
		t.Fatalf("two schedules of one seed differ:\n%v\n%v", a, b)
	}
	if len(a) != 6 {
		t.Fatalf("%d attempts, want 6 (5 retries)", len(a))
	}
	steps := p.Schedule()
	for i, s := range a[1:] {
		if s.Delay < steps[i].Min || s.Delay > steps[i].Max {
			t.Errorf("retry %d after %v, outside the policy's [%v, %v]", i+1, s.Delay, steps[i].Min, steps[i].Max)
		}
		if s.At != a[i].At+s.Delay {
			t.Errorf("attempt %d at %v, want %v", s.Attempt, s.At, a[i].At+s.Delay)
		}
	}
	if c := Schedule(p, 10, 4); slices.Equal(a, c) {
		t.Error("two seeds gave one schedule")
	}
}

func TestScheduleWithoutJitter(t *testing.T) {
	p := retry.DefaultPolicy()
	p.Jitter = retry.JitterNone
	got := Schedule(p, 3, 0)
	want := []Planned{{1, 0, 0}, {2, time.Second, time.Second}, {3, 3 * time.Second, 2 * time.Second}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestClock(t *testing.T) {
	c := NewClock(time.Time{})
	if !c.Now().Equal(DefaultStart) {
		t.Fatalf("now %v, want %v", c.Now(), DefaultStart)
	}
	if got := c.Advance(time.Minute); !got.Equal(DefaultStart.Add(time.Minute)) {
		t.Fatalf("advanced to %v", got)
	}
	c.Set(DefaultStart)
	if !c.Now().Equal(DefaultStart) {
		t.Fatalf("set to %v", c.Now())
	}
}

func fmtf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// A user's Observer still hears of the attempts.
func TestObserverPassedOn(t *testing.T) {
	var got []redrive.AttemptOutcome
	r := NewRunner(Options{Executor: redrive.ExecutorOptions{Observer: observerFunc(func(i redrive.AttemptInfo) {
		got = append(got, i.Outcome)
	})}})
	r.HandleFunc("k", func(ctx context.Context, job *redrive.Job) error { return nil })
	r.Work(t, "k", nil)
	if !slices.Equal(got, []redrive.AttemptOutcome{redrive.OutcomeCompleted}) {
		t.Fatalf("observer heard %v", got)
	}
}

type observerFunc func(redrive.AttemptInfo)

func (f observerFunc) ObserveAttempt(i redrive.AttemptInfo) { f(i) }

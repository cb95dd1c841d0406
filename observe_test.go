package redrive_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// attemptRecorder is an Observer that keeps every report.
type attemptRecorder struct {
	mu  sync.Mutex
	got []redrive.AttemptInfo
}

func (r *attemptRecorder) ObserveAttempt(a redrive.AttemptInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, a)
}

// of returns the reports about one job, in the order they were made.
func (r *attemptRecorder) of(id int64) []redrive.AttemptInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []redrive.AttemptInfo
	for _, a := range r.got {
		if a.JobID == id {
			out = append(out, a)
		}
	}
	return out
}

func outcomes(infos []redrive.AttemptInfo) []redrive.AttemptOutcome {
	out := make([]redrive.AttemptOutcome, len(infos))
	for i, a := range infos {
		out[i] = a.Outcome
	}
	return out
}

// near reports whether a and b are within a millisecond (PostgreSQL keeps
// microseconds; the rest is the wall clock against the monotonic one).
func near(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}

// dueOf is when the attempt was due, as the report tells it.
func dueOf(a redrive.AttemptInfo) time.Time { return a.Started.Add(-a.Lateness) }

func TestObserverSuccess(t *testing.T) {
	rec := &attemptRecorder{}
	e := newEnv(t, redrive.WorkerOptions{Observer: rec})
	e.worker.HandleFunc("sleepy", func(ctx context.Context, j *redrive.Job) error {
		time.Sleep(20 * time.Millisecond) // real time: the run time the Observer is told
		return nil
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "sleepy", nil, redrive.InQueue(redrive.DefaultQueue))
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, redrive.Completed)
	// The report is made before the outcome is stored: it is there now.
	got := rec.of(job.ID)
	if len(got) != 1 {
		t.Fatalf("reports %+v, want one", got)
	}
	a := got[0]
	if a.Outcome != redrive.OutcomeCompleted || a.Queue != redrive.DefaultQueue || a.Kind != "sleepy" ||
		a.Attempt != 1 || a.Retry || a.Class != failure.None || a.Err != nil {
		t.Fatalf("report %+v", a)
	}
	if a.Duration < 20*time.Millisecond {
		t.Errorf("duration %v of a handler that sleeps 20ms", a.Duration)
	}
	// A first attempt's lateness is its wait in the queue: since the job
	// was due, at its enqueue.
	if a.Lateness < 0 || !near(dueOf(a), job.RunAt) {
		t.Errorf("lateness %v: started %v, so due %v; the job was due %v", a.Lateness, a.Started, dueOf(a), job.RunAt)
	}
}

func TestObserverRetryAndDead(t *testing.T) {
	rec := &attemptRecorder{}
	e := newEnv(t, redrive.WorkerOptions{Observer: rec})
	e.worker.HandleFunc("doomed", func(ctx context.Context, j *redrive.Job) error {
		return redrive.Transient(errors.New("upstream down"))
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "doomed", nil, redrive.MaxRetries(2))
	if err != nil {
		t.Fatal(err)
	}
	j := e.waitState(job.ID, redrive.Dead)
	got := rec.of(job.ID)
	want := []redrive.AttemptOutcome{redrive.OutcomeRetry, redrive.OutcomeRetry, redrive.OutcomeDead}
	if len(got) != len(want) {
		t.Fatalf("outcomes %v, want %v", outcomes(got), want)
	}
	if len(j.History) != 3 {
		t.Fatalf("history %+v", j.History)
	}
	for i, a := range got {
		if a.Outcome != want[i] || a.Attempt != i+1 || a.Retry != (i > 0) || a.Class != failure.Transient ||
			a.Err == nil || !strings.Contains(a.Err.Error(), "upstream down") || a.Kind != "doomed" {
			t.Errorf("report %d: %+v", i, a)
		}
		if a.Lateness < 0 || a.Duration < 0 {
			t.Errorf("report %d: lateness %v, duration %v", i, a.Lateness, a.Duration)
		}
		if i == 0 {
			continue
		}
		// A retry is due its delay after the previous attempt ended: its
		// lateness is the start's overshoot of that delay.
		prev := got[i-1]
		delay := time.Duration(j.History[i-1].Delay)
		if j.History[i-1].Kind != store.EventRetry || delay <= 0 {
			t.Fatalf("history %d: %+v", i-1, j.History[i-1])
		}
		if due := prev.Started.Add(prev.Duration + delay); !near(dueOf(a), due) {
			t.Errorf("retry %d: started %v with lateness %v, so due %v; the retry was due %v (delay %v)",
				i, a.Started, a.Lateness, dueOf(a), due, delay)
		}
	}
}

func TestObserverSnooze(t *testing.T) {
	rec := &attemptRecorder{}
	e := newEnv(t, redrive.WorkerOptions{Observer: rec})
	var calls atomic.Int32
	e.worker.HandleFunc("later", func(ctx context.Context, j *redrive.Job) error {
		if calls.Add(1) == 1 {
			return redrive.Snooze(30 * time.Millisecond)
		}
		return nil
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "later", nil)
	e.waitState(job.ID, redrive.Completed)
	got := rec.of(job.ID)
	if len(got) != 2 || got[0].Outcome != redrive.OutcomeSnoozed || got[1].Outcome != redrive.OutcomeCompleted {
		t.Fatalf("outcomes %v, want snoozed, completed", outcomes(got))
	}
	for i, a := range got {
		// A snooze uses no attempt: both runs are the first attempt.
		if a.Attempt != 1 || a.Retry || a.Lateness < 0 {
			t.Errorf("report %d: %+v", i, a)
		}
	}
	var sn *redrive.SnoozeError
	if !errors.As(got[0].Err, &sn) {
		t.Errorf("snoozed report's error %v", got[0].Err)
	}
	if due := got[0].Started.Add(got[0].Duration + 30*time.Millisecond); !near(dueOf(got[1]), due) {
		t.Errorf("after the snooze: due %v by the report, %v by the snooze", dueOf(got[1]), due)
	}
}

func TestObserverBreakerDeferral(t *testing.T) {
	rec := &attemptRecorder{}
	clock := newHeldClock(2 * time.Second)
	reg := breaker.NewRegistry(breaker.Config{Failures: 2, Window: time.Minute, BreakDuration: time.Second, HalfOpenProbes: 1,
		Now: clock.Now})
	e := newEnv(t, redrive.WorkerOptions{Observer: rec, Breakers: reg, Queues: map[string]int{redrive.DefaultQueue: 1}})
	var calls atomic.Int32
	e.worker.HandleFunc("call", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		return nil
	}, redrive.UsesDependency("ocr"))
	b := reg.Get("ocr")
	for range 2 {
		tok, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		b.Record(tok, errors.New("down"))
	}
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "call", nil, redrive.MaxRetries(0))
	testwait.Until(t, "the job deferred by the open breaker", 30*time.Second, func() bool {
		got := rec.of(job.ID)
		return len(got) > 0 && got[0].Outcome == redrive.OutcomeDeferred
	})
	clock.release() // the break is over: the next fetch probes
	e.waitState(job.ID, redrive.Completed)
	got := rec.of(job.ID)
	if len(got) < 2 || got[len(got)-1].Outcome != redrive.OutcomeCompleted || calls.Load() != 1 {
		t.Fatalf("outcomes %v after %d handler calls, want deferrals then completed", outcomes(got), calls.Load())
	}
	for i, a := range got[:len(got)-1] {
		// Deferred before the handler ran: no duration, the breaker's
		// refusal as the error.
		if a.Outcome != redrive.OutcomeDeferred || a.Duration != 0 || !errors.Is(a.Err, breaker.ErrOpen) ||
			a.Attempt != 1 || a.Retry || a.Lateness < 0 {
			t.Errorf("report %d: %+v", i, a)
		}
	}
	if last := got[len(got)-1]; last.Attempt != 1 || last.Retry || last.Err != nil {
		t.Errorf("last report %+v", last)
	}
}

func TestObserverHandlerMeetsOpenBreaker(t *testing.T) {
	rec := &attemptRecorder{}
	e := newEnv(t, redrive.WorkerOptions{Observer: rec})
	b := breaker.New("payments", breaker.Config{Failures: 1, Window: time.Minute, BreakDuration: 80 * time.Millisecond})
	var calls atomic.Int32
	e.worker.HandleFunc("pay", func(ctx context.Context, j *redrive.Job) error {
		if calls.Add(1) == 1 {
			// The dependency fails just before the first attempt calls
			// it: that attempt meets the open breaker however late it
			// started (tripping it before Enqueue was racy on a loaded
			// machine: the 80 ms break could be over already).
			tok, _ := b.Allow()
			b.Record(tok, errors.New("down"))
		}
		return b.Do(ctx, func(context.Context) error { return nil })
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "pay", nil, redrive.MaxRetries(0))
	e.waitState(job.ID, redrive.Completed)
	got := rec.of(job.ID)
	if len(got) < 2 || got[0].Outcome != redrive.OutcomeDeferred || !errors.Is(got[0].Err, breaker.ErrOpen) ||
		got[len(got)-1].Outcome != redrive.OutcomeCompleted {
		t.Fatalf("reports %+v", got)
	}
}

func TestObserverReleasedAndCanceled(t *testing.T) {
	rec := &attemptRecorder{}
	e := newEnv(t, redrive.WorkerOptions{Observer: rec, ShutdownTimeout: 50 * time.Millisecond, LeaseDuration: 90 * time.Millisecond})
	started := make(chan int64, 2)
	e.worker.HandleFunc("long", func(ctx context.Context, j *redrive.Job) error {
		started <- j.ID
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e.start()
	ctx := context.Background()
	canceled, _ := e.client.Enqueue(ctx, "long", nil)
	<-started
	if _, err := e.client.Cancel(ctx, canceled.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(canceled.ID, redrive.Canceled)
	released, _ := e.client.Enqueue(ctx, "long", nil)
	<-started
	e.stop()
	for _, tc := range []struct {
		id   int64
		want redrive.AttemptOutcome
		err  error
	}{{canceled.ID, redrive.OutcomeCanceled, redrive.ErrJobCanceled}, {released.ID, redrive.OutcomeReleased, redrive.ErrShutdown}} {
		got := rec.of(tc.id)
		if len(got) != 1 || got[0].Outcome != tc.want || !errors.Is(got[0].Err, tc.err) || got[0].Duration <= 0 {
			t.Errorf("job %d: reports %+v, want one %s", tc.id, got, tc.want)
		}
	}
}

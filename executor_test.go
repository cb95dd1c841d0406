package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
)

// retryDelays returns the delays of the retry events of a job's history,
// in order.
func retryDelays(j *redrive.Job) []time.Duration {
	var ds []time.Duration
	for _, ev := range j.History {
		if ev.Kind == store.EventRetry {
			ds = append(ds, time.Duration(ev.Delay))
		}
	}
	return ds
}

// TestBurstKeepsPolicyDelays: a burst of failures well beyond the old
// floor of 10 retries per 10s, with the default retry budget, still
// retries every job after exactly its policy's delay: the budget must not
// move the delays a user configured under ordinary bursts.
func TestBurstKeepsPolicyDelays(t *testing.T) {
	p := fastPolicy(1)
	p.Initial = 10 * time.Millisecond
	e := newEnv(t, redrive.WorkerOptions{Policy: &p, Queues: map[string]int{redrive.DefaultQueue: 80}})
	jobs := failingOnce(e, 60)
	for _, j := range jobs {
		got := e.waitState(j.ID, redrive.Completed)
		if ds := retryDelays(got); len(ds) != 1 || ds[0] != p.Initial {
			t.Errorf("job %d: retry delays %v, want exactly [%v]", j.ID, ds, p.Initial)
		}
	}
	st, err := e.client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Counters[redrive.DefaultQueue][store.StatBudgetDeferred]; n != 0 {
		t.Errorf("budget_deferred = %d after an ordinary burst, want 0", n)
	}
}

// failingOnce registers kind "once", whose jobs fail their first attempt
// and succeed the next, enqueues n of them at once and starts the worker.
func failingOnce(e *env, n int) []*redrive.Job {
	e.t.Helper()
	var mu sync.Mutex
	failed := map[int64]bool{}
	e.worker.HandleFunc("once", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		defer mu.Unlock()
		if !failed[j.ID] {
			failed[j.ID] = true
			return errors.New("503 from the dependency")
		}
		return nil
	})
	reqs := make([]redrive.Request, n)
	for i := range reqs {
		reqs[i] = redrive.Request{Kind: "once", Payload: i}
	}
	jobs, err := e.client.EnqueueMany(context.Background(), reqs)
	if err != nil {
		e.t.Fatal(err)
	}
	e.start()
	return jobs
}

// TestRetryStormIsSpread: beyond the budget's floor, retries are pushed
// out (never dropped), counted as budget_deferred and logged.
func TestRetryStormIsSpread(t *testing.T) {
	p := fastPolicy(1)
	p.Initial = 10 * time.Millisecond
	logs := &syncBuffer{}
	e := newEnv(t, redrive.WorkerOptions{Policy: &p, Queues: map[string]int{redrive.DefaultQueue: 40},
		RetryBudget: retry.BudgetConfig{MinRetries: 5, Window: time.Second},
		Logger:      slog.New(slog.NewJSONHandler(logs, nil))})
	jobs := failingOnce(e, 30)
	pushed := 0
	for _, j := range jobs {
		got := e.waitState(j.ID, redrive.Completed)
		if ds := retryDelays(got); len(ds) == 1 && ds[0] > p.Initial {
			pushed++
		}
	}
	st, err := e.client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := st.Counters[redrive.DefaultQueue][store.StatBudgetDeferred]
	if pushed == 0 || n != int64(pushed) {
		t.Errorf("%d retries pushed out, budget_deferred = %d; want some, and equal", pushed, n)
	}
	logged := false
	for _, l := range logs.lines() {
		if strings.HasPrefix(fmt.Sprint(l["msg"]), "retry budget exceeded") && l["queue"] == redrive.DefaultQueue {
			logged = true
		}
	}
	if !logged {
		t.Error("no log line says the retry budget pushed retries out")
	}
}

// fixedRand is a jitter source that always draws u.
type fixedRand float64

func (f fixedRand) Float64() float64 { return float64(f) }

// TestFailIgnoresBudget: a rescued lease (Executor.Fail) is retried after
// its policy's delay even when the queue's retry budget is used up.
func TestFailIgnoresBudget(t *testing.T) {
	p := fastPolicy(3)
	p.Initial, p.MaxDelay = time.Second, time.Minute
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ex := redrive.NewExecutor(redrive.ExecutorOptions{Policy: &p, Logger: quietLogger(), Now: func() time.Time { return now },
		RetryBudget: retry.BudgetConfig{MinRetries: 1, Window: time.Hour, Now: func() time.Time { return now }}})
	ex.HandleFunc("k", func(ctx context.Context, j *redrive.Job) error { return errors.New("boom") })
	// Two failures: the second retry is over the budget of one.
	var last redrive.Outcome
	for i := range 2 {
		last = ex.Execute(context.Background(), &redrive.Job{ID: int64(i + 1), Queue: "q", Kind: "k", Attempt: 1, MaxRetries: -1})
	}
	if last.Kind != store.Retry || last.RunAt.Sub(last.At) <= p.Initial {
		t.Fatalf("the second failure was not pushed out by a budget of one: %+v", last)
	}
	j := &redrive.Job{ID: 3, Queue: "q", Kind: "k", Attempt: 1, MaxRetries: -1, Worker: "gone"}
	o := ex.Fail(j, failure.Verdict{Class: failure.Transient, Reason: "lease_expired"}, "lease expired", now.Add(-time.Minute), now)
	if o.Kind != store.Retry || o.RunAt.Sub(o.At) != p.Initial {
		t.Errorf("rescue: kind %v, delay %v; want a retry after exactly %v", o.Kind, o.RunAt.Sub(o.At), p.Initial)
	}
	if o.Event == nil || o.Event.Reason != "lease_expired" || o.Event.Kind != store.EventRetry {
		t.Errorf("rescue event %+v", o.Event)
	}
	for _, c := range o.Counters {
		if c.Name == store.StatBudgetDeferred {
			t.Errorf("rescue counted as budget_deferred")
		}
	}
}

// TestEngineDelaysMatchExplain runs a job that always fails through the
// worker, for every jitter kind, with the jitter's randomness pinned at
// its lowest and at its highest draw, and checks that the delays the
// engine chose are the bounds that `redrive policy explain` (Schedule)
// promises. For decorrelated jitter this needs the real previous delay:
// drawing from the unjittered base delay instead stays far below the
// promised maximum.
func TestEngineDelaysMatchExplain(t *testing.T) {
	kinds := []retry.Jitter{retry.JitterNone, retry.JitterProportional, retry.JitterFull, retry.JitterEqual,
		retry.JitterDecorrelated, retry.JitterAdditive}
	for _, kind := range kinds {
		for _, draw := range []struct {
			name string
			u    fixedRand
		}{{"lowest", 0}, {"highest", fixedRand(1 - 1e-9)}} {
			t.Run(kind.String()+"/"+draw.name, func(t *testing.T) {
				t.Parallel()
				p := retry.Policy{MaxRetries: 5, Initial: 10 * time.Millisecond, Multiplier: 2, MaxDelay: 200 * time.Millisecond,
					Jitter: kind, JitterFactor: 0.5, JitterMax: 10 * time.Millisecond}
				e := newEnv(t, redrive.WorkerOptions{Policy: &p, Rand: draw.u})
				e.worker.HandleFunc("fail", func(ctx context.Context, j *redrive.Job) error { return errors.New("always") })
				j, err := e.client.Enqueue(context.Background(), "fail", nil)
				if err != nil {
					t.Fatal(err)
				}
				e.start()
				got := retryDelays(e.waitState(j.ID, redrive.Dead))
				steps := p.Schedule()
				if len(got) != len(steps) {
					t.Fatalf("%d retries, want %d", len(got), len(steps))
				}
				for i, s := range steps {
					want := s.Min
					if draw.u > 0.5 {
						want = s.Max
					}
					// The highest draw is a hair below 1: allow 1µs.
					if d := got[i] - want; d < -time.Microsecond || d > time.Microsecond {
						t.Errorf("retry %d: delay %v, explain promises %v..%v (want %v for the %s draw)", s.Retry, got[i],
							s.Min, s.Max, want, draw.name)
					}
				}
			})
		}
	}
}

// TestIdempotencyConflict: the same key with the same request answers
// the first job; with another payload, kind or queue it is a conflict
// naming what differs, unless the caller asks for the existing job.
func TestIdempotencyConflict(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	ctx := context.Background()
	first, err := c.Enqueue(ctx, "charge", json.RawMessage(`{"amount": 100, "card": "tok_1"}`), redrive.IdempotencyKey("order-1"))
	if err != nil || first.Existing {
		t.Fatalf("first enqueue: %+v, %v", first, err)
	}
	// The same JSON value, written another way, is the same request.
	same, err := c.Enqueue(ctx, "charge", map[string]any{"card": "tok_1", "amount": 100}, redrive.IdempotencyKey("order-1"))
	if err != nil || !same.Existing || same.Conflict || same.ID != first.ID {
		t.Fatalf("same request again: %+v, %v", same, err)
	}
	for _, c2 := range []struct {
		kind    string
		payload any
		opts    []redrive.Option
		field   string
	}{
		{"charge", map[string]any{"card": "tok_1", "amount": 200}, nil, "payload"},
		{"refund", map[string]any{"card": "tok_1", "amount": 100}, nil, "kind"},
		{"charge", map[string]any{"card": "tok_1", "amount": 100}, []redrive.Option{redrive.InQueue("other")}, "queue"},
	} {
		opts := append([]redrive.Option{redrive.IdempotencyKey("order-1")}, c2.opts...)
		j, err := c.Enqueue(ctx, c2.kind, c2.payload, opts...)
		var kc *redrive.KeyConflictError
		if !errors.Is(err, redrive.ErrKeyConflict) || !errors.As(err, &kc) || kc.Conflicts[0].Field != c2.field ||
			j == nil || j.ID != first.ID || !j.Conflict {
			t.Errorf("%s differs: job %+v, err %v; want a conflict on %s", c2.field, j, err, c2.field)
		}
		j, err = c.Enqueue(ctx, c2.kind, c2.payload, append(opts, redrive.ReturnExisting())...)
		if err != nil || j.ID != first.ID || !j.Existing || !j.Conflict {
			t.Errorf("%s differs, ReturnExisting: job %+v, err %v", c2.field, j, err)
		}
	}
	// A batch: the conflicting request creates nothing, the others are
	// enqueued, and the error names the conflict's index.
	jobs, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "charge", Payload: 1}, {Kind: "charge", Payload: 2, IdempotencyKey: "order-1"},
		{Kind: "charge", Payload: 3}})
	var kc *redrive.KeyConflictError
	if !errors.As(err, &kc) || len(kc.Conflicts) != 1 || kc.Conflicts[0].Index != 1 || len(jobs) != 3 || jobs[0].Existing ||
		jobs[2].Existing || jobs[1].ID != first.ID {
		t.Fatalf("batch: %v, %+v", err, jobs)
	}
	if n, _ := c.Count(ctx, redrive.Filter{}); n != 3 {
		t.Errorf("%d jobs in the store, want 3 (the first and the two new of the batch)", n)
	}
}

// TestKeyOutlivesRetention: a key stays taken after retention deleted its
// job, for the key retention, then is free again.
func TestKeyOutlivesRetention(t *testing.T) {
	clock := &skewClock{}
	e := newEnvAt(t, redrive.WorkerOptions{CompletedRetention: time.Minute, KeyRetention: time.Minute}, clock.now)
	e.worker.HandleFunc("blob", func(ctx context.Context, j *redrive.Job) error { return nil })
	ctx := context.Background()
	key := redrive.KeyOf("container", "a/b.pdf", "0x8DC")
	first, err := e.client.Enqueue(ctx, "blob", nil, redrive.IdempotencyKey(key))
	if err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitState(first.ID, redrive.Completed)
	// Retention deletes the job, but keeps its key.
	if n, err := e.store.DeleteFinished(ctx, redrive.Completed, time.Now().Add(time.Minute), 10); err != nil || n != 1 {
		t.Fatalf("DeleteFinished = %d, %v", n, err)
	}
	again, err := e.client.Enqueue(ctx, "blob", nil, redrive.IdempotencyKey(key))
	if err != nil || !again.Existing || !again.Gone || again.ID != first.ID || again.State != redrive.Completed {
		t.Fatalf("the key of a deleted job: %+v, %v; want the completed job, gone", again, err)
	}
	clock.skew.Store(int64(2 * time.Minute)) // the key outlives its retention
	if _, err := e.worker.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := e.client.Enqueue(ctx, "blob", nil, redrive.IdempotencyKey(key))
	if err != nil || fresh.Existing || fresh.ID == first.ID {
		t.Fatalf("after the key retention: %+v, %v; want a new job", fresh, err)
	}
}

// TestGroupsDoNotCrossQueues: one cause in two queues (or kinds) is two
// groups, and a redrive of one group leaves the other alone.
func TestGroupsDoNotCrossQueues(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{Queues: map[string]int{"webhooks": 2, redrive.DefaultQueue: 2}})
	e.worker.HandleFunc("http", func(ctx context.Context, j *redrive.Job) error {
		return redrive.Permanent(errors.New(`POST "https://hooks.example.com/x" returned 404`))
	})
	ctx := context.Background()
	var ids []int64
	for i, q := range []string{"webhooks", redrive.DefaultQueue, redrive.DefaultQueue} {
		j, err := e.client.Enqueue(ctx, "http", i, redrive.InQueue(q))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	e.start()
	for _, id := range ids {
		e.waitState(id, redrive.Dead)
	}
	groups, err := e.client.DeadGroups(ctx, redrive.Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	byQueue := map[string]int64{}
	for _, g := range groups {
		byQueue[g.Queue] += g.Count
	}
	if len(groups) != 2 || byQueue["webhooks"] != 1 || byQueue[redrive.DefaultQueue] != 2 {
		t.Fatalf("groups %+v: want one per queue", groups)
	}
	var webhooks redrive.Group
	for _, g := range groups {
		if g.Queue == "webhooks" {
			webhooks = g
		}
	}
	n, err := e.client.Count(ctx, redrive.Filter{States: []redrive.State{redrive.Dead}, Fingerprint: webhooks.Fingerprint})
	if err != nil || n != 1 {
		t.Fatalf("the webhooks group selects %d dead jobs (%v), want 1", n, err)
	}
}

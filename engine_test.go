package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// fastPolicy retries quickly and exactly (no jitter) so tests run in
// milliseconds.
func fastPolicy(retries int) retry.Policy {
	p := retry.DefaultPolicy()
	p.MaxRetries = retries
	p.Initial = 5 * time.Millisecond
	p.MaxDelay = 40 * time.Millisecond
	p.Jitter = retry.JitterNone
	return p
}

type env struct {
	t      *testing.T
	store  store.Store
	client *redrive.Client
	worker *redrive.Worker
	cancel context.CancelFunc
	done   chan error
	// rounds is the worker's EngineSignal.
	rounds <-chan struct{}
	// ops is the worker's OperationsSignal.
	ops <-chan struct{}
}

// stateFallback is how long waitEngine waits without a signal: the
// states that real time brings (a due time passing, a lease expiring)
// come with no round of the engine's work.
const stateFallback = 20 * time.Millisecond

// waitEngine waits for the worker's next round of work (see
// redrive.EngineSignal), or stateFallback.
func (e *env) waitEngine() {
	t := time.NewTimer(stateFallback)
	defer t.Stop()
	select {
	case <-e.rounds:
	case <-t.C:
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openStore opens a fresh store for one test: SQLite in a temporary folder,
// or, with REDRIVE_ENGINE_STORE=postgres, a new schema on the PostgreSQL of
// REDRIVE_POSTGRES_URL, so the engine's tests also run on PostgreSQL.
func openStore(t *testing.T) store.Store {
	t.Helper()
	if os.Getenv("REDRIVE_ENGINE_STORE") == "postgres" {
		url := os.Getenv("REDRIVE_POSTGRES_URL")
		if url == "" {
			t.Fatal("REDRIVE_ENGINE_STORE=postgres needs REDRIVE_POSTGRES_URL")
		}
		schema := fmt.Sprintf("redrive_engine_%d_%d", os.Getpid(), schemaSeq.Add(1))
		st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			st.Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			st.Close()
		})
		return st
	}
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var schemaSeq atomic.Int64

func newEnv(t *testing.T, opts redrive.WorkerOptions) *env {
	t.Helper()
	return newEnvAt(t, opts, nil)
}

// newEnvAt is newEnv with now, when not nil, as the clock of the client
// and its worker (see redrive.SetClock).
func newEnvAt(t *testing.T, opts redrive.WorkerOptions, now func() time.Time) *env {
	t.Helper()
	st := openStore(t)
	// The client logs where the worker does (an operation's run logs
	// through the client).
	log := opts.Logger
	if log == nil {
		log = quietLogger()
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	if now != nil {
		redrive.SetClock(c, now)
	}
	if opts.Policy == nil {
		p := fastPolicy(3)
		opts.Policy = &p
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.Queues == nil {
		opts.Queues = map[string]int{redrive.DefaultQueue: 4}
	}
	w := redrive.NewWorker(c, opts)
	return &env{t: t, store: st, client: c, worker: w, rounds: redrive.EngineSignal(w), ops: redrive.OperationsSignal(w)}
}

// mergeSignals returns a signal sent on whenever one of sigs is, until
// the test ends.
func mergeSignals(t *testing.T, sigs ...<-chan struct{}) <-chan struct{} {
	out := make(chan struct{}, 64)
	ctx := t.Context()
	for _, s := range sigs {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-s:
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return out
}

// untilSignal waits, signal after signal of sig (a test signal of the
// worker, see export_test.go), until cond holds, and fails t, saying what
// it waited for, if cond does not hold within a generous bound.
func untilSignal(t *testing.T, sig <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	bound := time.NewTimer(30 * time.Second)
	defer bound.Stop()
	for !cond() {
		select {
		case <-sig:
		case <-bound.C:
			if cond() {
				return
			}
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (e *env) start() {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() { e.done <- e.worker.Run(ctx) }()
	e.t.Cleanup(e.stop)
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	if err := <-e.done; err != nil {
		e.t.Errorf("worker.Run: %v", err)
	}
	e.cancel = nil
}

// waitState polls the job until it reaches state (or fails the test after
// a generous bound: this is a liveness guard, not a timing assertion).
// Two minutes: 20 s was not enough at load 20 on two cores, where
// TestEngineDelaysMatchExplain's twelve parallel subtests, each six
// attempts of its job on a store of its own, found two jobs still
// running their sixth attempt after it.
func (e *env) waitState(id int64, state redrive.State) *redrive.Job {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		j, err := e.client.Get(context.Background(), id)
		if err != nil {
			e.t.Fatal(err)
		}
		if j.State == state {
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %d stuck in %s (attempt %d, last error %q), want %s", id, j.State, j.Attempt, j.LastError, state)
		}
		e.waitEngine()
	}
}

// waitStates waits until every job of ids is in state, within one bound
// for all of them, and returns them in the order of ids. Where many jobs
// share a queue, a retry is due after the jobs enqueued before it and
// waits behind them: a bound per job (waitState's) would be one on the
// whole backlog ahead of it, which a loaded machine can exceed.
func (e *env) waitStates(ids []int64, state redrive.State, within time.Duration) []*redrive.Job {
	e.t.Helper()
	deadline := time.Now().Add(within)
	out := make([]*redrive.Job, len(ids))
	for i, id := range ids {
		for {
			j, err := e.client.Get(context.Background(), id)
			if err != nil {
				e.t.Fatal(err)
			}
			if j.State == state {
				out[i] = j
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("job %d (%d of %d) stuck in %s (attempt %d, last error %q) after %v, want %s",
					id, i+1, len(ids), j.State, j.Attempt, j.LastError, within, state)
			}
			e.waitEngine()
		}
	}
	return out
}

func TestPoisonJobDiesAfterMaxRetriesPlusOne(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var calls atomic.Int32
	e.worker.HandleFunc("poison", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		return fmt.Errorf("upstream exploded on attempt %d", j.Attempt)
	})
	e.start()
	job, err := e.client.Enqueue(context.Background(), "poison", map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	j := e.waitState(job.ID, redrive.Dead)
	if got := calls.Load(); got != 4 {
		t.Fatalf("handler called %d times, want exactly max-retries+1 = 4", got)
	}
	if j.Attempt != 4 || j.RetryCount != 3 || j.DeadReason != retry.ReasonExhausted {
		t.Fatalf("attempt %d retry_count %d reason %q, want 4, 3, %q", j.Attempt, j.RetryCount, j.DeadReason, retry.ReasonExhausted)
	}
	if j.LastErrorClass != failure.Unknown || j.LastError != "upstream exploded on attempt 4" || j.LastFailedAt == nil || j.DeadAt == nil {
		t.Fatalf("last error fields wrong: %+v", j)
	}
	if len(j.History) != 4 {
		t.Fatalf("history has %d events, want 4: %+v", len(j.History), j.History)
	}
	wantDelays := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}
	for i, ev := range j.History {
		if ev.Attempt != i+1 {
			t.Errorf("event %d attempt %d", i, ev.Attempt)
		}
		if i < 3 {
			if ev.Kind != store.EventRetry || time.Duration(ev.Delay) != wantDelays[i] {
				t.Errorf("event %d = %s delay %v, want retry delay %v", i, ev.Kind, time.Duration(ev.Delay), wantDelays[i])
			}
		} else if ev.Kind != store.EventDead {
			t.Errorf("last event %s, want dead", ev.Kind)
		}
		if ev.Class != "unknown" || ev.Error == "" {
			t.Errorf("event %d class %q error %q", i, ev.Class, ev.Error)
		}
	}
	if j.Fingerprint == "" {
		t.Error("dead job has no fingerprint")
	}
	e.stop()
	st, err := e.client.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := st.Counters[redrive.DefaultQueue]
	want := map[string]int64{"attempts": 4, "failed.unknown": 4, "retried": 3, "dead.unknown": 1, "enqueued": 1}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("counter %s = %d, want %d (all: %v)", k, c[k], v, c)
		}
	}
	if st.Jobs[redrive.DefaultQueue][redrive.Dead] != 1 {
		t.Errorf("stats jobs: %v", st.Jobs)
	}
}

func TestPermanentAndNeedsAuthDieAtOnce(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var calls sync.Map
	count := func(kind string) int32 {
		v, _ := calls.LoadOrStore(kind, new(atomic.Int32))
		return v.(*atomic.Int32).Load()
	}
	inc := func(kind string) {
		v, _ := calls.LoadOrStore(kind, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
	}
	e.worker.HandleFunc("perm", func(ctx context.Context, j *redrive.Job) error {
		inc("perm")
		return redrive.Permanent(errors.New("invalid document"))
	})
	e.worker.HandleFunc("auth", func(ctx context.Context, j *redrive.Job) error {
		inc("auth")
		return &failure.StatusError{Code: 403, Status: "403 Forbidden"}
	})
	type args struct{ N int }
	redrive.Handle(e.worker, "typed", func(ctx context.Context, j *redrive.Job, a args) error {
		inc("typed")
		return nil
	})
	e.start()
	ctx := context.Background()
	p, _ := e.client.Enqueue(ctx, "perm", nil)
	a, _ := e.client.Enqueue(ctx, "auth", nil)
	ty, _ := e.client.Enqueue(ctx, "typed", json.RawMessage(`{"N":"not a number"}`))
	jp := e.waitState(p.ID, redrive.Dead)
	ja := e.waitState(a.ID, redrive.Dead)
	jt := e.waitState(ty.ID, redrive.Dead)
	if count("perm") != 1 || jp.DeadReason != retry.ReasonPermanent || jp.LastErrorClass != failure.Permanent || jp.Attempt != 1 {
		t.Errorf("permanent: calls %d, job %+v", count("perm"), jp)
	}
	if count("auth") != 1 || ja.DeadReason != retry.ReasonNeedsAuth || ja.LastErrorClass != failure.NeedsAuth {
		t.Errorf("needs auth: calls %d, job %+v", count("auth"), ja)
	}
	if count("typed") != 0 || jt.DeadReason != redrive.ReasonUndecodable || jt.LastErrorClass != failure.Permanent || jt.Attempt != 1 ||
		len(jt.History) != 1 || jt.History[0].Reason != failure.ReasonUndecodablePayload {
		t.Errorf("undecodable payload: calls %d, job %+v", count("typed"), jt)
	}
}

func TestSucceedsAfterRetries(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var calls atomic.Int32
	e.worker.HandleFunc("flaky", func(ctx context.Context, j *redrive.Job) error {
		if calls.Add(1) <= 2 {
			return &failure.StatusError{Code: 503}
		}
		return nil
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "flaky", nil)
	j := e.waitState(job.ID, redrive.Completed)
	if calls.Load() != 3 || j.Attempt != 3 || j.RetryCount != 2 || j.FinishedAt == nil {
		t.Fatalf("calls %d job %+v", calls.Load(), j)
	}
	if len(j.History) != 2 || j.History[0].Reason != "http_503" || j.History[0].Class != "transient" {
		t.Fatalf("history %+v", j.History)
	}
	e.stop()
	st, _ := e.client.Stats(context.Background())
	c := st.Counters[redrive.DefaultQueue]
	if c["succeeded"] != 1 || c["succeeded_after_retry"] != 1 || c["retried"] != 2 || c["failed.transient"] != 2 {
		t.Fatalf("counters %v", c)
	}
}

// TestRecord: what a handler records is kept as a "completed" event when
// the attempt succeeds, dropped when it fails; a success without Record
// adds no event.
func TestRecord(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{MaxErrorLength: 40})
	var calls atomic.Int32
	e.worker.HandleFunc("rec", func(ctx context.Context, j *redrive.Job) error {
		if calls.Add(1) == 1 {
			redrive.Record(ctx, "r1", "dropped: this attempt fails")
			return &failure.StatusError{Code: 503}
		}
		// From a derived context and another goroutine; the later call wins.
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			redrive.Record(dctx, "r0", "replaced")
			redrive.Record(dctx, "r2", strings.Repeat("n", 100))
		}()
		<-done
		return nil
	})
	e.worker.HandleFunc("plain", func(ctx context.Context, j *redrive.Job) error { return nil })
	redrive.Record(context.Background(), "x", "outside a handler: nothing happens")
	e.start()
	ctx := context.Background()
	rec, _ := e.client.Enqueue(ctx, "rec", nil)
	plain, _ := e.client.Enqueue(ctx, "plain", nil)
	j := e.waitState(rec.ID, redrive.Completed)
	if len(j.History) != 2 || j.History[0].Kind != store.EventRetry || j.History[0].Note != "" {
		t.Fatalf("history %+v, want the retry (without the dropped record) then the completion", j.History)
	}
	ev := j.History[1]
	if ev.Kind != store.EventCompleted || ev.Attempt != 2 || ev.Reason != "r2" || ev.Class != "" || ev.Error != "" ||
		ev.Duration <= 0 || ev.Worker == "" || j.AttemptedAt == nil ||
		ev.At.Before(*j.AttemptedAt) || ev.At.Sub(*j.AttemptedAt) > 10*time.Second {
		t.Fatalf("completed event %+v (the attempt was leased at %v)", ev, j.AttemptedAt)
	}
	if !strings.HasPrefix(ev.Note, strings.Repeat("n", 40)) || len(ev.Note) > 40+len("…") {
		t.Fatalf("note %q not cut to MaxErrorLength 40", ev.Note)
	}
	if p := e.waitState(plain.ID, redrive.Completed); len(p.History) != 0 {
		t.Fatalf("a success without Record added events: %+v", p.History)
	}
}

func TestIdempotentEnqueueUnderConcurrency(t *testing.T) {
	st := openStore(t)
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	key := redrive.KeyOf("container", "incoming/P001/session.txt", "0x8DC")
	const n = 100
	ids := make([]int64, n)
	existing := make([]bool, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			// Each caller sends its own payload: all but the first get the
			// first job back (ReturnExisting), marked as a conflict.
			j, err := c.Enqueue(context.Background(), "ingest", map[string]int{"caller": i}, redrive.IdempotencyKey(key),
				redrive.ReturnExisting())
			if err != nil {
				t.Error(err)
				return
			}
			if j.Existing != j.Conflict {
				t.Errorf("caller %d: Existing %v but Conflict %v (its payload differs from the first job's)", i, j.Existing, j.Conflict)
			}
			ids[i], existing[i] = j.ID, j.Existing
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		if ids[i] != ids[0] {
			t.Fatalf("caller %d got job %d, caller 0 got %d", i, ids[i], ids[0])
		}
		if !existing[i] {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d callers created a job, want exactly 1", created)
	}
	total, err := c.Count(context.Background(), redrive.Filter{})
	if err != nil || total != 1 {
		t.Fatalf("jobs in store: %d (%v), want 1", total, err)
	}
}

func TestKeyOf(t *testing.T) {
	if redrive.KeyOf("ab", "c") == redrive.KeyOf("a", "bc") {
		t.Fatal("KeyOf must separate parts")
	}
	// Pinned: SHA-256 of (8-byte big-endian length, part) for "a", "b".
	// Changing the derivation would silently break stored keys.
	if got, want := redrive.KeyOf("a", "b"), "3c9d591045bc8876f9d0399bbfb05c6a412096e906f73278f98406cd5dca86df"; got != want {
		t.Fatalf("KeyOf(a, b) = %s, want %s", got, want)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var first atomic.Int64
	var second atomic.Int64
	e.worker.HandleFunc("limited", func(ctx context.Context, j *redrive.Job) error {
		if j.Attempt == 1 {
			first.Store(time.Now().UnixNano())
			return redrive.RateLimited(errors.New("slow down"), 150*time.Millisecond)
		}
		second.Store(time.Now().UnixNano())
		return nil
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "limited", nil)
	j := e.waitState(job.ID, redrive.Completed)
	gap := time.Duration(second.Load() - first.Load())
	if gap < 150*time.Millisecond {
		t.Fatalf("retried after %v, before the server's Retry-After of 150ms", gap)
	}
	// 150ms plus the Retry-After jitter: up to 10% of it.
	if ev := j.History[0]; ev.Class != "rate_limited" || time.Duration(ev.Delay) < 150*time.Millisecond || time.Duration(ev.Delay) >= 165*time.Millisecond {
		t.Fatalf("history %+v, want a delay in [150ms, 165ms)", j.History)
	}
}

func TestSnoozeUsesNoAttempt(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var calls atomic.Int32
	e.worker.HandleFunc("later", func(ctx context.Context, j *redrive.Job) error {
		if calls.Add(1) <= 3 {
			return redrive.Snooze(5 * time.Millisecond)
		}
		if j.Attempt != 1 {
			return redrive.Permanent(fmt.Errorf("attempt %d, want 1", j.Attempt))
		}
		return nil
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "later", nil, redrive.MaxRetries(0))
	j := e.waitState(job.ID, redrive.Completed)
	if calls.Load() != 4 || j.Attempt != 1 {
		t.Fatalf("calls %d attempt %d", calls.Load(), j.Attempt)
	}
	snoozes := 0
	for _, ev := range j.History {
		if ev.Kind == store.EventSnoozed {
			snoozes++
		}
	}
	if snoozes != 3 {
		t.Fatalf("history %+v", j.History)
	}
}

func TestTimeoutIsTransient(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	e.worker.HandleFunc("slow", func(ctx context.Context, j *redrive.Job) error {
		if j.Attempt == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, redrive.Timeout(20*time.Millisecond))
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "slow", nil)
	j := e.waitState(job.ID, redrive.Completed)
	if ev := j.History[0]; ev.Class != "transient" || ev.Reason != "deadline_exceeded" {
		t.Fatalf("history %+v", j.History)
	}
}

func TestUnknownKindIsRetriedThenDead(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "nobody-handles-this", nil, redrive.MaxRetries(1))
	j := e.waitState(job.ID, redrive.Dead)
	if j.Attempt != 2 || j.DeadReason != retry.ReasonExhausted {
		t.Fatalf("job %+v", j)
	}
}

func TestDelayedJobWaits(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var ran atomic.Int64
	e.worker.HandleFunc("delayed", func(ctx context.Context, j *redrive.Job) error {
		ran.Store(time.Now().UnixNano())
		return nil
	})
	e.start()
	enq := time.Now()
	job, _ := e.client.Enqueue(context.Background(), "delayed", nil, redrive.After(80*time.Millisecond))
	if job.State != redrive.Scheduled {
		t.Fatalf("state %s, want scheduled", job.State)
	}
	e.waitState(job.ID, redrive.Completed)
	if d := time.Duration(ran.Load() - enq.UnixNano()); d < 80*time.Millisecond {
		t.Fatalf("ran %v after enqueue, before its 80ms delay", d)
	}
}

func TestBreakerDefersWithoutUsingAttempts(t *testing.T) {
	// The breaker stays open until the job was deferred, however long a
	// loaded machine takes to start and fetch it (a real break of 150 ms,
	// then of 1 s, was over before that in CI).
	clock := newHeldClock(2 * time.Second)
	reg := breaker.NewRegistry(breaker.Config{Failures: 2, Window: time.Minute, BreakDuration: time.Second, HalfOpenProbes: 1,
		Now: clock.Now})
	e := newEnv(t, redrive.WorkerOptions{Breakers: reg, Queues: map[string]int{redrive.DefaultQueue: 1}})
	var healthy atomic.Bool
	var calls atomic.Int32
	e.worker.HandleFunc("call", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		if !healthy.Load() {
			return errors.New("connection refused")
		}
		return nil
	}, redrive.UsesDependency("ocr"))
	// Trip the breaker by hand: two failures.
	b := reg.Get("ocr")
	for range 2 {
		tok, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		b.Record(tok, errors.New("down"))
	}
	if b.State() != breaker.Open {
		t.Fatalf("breaker %s, want open", b.State())
	}
	healthy.Store(true)
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "call", nil, redrive.MaxRetries(0))
	testwait.Until(t, "the job deferred by the open breaker", 30*time.Second, func() bool {
		j, err := e.client.Get(context.Background(), job.ID)
		return err == nil && len(j.History) > 0 && j.History[0].Kind == store.EventDeferred
	})
	clock.release()
	j := e.waitState(job.ID, redrive.Completed)
	if calls.Load() != 1 || j.Attempt != 1 {
		t.Fatalf("handler calls %d, attempt %d: deferral must not use attempts", calls.Load(), j.Attempt)
	}
	if len(j.History) == 0 || j.History[0].Kind != store.EventDeferred {
		t.Fatalf("history %+v, want a deferred event first", j.History)
	}
	if b.State() != breaker.Closed {
		t.Fatalf("breaker %s after a successful probe, want closed", b.State())
	}
}

func TestShutdownReleasesWithoutUsingAnAttempt(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{ShutdownTimeout: 50 * time.Millisecond})
	started := make(chan struct{})
	e.worker.HandleFunc("long", func(ctx context.Context, j *redrive.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "long", nil)
	<-started
	e.stop()
	j, err := e.client.Get(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != redrive.Pending || j.Attempt != 0 {
		t.Fatalf("after shutdown: state %s attempt %d, want pending 0", j.State, j.Attempt)
	}
	if n := len(j.History); n != 1 || j.History[0].Kind != store.EventReleased {
		t.Fatalf("history %+v", j.History)
	}
}

// TestShutdownLetsHandlersFinish: a handler still running when the
// shutdown begins finishes, its context not canceled within the
// ShutdownTimeout, and its job completes.
func TestShutdownLetsHandlersFinish(t *testing.T) {
	var buf syncBuffer
	e := newEnv(t, redrive.WorkerOptions{ShutdownTimeout: time.Minute, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	started, finish := make(chan struct{}), make(chan struct{})
	e.worker.HandleFunc("short", func(ctx context.Context, j *redrive.Job) error {
		close(started)
		<-finish         // runs on until the shutdown has begun
		return ctx.Err() // nil: the context is not canceled within the deadline
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "short", nil)
	<-started
	stopped := make(chan struct{}, 1)
	go func() { e.stop(); stopped <- struct{}{} }()
	waitLogged(t, &buf, "the shutdown to begin", func(l map[string]any) bool {
		return l["msg"] == "worker stopping: waiting for running handlers"
	})
	close(finish)
	testwait.Recv(t, "the worker to stop", 20*time.Second, stopped)
	j, _ := e.client.Get(context.Background(), job.ID)
	if j.State != redrive.Completed {
		t.Fatalf("state %s, want completed", j.State)
	}
}

func TestCancelRunningJob(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{LeaseDuration: 90 * time.Millisecond})
	started := make(chan struct{})
	e.worker.HandleFunc("cancelme", func(ctx context.Context, j *redrive.Job) error {
		close(started)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "cancelme", nil)
	<-started
	c, err := e.client.Cancel(context.Background(), job.ID)
	if err != nil || !c.CancelRequested {
		t.Fatalf("cancel: %v %+v", err, c)
	}
	e.waitState(job.ID, redrive.Canceled)
	if _, err := e.client.Cancel(context.Background(), job.ID); !errors.Is(err, redrive.ErrConflict) {
		t.Fatalf("cancel of a canceled job: %v, want ErrConflict", err)
	}
}

func TestRescueExpiredLease(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{RescueInterval: 20 * time.Millisecond})
	ctx := context.Background()
	// A worker that leased the job a minute ago and died: its lease is
	// already over.
	then := time.Now().Add(-time.Minute)
	job, _ := e.client.Enqueue(ctx, "work", nil, redrive.At(then))
	got, err := e.store.Fetch(ctx, store.FetchParams{Queue: redrive.DefaultQueue, Limit: 1, Now: then,
		LeaseUntil: then.Add(10 * time.Millisecond), Worker: "dead-worker"})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %d", err, len(got))
	}
	var calls atomic.Int32
	e.worker.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		return nil
	})
	e.start()
	j := e.waitState(job.ID, redrive.Completed)
	if calls.Load() != 1 || j.Attempt != 2 || j.RetryCount != 1 {
		t.Fatalf("calls %d job %+v", calls.Load(), j)
	}
	if ev := j.History[0]; ev.Reason != "lease_expired" || ev.Class != "transient" || ev.Kind != store.EventRetry {
		t.Fatalf("history %+v", j.History)
	}
	e.stop()
	st, _ := e.client.Stats(ctx)
	if st.Counters[redrive.DefaultQueue]["rescued"] != 1 {
		t.Fatalf("counters %v", st.Counters)
	}
}

func TestDLQRedriveEditPurgeExport(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	var fixed atomic.Bool
	e.worker.HandleFunc("doc", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ URL string }
		json.Unmarshal(j.Payload, &p)
		if p.URL == "fixed" || fixed.Load() {
			return nil
		}
		return redrive.Permanent(fmt.Errorf("cannot parse document %s", p.URL))
	})
	e.worker.HandleFunc("other", func(ctx context.Context, j *redrive.Job) error {
		return redrive.NeedsAuth(errors.New("token expired"))
	})
	e.start()
	ctx := context.Background()
	var docs []int64
	for i := range 5 {
		j, _ := e.client.Enqueue(ctx, "doc", map[string]string{"URL": fmt.Sprintf("u%d", i)})
		docs = append(docs, j.ID)
	}
	locked, _ := e.client.Enqueue(ctx, "doc", map[string]string{"URL": "u99"}, redrive.NotReprocessable())
	other, _ := e.client.Enqueue(ctx, "other", nil)
	for _, id := range append(docs, locked.ID, other.ID) {
		e.waitState(id, redrive.Dead)
	}
	groups, err := e.client.DeadGroups(ctx, redrive.Filter{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].Count != 6 || groups[0].Class != "permanent" || groups[1].Count != 1 || groups[1].Reason != "needs_auth" {
		t.Fatalf("groups %+v", groups)
	}

	dir := t.TempDir()
	n, err := e.client.Export(ctx, dir, redrive.Filter{Kind: "doc"}, nil)
	if err != nil || n != 6 {
		t.Fatalf("export: %d %v", n, err)
	}
	for _, f := range []string{"payload.json", "error.json", "metadata.json"} {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(docs[0]), f))
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(b) {
			t.Fatalf("%s is not JSON: %s", f, b)
		}
	}
	var exported redrive.ExportedError
	b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprint(docs[0]), "error.json"))
	json.Unmarshal(b, &exported)
	if exported.Class != "permanent" || exported.Reason != "permanent" || len(exported.History) != 1 {
		t.Fatalf("error.json %+v", exported)
	}

	// Edit and redrive one job by id.
	var progress []redrive.RedriveProgress
	prog, err := e.client.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{docs[0]}, Payload: map[string]string{"URL": "fixed"},
		Note: "fixed the URL", Progress: func(p redrive.RedriveProgress) { progress = append(progress, p) }})
	if err != nil || prog.Redriven != 1 || !prog.Done || len(progress) == 0 {
		t.Fatalf("redrive: %+v %v", prog, err)
	}
	j := e.waitState(docs[0], redrive.Completed)
	if j.Redriven != 1 || j.Attempt != 1 || string(j.Payload) != `{"URL":"fixed"}` {
		t.Fatalf("redriven job %+v", j)
	}
	kinds := []store.EventKind{}
	for _, ev := range j.History {
		kinds = append(kinds, ev.Kind)
	}
	if len(kinds) != 2 || kinds[0] != store.EventDead || kinds[1] != store.EventRedriven || j.History[1].Note != "fixed the URL" {
		t.Fatalf("history kept across redrive: %+v", j.History)
	}
	if got := j.History[1].PreviousPayload; got != `{"URL":"u0"}` {
		t.Fatalf("edit and redrive: the redriven event keeps the previous payload %q, want {\"URL\":\"u0\"}", got)
	}

	// Redrive by filter at a bounded rate: the locked job is refused.
	fixed.Store(true)
	prog, err = e.client.Redrive(ctx, redrive.RedriveRequest{Filter: redrive.Filter{Kind: "doc"}, Rate: 1000})
	if err != nil || prog.Matched != 5 || prog.Redriven != 4 || prog.Refused != 1 || prog.Refusals[0] != locked.ID {
		t.Fatalf("redrive by filter: %+v %v", prog, err)
	}
	for _, id := range docs[1:] {
		e.waitState(id, redrive.Completed)
	}
	// Purge by filter removes only what matches.
	n64, err := e.client.Purge(ctx, redrive.Filter{ErrorContains: "TOKEN EXPIRED"}, nil)
	if err != nil || n64 != 1 {
		t.Fatalf("purge: %d %v", n64, err)
	}
	if _, err := e.client.Get(ctx, other.ID); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("purged job still there: %v", err)
	}
	if j, _ := e.client.Get(ctx, locked.ID); j.State != redrive.Dead {
		t.Fatalf("locked job %s, want still dead", j.State)
	}
}

// skewClock is the real clock moved ahead by a skew the test sets.
type skewClock struct{ skew atomic.Int64 }

func (c *skewClock) now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }

// TestRetentionCleanup: a completed job older than CompletedRetention is
// deleted; a dead job younger than DLQMaxAge is kept.
func TestRetentionCleanup(t *testing.T) {
	clock := &skewClock{}
	e := newEnvAt(t, redrive.WorkerOptions{CompletedRetention: time.Minute, DLQMaxAge: time.Hour}, clock.now)
	e.worker.HandleFunc("ok", func(ctx context.Context, j *redrive.Job) error { return nil })
	e.worker.HandleFunc("bad", func(ctx context.Context, j *redrive.Job) error { return redrive.Permanent(errors.New("no")) })
	e.start()
	ctx := context.Background()
	ok, _ := e.client.Enqueue(ctx, "ok", nil)
	bad, _ := e.client.Enqueue(ctx, "bad", nil)
	e.waitState(ok.ID, redrive.Completed)
	e.waitState(bad.ID, redrive.Dead)
	clock.skew.Store(int64(2 * time.Minute)) // the completed job outlives its retention
	n, err := e.worker.Cleanup(ctx)
	if err != nil || n != 1 {
		t.Fatalf("cleanup deleted %d (%v), want 1 (the completed job; the dead one is younger than DLQMaxAge)", n, err)
	}
	if _, err := e.client.Get(ctx, ok.ID); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatal("completed job survived retention")
	}
	if _, err := e.client.Get(ctx, bad.ID); err != nil {
		t.Fatal("dead job deleted before DLQMaxAge")
	}
}

func TestEnqueueValidation(t *testing.T) {
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger(), MaxPayload: 64})
	ctx := context.Background()
	cases := map[string]func() error{
		"no kind":  func() error { _, err := c.Enqueue(ctx, "", nil); return err },
		"bad json": func() error { _, err := c.Enqueue(ctx, "k", []byte("{nope")); return err },
		"too big": func() error {
			_, err := c.Enqueue(ctx, "k", map[string]string{"x": string(make([]byte, 100))})
			return err
		},
		"neg retries": func() error { _, err := c.Enqueue(ctx, "k", nil, redrive.MaxRetries(-1)); return err },
		"bad policy": func() error {
			_, err := c.Enqueue(ctx, "k", nil, redrive.WithPolicy(retry.Policy{Multiplier: 0.5}))
			return err
		},
		"unencodable":  func() error { _, err := c.Enqueue(ctx, "k", func() {}); return err },
		"batch 2 of 2": func() error { _, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "k"}, {}}); return err },
		// A batch checks each name, not only the first of a run of equal
		// ones: a bad kind or queue after good ones fails the batch.
		"kind 3 of 3": func() error {
			_, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "k"}, {Kind: "k"}, {Kind: "k/x"}})
			return err
		},
		"queue 3 of 3": func() error {
			_, err := c.EnqueueMany(ctx, []redrive.Request{{Kind: "k", Queue: "q"}, {Kind: "k", Queue: "q"}, {Kind: "k", Queue: " q"}})
			return err
		},
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, redrive.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if n, _ := c.Count(ctx, redrive.Filter{}); n != 0 {
		t.Fatalf("%d jobs created by invalid requests", n)
	}
}

func TestHandlerSeesOpenBreakerIsDeferred(t *testing.T) {
	e := newEnv(t, redrive.WorkerOptions{})
	// The breaker's clock stands still, an hour behind the wall clock,
	// until the test has seen the deferral: on the wall clock a loaded
	// machine's first attempt came after the break (80 ms, then 600 ms).
	var moved atomic.Int64
	start := time.Now().Add(-time.Hour)
	clock := func() time.Time { return start.Add(time.Duration(moved.Load())) }
	b := breaker.New("payments", breaker.Config{Failures: 1, Window: time.Minute, BreakDuration: 600 * time.Millisecond, Now: clock})
	tok, _ := b.Allow()
	b.Record(tok, errors.New("down"))
	var calls atomic.Int32
	e.worker.HandleFunc("pay", func(ctx context.Context, j *redrive.Job) error {
		calls.Add(1)
		return b.Do(ctx, func(context.Context) error { return nil })
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "pay", nil, redrive.MaxRetries(0))
	for deadline := time.Now().Add(time.Minute); ; e.waitEngine() {
		j, err := e.client.Get(context.Background(), job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == redrive.Completed || j.State == redrive.Dead {
			t.Fatalf("job ended %s while the breaker was open: %+v", j.State, j.History)
		}
		if len(j.History) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d not deferred within a minute: %s, attempt %d", job.ID, j.State, j.Attempt)
		}
	}
	moved.Store(int64(time.Second)) // the break is over
	j := e.waitState(job.ID, redrive.Completed)
	if j.Attempt != 1 || calls.Load() < 2 {
		t.Fatalf("attempt %d after %d calls: an open breaker inside the handler must defer without using attempts", j.Attempt, calls.Load())
	}
	if j.History[0].Kind != store.EventDeferred || j.History[0].Reason != "breaker_open:payments" {
		t.Fatalf("history %+v", j.History)
	}
}

// syncBuffer is a bytes.Buffer safe for the worker's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
	// wrote is sent on after each write (made at the first use).
	wrote chan struct{}
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	if s.wrote == nil {
		s.wrote = make(chan struct{}, 1)
	}
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

// written returns the channel sent on after each write.
func (s *syncBuffer) written() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wrote == nil {
		s.wrote = make(chan struct{}, 1)
	}
	return s.wrote
}

// waitLogged waits, log line after log line, until one written to buf
// matches, and fails t, saying what it waited for, if none does within a
// generous bound.
func waitLogged(t *testing.T, buf *syncBuffer, what string, match func(line map[string]any) bool) {
	t.Helper()
	bound := time.NewTimer(20 * time.Second)
	defer bound.Stop()
	for {
		wrote := buf.written()
		for _, l := range buf.lines() {
			if match(l) {
				return
			}
		}
		select {
		case <-wrote:
		case <-bound.C:
			t.Fatalf("timed out waiting for %s: no such log line", what)
		}
	}
}

func (s *syncBuffer) lines() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(s.b)), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func TestRetryAndDLQAreLogged(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	e := newEnv(t, redrive.WorkerOptions{Logger: log})
	e.worker.HandleFunc("fails", func(ctx context.Context, j *redrive.Job) error {
		return &failure.StatusError{Code: 502, Status: "502 Bad Gateway"}
	})
	e.start()
	job, _ := e.client.Enqueue(context.Background(), "fails", nil, redrive.MaxRetries(1))
	e.waitState(job.ID, redrive.Dead)
	e.stop()
	var retries, dead int
	for _, l := range buf.lines() {
		switch l["msg"] {
		case "job failed; retry scheduled":
			retries++
			for _, k := range []string{"job_id", "kind", "attempt", "class", "delay", "error", "reason"} {
				if _, ok := l[k]; !ok {
					t.Errorf("retry log lacks %q: %v", k, l)
				}
			}
			if l["level"] != "INFO" || l["class"] != "transient" || l["reason"] != "http_502" {
				t.Errorf("retry log %v", l)
			}
		case "job moved to the DLQ":
			dead++
			if l["level"] != "WARN" || l["reason"] != "retries_exhausted" || l["job_id"] != float64(job.ID) {
				t.Errorf("DLQ log %v", l)
			}
		}
	}
	if retries != 1 || dead != 1 {
		t.Fatalf("%d retry and %d DLQ log lines, want 1 and 1", retries, dead)
	}
}

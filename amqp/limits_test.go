package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// limitPolicy gives a queue short delay queues, so that a deferred
// message comes back soon.
var limitPolicy = retry.Policy{MaxRetries: 3, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: 100 * time.Millisecond}

// publishN publishes n messages of kind to q, the i-th with the payload
// body(i) and message id "m<i>".
func publishN(t *testing.T, c *amqp.Conn, q, kind string, n int, body func(i int) string) {
	t.Helper()
	p, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range n {
		if err := p.Publish(context.Background(), "", q, amqp091.Publishing{Type: kind, MessageId: fmt.Sprint("m", i),
			Body: []byte(body(i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLimitsConcurrencyPerKey: with a limit of 2 per customer on a
// consumer of 8 handlers, no customer ever has more than 2 handlers
// running (observed from the handlers), every message runs exactly once
// and completes, and none uses an attempt while it waits.
func TestLimitsConcurrencyPerKey(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	const limit, keys, n = 2, 4, 120
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:    map[string]amqp.QueueOptions{q: {Concurrency: 8, Prefetch: 16}},
		Executor:  redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:    []redrive.ConcurrencyLimit{{Name: "per-customer", Queue: q, Key: "payload.customer", Max: limit}},
		LimitHold: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inRun, peak := map[string]int{}, map[string]int{}
	ran := map[string]int{}
	cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ Customer string }
		if err := jsonUnmarshal(string(j.Payload), &p); err != nil {
			return err
		}
		mu.Lock()
		inRun[p.Customer]++
		peak[p.Customer] = max(peak[p.Customer], inRun[p.Customer])
		ran[j.IdempotencyKey]++
		if j.Attempt != 1 {
			t.Errorf("%s ran as attempt %d: waiting on a limit uses none", j.IdempotencyKey, j.Attempt)
		}
		mu.Unlock()
		// Real time passing is what is tested: a handler that runs a
		// while lets its group fill up.
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		inRun[p.Customer]--
		mu.Unlock()
		return nil
	})
	stop := running(t, cons)
	publishN(t, c, q, "work", n, func(i int) string { return fmt.Sprintf(`{"customer":"c%d"}`, i%keys) })
	eventually(t, "every message completed", time.Minute, func() bool { return cons.Stats().Completed == n })
	topo, _ := cons.Topology(q)
	requireSettled(t, c, topo, stop)
	mu.Lock()
	defer mu.Unlock()
	for k, p := range peak {
		if p > limit {
			t.Errorf("customer %s ran %d at once, the limit is %d", k, p, limit)
		}
	}
	if len(ran) != n {
		t.Errorf("%d distinct messages ran, want %d", len(ran), n)
	}
	for id, k := range ran {
		if k != 1 {
			t.Errorf("%s ran %d times", id, k)
		}
	}
	if st := cons.Stats(); st.Dead != 0 || st.Retried != 0 || len(st.Limits) != 1 || st.Limits[0].InUse != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestLimitsRate: a rate of 20/s with a burst of 2 on one group never
// starts more than burst + d/interval handlers in any window of length d
// between two starts (the handlers' own clock; one start of slack for
// the dispatch between the limiter's grant and the handler's first line).
func TestLimitsRate(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	const n = 30
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{q: {Concurrency: 4}},
		Executor: redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:   []redrive.ConcurrencyLimit{{Name: "api", Kind: "call", Rate: "20/s", Burst: 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	cons.HandleFunc("call", func(ctx context.Context, j *redrive.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	})
	running(t, cons)
	publishN(t, c, q, "call", n, func(int) string { return `{}` })
	eventually(t, "every message completed", time.Minute, func() bool { return cons.Stats().Completed == n })
	mu.Lock()
	defer mu.Unlock()
	const interval = 50 * time.Millisecond
	for i := range starts {
		for j := i; j < len(starts); j++ {
			d := starts[j].Sub(starts[i])
			if got, bound := j-i+1, 2+int(d/interval)+1; got > bound {
				t.Errorf("%d starts in %v, bound %d", got, d, bound)
			}
		}
	}
}

// TestLimitsHoldSurvivesShutdown: messages held on a full group are not
// acknowledged while they wait; a consumer stopped while it holds them
// puts every one back in the queue; a new consumer runs each once, as
// its first attempt.
func TestLimitsHoldSurvivesShutdown(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	const n = 5
	limits := []redrive.ConcurrencyLimit{{Name: "one", Queue: q, Max: 1}}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:          map[string]amqp.QueueOptions{q: {Concurrency: 2, Prefetch: 10}},
		Executor:        redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:          limits,
		LimitHold:       time.Hour,
		ShutdownTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, n)
	cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		started <- j.IdempotencyKey
		<-ctx.Done() // holds the only slot until the shutdown
		return ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	publishN(t, c, q, "work", n, func(int) string { return `{}` })
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("no message started")
	}
	eventually(t, "the others wait on the limit", time.Minute, func() bool {
		st := cons.Stats()
		return len(st.Limits) == 1 && st.Limits[0].Waiting == n-1
	})
	if d := depth(t, c, q); d != 0 {
		t.Fatalf("%d messages ready while the consumer holds them all", d)
	}
	if st := cons.Stats(); st.Completed != 0 || st.LimitDeferred != 0 {
		t.Fatalf("stats %+v", st)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "every message is back in the queue", time.Minute, func() bool { return depth(t, c, q) == n })

	again, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{q: {Concurrency: 2}},
		Executor: redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:   limits,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ran sync.Map
	var dup atomic.Int32
	again.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		if _, loaded := ran.LoadOrStore(j.IdempotencyKey, true); loaded {
			dup.Add(1)
		}
		if j.Attempt != 1 {
			t.Errorf("%s ran as attempt %d", j.IdempotencyKey, j.Attempt)
		}
		return nil
	})
	stop := running(t, again)
	eventually(t, "every message completed", time.Minute, func() bool { return again.Stats().Completed == n })
	topo, _ := again.Topology(q)
	requireSettled(t, c, topo, stop)
	if dup.Load() != 0 {
		t.Errorf("%d messages ran twice", dup.Load())
	}
}

// TestLimitsDeferRound: with room to hold no message (prefetch equal to
// concurrency) and a group of one slot, the messages the full group
// turns away go round the shortest delay queue, unacknowledged until
// published there, and each runs once, as its first attempt.
func TestLimitsDeferRound(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	const n = 10
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{q: {Concurrency: 3, Prefetch: 3}},
		Executor: redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:   []redrive.ConcurrencyLimit{{Name: "one", Max: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var inFlight, peak atomic.Int32
	var ran sync.Map
	cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		if v := inFlight.Add(1); v > peak.Load() {
			peak.Store(v)
		}
		defer inFlight.Add(-1)
		if _, loaded := ran.LoadOrStore(j.IdempotencyKey, true); loaded {
			t.Errorf("%s ran twice", j.IdempotencyKey)
		}
		if j.Attempt != 1 {
			t.Errorf("%s ran as attempt %d", j.IdempotencyKey, j.Attempt)
		}
		// Real time passing is what is tested: the slot stays taken a
		// while, so that others are turned away.
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	stop := running(t, cons)
	publishN(t, c, q, "work", n, func(int) string { return `{}` })
	eventually(t, "every message completed", time.Minute, func() bool { return cons.Stats().Completed == n })
	topo, _ := cons.Topology(q)
	requireSettled(t, c, topo, stop)
	if peak.Load() > 1 {
		t.Errorf("%d ran at once under a limit of 1", peak.Load())
	}
	if st := cons.Stats(); st.LimitDeferred == 0 {
		t.Errorf("no message went round a delay queue: %+v", st)
	}
}

// TestLimitsBadKey: a message whose group cannot be read goes to the DLQ
// with a reason naming the field, and is not run.
func TestLimitsBadKey(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{q: {}},
		Executor: redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:   []redrive.ConcurrencyLimit{{Name: "cust", Key: "payload.customer", Max: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		t.Errorf("ran %s", j.Payload)
		return nil
	})
	running(t, cons)
	publishN(t, c, q, "work", 1, func(int) string { return `{"other":1}` })
	topo, _ := cons.Topology(q)
	eventually(t, "the message is in the DLQ", time.Minute, func() bool { return depth(t, c, topo.DLQ()) == 1 })
	ch, _ := c.Channel(context.Background())
	defer ch.Close()
	d, ok, err := ch.Get(topo.DLQ(), true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if s := fmt.Sprint(d.Headers[amqp.HeaderError]); !strings.Contains(s, "payload.customer") {
		t.Errorf("dead letter's error %q does not name the field", s)
	}
}

// grantLog is a LimitStore that records when the store took each start:
// the time its clock read inside the transaction.
type grantLog struct {
	store.Limits
	mu     sync.Mutex
	grants []time.Time
}

func (g *grantLog) TakeLimitStarts(ctx context.Context, name, key string, r store.LimitRate, n int, clock func() time.Time) (int, time.Time, error) {
	var at time.Time
	took, next, err := g.Limits.TakeLimitStarts(ctx, name, key, r, n, func() time.Time { at = clock(); return at })
	if took > 0 {
		g.mu.Lock()
		for range took {
			g.grants = append(g.grants, at)
		}
		g.mu.Unlock()
	}
	return took, next, err
}

// TestLimitsFleetRate: two consumers of one queue (two processes) with
// one store as their LimitStore share a rate of 20/s, burst 2: the starts
// the store took for both never exceed burst + d/interval in any window
// d between two of them (measured on the store's side, where the
// contract holds: a handler starts a little after the store's commit),
// every start the handlers saw was taken there, and every message ran.
// Each consumer alone would start up to that many.
func TestLimitsFleetRate(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := &grantLog{Limits: st}
	const n = 40
	var ran atomic.Int64
	var conss []*amqp.Consumer
	for range 2 {
		cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
			Queues:     map[string]amqp.QueueOptions{q: {Concurrency: 4}},
			Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
			Limits:     []redrive.ConcurrencyLimit{{Name: "api", Kind: "call", Rate: "20/s", Burst: 2}},
			LimitStore: log,
		})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("call", func(ctx context.Context, j *redrive.Job) error {
			ran.Add(1)
			return nil
		})
		running(t, cons)
		conss = append(conss, cons)
	}
	publishN(t, c, q, "call", n, func(int) string { return `{}` })
	eventually(t, "every message completed", time.Minute, func() bool {
		return conss[0].Stats().Completed+conss[1].Stats().Completed == n
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.grants) != int(ran.Load()) {
		t.Errorf("the store took %d starts, the handlers ran %d", len(log.grants), ran.Load())
	}
	slices.SortFunc(log.grants, func(a, b time.Time) int { return a.Compare(b) })
	const interval = 50 * time.Millisecond
	for i := range log.grants {
		for j := i; j < len(log.grants); j++ {
			d := log.grants[j].Sub(log.grants[i])
			if got, bound := j-i+1, 2+int(d/interval); got > bound {
				t.Errorf("%d starts in %v across both consumers, bound %d", got, d, bound)
			}
		}
	}
}

// failingLimits is a LimitStore whose TakeLimitStarts fails while
// failing is set.
type failingLimits struct {
	store.Limits
	failing atomic.Bool
}

func (f *failingLimits) TakeLimitStarts(ctx context.Context, name, key string, r store.LimitRate, n int, clock func() time.Time) (int, time.Time, error) {
	if f.failing.Load() {
		return 0, time.Time{}, errors.New("store unreachable")
	}
	return f.Limits.TakeLimitStarts(ctx, name, key, r, n, clock)
}

// TestLimitsStoreDown: while the LimitStore cannot be reached, no
// rate-limited message starts: each waits, then goes round a delay
// queue, unacknowledged until then; once the store answers, each runs
// once, as its first attempt.
func TestLimitsStoreDown(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fl := &failingLimits{Limits: st}
	fl.failing.Store(true)
	const n = 3
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:     map[string]amqp.QueueOptions{q: {Concurrency: 2}},
		Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:     []redrive.ConcurrencyLimit{{Name: "api", Rate: "100/s", Burst: 10}},
		LimitStore: fl,
		LimitHold:  30 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ran sync.Map
	var runs atomic.Int32
	cons.HandleFunc("call", func(ctx context.Context, j *redrive.Job) error {
		if fl.failing.Load() {
			t.Errorf("%s ran while the store was down", j.IdempotencyKey)
		}
		if _, loaded := ran.LoadOrStore(j.IdempotencyKey, true); loaded {
			t.Errorf("%s ran twice", j.IdempotencyKey)
		}
		if j.Attempt != 1 {
			t.Errorf("%s ran as attempt %d", j.IdempotencyKey, j.Attempt)
		}
		runs.Add(1)
		return nil
	})
	stop := running(t, cons)
	publishN(t, c, q, "call", n, func(int) string { return `{}` })
	eventually(t, "the messages went round a delay queue", time.Minute, func() bool { return cons.Stats().LimitDeferred >= n })
	fl.failing.Store(false)
	eventually(t, "every message ran", time.Minute, func() bool { return runs.Load() == n })
	topo, _ := cons.Topology(q)
	requireSettled(t, c, topo, stop)
}

// TestLimitsDeferKeepsDeathCount: a message whose attempts the broker
// counted in x-death (no HeaderAttempt: rejected twice before redrive's
// headers were written) keeps them when it goes round a delay queue for
// its limit: republished, it loses its x-death, so the deferral must
// write the count it read as HeaderAttempt, or the message comes back
// as new, its retry budget refilled.
func TestLimitsDeferKeepsDeathCount(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	const n = 6
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:    map[string]amqp.QueueOptions{q: {Concurrency: 3, Prefetch: 3}},
		Executor:  redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:    []redrive.ConcurrencyLimit{{Name: "one", Max: 1}},
		LimitHold: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		if j.Attempt != 3 {
			t.Errorf("%s ran as attempt %d, want 3 (two rejections in x-death)", j.IdempotencyKey, j.Attempt)
		}
		// Real time passing is what is tested: the slot stays taken a
		// while, so that others are deferred.
		time.Sleep(5 * time.Millisecond)
		return nil
	})
	stop := running(t, cons)
	p, err := amqp.NewPublisher(c, amqp.PublisherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	death := amqp091.Table{"x-death": []any{amqp091.Table{"queue": q, "reason": "rejected", "count": int64(2)}}}
	for i := range n {
		if err := p.Publish(context.Background(), "", q, amqp091.Publishing{Type: "work", MessageId: fmt.Sprint("m", i),
			Headers: death, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every message completed", time.Minute, func() bool { return cons.Stats().Completed == n })
	topo, _ := cons.Topology(q)
	requireSettled(t, c, topo, stop)
	if st := cons.Stats(); st.LimitDeferred == 0 {
		t.Errorf("no message went round a delay queue: %+v", st)
	}
}

// TestLimitsNoTiersHoldsNoMoreThanSpare: on a queue without delay queues
// (a policy of no retries), held deliveries must still keep to the
// prefetch beyond Concurrency, as the package documentation states, or
// the consumer must refuse the limits (it does: NewConsumer's error):
// otherwise the deliveries of one full group fill the prefetch, the
// broker delivers nothing more, and the other handlers sit idle while
// an unlimited message waits behind them.
func TestLimitsNoTiersHoldsNoMoreThanSpare(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	none := retry.Policy{MaxRetries: 0, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: 100 * time.Millisecond}
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:   map[string]amqp.QueueOptions{q: {Concurrency: 2, Prefetch: 2}},
		Executor: redrive.ExecutorOptions{Policy: &none, Logger: testLogger(t)},
		Limits:   []redrive.ConcurrencyLimit{{Name: "one", Kind: "slow", Max: 1}},
	})
	if errors.Is(err, redrive.ErrInvalid) && strings.Contains(err.Error(), "delay queue") {
		return // refused, with a clear error: nothing can fill the prefetch
	}
	if err != nil {
		t.Fatal(err)
	}
	if topo, _ := cons.Topology(q); len(topo.Tiers) != 0 {
		t.Fatalf("tiers %v, want none", topo.Tiers)
	}
	release := make(chan struct{})
	fastDone := make(chan struct{})
	cons.HandleFunc("slow", func(ctx context.Context, j *redrive.Job) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	cons.HandleFunc("fast", func(ctx context.Context, j *redrive.Job) error {
		close(fastDone)
		return nil
	})
	stop := running(t, cons)
	publishN(t, c, q, "slow", 3, func(int) string { return `{}` })
	publishN(t, c, q, "fast", 1, func(int) string { return `{}` })
	select {
	case <-fastDone:
	case <-time.After(30 * time.Second): // liveness bound
		t.Errorf("the unlimited message did not run while a full group's deliveries filled the prefetch: %+v", cons.Stats())
	}
	close(release)
	eventually(t, "every message completed", time.Minute, func() bool { return cons.Stats().Completed == 4 })
	topo, _ := cons.Topology(q)
	requireSettled(t, c, topo, stop)
}

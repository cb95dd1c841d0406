package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// overlap counts, per key, the handlers running at once across every
// consumer of a test, and the most seen.
type overlap struct {
	mu        sync.Mutex
	now, peak map[string]int
	started   chan string
	ran       map[string]int
}

func newOverlap() *overlap {
	return &overlap{now: map[string]int{}, peak: map[string]int{}, ran: map[string]int{}, started: make(chan string, 100)}
}

func (o *overlap) begin(key string) {
	o.mu.Lock()
	o.now[key]++
	o.peak[key] = max(o.peak[key], o.now[key])
	o.mu.Unlock()
	select {
	case o.started <- key:
	default:
	}
}

func (o *overlap) end(key, id string) {
	o.mu.Lock()
	o.now[key]--
	o.ran[id]++
	o.mu.Unlock()
}

// killableLimits is a LimitStore whose slot renewals and releases fail
// once killed: as far as the store sees, the process is gone.
type killableLimits struct {
	store.Limits
	dead atomic.Bool
}

func (k *killableLimits) RenewLimitSlots(ctx context.Context, tokens []int64, now, until time.Time) ([]int64, error) {
	if k.dead.Load() {
		return nil, errors.New("killed")
	}
	return k.Limits.RenewLimitSlots(ctx, tokens, now, until)
}

func (k *killableLimits) ReleaseLimitSlot(ctx context.Context, token int64, now time.Time) (bool, error) {
	if k.dead.Load() {
		return false, errors.New("killed")
	}
	return k.Limits.ReleaseLimitSlot(ctx, token, now)
}

func openSlotStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLimitsFleetSlots: two consumers of one queue (two processes), each
// of 6 handlers, with one store as their LimitStore, share a max of 2
// per customer: no customer ever has more than 2 handlers running across
// both (observed from the handlers), every message runs once and
// completes, as its first attempt, and no slot is left taken. Without
// the store each consumer would run 2 of a customer, 4 in all.
func TestLimitsFleetSlots(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	st := openSlotStore(t)
	const limit, keys, n = 2, 3, 90
	ov := newOverlap()
	var conss []*amqp.Consumer
	var stops []func()
	for range 2 {
		cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
			Queues:     map[string]amqp.QueueOptions{q: {Concurrency: 6, Prefetch: 12}},
			Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
			Limits:     []redrive.ConcurrencyLimit{{Name: "per-customer", Queue: q, Key: "payload.customer", Max: limit}},
			LimitStore: st,
			LimitHold:  time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
			var p struct{ Customer string }
			if err := jsonUnmarshal(string(j.Payload), &p); err != nil {
				return err
			}
			if j.Attempt != 1 {
				t.Errorf("%s ran as attempt %d: waiting on a limit uses none", j.IdempotencyKey, j.Attempt)
			}
			ov.begin(p.Customer)
			// Real time passing is what is tested: a handler that runs
			// a while lets its group fill up across both consumers.
			time.Sleep(5 * time.Millisecond)
			ov.end(p.Customer, j.IdempotencyKey)
			return nil
		})
		stops = append(stops, running(t, cons))
		conss = append(conss, cons)
	}
	publishN(t, c, q, "work", n, func(i int) string { return fmt.Sprintf(`{"customer":"c%d"}`, i%keys) })
	eventually(t, "every message completed", 2*time.Minute, func() bool {
		return conss[0].Stats().Completed+conss[1].Stats().Completed == n
	})
	topo, _ := conss[0].Topology(q)
	stops[0]()
	requireSettled(t, c, topo, stops[1])
	ov.mu.Lock()
	defer ov.mu.Unlock()
	for k, p := range ov.peak {
		if p > limit {
			t.Errorf("customer %s ran %d at once across both consumers, the limit is %d", k, p, limit)
		}
	}
	if len(ov.ran) != n {
		t.Errorf("%d distinct messages ran, want %d", len(ov.ran), n)
	}
	for id, k := range ov.ran {
		if k != 1 {
			t.Errorf("%s ran %d times", id, k)
		}
	}
	for i, cons := range conss {
		if s := cons.Stats(); s.Dead != 0 || s.Retried != 0 || s.LimitSlotsLost != 0 {
			t.Errorf("consumer %d: stats %+v", i, s)
		}
	}
	for _, c := range []string{"c0", "c1", "c2"} {
		for i := range limit {
			if tok, err := st.TakeLimitSlot(context.Background(), "per-customer", c, limit, "test", time.Now(), time.Now().Add(time.Minute)); err != nil || tok == 0 {
				t.Errorf("after the run, customer %s's slot %d is not free: %d, %v", c, i+1, tok, err)
			}
		}
	}
}

// TestLimitsFleetSlotsKilled: a consumer that holds both slots of a
// customer's max of 2 is killed (its context cancelled; its handlers
// never return and it never renews nor releases a slot again): the
// other consumer's messages of that customer wait, none running beside
// the killed ones while their leases last, and run once the leases end.
// Real time passes here: leases end by the clock.
func TestLimitsFleetSlotsKilled(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	st := openSlotStore(t)
	// Long enough that a loaded machine renews in time.
	const lease = 3 * time.Second
	limits := []redrive.ConcurrencyLimit{{Name: "per-customer", Queue: q, Key: "payload.customer", Max: 2}}
	ov := newOverlap()
	frozen := make(chan struct{})
	defer close(frozen)
	ka := &killableLimits{Limits: st}
	a, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:     map[string]amqp.QueueOptions{q: {Concurrency: 2, Prefetch: 2}},
		Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:     limits,
		LimitStore: ka, LimitLease: lease, ShutdownTimeout: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	a.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		ov.begin("a")
		<-frozen // a killed process's handler: it never ends
		return nil
	})
	ctxA, killA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	t.Cleanup(func() { <-doneA })
	publishN(t, c, q, "work", 2, func(int) string { return `{"customer":"x"}` })
	for range 2 {
		select {
		case <-ov.started:
		case <-time.After(time.Minute):
			t.Fatal("the first consumer did not start both messages")
		}
	}
	// Killed: no more consuming, renewing or releasing; its handlers
	// stay as they are.
	ka.dead.Store(true)
	killA()
	killedAt := time.Now()
	var ranB atomic.Int64
	var startedB sync.Map
	b, err := amqp.NewConsumer(c, amqp.ConsumerOptions{
		Queues:     map[string]amqp.QueueOptions{q: {Concurrency: 4, Prefetch: 8}},
		Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:     limits,
		LimitStore: st, LimitLease: lease, LimitHold: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		startedB.Store(j.IdempotencyKey, time.Now())
		ranB.Add(1)
		return nil
	})
	running(t, b)
	publishN(t, c, q, "work", 3, func(int) string { return `{"customer":"x"}` })
	eventually(t, "the second consumer ran the customer's messages once the killed one's leases ended", 2*time.Minute,
		func() bool { return ranB.Load() == 3 })
	startedB.Range(func(k, v any) bool {
		// The killed consumer's last renewal was at most a third of a
		// lease before it was killed: its leases end a lease after it,
		// at the earliest two thirds of a lease after the kill.
		if at := v.(time.Time); at.Before(killedAt.Add(2 * lease / 3)) {
			t.Errorf("%v ran %v after the kill, while the killed consumer's slots were still leased", k, at.Sub(killedAt))
		}
		return true
	})
}

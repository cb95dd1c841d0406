package kafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

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
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestLimitsFleetSlots: two consumers of one group (two processes, each
// given partitions of an 8-partition topic) with one store as their
// LimitStore share a max of 2 per customer: no customer ever has more
// than 2 records running across both (observed from the handlers), and
// every record runs. Without the store each consumer would run 2 of a
// customer, 4 in all.
func TestLimitsFleetSlots(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	st := openSlotStore(t)
	const limit, n = 2, 80
	var mu sync.Mutex
	inRun, peak, ran := map[string]int{}, map[string]int{}, map[string]bool{}
	newConsumer := func() *kafka.Consumer {
		cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
			Topics:     map[string]kafka.TopicOptions{topic: {Partitions: 8}},
			Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
			Limits:     []redrive.ConcurrencyLimit{{Name: "cust", Queue: topic, Kind: "work", Key: "payload.customer", Max: limit}},
			LimitStore: st, LimitHold: time.Second,
			ClientOptions: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("probe", func(ctx context.Context, j *redrive.Job) error { return nil })
		cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
			var p struct{ Customer, ID string }
			if err := json.Unmarshal(j.Payload, &p); err != nil {
				return err
			}
			mu.Lock()
			inRun[p.Customer]++
			peak[p.Customer] = max(peak[p.Customer], inRun[p.Customer])
			mu.Unlock()
			// Real time passing is what is tested: a handler that runs
			// a while lets the other partitions' records of its
			// customer, on either consumer, arrive meanwhile.
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			inRun[p.Customer]--
			ran[p.ID] = true
			mu.Unlock()
			return nil
		})
		running(t, cons)
		return cons
	}
	first, second := newConsumer(), newConsumer()
	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	// Unlimited probes on every partition until both consumers have
	// partitions and consume.
	eventually(t, "both consumers consume", 2*time.Minute, func() bool {
		for p := range int32(8) {
			r, err := kafka.NewRecord(topic, "probe", map[string]string{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Partition = p
			c.produce(t, cl, r)
		}
		return first.Stats()[topic].Consumed > 0 && second.Stats()[topic].Consumed > 0
	})
	for i := range n {
		r, err := kafka.NewRecord(topic, "work", map[string]string{"customer": "c0", "ID": fmt.Sprint(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = int32(i % 8)
		c.produce(t, cl, r)
	}
	eventually(t, "every record ran", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for k, p := range peak {
		if p > limit {
			t.Errorf("customer %s ran %d at once across both consumers, the limit is %d", k, p, limit)
		}
	}
	if first.LimitSlotsLost() != 0 || second.LimitSlotsLost() != 0 {
		t.Errorf("slots lost: %d, %d", first.LimitSlotsLost(), second.LimitSlotsLost())
	}
}

// TestLimitsFleetSlotsKilled: a consumer that holds both slots of a
// customer's max of 2 is killed (its context cancelled; its handlers
// never return and it never renews nor releases a slot again): another
// consumer's records of that customer (on another topic, under the same
// limit) wait, none running while the killed one's leases last, and run
// once the leases end. Real time passes here: leases end by the clock.
func TestLimitsFleetSlotsKilled(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topicA, topicB := newTopic(t)+"-a", newTopic(t)+"-b"
	st := openSlotStore(t)
	// Long enough that a loaded machine renews in time.
	const lease = 3 * time.Second
	limits := []redrive.ConcurrencyLimit{{Name: "cust", Key: "payload.customer", Max: 2}}
	frozen := make(chan struct{})
	defer close(frozen)
	startedA := make(chan struct{}, 2)
	ka := &killableLimits{Limits: st}
	a, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topicA + "-g",
		Topics:     map[string]kafka.TopicOptions{topicA: {Partitions: 2}},
		Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:     limits,
		LimitStore: ka, LimitLease: lease, ShutdownTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		startedA <- struct{}{}
		<-frozen // a killed process's handler: it never ends
		return nil
	})
	ctxA, killA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() { doneA <- a.Run(ctxA) }()
	t.Cleanup(func() { <-doneA })
	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range 2 {
		r, err := kafka.NewRecord(topicA, "work", map[string]string{"customer": "x"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = int32(i)
		c.produce(t, cl, r)
	}
	for range 2 {
		select {
		case <-startedA:
		case <-time.After(2 * time.Minute):
			t.Fatal("the first consumer did not start both records")
		}
	}
	ka.dead.Store(true)
	killA()
	killedAt := time.Now()
	var mu sync.Mutex
	startedB := map[string]time.Time{}
	b, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topicB + "-g",
		Topics:     map[string]kafka.TopicOptions{topicB: {Partitions: 3}},
		Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:     limits,
		LimitStore: st, LimitLease: lease, LimitHold: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ ID string }
		_ = json.Unmarshal(j.Payload, &p)
		mu.Lock()
		if _, ok := startedB[p.ID]; !ok {
			startedB[p.ID] = time.Now()
		}
		mu.Unlock()
		return nil
	})
	running(t, b)
	for i := range 3 {
		r, err := kafka.NewRecord(topicB, "work", map[string]string{"customer": "x", "ID": fmt.Sprint(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = int32(i)
		c.produce(t, cl, r)
	}
	eventually(t, "the second consumer ran the customer's records once the killed one's leases ended", 2*time.Minute,
		func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(startedB) == 3
		})
	mu.Lock()
	defer mu.Unlock()
	for id, at := range startedB {
		// The killed consumer's last renewal was at most a third of a
		// lease before it was killed: its leases end a lease after it,
		// at the earliest two thirds of a lease after the kill.
		if at.Before(killedAt.Add(2 * lease / 3)) {
			t.Errorf("record %s ran %v after the kill, while the killed consumer's slots were still leased", id, at.Sub(killedAt))
		}
	}
}

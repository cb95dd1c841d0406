package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

var limitPolicy = retry.Policy{MaxRetries: 3, Initial: 50 * time.Millisecond, Multiplier: 2, MaxDelay: 200 * time.Millisecond,
	Jitter: retry.JitterNone}

// TestLimitsPerKeyAcrossPartitions: records of two customers spread
// over four partitions, under a limit of 1 per customer: no customer
// ever runs two at once (observed from the handlers), in either mode,
// and every record completes, as its first attempt (once, in
// at-least-once mode without a rebalance).
func TestLimitsPerKeyAcrossPartitions(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			topic := newTopic(t)
			const n = 40
			cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
				Topics:    map[string]kafka.TopicOptions{topic: {Partitions: 4}},
				Executor:  redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
				Limits:    []redrive.ConcurrencyLimit{{Name: "cust", Queue: topic, Key: "payload.customer", Max: 1}},
				LimitHold: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			inRun, peak, ran := map[string]int{}, map[string]int{}, map[string]int{}
			cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
				var p struct{ Customer, ID string }
				if err := json.Unmarshal(j.Payload, &p); err != nil {
					return err
				}
				mu.Lock()
				inRun[p.Customer]++
				peak[p.Customer] = max(peak[p.Customer], inRun[p.Customer])
				if j.Attempt != 1 {
					t.Errorf("%s ran as attempt %d", p.ID, j.Attempt)
				}
				mu.Unlock()
				// Real time passing is what is tested: a handler that
				// runs a while lets the other partitions' records of
				// its customer arrive meanwhile.
				time.Sleep(3 * time.Millisecond)
				mu.Lock()
				inRun[p.Customer]--
				ran[p.ID]++
				mu.Unlock()
				return nil
			})
			running(t, cons)
			cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			for i := range n {
				r, err := kafka.NewRecord(topic, "work", map[string]string{"customer": fmt.Sprint("c", i%2), "ID": fmt.Sprint(i)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				r.Partition = int32(i % 4)
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
				if p > 1 {
					t.Errorf("customer %s ran %d at once, the limit is 1", k, p)
				}
			}
			for id, k := range ran {
				// In exactly-once mode a batch whose transaction a
				// rebalance aborted runs again (its effects count once).
				if k != 1 && mode == kafka.AtLeastOnce {
					t.Errorf("%s ran %d times", id, k)
				}
			}
		})
	}
}

// TestLimitsHeldNotCommitted: a record held on its limit is not
// committed, nor is anything after it on its partition, while the
// records before it are; a consumer stopped mid-hold loses nothing: the
// next one runs the held record and those behind it.
func TestLimitsHeldNotCommitted(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	group := topic + "-g"
	limits := []redrive.ConcurrencyLimit{{Name: "one", Kind: "limited", Max: 1}}
	opts := kafka.ConsumerOptions{Brokers: c.brokers, Group: group,
		Topics:    map[string]kafka.TopicOptions{topic: {Partitions: 2}},
		Executor:  redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
		Limits:    limits,
		LimitHold: time.Hour, ShutdownTimeout: 50 * time.Millisecond}
	cons, err := kafka.NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	blocking := make(chan struct{})
	cons.HandleFunc("limited", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ ID string }
		_ = json.Unmarshal(j.Payload, &p)
		mu.Lock()
		ran[p.ID]++
		mu.Unlock()
		if p.ID == "a0" {
			close(blocking)
			<-ctx.Done() // holds the limit's only slot until the shutdown
			return ctx.Err()
		}
		return nil
	})
	cons.HandleFunc("free", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ ID string }
		_ = json.Unmarshal(j.Payload, &p)
		mu.Lock()
		ran[p.ID]++
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rec := func(kind, id string, part int32) *kgo.Record {
		r, err := kafka.NewRecord(topic, kind, map[string]string{"ID": id}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Partition = part
		return r
	}
	c.produce(t, cl, rec("limited", "a0", 0))
	select {
	case <-blocking:
	case <-time.After(2 * time.Minute):
		t.Fatal("a0 never ran")
	}
	c.produce(t, cl, rec("free", "b0", 1), rec("limited", "b1", 1), rec("free", "b2", 1))
	eventually(t, "b1 waits on the limit", time.Minute, func() bool {
		st := cons.LimitStats()
		return len(st) == 1 && st[0].Waiting == 1
	})
	adm := kadm.NewClient(c.client(t))
	eventually(t, "b0 is committed", time.Minute, func() bool { return committedAt(t, adm, group, topic, 1) == 1 })
	mu.Lock()
	if ran["b1"] != 0 || ran["b2"] != 0 {
		t.Errorf("ran behind a held record: %v", ran)
	}
	mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := committedAt(t, adm, group, topic, 1); got != 1 {
		t.Fatalf("partition 1 committed at %d after the shutdown, want 1 (b1 did not run)", got)
	}

	again, err := kafka.NewConsumer(opts)
	if err != nil {
		t.Fatal(err)
	}
	again.HandleFunc("limited", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ ID string }
		_ = json.Unmarshal(j.Payload, &p)
		mu.Lock()
		ran[p.ID]++
		mu.Unlock()
		return nil
	})
	again.HandleFunc("free", func(ctx context.Context, j *redrive.Job) error {
		var p struct{ ID string }
		_ = json.Unmarshal(j.Payload, &p)
		mu.Lock()
		ran[p.ID]++
		mu.Unlock()
		return nil
	})
	running(t, again)
	eventually(t, "every record ran", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran["b1"] >= 1 && ran["b2"] >= 1 && ran["a0"] >= 2
	})
	eventually(t, "everything is committed", time.Minute, func() bool {
		return committedAt(t, adm, group, topic, 0) == 1 && committedAt(t, adm, group, topic, 1) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if ran["b0"] != 1 || ran["b1"] != 1 || ran["b2"] != 1 {
		t.Errorf("runs %v: b0, b1 and b2 should have run once each", ran)
	}
}

// committedAt returns the group's committed offset of a partition of
// topic (-1: none).
func committedAt(t *testing.T, adm *kadm.Client, group, topic string, part int32) int64 {
	t.Helper()
	o, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		return -1
	}
	if r, ok := o.Lookup(topic, part); ok {
		return r.At
	}
	return -1
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
	g.mu.Lock()
	for range took {
		g.grants = append(g.grants, at)
	}
	g.mu.Unlock()
	return took, next, err
}

// TestLimitsFleetRate: two consumers of one group (two processes, each
// given partitions of the topic) with one store as their LimitStore
// share a rate of 20/s, burst 2: the starts the store took for both never
// exceed burst + d/interval in any window d between two of them
// (measured on the store's side), and every record ran.
func TestLimitsFleetRate(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := &grantLog{Limits: st}
	const n = 100
	var mu sync.Mutex
	ran := map[string]bool{}
	newConsumer := func() *kafka.Consumer {
		cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
			Topics:     map[string]kafka.TopicOptions{topic: {Partitions: 4}},
			Executor:   redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
			Limits:     []redrive.ConcurrencyLimit{{Name: "api", Kind: "call", Rate: "20/s", Burst: 2}},
			LimitStore: log, ClientOptions: []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("call", func(ctx context.Context, j *redrive.Job) error {
			mu.Lock()
			ran[j.IdempotencyKey] = true
			mu.Unlock()
			return nil
		})
		running(t, cons)
		return cons
	}
	// The second consumer starts once the first has created the topics
	// and runs: it joins the group midway, and takes partitions. The
	// rest of the records are produced once the group is stable with
	// both (a rebalance on a loaded machine can outlast the whole run
	// at 20/s, and the second consumer would find nothing left).
	newConsumer()
	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r, err := kafka.NewRecord(topic, "call", map[string]int{"i": i}, nil)
			if err != nil {
				t.Fatal(err)
			}
			r.Partition = int32(i % 4)
			c.produce(t, cl, r)
		}
	}
	produce(0, 8)
	eventually(t, "the first records ran", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) >= 4
	})
	second := newConsumer()
	adm := kadm.NewClient(c.client(t))
	eventually(t, "the group stable with both consumers", 2*time.Minute, func() bool {
		gs, err := adm.DescribeGroups(context.Background(), topic+"-g")
		if err != nil {
			return false
		}
		g := gs[topic+"-g"]
		return g.Err == nil && g.State == "Stable" && len(g.Members) == 2
	})
	produce(8, n)
	eventually(t, "the second consumer consumed", 2*time.Minute, func() bool { return second.Stats()[topic].Consumed > 0 })
	eventually(t, "every record ran", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == n
	})
	log.mu.Lock()
	defer log.mu.Unlock()
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

// TestLimitsDeferToTier: while a record holds a limit's only slot, the
// records of that limit on other partitions wait LimitHold, then go to
// the shortest tier (committed only once produced there) and run from
// it once the slot is free: each once, as its first attempt, in either
// mode.
func TestLimitsDeferToTier(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			topic := newTopic(t)
			cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
				Topics:    map[string]kafka.TopicOptions{topic: {Partitions: 3}},
				Executor:  redrive.ExecutorOptions{Policy: &limitPolicy, Logger: testLogger(t)},
				Limits:    []redrive.ConcurrencyLimit{{Name: "one", Max: 1}},
				LimitHold: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			ran := map[string]int{}
			release := make(chan struct{})
			first := make(chan struct{})
			cons.HandleFunc("work", func(ctx context.Context, j *redrive.Job) error {
				var p struct{ ID string }
				_ = json.Unmarshal(j.Payload, &p)
				if j.Attempt != 1 {
					t.Errorf("%s ran as attempt %d", p.ID, j.Attempt)
				}
				if p.ID == "blocker" {
					close(first)
					<-release
				}
				mu.Lock()
				ran[p.ID]++
				mu.Unlock()
				return nil
			})
			running(t, cons)
			cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			rec := func(id string, part int32) *kgo.Record {
				r, err := kafka.NewRecord(topic, "work", map[string]string{"ID": id}, nil)
				if err != nil {
					t.Fatal(err)
				}
				r.Partition = part
				return r
			}
			c.produce(t, cl, rec("blocker", 0))
			select {
			case <-first:
			case <-time.After(2 * time.Minute):
				t.Fatal("the blocker never ran")
			}
			if mode == kafka.AtLeastOnce {
				// Exactly-once holds the blocker's batch open: only
				// at-least-once takes other partitions' records meanwhile.
				c.produce(t, cl, rec("p1", 1), rec("p2", 2))
				eventually(t, "the held records went to a tier", time.Minute, func() bool {
					return cons.Stats()[topic].LimitDeferred >= 2
				})
				mu.Lock()
				if ran["p1"]+ran["p2"] != 0 {
					t.Errorf("ran while the slot was taken: %v", ran)
				}
				mu.Unlock()
				close(release)
			} else {
				close(release)
				c.produce(t, cl, rec("p1", 1), rec("p2", 2))
			}
			eventually(t, "every record ran", 2*time.Minute, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return ran["blocker"] >= 1 && ran["p1"] >= 1 && ran["p2"] >= 1
			})
			if mode == kafka.AtLeastOnce {
				mu.Lock()
				defer mu.Unlock()
				for id, k := range ran {
					if k != 1 {
						t.Errorf("%s ran %d times", id, k)
					}
				}
			}
		})
	}
}

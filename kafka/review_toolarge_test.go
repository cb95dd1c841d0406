package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestTooLargeBatchNotTooLargeRecords: in exactly-once mode the retries
// of one polled batch are produced together, and the client batches them
// per partition; a tier whose max.message.bytes takes each retry but not
// all of them in one batch refuses the batch as too large. Records that
// each fit must still be retried through the tier, not shrunk and
// dead-lettered as too_large.
func TestTooLargeBatchNotTooLargeRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: kafka.ExactlyOnce,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{10 * time.Millisecond}}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := cons.Topology(topic)
	limit := "1500"
	resp, err := kadm.NewClient(c.client(t)).CreateTopics(context.Background(), 1, -1,
		map[string]*string{"max.message.bytes": &limit}, topo.TierTopic(10*time.Millisecond))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	var mu sync.Mutex
	completed := map[string]bool{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		mu.Lock()
		completed[string(r.Key)] = true
		mu.Unlock()
		return nil
	})
	// Produced before the consumer runs: polled in one batch.
	var rs []*kgo.Record
	const n = 8
	for i := range n {
		value := make([]byte, 300) // random: the producer cannot compress it
		for j := range value {
			value[j] = byte(rand.IntN(256))
		}
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(fmt.Sprint(i)), Value: value,
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}}})
	}
	c.produce(t, c.client(t), rs...)
	running(t, cons)
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		done := len(completed)
		mu.Unlock()
		if done == n {
			break
		}
		if dead := c.readCommitted(t, topo.DLT(), 0); len(dead) > 0 {
			t.Fatalf("%d of %d records dead-lettered (reason %q), each of which fits the tier",
				len(dead), n, header(dead[0], kafka.HeaderReason))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records completed", done, n)
		}
	}
}

// TestTooLargeBatchAtLeastOnce: in at-least-once mode the partitions'
// goroutines produce their retries concurrently, and the client batches
// those bound for one tier partition; records that each fit the tier
// must be retried through it, not dead-lettered as too_large.
func TestTooLargeBatchAtLeastOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	const parts = 8
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: parts, Tiers: []time.Duration{10 * time.Millisecond}}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := cons.Topology(topic)
	limit := "1500"
	resp, err := kadm.NewClient(c.client(t)).CreateTopics(context.Background(), 1, -1,
		map[string]*string{"max.message.bytes": &limit}, topo.TierTopic(10*time.Millisecond))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	c.ensure(t, cons, topic)
	var mu sync.Mutex
	completed := map[string]bool{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		mu.Lock()
		completed[string(r.Key)] = true
		mu.Unlock()
		return nil
	})
	var rs []*kgo.Record
	const n = 10 * parts
	for i := range n {
		value := make([]byte, 300)
		for j := range value {
			value[j] = byte(rand.IntN(256))
		}
		rs = append(rs, &kgo.Record{Topic: topic, Partition: int32(i % parts), Key: []byte(fmt.Sprint(i)), Value: value,
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}}})
	}
	c.produce(t, c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())), rs...)
	running(t, cons)
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		done := len(completed)
		mu.Unlock()
		if done == n {
			break
		}
		if dead := c.readCommitted(t, topo.DLT(), 0); len(dead) > 0 {
			t.Fatalf("%d of %d records dead-lettered (reason %q), each of which fits the tier",
				len(dead), n, header(dead[0], kafka.HeaderReason))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records completed", done, n)
		}
	}
}

// TestTooLargeDeadCountedOnce: a retry too large for its tier, whose
// dead letter is too large for the DLT until its value is dropped, is one
// dead record in the consumer's stats, not one per form tried.
func TestTooLargeDeadCountedOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			topic := newTopic(t)
			p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
			cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
				Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1, Tiers: []time.Duration{10 * time.Millisecond}}},
				Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
			if err != nil {
				t.Fatal(err)
			}
			topo, _ := cons.Topology(topic)
			adm := kadm.NewClient(c.client(t))
			limit := "700"
			resp, err := adm.CreateTopics(context.Background(), 1, -1, map[string]*string{"max.message.bytes": &limit},
				topo.TierTopic(10*time.Millisecond), topo.DLT())
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			c.ensure(t, cons, topic)
			cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error { return errors.New("fails") })
			running(t, cons)
			value := make([]byte, 940)
			for i := range value {
				value[i] = byte(rand.IntN(256))
			}
			c.produce(t, c.client(t), &kgo.Record{Topic: topic, Key: []byte("big"), Value: value,
				Headers: []kgo.RecordHeader{{Key: kafka.HeaderKind, Value: []byte("job")}}})
			dead := c.readCommitted(t, topo.DLT(), 1)
			if header(dead[0], kafka.HeaderValueRef) == "" {
				t.Fatalf("dead letter with %d bytes of value, no value ref", len(dead[0].Value))
			}
			eventually(t, "the dead letter counted", 30*time.Second, func() bool { return cons.Stats()[topic].Dead > 0 })
			if n := cons.Stats()[topic].Dead; n != 1 {
				t.Errorf("stats: %d dead, want 1", n)
			}
		})
	}
}

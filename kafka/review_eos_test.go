package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestExactlyOnceEndTimesOutAfterCommit: the broker answers a few
// EndTxn(commit) requests after the transaction's end timeout, and then
// commits them: the lane's End fails though the transaction commits, the
// lane replaces its session and consumes from the committed offsets.
// Every retry is visible once to read_committed, none twice.
func TestExactlyOnceEndTimesOutAfterCommit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.needFake(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: kafka.ExactlyOnce,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 2}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	kafka.SetEndTimeout(cons, 300*time.Millisecond)
	sessionFailed := make(chan struct{}, 16)
	kafka.OnSessionFailed(cons, func(error) {
		select {
		case sessionFailed <- struct{}{}:
		default:
		}
	})
	c.ensure(t, cons, topic)
	const n = 30
	var mu sync.Mutex
	completed := map[string]int{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		mu.Lock()
		completed[string(r.Key)]++
		mu.Unlock()
		return nil
	})
	var slowed atomic.Int64
	c.fake.ControlKey(int16(kmsg.EndTxn), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.EndTxnRequest)
		if !req.Commit || slowed.Load() >= 3 {
			return nil, nil, false
		}
		c.fake.KeepControl()
		slowed.Add(1)
		// The answer comes after the client's end timeout: once the
		// session whose End timed out was given up.
		c.fake.SleepControl(func() {
			select {
			case <-sessionFailed:
			case <-time.After(30 * time.Second): // a liveness bound
				t.Errorf("the lane kept its session 30s past the end timeout of a transaction not ended")
			}
		})
		return nil, nil, false
	})
	stop := running(t, cons)
	cl := c.client(t)
	for i := range n {
		r, _ := kafka.NewRecord(topic, "job", i, []byte(fmt.Sprintf("k%d", i)))
		c.produce(t, cl, r)
	}
	eventually(t, "every record completed", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) == n
	})
	topo, _ := cons.Topology(topic)
	tier := topo.TierTopic(topo.Tiers[0])
	// Stopped, the consumer produces nothing more: the tier is read to
	// its end.
	stop()
	retries := c.readToEnd(t, tier)
	seen := map[string]int{}
	for _, r := range retries {
		seen[string(r.Key)]++
	}
	for k, v := range seen {
		if v != 1 {
			t.Errorf("%s: %d retries visible to read_committed, want 1", k, v)
		}
	}
	if len(seen) != n {
		t.Errorf("%d records retried, want %d", len(seen), n)
	}
	if slowed.Load() == 0 {
		t.Error("no EndTxn was slowed")
	}
	t.Logf("EndTxn slowed: %d", slowed.Load())
}

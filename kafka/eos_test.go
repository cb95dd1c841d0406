package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestExactlyOnce: in ExactlyOnce mode, with transactions aborted on
// purpose (the offset commit inside the transaction fails), every record
// completes, and a read_committed reader sees each retry and each dead
// letter exactly once: the aborted batches' produces never show.
func TestExactlyOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 1, Initial: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: kafka.ExactlyOnce,
		Topics: map[string]kafka.TopicOptions{topic: {Partitions: 3}},
		// Aborted batches run their handlers again: beyond 100 retries
		// in 10 s the retry budget would push some retries to a longer
		// tier, which this test does not read.
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t), DisableRetryBudget: true}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 60
	var mu sync.Mutex
	completed := map[string]int{}
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		r, _ := kafka.RecordOf(ctx)
		k := string(r.Key)
		if j.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		if k[0] == 'd' {
			return redrive.Permanent(errors.New("dead on the retry"))
		}
		mu.Lock()
		completed[k]++
		mu.Unlock()
		return nil
	})
	var aborted atomic.Int64
	if c.fake != nil {
		// Fail the transactional offset commit of a few batches: their
		// transactions abort and the batches are consumed again.
		c.fake.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if aborted.Load() >= 3 {
				return nil, nil, false
			}
			c.fake.KeepControl()
			aborted.Add(1)
			r := req.(*kmsg.TxnOffsetCommitRequest)
			resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
			for _, rt := range r.Topics {
				st := kmsg.NewTxnOffsetCommitResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
					sp.Partition = rp.Partition
					sp.ErrorCode = kerr.UnknownServerError.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
	}
	running(t, cons)
	cl := c.client(t)
	for i := range n {
		k := fmt.Sprintf("ok-%d", i)
		if i%10 == 0 {
			k = fmt.Sprintf("dead-%d", i)
		}
		r, _ := kafka.NewRecord(topic, "job", i, []byte(k))
		c.produce(t, cl, r)
	}
	eventually(t, "every record settled", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(completed) == n-n/10
	})
	topo, _ := cons.Topology(topic)
	// read_committed: what a downstream reader sees.
	tier := topo.TierTopic(10 * time.Millisecond)
	retries := c.readCommitted(t, tier, n)
	dead := c.readCommitted(t, topo.DLT(), n/10)
	time.Sleep(500 * time.Millisecond)
	retries = append(retries, c.readCommitted(t, tier, 0)[len(retries):]...)
	seen := map[string]int{}
	for _, r := range retries {
		seen[string(r.Key)]++
	}
	for k, v := range seen {
		if v != 1 {
			t.Errorf("%s: %d retries visible to read_committed, want 1", k, v)
		}
	}
	if len(seen) != n || len(dead) != n/10 {
		t.Errorf("%d records retried, %d dead letters; want %d and %d", len(seen), len(dead), n, n/10)
	}
	if c.fake != nil && aborted.Load() == 0 {
		t.Errorf("no transaction was aborted: the injection did not happen")
	}
	t.Logf("transactions aborted on purpose: %d; handler completions beyond one per record: %d", aborted.Load(), func() int {
		mu.Lock()
		defer mu.Unlock()
		extra := 0
		for _, v := range completed {
			extra += v - 1
		}
		return extra
	}())
}

// readCommitted reads topic from the start with read_committed isolation
// until it has at least n records (n 0: whatever comes within a second).
func (c *testCluster) readCommitted(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := c.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var out []*kgo.Record
	bound := 20 * time.Second
	if n == 0 {
		bound = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for n == 0 || len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			if n == 0 {
				return out
			}
			t.Fatalf("read %s: %d records, want %d", topic, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

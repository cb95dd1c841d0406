package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
)

// TestReadAheadPausedAcrossRebalance: partitions paused because their
// read-ahead is full move to a second consumer of the group and back
// (it joins, then leaves): every record still completes, none left
// behind a pause nobody lifts.
func TestReadAheadPausedAcrossRebalance(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	const parts, n = 4, 200
	var mu sync.Mutex
	done := map[string]bool{}
	release := make(chan struct{})
	newCons := func() *kafka.Consumer {
		cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g",
			Topics:          map[string]kafka.TopicOptions{topic: {Partitions: parts}},
			MaxReadAhead:    4,
			ShutdownTimeout: 100 * time.Millisecond,
			Executor:        redrive.ExecutorOptions{Logger: testLogger(t)},
			ClientOptions:   []kgo.Opt{kgo.FetchMaxPartitionBytes(1 << 10)}})
		if err != nil {
			t.Fatal(err)
		}
		cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			done[string(j.Payload)] = true
			mu.Unlock()
			return nil
		})
		return cons
	}
	a := newCons()
	c.ensure(t, a, topic)
	cl := c.client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range n {
		r, _ := kafka.NewRecord(topic, "job", []byte(fmt.Sprint(i)), nil)
		r.Partition = int32(i % parts)
		c.produce(t, cl, r)
	}
	running(t, a)
	eventually(t, "the first records polled", 30*time.Second, func() bool { return a.Stats()[topic].Consumed > 0 })
	b := newCons()
	stopB := running(t, b)
	eventually(t, "the second consumer polled", 30*time.Second, func() bool { return b.Stats()[topic].Consumed > 0 })
	stopB()
	close(release)
	eventually(t, "every record completed", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == n
	})
}

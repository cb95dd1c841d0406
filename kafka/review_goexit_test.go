package kafka_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/retry"
)

// TestHandlerGoexitRetries: a handler that calls runtime.Goexit (as
// t.FailNow does) fails its attempt as a panic would: the record is
// retried, and the records behind it on its partition still run, in
// both modes.
func TestHandlerGoexitRetries(t *testing.T) {
	for _, mode := range []kafka.Mode{kafka.AtLeastOnce, kafka.ExactlyOnce} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) { testHandlerGoexitRetries(t, mode) })
	}
}

func testHandlerGoexitRetries(t *testing.T, mode kafka.Mode) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	p := retry.Policy{MaxRetries: 3, Initial: 100 * time.Millisecond, Multiplier: 1, MaxDelay: 100 * time.Millisecond, Jitter: retry.JitterNone}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: topic + "-g", Mode: mode,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	var goexitRuns, nextRuns atomic.Int32
	var retryAttempt atomic.Int32
	cons.HandleFunc("goexit", func(ctx context.Context, j *redrive.Job) error {
		if goexitRuns.Add(1) == 1 {
			runtime.Goexit()
		}
		retryAttempt.Store(int32(j.Attempt))
		return nil
	})
	cons.HandleFunc("next", func(ctx context.Context, j *redrive.Job) error { nextRuns.Add(1); return nil })
	running(t, cons)
	cl := c.client(t)
	r, _ := kafka.NewRecord(topic, "goexit", 1, nil)
	c.produce(t, cl, r)
	r, _ = kafka.NewRecord(topic, "next", 2, nil)
	c.produce(t, cl, r)
	eventually(t, "the record behind the Goexit runs", 20*time.Second, func() bool { return nextRuns.Load() == 1 })
	eventually(t, "the Goexit's record is retried", 20*time.Second, func() bool { return retryAttempt.Load() != 0 })
	if a := retryAttempt.Load(); a != 2 {
		t.Errorf("retry ran as attempt %d, want 2", a)
	}
}

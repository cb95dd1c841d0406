package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/kafka"
)

// TestSettledCommittedWhileNextRuns: a record settled while the record
// behind it still runs is committed within the commit interval, not only
// once that next record's handler returns: a crash during a long handler
// must not run the records settled before it again. (Marks batched by
// the partition were held for as long as the next attempt ran.)
func TestSettledCommittedWhileNextRuns(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	topic := newTopic(t)
	group := topic + "-g"
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: c.brokers, Group: group,
		Topics:   map[string]kafka.TopicOptions{topic: {Partitions: 1}},
		Executor: redrive.ExecutorOptions{Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{}) // closed: "first" returns
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	cons.HandleFunc("job", func(ctx context.Context, j *redrive.Job) error {
		switch string(j.Payload) {
		case `"first"`:
			<-gate
		case `"slow"`:
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	running(t, cons)
	t.Cleanup(func() { close(release) })
	cl := c.client(t)
	for _, p := range []string{"first", "quick", "slow"} {
		r, _ := kafka.NewRecord(topic, "job", p, nil)
		c.produce(t, cl, r)
	}
	// All three queued behind "first" (the consumer polled them), so
	// the partition's queue does not run empty before "slow" starts.
	eventually(t, "the three records polled", 20*time.Second, func() bool { return cons.Stats()[topic].Consumed >= 3 })
	close(gate)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("slow did not start")
	}
	adm := kadm.NewClient(c.client(t))
	eventually(t, "the records before slow committed while it runs", 20*time.Second, func() bool {
		os, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			return false
		}
		o, ok := os.Lookup(topic, 0)
		return ok && o.Err == nil && o.At >= 2
	})
}

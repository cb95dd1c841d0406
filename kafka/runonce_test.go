package kafka_test

import (
	"context"
	"math"
	"testing"

	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
)

// TestRunOnce: a consumer and a keeper run once: Run again, after the
// first has returned, is refused with the error text users have always
// seen. No broker is needed: the first Run's ctx is over.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	brokers := []string{"127.0.0.1:1"}
	cons, err := kafka.NewConsumer(kafka.ConsumerOptions{Brokers: brokers, Group: "g",
		Topics: map[string]kafka.TopicOptions{"run-once": {Partitions: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	add := func(context.Context, []store.DeadJob) ([]*store.Job, error) { return nil, nil }
	k, err := kafka.NewKeeper(kafka.KeeperOptions{Brokers: brokers, Topologies: []kafka.Topology{{Topic: "run-once"}}, Add: add})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		run  func(context.Context) error
		want string
	}{{cons.Run, "kafka: consumer already running"}, {k.Run, "kafka: keeper already running"}} {
		_ = x.run(ended) // its ctx over: it returns at once
		if err := x.run(ended); err == nil || err.Error() != x.want {
			t.Errorf("second Run: %v, want %q", err, x.want)
		}
	}
}

// TestRedriveRefusesNaNRate: a rate of NaN (--rate NaN) is refused with
// an error, before any record is touched; it used to panic in
// time.NewTicker.
func TestRedriveRefusesNaNRate(t *testing.T) {
	_, err := new(kafka.DLT).Redrive(context.Background(), kafka.RedriveOptions{Rate: math.NaN()})
	if err == nil || err.Error() != "kafka: redrive: rate NaN is not a number" {
		t.Fatalf("got %v, want the rate refused", err)
	}
}

package amqp_test

import (
	"context"
	"math"
	"testing"

	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/store"
)

// TestRunOnce: a consumer, a router and a keeper run once: Run again,
// after the first has returned, is refused with the error text users
// have always seen.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	c := dial(t)
	q := newQueue(t, c)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	cons, err := amqp.NewConsumer(c, amqp.ConsumerOptions{Queues: map[string]amqp.QueueOptions{q: {}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := amqp.NewRouter(c, amqp.RouterOptions{Queues: map[string]amqp.QueueOptions{q: {}}, FailureExchange: q + "-failures"})
	if err != nil {
		t.Fatal(err)
	}
	add := func(context.Context, []store.DeadJob) ([]*store.Job, error) { return nil, nil }
	k, err := amqp.NewKeeper(c, amqp.KeeperOptions{Topologies: []amqp.Topology{{Queue: q}}, Add: add})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		run  func(context.Context) error
		want string
	}{{cons.Run, "amqp: consumer already running"}, {r.Run, "amqp: router already running"},
		{k.Run, "amqp: keeper already running"}} {
		_ = x.run(ended) // its ctx over: it returns at once
		if err := x.run(ended); err == nil || err.Error() != x.want {
			t.Errorf("second Run: %v, want %q", err, x.want)
		}
	}
}

// TestRedriveRefusesNaNRate: a rate of NaN (--rate NaN) is refused with
// an error, before any message is touched; it used to panic in
// time.NewTicker.
func TestRedriveRefusesNaNRate(t *testing.T) {
	_, err := new(amqp.DLQ).Redrive(context.Background(), amqp.RedriveOptions{Rate: math.NaN()})
	if err == nil || err.Error() != "amqp: redrive: rate NaN is not a number" {
		t.Fatalf("got %v, want the rate refused", err)
	}
}

package amqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/retry"
)

// existingQueue declares q as an operator's earlier setup would, with
// redrive's dead-letter arguments and extra ones, and puts one message
// in it.
func existingQueue(t *testing.T, c *amqp.Conn, q string, extra amqp091.Table) {
	t.Helper()
	ch, err := c.Channel(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	args := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q + "-dlq"}
	for k, v := range extra {
		args[k] = v
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp091.Publishing{Body: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	// Wait for the broker to have it (a liveness bound, not a timing).
	eventually(t, "the message is in "+q, time.Minute, func() bool { return depth(t, c, q) == 1 })
}

// TestDeclareAdoptsCompatibleQueue: an existing work queue whose extra
// arguments redrive does not set and that lose no message (a priority, a
// queue mode, a single active consumer) is adopted with its messages; one
// with an argument that drops messages (x-max-length) is refused with
// the ways to migrate, and keeps its messages too.
func TestDeclareAdoptsCompatibleQueue(t *testing.T) {
	t.Parallel()
	c := dial(t)

	q := newQueue(t, c)
	existingQueue(t, c, q, amqp091.Table{"x-max-priority": int64(5), "x-queue-mode": "lazy", "x-single-active-consumer": true})
	topo := amqp.Topology{Queue: q}
	if err := topo.DeclareConn(context.Background(), c); err != nil {
		t.Fatalf("DeclareConn on a compatible queue: %v", err)
	}
	if err := topo.DeclareConn(context.Background(), c); err != nil {
		t.Fatalf("DeclareConn again: %v", err)
	}
	if n := depth(t, c, q); n != 1 {
		t.Errorf("adopted queue holds %d messages, want 1", n)
	}

	bad := newQueue(t, c)
	existingQueue(t, c, bad, amqp091.Table{"x-max-priority": int64(5), "x-max-length": int64(10)})
	err := amqp.Topology{Queue: bad}.DeclareConn(context.Background(), c)
	for _, want := range []string{bad, "x-max-length", "new queue name", "shovel", "policy", "docs/rabbitmq.md"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("DeclareConn on an incompatible queue = %v, want it to say %q", err, want)
		}
	}
	if n := depth(t, c, bad); n != 1 {
		t.Errorf("refused queue holds %d messages, want 1", n)
	}
}

// TestRouterAdoptsCompatibleQueue: a managed work queue an operator made
// earlier with a priority, besides the dead-lettering redrive needs, is
// adopted by the router with its message (serve's path); one with a
// maximum length is refused with the ways to migrate.
func TestRouterAdoptsCompatibleQueue(t *testing.T) {
	t.Parallel()
	c := dial(t)
	p := retry.Policy{MaxRetries: 1, Initial: 20 * time.Millisecond, Multiplier: 2, MaxDelay: 40 * time.Millisecond, Jitter: retry.JitterNone}
	declare := func(extra amqp091.Table) (string, error) {
		q := newQueue(t, c)
		exchange := "redrive-test-failures-" + q
		t.Cleanup(func() {
			if ch, err := c.Channel(context.Background()); err == nil {
				ch.ExchangeDelete(exchange, false, false)
				// The policy's delay queues, whatever deleteTopology's
				// list holds.
				topo := amqp.NewTopology(q, p)
				for _, d := range topo.Tiers {
					ch.QueueDelete(topo.TierQueue(d), false, false, false)
				}
				ch.Close()
			}
		})
		ch, err := c.Channel(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		args := amqp091.Table{"x-dead-letter-exchange": exchange, "x-dead-letter-routing-key": q}
		for k, v := range extra {
			args[k] = v
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
		if err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp091.Publishing{Body: []byte("kept")}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the message is in "+q, time.Minute, func() bool { return depth(t, c, q) == 1 })
		r, err := amqp.NewRouter(c, amqp.RouterOptions{Queues: map[string]amqp.QueueOptions{q: {}}, FailureExchange: exchange,
			Executor: redrive.ExecutorOptions{Policy: &p, Logger: testLogger(t)}})
		if err != nil {
			t.Fatal(err)
		}
		err = r.Declare(context.Background())
		if n := depth(t, c, q); n != 1 {
			t.Errorf("queue %s holds %d messages, want 1", q, n)
		}
		return q, err
	}
	if _, err := declare(amqp091.Table{"x-max-priority": int64(9)}); err != nil {
		t.Fatalf("a compatible queue is refused: %v", err)
	}
	q, err := declare(amqp091.Table{"x-max-length": int64(100)})
	for _, want := range []string{q, "x-max-length", "new queue name", "shovel", "policy"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("an incompatible queue: %v, want it to say %q", err, want)
		}
	}
}

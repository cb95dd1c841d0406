package amqpmetrics_test

import (
	"context"
	"github.com/redrivehq/redrive/metrics/internal/metricstest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/metrics/amqpmetrics"
	"github.com/redrivehq/redrive/store"
)

// managedFixture is what serve reports of two managed queues: orders,
// whose dead letters are kept in the store, with a delay queue missing on
// the broker; and mail, whose broker could not be asked and whose dead
// letters stay in the broker. orders is listed twice, as a buggy source
// could.
func managedFixture() []amqp.ManagedQueue {
	orders := amqp.ManagedQueue{Queue: "orders", Broker: "amqp://rabbit:5672/", FailureExchange: amqp.DefaultFailureExchange,
		DeadLetters: "store",
		Queues: []amqp.QueueDepth{
			{Name: "orders", Role: "work", Messages: 12, Consumers: 3},
			{Name: "orders-dlq", Role: "dlq", Messages: 0, Consumers: 1},
			{Name: "orders-failed", Role: "failed", Messages: 2, Consumers: 1},
			{Name: "orders-retry-1s", Role: "tier", Delay: store.Duration(time.Second), Messages: 5},
			{Name: "orders-retry-10s", Role: "tier", Delay: store.Duration(10 * time.Second), Missing: true},
		},
		Router: amqp.RouterStats{Failures: 40, Reported: 4, Retried: 33, Dead: 7, Returned: 30},
		Keeper: &amqp.KeeperStats{Kept: 6, Duplicates: 1}}
	mail := amqp.ManagedQueue{Queue: "mail", Broker: "amqp://rabbit:5672/", DeadLetters: "broker",
		Router: amqp.RouterStats{Failures: 1, Retried: 1}, Error: "RabbitMQ did not answer in time (not connected?)"}
	return []amqp.ManagedQueue{mail, orders, orders}
}

func TestCollector(t *testing.T) {
	var deadline bool
	c := amqpmetrics.NewCollector(func(ctx context.Context) []amqp.ManagedQueue {
		_, deadline = ctx.Deadline()
		return managedFixture()
	}, amqpmetrics.Options{Timeout: time.Second})
	want := `
# HELP redrive_amqp_dead_letters_duplicate_total Dead letters of a managed RabbitMQ queue that were already stored (delivered again after a crash), dropped from the DLQ. Since this process started; sum across replicas.
# TYPE redrive_amqp_dead_letters_duplicate_total counter
redrive_amqp_dead_letters_duplicate_total{queue="orders"} 1
# HELP redrive_amqp_dead_letters_kept_total Dead letters of a managed RabbitMQ queue stored in the store as new dead jobs. Since this process started; sum across replicas.
# TYPE redrive_amqp_dead_letters_kept_total counter
redrive_amqp_dead_letters_kept_total{queue="orders"} 6
# HELP redrive_amqp_dead_total Messages of a managed RabbitMQ queue the router moved to its DLQ (retries exhausted, permanent, undecodable). Since this process started; sum across replicas.
# TYPE redrive_amqp_dead_total counter
redrive_amqp_dead_total{queue="mail"} 0
redrive_amqp_dead_total{queue="orders"} 7
# HELP redrive_amqp_failures_total Failed attempts of a managed RabbitMQ queue's messages the router received: rejections and reported failures. Since this process started; sum across replicas.
# TYPE redrive_amqp_failures_total counter
redrive_amqp_failures_total{queue="mail"} 1
redrive_amqp_failures_total{queue="orders"} 40
# HELP redrive_amqp_queue_consumers Consumers subscribed to a queue of a managed RabbitMQ queue's topology; role is work, failed, tier or dlq. The broker's count: every process managing the queue reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_amqp_queue_consumers gauge
redrive_amqp_queue_consumers{broker_queue="orders",queue="orders",role="work"} 3
redrive_amqp_queue_consumers{broker_queue="orders-dlq",queue="orders",role="dlq"} 1
redrive_amqp_queue_consumers{broker_queue="orders-failed",queue="orders",role="failed"} 1
redrive_amqp_queue_consumers{broker_queue="orders-retry-1s",queue="orders",role="tier"} 0
# HELP redrive_amqp_queue_messages Messages ready in a queue of a managed RabbitMQ queue's topology (not those consumers hold unacknowledged); role is work, failed, tier (a delay queue) or dlq. The broker's count: every process managing the queue reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_amqp_queue_messages gauge
redrive_amqp_queue_messages{broker_queue="orders",queue="orders",role="work"} 12
redrive_amqp_queue_messages{broker_queue="orders-dlq",queue="orders",role="dlq"} 0
redrive_amqp_queue_messages{broker_queue="orders-failed",queue="orders",role="failed"} 2
redrive_amqp_queue_messages{broker_queue="orders-retry-1s",queue="orders",role="tier"} 5
# HELP redrive_amqp_retried_total Retries of a managed RabbitMQ queue's messages the router scheduled through the delay queues. Since this process started; sum across replicas.
# TYPE redrive_amqp_retried_total counter
redrive_amqp_retried_total{queue="mail"} 1
redrive_amqp_retried_total{queue="orders"} 33
# HELP redrive_amqp_returned_total Retried messages of a managed RabbitMQ queue the router handed back to the work queue once due. Since this process started; sum across replicas.
# TYPE redrive_amqp_returned_total counter
redrive_amqp_returned_total{queue="mail"} 0
redrive_amqp_returned_total{queue="orders"} 30
# HELP redrive_amqp_up 1 when the broker answered the last scrape's questions about a managed RabbitMQ queue, else 0.
# TYPE redrive_amqp_up gauge
redrive_amqp_up{queue="mail"} 0
redrive_amqp_up{queue="orders"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if !deadline {
		t.Error("the scrape asked for the managed queues without a deadline: a hung broker would hang the scrape")
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	// Through a registry, as serve exposes it: no duplicate series.
	text := metricstest.Exposition(t, c)
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_amqp_up{queue="orders"}`: 1,
		`redrive_amqp_queue_messages{broker_queue="orders-retry-1s",queue="orders",role="tier"}`: 5,
	})
	if strings.Contains(text, "orders-retry-10s") {
		t.Errorf("a missing queue has depth series:\n%s", metricstest.GrepLines(text, "orders-retry-10s"))
	}
}

func TestCollectorNothing(t *testing.T) {
	for name, c := range map[string]*amqpmetrics.Collector{
		"nil function": amqpmetrics.NewCollector(nil, amqpmetrics.Options{}),
		"no queues":    amqpmetrics.NewCollector(func(context.Context) []amqp.ManagedQueue { return nil }, amqpmetrics.Options{}),
	} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series, want none", name, n)
		}
		if text := metricstest.Exposition(t, c); strings.Contains(text, "redrive_amqp") {
			t.Errorf("%s: exposition:\n%s", name, text)
		}
	}
}

package amqpmetrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrivehq/redrive/amqp"
	"github.com/redrivehq/redrive/metrics/internal/label"
)

// Options configure NewCollector. The zero value is
// usable.
type Options struct {
	// Timeout bounds how long one scrape waits for the broker's depths
	// (default 10s).
	Timeout time.Duration
}

// Collector is a prometheus.Collector of the RabbitMQ queues that
// `redrive serve --amqp-url` manages for consumers in any language (see
// package amqp, Router and Keeper), read at every scrape:
//
//	redrive_amqp_queue_messages{queue,broker_queue,role}   messages ready in each queue of the topology
//	redrive_amqp_queue_consumers{queue,broker_queue,role}  consumers of each queue of the topology
//	redrive_amqp_failures_total{queue}                     failed attempts the router received
//	redrive_amqp_retried_total{queue}                      retries the router scheduled
//	redrive_amqp_dead_total{queue}                         messages the router moved to the DLQ
//	redrive_amqp_returned_total{queue}                     retries handed back to the work queue once due
//	redrive_amqp_dead_letters_kept_total{queue}            dead letters stored as dead jobs
//	redrive_amqp_dead_letters_duplicate_total{queue}       dead letters already stored
//	redrive_amqp_up{queue}                                 1 when the broker answered
//
// queue is the managed work queue; broker_queue is one queue of its
// topology, and role what it is to it: work, failed (the failure queue),
// tier (a delay queue) or dlq. A queue of the topology that does not
// exist on the broker has no depth series. The dead-letter counters are
// exported only when dead letters are kept in the store.
//
// The depths are the broker's: every process managing the same queues
// reports the same values (aggregate replicas with max). The counters
// are this process's own since it started (sum them). Create it with
// NewCollector.
type Collector struct {
	queues  func(ctx context.Context) []amqp.ManagedQueue
	timeout time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of the managed queues that
// queues returns at each scrape, typically the ManagedQueues method of
// the server.Brokers given to the API (server.Options.Brokers). A nil
// queues collects nothing. Register it on a prometheus.Registerer.
func NewCollector(queues func(ctx context.Context) []amqp.ManagedQueue, opts Options) *Collector {
	c := &Collector{queues: queues, timeout: opts.Timeout}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	return c
}

// perBroker ends the help of the depth gauges; perProcess, that of the
// counters.
const (
	perBroker  = " The broker's count: every process managing the queue reports the same value; aggregate replicas with max, not sum."
	perProcess = " Since this process started; sum across replicas."
)

var (
	amqpMessagesDesc = prometheus.NewDesc("redrive_amqp_queue_messages",
		"Messages ready in a queue of a managed RabbitMQ queue's topology (not those consumers hold unacknowledged); "+
			"role is work, failed, tier (a delay queue) or dlq."+perBroker,
		[]string{"queue", "broker_queue", "role"}, nil)
	amqpConsumersDesc = prometheus.NewDesc("redrive_amqp_queue_consumers",
		"Consumers subscribed to a queue of a managed RabbitMQ queue's topology; role is work, failed, tier or dlq."+perBroker,
		[]string{"queue", "broker_queue", "role"}, nil)
	amqpFailuresDesc = prometheus.NewDesc("redrive_amqp_failures_total",
		"Failed attempts of a managed RabbitMQ queue's messages the router received: rejections and reported failures."+perProcess,
		[]string{"queue"}, nil)
	amqpRetriedDesc = prometheus.NewDesc("redrive_amqp_retried_total",
		"Retries of a managed RabbitMQ queue's messages the router scheduled through the delay queues."+perProcess,
		[]string{"queue"}, nil)
	amqpDeadDesc = prometheus.NewDesc("redrive_amqp_dead_total",
		"Messages of a managed RabbitMQ queue the router moved to its DLQ (retries exhausted, permanent, undecodable)."+perProcess,
		[]string{"queue"}, nil)
	amqpReturnedDesc = prometheus.NewDesc("redrive_amqp_returned_total",
		"Retried messages of a managed RabbitMQ queue the router handed back to the work queue once due."+perProcess,
		[]string{"queue"}, nil)
	amqpKeptDesc = prometheus.NewDesc("redrive_amqp_dead_letters_kept_total",
		"Dead letters of a managed RabbitMQ queue stored in the store as new dead jobs."+perProcess,
		[]string{"queue"}, nil)
	amqpDuplicateDesc = prometheus.NewDesc("redrive_amqp_dead_letters_duplicate_total",
		"Dead letters of a managed RabbitMQ queue that were already stored (delivered again after a crash), dropped from the DLQ."+perProcess,
		[]string{"queue"}, nil)
	amqpUpDesc = prometheus.NewDesc("redrive_amqp_up",
		"1 when the broker answered the last scrape's questions about a managed RabbitMQ queue, else 0.",
		[]string{"queue"}, nil)
)

// Describe sends the collector's fixed descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{amqpMessagesDesc, amqpConsumersDesc, amqpFailuresDesc, amqpRetriedDesc, amqpDeadDesc,
		amqpReturnedDesc, amqpKeptDesc, amqpDuplicateDesc, amqpUpDesc} {
		ch <- d
	}
}

// Collect asks for the managed queues and exports them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.queues == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// A registry refuses a scrape with a series twice: a queue listed
	// twice is exported once.
	seen := map[string]bool{}
	for _, q := range c.queues(ctx) {
		name := label.NonEmpty(q.Queue)
		if seen[name] {
			continue
		}
		seen[name] = true
		gauge := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), name)
		}
		gauge(amqpUpDesc, label.Bool(q.Error == ""), name)
		depth := map[string]bool{}
		for _, d := range q.Queues {
			bq := label.NonEmpty(d.Name)
			if d.Missing || depth[bq] {
				continue
			}
			depth[bq] = true
			role := label.NonEmpty(d.Role)
			gauge(amqpMessagesDesc, float64(d.Messages), name, bq, role)
			gauge(amqpConsumersDesc, float64(d.Consumers), name, bq, role)
		}
		counter(amqpFailuresDesc, q.Router.Failures)
		counter(amqpRetriedDesc, q.Router.Retried)
		counter(amqpDeadDesc, q.Router.Dead)
		counter(amqpReturnedDesc, q.Router.Returned)
		if q.Keeper != nil {
			counter(amqpKeptDesc, q.Keeper.Kept)
			counter(amqpDuplicateDesc, q.Keeper.Duplicates)
		}
	}
}

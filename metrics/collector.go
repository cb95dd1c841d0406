package metrics

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrivehq/redrive/metrics/internal/label"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/store"
)

// CollectorOptions configure NewCollector. The zero value is usable.
type CollectorOptions struct {
	// Breakers, when set, are exported too: a worker's circuit breakers
	// (Worker.Breakers).
	Breakers *breaker.Registry
	// Logger receives a warning when a scrape cannot read the store
	// (default slog.Default()).
	Logger *slog.Logger
	// Timeout bounds the store reads of one scrape (default 10s).
	Timeout time.Duration
	// Now is the clock of redrive_schedule_overdue_seconds (default
	// time.Now).
	Now func() time.Time
}

// Collector is a prometheus.Collector of the store-wide metrics, read from
// the store at every scrape (so they are the store's real counts, whichever
// process changed them), and of a worker's circuit breakers:
//
//	redrive_jobs{queue,state}                  jobs per queue and state
//	redrive_<counter>_total{queue,class}       the store's running totals
//	redrive_events_total{queue,name,class}     other running totals
//	redrive_queue_paused{queue}                1 when paused
//	redrive_queue_latency_seconds{queue}       age of the oldest due job
//	redrive_queue_unconsumed{queue}            1 when due jobs wait and no live worker serves the queue
//	redrive_stats_up                           1 when the last read succeeded
//	redrive_breaker_state{breaker,state}       per process
//	redrive_breaker_failures{breaker}          per process
//	redrive_breaker_trips_total{breaker}       per process
//	redrive_breaker_fallback                   per process: 1 when it lost the store and decides alone
//	redrive_fleet_breaker_state{breaker,state} the fleet's breakers, shared through the store
//	redrive_fleet_breaker_opened_timestamp_seconds{breaker,opened_by}
//	redrive_fleet_breaker_ready_timestamp_seconds{breaker}
//	redrive_fleet_breaker_failures{breaker}
//	redrive_fleet_breaker_trips_total{breaker}
//	redrive_schedule_paused{schedule}          periodic schedules (schedules.go)
//	redrive_schedule_last_run_timestamp_seconds{schedule}
//	redrive_schedule_next_run_timestamp_seconds{schedule}
//	redrive_schedule_overdue_seconds{schedule}
//
// Every process sharing a store reports the same store-wide values: do not
// sum them across replicas, take the max (see the package documentation).
// Create it with NewCollector.
type Collector struct {
	client   *redrive.Client
	breakers *breaker.Registry
	log      *slog.Logger
	timeout  time.Duration
	now      func() time.Time
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of the store-wide metrics of client's
// store, and of opts.Breakers. Register it on a prometheus.Registerer.
func NewCollector(client *redrive.Client, opts CollectorOptions) *Collector {
	c := &Collector{client: client, breakers: opts.Breakers, log: opts.Logger, timeout: opts.Timeout, now: opts.Now}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// storeWide ends the help of the store-wide metrics.
const storeWide = " Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum."

// noClass is the class label of the counters that have no failure class.
const noClass = "none"

// jobStates are the states of redrive_jobs: store.States and Blocked,
// which store.States leaves out because the queues' counts (the
// Queue.Jobs of /v1/queues, the CLI's and the dashboard's columns) list
// six states; the gauge has every state a job can be in.
var jobStates = append(slices.Clone(store.States), store.Blocked)

var (
	jobsDesc = prometheus.NewDesc("redrive_jobs", "Jobs per queue and state, as the store counts them."+storeWide,
		[]string{"queue", "state"}, nil)
	workflowsDesc = prometheus.NewDesc("redrive_workflows",
		"Workflows by state (active, succeeded, finished, canceled), from the workflows' rows."+storeWide, []string{"state"}, nil)
	counterDesc = map[string]*prometheus.Desc{}
	otherDesc   = prometheus.NewDesc("redrive_events_total", "Other running totals of the store, by name."+storeWide,
		[]string{"queue", "name", "class"}, nil)
	breakerStateDesc = prometheus.NewDesc("redrive_breaker_state",
		"Circuit breaker state: 1 for the breaker's current state, 0 for the others. Per process.", []string{"breaker", "state"}, nil)
	breakerFailuresDesc = prometheus.NewDesc("redrive_breaker_failures",
		"Failures within the breaker's window. Per process.", []string{"breaker"}, nil)
	breakerTripsDesc = prometheus.NewDesc("redrive_breaker_trips_total",
		"Times the breaker opened since the process started. Per process.", []string{"breaker"}, nil)
	statsUpDesc = prometheus.NewDesc("redrive_stats_up",
		"1 when the last read of the store's statistics succeeded, else 0.", nil, nil)
	queuePausedDesc = prometheus.NewDesc("redrive_queue_paused",
		"1 when the queue is paused (workers fetch none of its jobs), else 0."+storeWide, []string{"queue"}, nil)
	queueLatencyDesc = prometheus.NewDesc("redrive_queue_latency_seconds",
		"How long the queue's oldest due job (pending, or scheduled and due) has waited since it was due; 0 when none is due."+storeWide,
		[]string{"queue"}, nil)
	queueUnconsumedDesc = prometheus.NewDesc("redrive_queue_unconsumed",
		"1 when the queue has due jobs and no live worker serves it (nothing will run them), else 0."+storeWide,
		[]string{"queue"}, nil)
)

// counterHelp describes the store's counters exported as
// redrive_<name>_total{queue,class}.
var counterHelp = map[string]string{
	store.StatAttempts:            "Attempts started.",
	store.StatSucceeded:           "Attempts that completed their job.",
	store.StatSucceededAfterRetry: "Completions on an attempt after the first.",
	store.StatFailed:              "Failed attempts, by failure class.",
	store.StatRetried:             "Retries scheduled.",
	store.StatDead:                "Jobs moved to the dead-letter queue, by failure class.",
	store.StatRedriven:            "Jobs redriven from the dead-letter queue.",
	store.StatSnoozed:             "Jobs snoozed by their handler.",
	store.StatDeferred:            "Jobs deferred by an open circuit breaker.",
	store.StatRescued:             "Expired leases rescued.",
	store.StatEnqueued:            "Jobs created.",
	store.StatDeduplicated:        "Enqueues answered by an existing job (idempotency key).",
	store.StatCanceled:            "Jobs canceled.",
	store.StatPurged:              "Dead jobs purged or expired.",
}

func init() {
	for name, help := range counterHelp {
		counterDesc[name] = prometheus.NewDesc("redrive_"+name+"_total",
			help+` class="none" when the counter has no failure class.`+storeWide, []string{"queue", "class"}, nil)
	}
}

// Describe sends the collector's fixed descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- workflowsDesc
	ch <- otherDesc
	for _, d := range counterDesc {
		ch <- d
	}
	ch <- breakerStateDesc
	ch <- breakerFailuresDesc
	ch <- breakerTripsDesc
	describeFleet(ch)
	describeSchedules(ch)
	describeLimits(ch)
	ch <- statsUpDesc
	ch <- queuePausedDesc
	ch <- queueLatencyDesc
	ch <- queueUnconsumedDesc
}

// Collect reads the statistics and the queues from the store, and the
// breakers.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.client.Stats(ctx)
	up := 1.0
	if err != nil {
		up = 0
		c.log.Warn("metrics: reading the statistics failed", "error", err)
	}
	qs, qerr := c.client.Queues(ctx)
	if qerr != nil {
		up = 0
		c.log.Warn("metrics: reading the queues failed", "error", qerr)
	}
	ch <- prometheus.MustNewConstMetric(statsUpDesc, prometheus.GaugeValue, up)
	for _, q := range qs {
		name := nonEmpty(q.Name)
		ch <- prometheus.MustNewConstMetric(queuePausedDesc, prometheus.GaugeValue, b2f(q.Paused), name)
		ch <- prometheus.MustNewConstMetric(queueLatencyDesc, prometheus.GaugeValue, float64(q.LatencyMS)/1000, name)
		ch <- prometheus.MustNewConstMetric(queueUnconsumedDesc, prometheus.GaugeValue, b2f(q.Unconsumed), name)
	}
	for queue, states := range st.Jobs {
		for _, s := range jobStates {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(states[s]), nonEmpty(queue), string(s))
		}
	}
	// Counters without a class and those of class "none" are one series:
	// added up, not exported twice.
	type series struct{ queue, name, class string }
	counters := map[series]float64{}
	for queue, cs := range st.Counters {
		for key, n := range cs {
			name, class, _ := strings.Cut(key, ".")
			if class == "" {
				class = noClass
			}
			counters[series{nonEmpty(queue), nonEmpty(name), class}] += float64(n)
		}
	}
	for s, n := range counters {
		if d, ok := counterDesc[s.name]; ok {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, n, s.queue, s.class)
		} else {
			ch <- prometheus.MustNewConstMetric(otherDesc, prometheus.CounterValue, n, s.queue, s.name, s.class)
		}
	}
	c.collectWorkflows(ctx, ch)
	c.collectFleet(ctx, ch)
	c.collectSchedules(ctx, ch)
	c.collectLimits(ctx, ch)
	if c.breakers == nil {
		return
	}
	for _, b := range c.breakers.Statuses() {
		name := nonEmpty(b.Name)
		for _, s := range []breaker.State{breaker.Closed, breaker.HalfOpen, breaker.Open} {
			ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, b2f(b.State == s), name, s.String())
		}
		ch <- prometheus.MustNewConstMetric(breakerFailuresDesc, prometheus.GaugeValue, float64(b.Failures), name)
		ch <- prometheus.MustNewConstMetric(breakerTripsDesc, prometheus.CounterValue, float64(b.Trips), name)
	}
}

// collectWorkflows exports the workflows by state; a failed read is
// logged and exports none (redrive_stats_up says the store was read).
func (c *Collector) collectWorkflows(ctx context.Context, ch chan<- prometheus.Metric) {
	counts, err := c.client.CountWorkflows(ctx)
	if err != nil {
		c.log.Warn("metrics: reading the workflows' states failed", "error", err)
		return
	}
	for _, s := range store.WorkflowStates {
		ch <- prometheus.MustNewConstMetric(workflowsDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 { return label.Bool(b) }

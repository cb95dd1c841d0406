// Package metrics exports redrive's Prometheus metrics, the ones
// `redrive serve` exposes on /metrics, for programs that embed redrive
// and register them on their own registry. It and its sub-packages are
// the only packages of the module that depend on
// github.com/prometheus/client_golang.
//
// These collectors make them:
//
//   - NewCollector: the store-wide metrics, read from the store at each
//     scrape (jobs per queue and state, the store's running totals, queue
//     pause, latency and consumption), and the circuit breakers of a
//     worker.
//   - NewObserver: the histograms of attempt durations and lateness. It is
//     the Worker's Observer (WorkerOptions.Observer), since only the
//     process that ran an attempt knows its timings.
//   - amqpmetrics.NewCollector (package metrics/amqpmetrics, so that a
//     program without RabbitMQ does not link its client): the RabbitMQ
//     queues managed for consumers in any
//     language (redrive_amqp_*): the broker's depth and consumers of each
//     queue of their topologies, and the router's and dead-letter
//     keeper's running totals.
//   - kafkametrics.NewCollector (package metrics/kafkametrics, likewise
//     for Kafka): the Kafka topics whose dead letters are kept in
//     the store (redrive_kafka_*): the records each topic of their
//     topologies retains, consumer lag, and the dead-letter keeper's
//     running totals.
//
// # Summing across replicas
//
// The store-wide metrics (redrive_jobs, redrive_<counter>_total,
// redrive_events_total, redrive_queue_paused, redrive_queue_latency_seconds,
// redrive_queue_unconsumed) are the store's numbers: every process that
// shares the store (PostgreSQL) reports the same values, so a sum over
// replicas multiplies them. Aggregate them with max, e.g.
//
//	max by (queue, state) (redrive_jobs)
//	max by (queue, class) (rate(redrive_failed_total[5m]))
//	max by (queue) (redrive_queue_latency_seconds)
//
// The per-process metrics (the attempt histograms, the breakers, the
// redrive_amqp_*_total and redrive_kafka_*_total counters) are this
// process's own: sum those. The RabbitMQ depths
// (redrive_amqp_queue_messages, _consumers) are the broker's, and the
// Kafka offsets, records and lags (redrive_kafka_offsets, _records,
// _lag) the cluster's, the same in every process: take the max.
//
// No label is ever empty: a counter without a failure class has
// class="none", a job kind without a handler kind="other", and an empty
// queue or breaker name (which redrive does not create) would be
// "unknown".
package metrics

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrivehq/redrive/metrics/internal/label"

	"github.com/redrivehq/redrive"
)

// LatencyBuckets are the upper bounds, in seconds, of the attempt duration
// and lateness histograms: 1ms to 10min, in steps of 2 to 3.
//
//   - 1ms at the bottom: the worker starts a due job or retry within about
//     a millisecond (it leases jobs due within its 20ms lookahead and
//     starts each at its due time), and a trivial handler takes less, so
//     finer buckets would only split "on time" and "instant".
//   - 10min at the top: the longest timeout the http kind accepts is 5min,
//     retry delays are capped at minutes by sensible policies, and a queue
//     wait beyond 10 minutes is an outage, visible in the +Inf bucket and
//     in redrive_queue_latency_seconds, not a figure to read a quantile of.
//   - Steps of 2 to 3 (the 1-2.5-5 series, then 10s, 30s, 1m, 2m, 5m,
//     10m) keep a quantile estimate within one step of the truth with 18
//     buckets: 20 series per label set with _sum and _count.
var LatencyBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// OtherKind is the kind label of the jobs of kinds the Observer was not
// told of: the API accepts any kind, and a label per unknown kind would
// let any client grow the metrics without bound.
const OtherKind = "other"

// nonEmpty returns s, or "unknown" when s is empty (see label.NonEmpty).
func nonEmpty(s string) string { return label.NonEmpty(s) }

// Observer is a redrive.Observer that feeds the histograms of attempt
// durations and lateness, and a prometheus.Collector to register:
//
//	redrive_attempt_duration_seconds{queue,kind,outcome}
//	redrive_job_lateness_seconds{queue,kind,attempt_kind="first"|"retry"}
//	redrive_trace_contexts_malformed_total
//
// An attempt traced by a sampled span (AttemptInfo.Span) is observed in
// the duration histogram with an exemplar, its trace_id and span_id,
// which a registry exposes when scraped in the OpenMetrics format
// (promhttp.HandlerOpts.EnableOpenMetrics, and a scraper that asks for
// it).
//
// Create it with NewObserver. It is safe for concurrent use.
type Observer struct {
	duration *prometheus.HistogramVec
	lateness *prometheus.HistogramVec
	// kinds are the kinds with a handler; others are labeled OtherKind.
	kinds map[string]bool
	// series caches the histograms of each label set, read without a
	// lock: WithLabelValues hashes the labels and takes the vector's lock
	// on every call, which on a busy worker is most of an observation's
	// cost. The map is replaced, never changed; mu orders the additions.
	// No series of the vectors is ever deleted, so a cached one stays the
	// one exposed.
	series atomic.Pointer[map[seriesKey]attemptSeries]
	mu     sync.Mutex
}

var _ redrive.Observer = (*Observer)(nil)
var _ prometheus.Collector = (*Observer)(nil)

// seriesKey is the labels of one attempt's observations.
type seriesKey struct {
	queue, kind string
	outcome     redrive.AttemptOutcome
	retry       bool
}

// attemptSeries are the histograms one attempt is observed in.
type attemptSeries struct {
	duration, lateness prometheus.Observer
}

// NewObserver returns the histograms for a worker that handles the given
// kinds (the kinds registered with Worker.HandleFunc); attempts of other
// kinds are labeled kind="other". Pass it as WorkerOptions.Observer and
// register it on a prometheus.Registerer.
func NewObserver(kinds ...string) *Observer {
	m := &Observer{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redrive_attempt_duration_seconds",
			Help: "How long handlers ran, per attempt outcome (completed, retry, dead, snoozed, deferred, " +
				"released, canceled); 0 for a job an open breaker deferred before its handler ran. " +
				"Per process: sum across replicas.",
			Buckets: LatencyBuckets,
		}, []string{"queue", "kind", "outcome"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redrive_job_lateness_seconds",
			Help: "How long after its job was due each attempt started: the queue wait of first attempts " +
				`(attempt_kind="first"), the retry lateness of retries (attempt_kind="retry"). Per process: sum across replicas.`,
			Buckets: LatencyBuckets,
		}, []string{"queue", "kind", "attempt_kind"}),
		kinds: map[string]bool{},
	}
	for _, k := range kinds {
		m.kinds[k] = true
	}
	m.series.Store(&map[seriesKey]attemptSeries{})
	return m
}

// ObserveAttempt records one attempt in the histograms. It is called by
// the worker's goroutines, at once: the histograms are safe for that.
func (m *Observer) ObserveAttempt(a redrive.AttemptInfo) {
	k := seriesKey{queue: a.Queue, kind: a.Kind, outcome: a.Outcome, retry: a.Retry}
	if !m.kinds[k.kind] {
		k.kind = OtherKind
	}
	s, ok := (*m.series.Load())[k]
	if !ok {
		s = m.addSeries(k)
	}
	if a.Span.IsSampled() && a.Span.HasTraceID() {
		// The attempt's trace, so that a slow bucket leads to one trace
		// that fell in it (exposed in the OpenMetrics format only).
		s.duration.(prometheus.ExemplarObserver).ObserveWithExemplar(a.Duration.Seconds(),
			prometheus.Labels{"trace_id": a.Span.TraceID().String(), "span_id": a.Span.SpanID().String()})
	} else {
		s.duration.Observe(a.Duration.Seconds())
	}
	s.lateness.Observe(a.Lateness.Seconds())
}

// addSeries returns the histograms of k, adding them to the cache.
func (m *Observer) addSeries(k seriesKey) attemptSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.series.Load()
	if s, ok := old[k]; ok {
		return s
	}
	attemptKind := "first"
	if k.retry {
		attemptKind = "retry"
	}
	queue, outcome := nonEmpty(k.queue), nonEmpty(string(k.outcome))
	s := attemptSeries{
		duration: m.duration.WithLabelValues(queue, k.kind, outcome),
		lateness: m.lateness.WithLabelValues(queue, k.kind, attemptKind),
	}
	next := make(map[seriesKey]attemptSeries, len(old)+1)
	maps.Copy(next, old)
	next[k] = s
	m.series.Store(&next)
	return s
}

// malformedDesc describes redrive_trace_contexts_malformed_total.
var malformedDesc = prometheus.NewDesc("redrive_trace_contexts_malformed_total",
	"Trace contexts (a traceparent header of an API request or a broker message, a job's stored trace context) "+
		"that did not parse and were ignored, a new trace started instead. Per process: sum across replicas.", nil, nil)

// Describe sends the histograms' descriptions.
func (m *Observer) Describe(ch chan<- *prometheus.Desc) {
	m.duration.Describe(ch)
	m.lateness.Describe(ch)
	ch <- malformedDesc
}

// Collect sends the histograms, and the count of this process's
// malformed trace contexts (redrive.MalformedTraceContexts).
func (m *Observer) Collect(ch chan<- prometheus.Metric) {
	m.duration.Collect(ch)
	m.lateness.Collect(ch)
	ch <- prometheus.MustNewConstMetric(malformedDesc, prometheus.CounterValue, float64(redrive.MalformedTraceContexts()))
}

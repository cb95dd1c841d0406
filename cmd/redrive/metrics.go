package main

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redrivehq/redrive"
)

// latencyBuckets are the upper bounds, in seconds, of the attempt duration
// and lateness histograms: 1ms to 10min, in steps of 2 to 3.
//
//   - 1ms at the bottom: the worker starts a due job or retry within about
//     a millisecond (it leases jobs due within its 20ms lookahead and
//     starts each at its due time), and a trivial handler takes less, so
//     finer buckets would only split "on time" and "instant".
//   - 10min at the top: the longest timeout the http kind accepts is 5min,
//     retry delays are capped at minutes by sensible policies, and a queue
//     wait beyond 10 minutes is an outage, visible in the +Inf bucket and
//     in redrive_jobs, not a figure to read a quantile of.
//   - Steps of 2 to 3 (the 1-2.5-5 series, then 10s, 30s, 1m, 2m, 5m,
//     10m) keep a quantile estimate within one step of the truth with 18
//     buckets: 20 series per label set with _sum and _count.
var latencyBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// otherKind is the kind label of the jobs of kinds this process has no
// handler for: the API accepts any kind, and a label per unknown kind
// would let any client grow the metrics without bound.
const otherKind = "other"

// attemptMetrics is the worker's redrive.Observer in serve: it feeds the
// histograms of attempt durations and lateness, which only the process
// that ran the attempts knows (the store keeps counts, not timings). It
// is a prometheus.Collector to register.
type attemptMetrics struct {
	duration *prometheus.HistogramVec
	lateness *prometheus.HistogramVec
	// kinds are the kinds with a handler; others are labeled otherKind.
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

// newAttemptMetrics returns the histograms for a worker that handles the
// given kinds.
func newAttemptMetrics(kinds ...string) *attemptMetrics {
	m := &attemptMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redrive_attempt_duration_seconds",
			Help: "How long handlers ran, per attempt outcome (completed, retry, dead, snoozed, deferred, " +
				"released, canceled); 0 for a job an open breaker deferred before its handler ran.",
			Buckets: latencyBuckets,
		}, []string{"queue", "kind", "outcome"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redrive_job_lateness_seconds",
			Help: "How long after its job was due each attempt started: the queue wait of first attempts " +
				`(attempt_kind="first"), the retry lateness of retries (attempt_kind="retry").`,
			Buckets: latencyBuckets,
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
func (m *attemptMetrics) ObserveAttempt(a redrive.AttemptInfo) {
	k := seriesKey{queue: a.Queue, kind: a.Kind, outcome: a.Outcome, retry: a.Retry}
	if !m.kinds[k.kind] {
		k.kind = otherKind
	}
	s, ok := (*m.series.Load())[k]
	if !ok {
		s = m.addSeries(k)
	}
	s.duration.Observe(a.Duration.Seconds())
	s.lateness.Observe(a.Lateness.Seconds())
}

// addSeries returns the histograms of k, adding them to the cache.
func (m *attemptMetrics) addSeries(k seriesKey) attemptSeries {
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
	s := attemptSeries{
		duration: m.duration.WithLabelValues(k.queue, k.kind, string(k.outcome)),
		lateness: m.lateness.WithLabelValues(k.queue, k.kind, attemptKind),
	}
	next := make(map[seriesKey]attemptSeries, len(old)+1)
	maps.Copy(next, old)
	next[k] = s
	m.series.Store(&next)
	return s
}

// Describe sends the histograms' descriptions.
func (m *attemptMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.duration.Describe(ch)
	m.lateness.Describe(ch)
}

// Collect sends the histograms.
func (m *attemptMetrics) Collect(ch chan<- prometheus.Metric) {
	m.duration.Collect(ch)
	m.lateness.Collect(ch)
}

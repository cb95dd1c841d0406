package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/metrics/internal/metricstest"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

func TestAttemptMetrics(t *testing.T) {
	m := metrics.NewObserver("http", "mail")
	m.ObserveAttempt(redrive.AttemptInfo{Queue: "default", Kind: "http", Attempt: 1, Outcome: redrive.OutcomeCompleted,
		Duration: 20 * time.Millisecond, Lateness: 3 * time.Millisecond})
	m.ObserveAttempt(redrive.AttemptInfo{Queue: "default", Kind: "http", Attempt: 2, Retry: true, Outcome: redrive.OutcomeRetry,
		Class: failure.Transient, Err: errors.New("503"), Duration: 2 * time.Second, Lateness: 700 * time.Microsecond})
	m.ObserveAttempt(redrive.AttemptInfo{Queue: "mail", Kind: "mail", Attempt: 3, Retry: true, Outcome: redrive.OutcomeDead,
		Duration: time.Hour, Lateness: 20 * time.Minute})
	// Kinds without a handler share one label value.
	for _, k := range []string{"mystery", "other", "x"} {
		m.ObserveAttempt(redrive.AttemptInfo{Queue: "default", Kind: k, Attempt: 1, Outcome: redrive.OutcomeDeferred})
	}
	text := metricstest.Exposition(t, m)
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_attempt_duration_seconds_count{kind="http",outcome="completed",queue="default"}`:             1,
		`redrive_attempt_duration_seconds_bucket{kind="http",outcome="completed",queue="default",le="0.01"}`:  0,
		`redrive_attempt_duration_seconds_bucket{kind="http",outcome="completed",queue="default",le="0.025"}`: 1,
		`redrive_attempt_duration_seconds_sum{kind="http",outcome="completed",queue="default"}`:               0.02,
		`redrive_attempt_duration_seconds_bucket{kind="http",outcome="retry",queue="default",le="1"}`:         0,
		`redrive_attempt_duration_seconds_bucket{kind="http",outcome="retry",queue="default",le="2.5"}`:       1,
		`redrive_attempt_duration_seconds_bucket{kind="mail",outcome="dead",queue="mail",le="600"}`:           0,
		`redrive_attempt_duration_seconds_bucket{kind="mail",outcome="dead",queue="mail",le="+Inf"}`:          1,
		`redrive_attempt_duration_seconds_count{kind="other",outcome="deferred",queue="default"}`:             3,
		`redrive_attempt_duration_seconds_bucket{kind="other",outcome="deferred",queue="default",le="0.001"}`: 3,
		`redrive_job_lateness_seconds_count{attempt_kind="first",kind="http",queue="default"}`:                1,
		`redrive_job_lateness_seconds_bucket{attempt_kind="first",kind="http",queue="default",le="0.0025"}`:   0,
		`redrive_job_lateness_seconds_bucket{attempt_kind="first",kind="http",queue="default",le="0.005"}`:    1,
		`redrive_job_lateness_seconds_count{attempt_kind="retry",kind="http",queue="default"}`:                1,
		`redrive_job_lateness_seconds_bucket{attempt_kind="retry",kind="http",queue="default",le="0.001"}`:    1,
		`redrive_job_lateness_seconds_bucket{attempt_kind="retry",kind="mail",queue="mail",le="600"}`:         0,
		`redrive_job_lateness_seconds_count{attempt_kind="first",kind="other",queue="default"}`:               3,
	})
	for _, k := range []string{"mystery", `kind="x"`} {
		if strings.Contains(text, k) {
			t.Errorf("a kind without a handler has its own label: %s", metricstest.GrepLines(text, k))
		}
	}
	// Every bucket of the range is exposed, in order.
	var les []string
	for _, b := range metrics.LatencyBuckets {
		les = append(les, strconv.FormatFloat(b, 'g', -1, 64))
	}
	for i, le := range les {
		series := fmt.Sprintf(`redrive_job_lateness_seconds_bucket{attempt_kind="first",kind="http",queue="default",le="%s"}`, le)
		if _, ok := metricstest.Sample(text, series); !ok {
			t.Errorf("bucket %d (le %s) missing", i, le)
		}
	}
	if metrics.LatencyBuckets[0] != 0.001 || metrics.LatencyBuckets[len(metrics.LatencyBuckets)-1] != 600 {
		t.Errorf("buckets %v, want 1ms to 10min", metrics.LatencyBuckets)
	}
}

// TestAttemptMetricsConcurrent observes from many goroutines at once, each
// walking the label sets in its own order, so that series are added to the
// cache while others are read: every observation must be counted once.
func TestAttemptMetricsConcurrent(t *testing.T) {
	m := metrics.NewObserver("http")
	outcomes := []redrive.AttemptOutcome{redrive.OutcomeCompleted, redrive.OutcomeRetry, redrive.OutcomeDead,
		redrive.OutcomeSnoozed, redrive.OutcomeDeferred, redrive.OutcomeReleased, redrive.OutcomeCanceled}
	queues := []string{"a", "b", "c"}
	const goroutines, rounds = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for r := range rounds {
				n := len(queues) * len(outcomes)
				for i := range n {
					k := (i + g*5 + r) % n // each label set once per round
					m.ObserveAttempt(redrive.AttemptInfo{Queue: queues[k%len(queues)], Kind: "http",
						Outcome: outcomes[k/len(queues)], Attempt: 1 + k%2, Retry: k%2 == 1})
				}
			}
		})
	}
	wg.Wait()
	text := metricstest.Exposition(t, m)
	want := map[string]float64{}
	for _, q := range queues {
		for _, o := range outcomes {
			want[fmt.Sprintf(`redrive_attempt_duration_seconds_count{kind="http",outcome="%s",queue="%s"}`, o, q)] = goroutines * rounds
		}
	}
	metricstest.WantSamples(t, text, want)
	var late float64
	for _, q := range queues {
		for _, ak := range []string{"first", "retry"} {
			n, _ := metricstest.Sample(text, fmt.Sprintf(`redrive_job_lateness_seconds_count{attempt_kind="%s",kind="http",queue="%s"}`, ak, q))
			late += n
		}
	}
	if total := float64(goroutines * rounds * len(queues) * len(outcomes)); late != total {
		t.Errorf("lateness observations %v, want %v", late, total)
	}
}

func BenchmarkAttemptObserver(b *testing.B) {
	m := metrics.NewObserver("http")
	infos := []redrive.AttemptInfo{
		{Queue: "default", Kind: "http", Attempt: 1, Outcome: redrive.OutcomeCompleted, Duration: 3 * time.Millisecond, Lateness: 400 * time.Microsecond},
		{Queue: "default", Kind: "http", Attempt: 1, Outcome: redrive.OutcomeRetry, Class: failure.Transient, Duration: 40 * time.Millisecond},
		{Queue: "default", Kind: "http", Attempt: 2, Retry: true, Outcome: redrive.OutcomeCompleted, Duration: 5 * time.Millisecond, Lateness: time.Millisecond},
		{Queue: "webhooks", Kind: "mystery", Attempt: 1, Outcome: redrive.OutcomeDead, Class: failure.Unknown, Duration: time.Microsecond},
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.ObserveAttempt(infos[i&3])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				m.ObserveAttempt(infos[i&3])
				i++
			}
		})
	})
}

// openClient opens a client on a new SQLite store.
func openClient(t *testing.T) (*redrive.Client, store.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)}), st
}

func TestCollectorBreakers(t *testing.T) {
	client, _ := openClient(t)
	reg := breaker.NewRegistry(breaker.DefaultConfig())
	b := reg.Get("api.example.com:443")
	for range 10 {
		tok, err := b.Allow()
		if err != nil {
			break
		}
		b.Record(tok, errors.New("boom"))
	}
	reg.Get("healthy:80")
	c := metrics.NewCollector(client, metrics.CollectorOptions{Breakers: reg, Logger: slog.New(slog.DiscardHandler)})
	want := `
# HELP redrive_breaker_state Circuit breaker state: 1 for the breaker's current state, 0 for the others. Per process.
# TYPE redrive_breaker_state gauge
redrive_breaker_state{breaker="api.example.com:443",state="closed"} 0
redrive_breaker_state{breaker="api.example.com:443",state="half_open"} 0
redrive_breaker_state{breaker="api.example.com:443",state="open"} 1
redrive_breaker_state{breaker="healthy:80",state="closed"} 1
redrive_breaker_state{breaker="healthy:80",state="half_open"} 0
redrive_breaker_state{breaker="healthy:80",state="open"} 0
# HELP redrive_breaker_trips_total Times the breaker opened since the process started. Per process.
# TYPE redrive_breaker_trips_total counter
redrive_breaker_trips_total{breaker="api.example.com:443"} 1
redrive_breaker_trips_total{breaker="healthy:80"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "redrive_breaker_state", "redrive_breaker_trips_total"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(context.Background(), "x", nil, redrive.InQueue("mail")); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP redrive_jobs Jobs per queue and state, as the store counts them. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_jobs gauge
redrive_jobs{queue="mail",state="blocked"} 0
redrive_jobs{queue="mail",state="canceled"} 0
redrive_jobs{queue="mail",state="completed"} 0
redrive_jobs{queue="mail",state="dead"} 0
redrive_jobs{queue="mail",state="pending"} 1
redrive_jobs{queue="mail",state="running"} 0
redrive_jobs{queue="mail",state="scheduled"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "redrive_jobs"); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorWorkflows: redrive_jobs counts the blocked jobs of a
// workflow, and redrive_workflows the workflows by state, every state
// present, as they move.
func TestCollectorWorkflows(t *testing.T) {
	ctx := context.Background()
	client, st := openClient(t)
	c := metrics.NewCollector(client, metrics.CollectorOptions{Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: "etl", Kind: kind, MaxRetries: -1} }
	for _, name := range []string{"one", "two"} {
		if _, err := st.EnqueueWorkflow(ctx, store.NewWorkflow{Name: name, Jobs: []store.WorkflowNode{
			{Name: "a", Job: nj("a")}, {Name: "b", Job: nj("b"), After: []string{"a"}}, {Name: "c", Job: nj("c"), After: []string{"a", "b"}},
		}}, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.EnqueueWorkflow(ctx, store.NewWorkflow{Name: "batch", Jobs: []store.WorkflowNode{{Name: "x", Job: nj("x")}}}, now); err != nil {
		t.Fatal(err)
	}
	metricstest.WantSamples(t, metricstest.Exposition(t, c), map[string]float64{
		`redrive_jobs{queue="etl",state="blocked"}`: 4,
		`redrive_jobs{queue="etl",state="pending"}`: 3,
		`redrive_workflows{state="active"}`:         3,
		`redrive_workflows{state="succeeded"}`:      0,
		`redrive_workflows{state="finished"}`:       0,
		`redrive_workflows{state="canceled"}`:       0,
	})
	// The batch's job completes, one workflow is canceled.
	got, err := st.Fetch(ctx, store.FetchParams{Queue: "etl", Limit: 10, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range got {
		if j.Kind != "x" {
			continue
		}
		if _, err := st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker,
			Kind: store.Complete, At: now}}); err != nil {
			t.Fatal(err)
		}
	}
	ws, _, err := client.ListWorkflows(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Name == "one" {
			if _, err := client.CancelWorkflow(ctx, w.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	text := metricstest.Exposition(t, c)
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_jobs{queue="etl",state="blocked"}`: 2,
		`redrive_workflows{state="active"}`:         1,
		`redrive_workflows{state="succeeded"}`:      1,
		`redrive_workflows{state="finished"}`:       0,
		`redrive_workflows{state="canceled"}`:       1,
	})
	if !strings.Contains(text, "# TYPE redrive_workflows gauge") || !strings.Contains(text, "max, not sum") {
		t.Errorf("redrive_workflows' type or help:\n%s", text)
	}
}

func TestCollectorQueues(t *testing.T) {
	ctx := context.Background()
	client, st := openClient(t)
	c := metrics.NewCollector(client, metrics.CollectorOptions{Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	if _, err := st.Enqueue(ctx, []store.NewJob{
		{Queue: "mail", Kind: "x", RunAt: now.Add(-90 * time.Second), MaxRetries: -1},
		{Queue: "served", Kind: "x", RunAt: now.Add(-90 * time.Second), MaxRetries: -1},
		{Queue: "later", Kind: "x", RunAt: now.Add(time.Hour), MaxRetries: -1},
	}, now.Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterWorker(ctx, store.WorkerInfo{ID: "w", Queues: map[string]int{"served": 1}, StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PauseQueue(ctx, "later"); err != nil {
		t.Fatal(err)
	}
	text := metricstest.Exposition(t, c)
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_queue_paused{queue="later"}`:          1,
		`redrive_queue_paused{queue="mail"}`:           0,
		`redrive_queue_unconsumed{queue="mail"}`:       1,
		`redrive_queue_unconsumed{queue="served"}`:     0,
		`redrive_queue_unconsumed{queue="later"}`:      0,
		`redrive_queue_latency_seconds{queue="later"}`: 0,
		`redrive_stats_up`:                             1,
	})
	for _, q := range []string{"mail", "served"} {
		if l, ok := metricstest.Sample(text, `redrive_queue_latency_seconds{queue="`+q+`"}`); !ok || l < 90 || l > 150 {
			t.Errorf("%s latency %v (found %v), want about 90s", q, l, ok)
		}
	}
	for _, m := range []string{"redrive_queue_latency_seconds gauge", "redrive_queue_unconsumed gauge"} {
		if !strings.Contains(text, "# TYPE "+m) {
			t.Errorf("exposition lacks %q", m)
		}
	}
	// Store-wide metrics say they must not be summed.
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "# HELP redrive_queue_") || strings.HasPrefix(l, "# HELP redrive_enqueued_total") {
			if !strings.Contains(l, "max, not sum") {
				t.Errorf("help without the aggregation rule: %s", l)
			}
		}
	}
}

// TestCollectorNoEmptyLabel: counters without a failure class are
// labeled class="none", once, with those of class none added in.
func TestCollectorNoEmptyLabel(t *testing.T) {
	ctx := context.Background()
	client, _ := openClient(t)
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{"default": 1}, Logger: slog.New(slog.DiscardHandler),
		PollInterval: 5 * time.Millisecond})
	done := make(chan struct{})
	w.HandleFunc("ok", func(context.Context, *redrive.Job) error { close(done); return nil })
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go w.Run(runCtx)
	if _, err := client.Enqueue(ctx, "ok", nil); err != nil {
		t.Fatal(err)
	}
	<-done
	c := metrics.NewCollector(client, metrics.CollectorOptions{Breakers: w.Breakers(), Logger: slog.New(slog.DiscardHandler)})
	var text string
	testwait.Until(t, "redrive_succeeded_total of queue default to count the completion", 10*time.Second, func() bool {
		text = metricstest.Exposition(t, c)
		n, ok := metricstest.Sample(text, `redrive_succeeded_total{class="none",queue="default"}`)
		return ok && n == 1
	})
	if strings.Contains(text, `=""`) {
		t.Fatalf("an empty label:\n%s", metricstest.GrepLines(text, `=""`))
	}
	if n, ok := metricstest.Sample(text, `redrive_enqueued_total{class="none",queue="default"}`); !ok || n != 1 {
		t.Errorf("redrive_enqueued_total = %v (found %v), want 1", n, ok)
	}
}

// TestAttemptExemplars: an attempt traced by a sampled span is observed
// with its trace and span ids as an exemplar, which the OpenMetrics
// exposition shows (and the classic text format does not); an attempt
// without one, or with an unsampled one, has none.
func TestAttemptExemplars(t *testing.T) {
	m := metrics.NewObserver("http")
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
	m.ObserveAttempt(redrive.AttemptInfo{Queue: "q", Kind: "http", Attempt: 1, Outcome: redrive.OutcomeCompleted,
		Duration: 20 * time.Millisecond, Span: sampled})
	m.ObserveAttempt(redrive.AttemptInfo{Queue: "q", Kind: "http", Attempt: 1, Outcome: redrive.OutcomeRetry,
		Duration: 20 * time.Millisecond, Span: unsampled})
	m.ObserveAttempt(redrive.AttemptInfo{Queue: "q", Kind: "http", Attempt: 1, Outcome: redrive.OutcomeDead,
		Duration: 20 * time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	scrape := func(accept string) string {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", accept)
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}).ServeHTTP(rec, req)
		return rec.Body.String()
	}
	om := scrape("application/openmetrics-text; version=1.0.0")
	// The exemplar's labels come in no set order.
	want := regexp.MustCompile(`(?m)^redrive_attempt_duration_seconds_bucket\{kind="http",outcome="completed",queue="q",le="0.025"\} 1 # \{(` +
		`trace_id="0af7651916cd43dd8448eb211c80319c",span_id="b7ad6b7169203331"|span_id="b7ad6b7169203331",trace_id="0af7651916cd43dd8448eb211c80319c")\} 0.02 `)
	if !want.MatchString(om) {
		t.Errorf("OpenMetrics exposition lacks the exemplar %s:\n%s", want, metricstest.GrepLines(om, "redrive_attempt_duration_seconds_bucket"))
	}
	if n := strings.Count(om, "trace_id="); n != 1 {
		t.Errorf("%d exemplars exposed, want 1 (the sampled attempt's):\n%s", n, metricstest.GrepLines(om, "trace_id"))
	}
	if text := scrape("text/plain"); strings.Contains(text, "trace_id") {
		t.Errorf("the text format shows an exemplar:\n%s", metricstest.GrepLines(text, "trace_id"))
	}
}

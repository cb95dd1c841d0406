package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
)

// exposition returns the text exposition of the collectors.
func exposition(t *testing.T, cs ...prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// sample returns the value of one series (name and labels exactly as
// exposed, labels sorted by name) in a text exposition.
func sample(text, series string) (float64, bool) {
	for l := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// wantSamples checks series values in a text exposition.
func wantSamples(t *testing.T, text string, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		if got, ok := sample(text, series); !ok || got != w {
			t.Errorf("%s = %v (found %v), want %v", series, got, ok, w)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", grepLines(text, "redrive_attempt_duration_seconds_count")+"\n"+
			grepLines(text, "redrive_job_lateness_seconds_count"))
	}
}

func TestAttemptMetrics(t *testing.T) {
	m := newAttemptMetrics("http", "mail")
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
	text := exposition(t, m)
	wantSamples(t, text, map[string]float64{
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
			t.Errorf("a kind without a handler has its own label: %s", grepLines(text, k))
		}
	}
	// Every bucket of the range is exposed, in order.
	var les []string
	for _, b := range latencyBuckets {
		les = append(les, strconv.FormatFloat(b, 'g', -1, 64))
	}
	for i, le := range les {
		series := fmt.Sprintf(`redrive_job_lateness_seconds_bucket{attempt_kind="first",kind="http",queue="default",le="%s"}`, le)
		if _, ok := sample(text, series); !ok {
			t.Errorf("bucket %d (le %s) missing", i, le)
		}
	}
	if latencyBuckets[0] != 0.001 || latencyBuckets[len(latencyBuckets)-1] != 600 {
		t.Errorf("buckets %v, want 1ms to 10min", latencyBuckets)
	}
}

// TestAttemptMetricsConcurrent observes from many goroutines at once, each
// walking the label sets in its own order, so that series are added to the
// cache while others are read: every observation must be counted once.
func TestAttemptMetricsConcurrent(t *testing.T) {
	m := newAttemptMetrics("http")
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
	text := exposition(t, m)
	want := map[string]float64{}
	for _, q := range queues {
		for _, o := range outcomes {
			want[fmt.Sprintf(`redrive_attempt_duration_seconds_count{kind="http",outcome="%s",queue="%s"}`, o, q)] = goroutines * rounds
		}
	}
	wantSamples(t, text, want)
	var late float64
	for _, q := range queues {
		for _, ak := range []string{"first", "retry"} {
			n, _ := sample(text, fmt.Sprintf(`redrive_job_lateness_seconds_count{attempt_kind="%s",kind="http",queue="%s"}`, ak, q))
			late += n
		}
	}
	if total := float64(goroutines * rounds * len(queues) * len(outcomes)); late != total {
		t.Errorf("lateness observations %v, want %v", late, total)
	}
}

// waitJob polls a job through the API until it is in a final state and
// returns that state.
func waitJob(t *testing.T, base string, id int64) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, b := call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, id), "", "")
		if code != http.StatusOK {
			t.Fatalf("GET job %d: %d %s", id, code, b)
		}
		var j struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(b, &j); err != nil {
			t.Fatal(err)
		}
		switch j.State {
		case "completed", "dead", "canceled":
			return j.State
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d still %s after 20s: %s", id, j.State, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeAttemptHistograms runs jobs through a real serve, on SQLite and
// on PostgreSQL, and reads the histograms' counts from /metrics.
func TestServeAttemptHistograms(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testServeAttemptHistograms(t) })
	t.Run("postgres", func(t *testing.T) {
		u := pgURL(t)
		schema := fmt.Sprintf("redrive_metrics_%d", os.Getpid())
		dropSchema(t, u, schema)
		t.Cleanup(func() { dropSchema(t, u, schema) }) // after serve stops: cleanups run last first
		testServeAttemptHistograms(t, "--database-url", u, "--schema", schema)
	})
}

func testServeAttemptHistograms(t *testing.T, args ...string) {
	var flaky atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			time.Sleep(30 * time.Millisecond)
		case "/flaky":
			if flaky.Add(1) == 1 {
				http.Error(w, "warming up", http.StatusServiceUnavailable)
				return
			}
		case "/gone":
			http.Error(w, "no such hook", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer target.Close()
	base, logs := startServe(t, append([]string{"--retry-base", "20ms", "--retry-jitter", "none", "--queues", "default=4,mail=2"}, args...)...)

	enqueue := func(body string) int64 {
		t.Helper()
		code, b := call(t, "POST", base+"/v1/jobs", "", body)
		if code != http.StatusCreated {
			t.Fatalf("POST /v1/jobs %s: %d %s", body, code, b)
		}
		var j struct {
			ID int64 `json:"id"`
		}
		if err := json.Unmarshal(b, &j); err != nil || j.ID == 0 {
			t.Fatalf("POST /v1/jobs: %v %s", err, b)
		}
		return j.ID
	}
	httpJob := func(queue, path string) string {
		return fmt.Sprintf(`{"kind":"http","queue":%q,"payload":{"method":"GET","url":%q}}`, queue, target.URL+path)
	}
	want := map[int64]string{
		enqueue(httpJob("default", "/slow")):                         "completed",
		enqueue(httpJob("default", "/flaky")):                        "completed",
		enqueue(httpJob("default", "/gone")):                         "dead",
		enqueue(httpJob("mail", "/ok")):                              "completed",
		enqueue(`{"kind":"mystery","queue":"mail","max_retries":0}`): "dead",
	}
	for id, w := range want {
		if got := waitJob(t, base, id); got != w {
			t.Fatalf("job %d ended %s, want %s\nlogs:\n%s", id, got, w, logs)
		}
	}
	// The worker reports an attempt before it stores the outcome: every
	// attempt of the jobs above is in the histograms now.
	code, b := call(t, "GET", base+"/metrics", "", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	text := string(b)
	wantSamples(t, text, map[string]float64{
		`redrive_attempt_duration_seconds_count{kind="http",outcome="completed",queue="default"}`: 2,
		`redrive_attempt_duration_seconds_count{kind="http",outcome="retry",queue="default"}`:     1,
		`redrive_attempt_duration_seconds_count{kind="http",outcome="dead",queue="default"}`:      1,
		`redrive_attempt_duration_seconds_count{kind="http",outcome="completed",queue="mail"}`:    1,
		`redrive_attempt_duration_seconds_count{kind="other",outcome="dead",queue="mail"}`:        1,
		`redrive_job_lateness_seconds_count{attempt_kind="first",kind="http",queue="default"}`:    3,
		`redrive_job_lateness_seconds_count{attempt_kind="retry",kind="http",queue="default"}`:    1,
		`redrive_job_lateness_seconds_count{attempt_kind="first",kind="http",queue="mail"}`:       1,
		`redrive_job_lateness_seconds_count{attempt_kind="first",kind="other",queue="mail"}`:      1,
	})
	// The /slow attempt took at least 30ms: at most the flaky job's second
	// attempt is in the 25ms bucket of the default queue's completions.
	if n, ok := sample(text, `redrive_attempt_duration_seconds_bucket{kind="http",outcome="completed",queue="default",le="0.025"}`); !ok || n > 1 {
		t.Errorf("completions within 25ms: %v (found %v), want at most 1", n, ok)
	}
	if s, ok := sample(text, `redrive_attempt_duration_seconds_sum{kind="http",outcome="completed",queue="default"}`); !ok || s < 0.03 {
		t.Errorf("duration sum of the completions %v (found %v), want at least the 30ms of /slow", s, ok)
	}
	for _, series := range []string{"# TYPE redrive_attempt_duration_seconds histogram", "# TYPE redrive_job_lateness_seconds histogram"} {
		if !strings.Contains(text, series) {
			t.Errorf("/metrics lacks %q", series)
		}
	}
	if strings.Contains(text, `kind="mystery"`) {
		t.Errorf("a kind without a handler has its own label")
	}
}

func BenchmarkAttemptObserver(b *testing.B) {
	m := newAttemptMetrics("http")
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

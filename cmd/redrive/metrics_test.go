package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

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

// waitJob polls a job through the API until it is in a final state and
// returns that state.
func waitJob(t *testing.T, base string, id int64) string {
	t.Helper()
	var state string
	waitUntil(t, e2eWait, fmt.Sprintf("job %d is in a final state", id), func() error {
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
			state = j.State
			return nil
		}
		return fmt.Errorf("%s", b)
	})
	return state
}

// TestServeAttemptHistograms runs jobs through a real serve, on SQLite and
// on PostgreSQL, and reads the histograms' counts from /metrics.
func TestServeAttemptHistograms(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		db := sqlitetest.Path(t)
		testServeAttemptHistograms(t, func() (store.Store, error) {
			return sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		}, "--db", db)
	})
	t.Run("postgres", func(t *testing.T) {
		u := pgURL(t)
		schema := fmt.Sprintf("redrive_metrics_%d", os.Getpid())
		dropSchema(t, u, schema)
		t.Cleanup(func() { dropSchema(t, u, schema) }) // after serve stops: cleanups run last first
		testServeAttemptHistograms(t, func() (store.Store, error) {
			return postgres.Open(context.Background(), u, postgres.Options{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
		}, "--database-url", u, "--schema", schema)
	})
}

// testServeAttemptHistograms runs jobs through a serve started with args,
// on the store open opens.
func testServeAttemptHistograms(t *testing.T, open func() (store.Store, error), args ...string) {
	var flaky atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			time.Sleep(30 * time.Millisecond) // a real wait: a slow dependency's latency is what is measured
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
		enqueue(httpJob("default", "/slow")):  "completed",
		enqueue(httpJob("default", "/flaky")): "completed",
		enqueue(httpJob("default", "/gone")):  "dead",
		enqueue(httpJob("mail", "/ok")):       "completed",
	}
	// A kind serve does not run: the API refuses it, a Go program's
	// Client.Enqueue on the store does not check.
	st, err := open()
	if err != nil {
		t.Fatal(err)
	}
	mystery, err := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)}).Enqueue(context.Background(),
		"mystery", nil, redrive.InQueue("mail"), redrive.MaxRetries(0))
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	want[mystery.ID] = "dead"
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

// TestServeQueueLatency: a queue with due jobs that serve's worker does
// not serve is flagged in the API and in /metrics, with its latency; no
// label of /metrics is empty.
func TestServeQueueLatency(t *testing.T) {
	base, _ := startServe(t, "--queues", "default=1")
	code, b := call(t, "POST", base+"/v1/jobs", "", `{"kind":"nothing","queue":"orphan"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/jobs: %d %s", code, b)
	}
	code, b = call(t, "GET", base+"/v1/queues", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/queues: %d %s", code, b)
	}
	var list struct {
		Queues []struct {
			Name        string  `json:"name"`
			OldestDueAt *string `json:"oldest_due_at"`
			LatencyMS   *int64  `json:"latency_ms"`
			Unconsumed  bool    `json:"unconsumed"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range list.Queues {
		if q.LatencyMS == nil {
			t.Errorf("queue %s without latency_ms: %s", q.Name, b)
		}
		if q.Name == "orphan" {
			found = true
			if !q.Unconsumed || q.OldestDueAt == nil {
				t.Errorf("orphan queue: unconsumed %v, oldest_due_at %v; want true, set: %s", q.Unconsumed, q.OldestDueAt, b)
			}
		} else if q.Unconsumed {
			t.Errorf("queue %s unconsumed: %s", q.Name, b)
		}
	}
	if !found {
		t.Fatalf("no orphan queue: %s", b)
	}
	code, b = call(t, "GET", base+"/metrics", "", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, b)
	}
	text := string(b)
	wantSamples(t, text, map[string]float64{`redrive_queue_unconsumed{queue="orphan"}`: 1})
	if l, ok := sample(text, `redrive_queue_latency_seconds{queue="orphan"}`); !ok || l < 0 || l > 60 {
		t.Errorf("orphan latency %v (found %v)", l, ok)
	}
	if strings.Contains(text, `=""`) {
		t.Errorf("/metrics has an empty label:\n%s", grepLines(text, `=""`))
	}
}

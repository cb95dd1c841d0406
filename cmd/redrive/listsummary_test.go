package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestJobsListSummary: jobs ls shows what each job is (an http job's
// method and URL without its query, a payload excerpt without secrets),
// directly on the store and through a server, and --json gives the
// listing without histories.
func TestJobsListSummary(t *testing.T) {
	clearConnEnv(t)
	ts, _ := newTestServer(t, "")
	db := sqlitetest.Path(t)
	for _, conn := range [][]string{{"--db", db}, {"--server", ts.URL}} {
		mustCLI(t, append(conn, "enqueue", "http", "--payload", `{"method":"PUT","url":"https://example.com/a/b?token=zz"}`)...)
		mustCLI(t, append(conn, "enqueue", "email", "--payload", `{"to":"a@example.com","api_key":"zz"}`)...)
		out := mustCLI(t, append(conn, "jobs", "ls")...)
		for _, want := range []string{"SUMMARY", "PUT https://example.com/a/b?***", `{"to":"a@example.com","api_key":"***"}`} {
			if !strings.Contains(out, want) {
				t.Errorf("%v jobs ls does not show %q:\n%s", conn, want, out)
			}
		}
		if strings.Contains(out, "zz") {
			t.Errorf("%v jobs ls shows a secret:\n%s", conn, out)
		}
		js := mustCLI(t, append(conn, "--json", "jobs", "ls")...)
		var page struct {
			Jobs []map[string]json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal([]byte(js), &page); err != nil || len(page.Jobs) != 2 {
			t.Fatalf("%v --json jobs ls: %v: %s", conn, err, js)
		}
		for _, j := range page.Jobs {
			if j["history"] != nil || j["summary"] == nil {
				t.Errorf("%v --json jobs ls: a job with history %s, summary %s", conn, j["history"], j["summary"])
			}
		}
	}
}

// TestDeferralWording: jobs show words a deferral as what it is (an open
// breaker, no attempt used) instead of as attempt N, and breakers ls does
// not show an open breaker's failures as 0 (its count restarts when it
// trips).
func TestDeferralWording(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rule := store.BreakerRule{Failures: 3, Window: time.Minute, BreakDuration: time.Hour}
	if _, err := st.ReportBreaker(ctx, store.BreakerReport{Name: "payments", Process: "worker-b", Now: now, Failures: 3, Rule: rule}); err != nil {
		t.Fatal(err)
	}
	jobs, err := st.AddDead(ctx, []store.DeadJob{{Queue: "default", Kind: "charge", Payload: json.RawMessage(`{"n":1}`),
		MaxRetries: -1, DeadAt: now, Attempt: 2, DeadReason: "retries_exhausted", LastError: "boom", LastErrorClass: failure.Transient,
		History: []store.Event{
			{Kind: store.EventDeferred, Attempt: 2, At: now.Add(-time.Minute), Reason: "breaker_open:payments", Delay: store.Duration(30 * time.Second)},
			{Kind: store.EventDead, Attempt: 2, At: now, Class: "transient", Error: "boom"},
		}}}, now)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := mustCLI(t, "--db", db, "jobs", "show", fmt.Sprint(jobs[0].ID))
	var row string
	for l := range strings.Lines(out) {
		if strings.Contains(l, "deferred") {
			row = l
		}
	}
	if f := strings.Fields(row); len(f) < 3 || f[2] != "-" || !strings.Contains(row, "no attempt used") || !strings.Contains(row, "payments") {
		t.Errorf("the deferral reads %q: want no attempt number, the open breaker and \"no attempt used\"\n%s", row, out)
	}
	out = mustCLI(t, "--db", db, "breakers", "ls")
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "payments") && !strings.Contains(l, "not counted while open") {
			t.Errorf("an open breaker's row %q: want its failures \"not counted while open\"", l)
		}
	}
}

// TestJobsRun: jobs run makes a delayed job due now, directly on the
// store and through a server, and refuses a finished one with its state.
func TestJobsRun(t *testing.T) {
	clearConnEnv(t)
	ts, _ := newTestServer(t, "")
	db := sqlitetest.Path(t)
	for _, conn := range [][]string{{"--db", db}, {"--server", ts.URL}} {
		mustCLI(t, append(conn, "enqueue", "email", "--queue", "idle", "--payload", `{"to":"a@example.com"}`, "--delay", "1h")...)
		out := mustCLI(t, append(conn, "jobs", "run", "1")...)
		if !strings.Contains(out, "job 1: pending, due now") {
			t.Errorf("%v jobs run: %q", conn, out)
		}
		mustCLI(t, append(conn, "jobs", "cancel", "1")...)
		if _, stderr, err := runCLI(t, append(conn, "jobs", "run", "1")...); err == nil || !strings.Contains(err.Error()+stderr, "canceled") {
			t.Errorf("%v jobs run of a canceled job: %v %s", conn, err, stderr)
		}
	}
}

// TestQueuesLsUnconsumed: queues ls says in its text, not only in
// --json, that a queue's due jobs wait with no worker to take them, and
// how long the oldest has waited.
func TestQueuesLsUnconsumed(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "email", "--queue", "orphan", "--payload", `{"to":"a@example.com"}`)
	out := mustCLI(t, "--db", db, "queues", "ls")
	var row string
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "orphan ") {
			row = l
		}
	}
	f := strings.Fields(row)
	if len(f) < 2 || f[1] != "unconsumed" || !strings.Contains(out, "LATENCY") || f[len(f)-1] == "-" ||
		!strings.Contains(out, "no live worker serves the queue") {
		t.Errorf("queues ls does not say the queue is unconsumed, with its latency:\n%s", out)
	}
}

// TestJobsListMatch: jobs ls --match selects by a payload value, as
// replay --match does, directly and through a server, and the count
// under the page counts the same jobs.
func TestJobsListMatch(t *testing.T) {
	clearConnEnv(t)
	ts, _ := newTestServer(t, "")
	db := sqlitetest.Path(t)
	for _, conn := range [][]string{{"--db", db}, {"--server", ts.URL}} {
		for _, p := range []string{`{"customer_id":42,"n":1}`, `{"customer_id":7,"n":2}`, `{"customer_id":42,"n":3}`} {
			mustCLI(t, append(conn, "enqueue", "sync", "--queue", "idle", "--payload", p)...)
		}
		out := mustCLI(t, append(conn, "jobs", "ls", "--match", "payload.customer_id=42", "--limit", "1")...)
		if !strings.Contains(out, `"n":3`) || strings.Contains(out, `"n":2`) || !strings.Contains(out, "showing 1 of 2") {
			t.Errorf("%v jobs ls --match payload.customer_id=42 --limit 1:\n%s", conn, out)
		}
		if _, _, err := runCLI(t, append(conn, "jobs", "ls", "--match", "customer_id=42")...); err == nil || !strings.Contains(err.Error(), "--match") {
			t.Errorf("%v jobs ls --match without payload.: %v", conn, err)
		}
	}
}

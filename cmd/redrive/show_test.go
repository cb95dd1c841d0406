package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// failThenSucceed creates, in the database at db, a job whose first
// attempt failed with msg and whose second one completed; it returns its id.
func failThenSucceed(t *testing.T, db, msg string) int64 {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	jobs, err := st.Enqueue(ctx, []store.NewJob{{Queue: "flaky", Kind: "k", Payload: json.RawMessage(`{}`), MaxRetries: -1}}, now)
	if err != nil {
		t.Fatal(err)
	}
	lease := func() *store.Job {
		t.Helper()
		got, err := st.Fetch(ctx, store.FetchParams{Queue: "flaky", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "test"})
		if err != nil || len(got) != 1 {
			t.Fatalf("fetch: %v, %d jobs", err, len(got))
		}
		return got[0]
	}
	j := lease()
	finish := func(o store.Outcome) {
		t.Helper()
		if applied, err := st.Finish(ctx, []store.Outcome{o}); err != nil || !applied[0] {
			t.Fatalf("finish: %v %v", applied, err)
		}
	}
	finish(store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "test", Kind: store.Retry, At: now, RunAt: now,
		Event: &store.Event{Kind: store.EventRetry, Attempt: 1, At: now, Class: "transient", Error: msg, Reason: "http_503"},
		Error: msg, Class: failure.Transient})
	j = lease()
	finish(store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "test", Kind: store.Complete, At: now})
	return jobs[0].ID
}

// TestShowFailedBeforeSuccess: a completed job's last error is shown as
// the failure before its success, by the CLI's text and in the JSON of
// the CLI and the API, which keeps the last error's fields.
func TestShowFailedBeforeSuccess(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	id := failThenSucceed(t, db, "upstream said 503")
	ts, serverDB := newTestServer(t, "")
	serverID := failThenSucceed(t, serverDB, "upstream said 503")
	for _, mode := range []struct {
		name string
		args []string
		id   int64
	}{{"direct", []string{"--db", db}, id}, {"server", []string{"--server", ts.URL}, serverID}} {
		t.Run(mode.name, func(t *testing.T) {
			ids := strconv.FormatInt(mode.id, 10)
			out := mustCLI(t, append(mode.args, "jobs", "show", ids)...)
			if !strings.Contains(out, "failed before success") || !strings.Contains(out, "upstream said 503") || strings.Contains(out, "last error") {
				t.Errorf("jobs show of a job completed after a failure: want its error as \"failed before success\", not \"last error\":\n%s", out)
			}
			var j map[string]any
			if err := json.Unmarshal([]byte(mustCLI(t, append(mode.args, "--json", "jobs", "show", ids)...)), &j); err != nil {
				t.Fatal(err)
			}
			if j["state"] != "completed" || j["last_error"] != "upstream said 503" || j["last_error_class"] != "transient" ||
				j["last_failed_at"] == nil || j["failed_before_success"] != true {
				t.Errorf("jobs show --json: state %v, last_error %v, last_error_class %v, last_failed_at %v, failed_before_success %v; "+
					"want completed, the error and its class and time kept, failed_before_success true",
					j["state"], j["last_error"], j["last_error_class"], j["last_failed_at"], j["failed_before_success"])
			}
		})
	}
	// A job that is failing now keeps "last error".
	failing := filepath.Join(t.TempDir(), "failing.db")
	mustCLI(t, "--db", failing, "enqueue", "email", "--queue", "mail")
	bury(t, failing, "mail")
	out := mustCLI(t, "--db", failing, "jobs", "show", "1")
	if !strings.Contains(out, "last error") || strings.Contains(out, "failed before success") {
		t.Errorf("jobs show of a dead job: want \"last error\":\n%s", out)
	}
	if strings.Contains(mustCLI(t, "--db", failing, "--json", "jobs", "show", "1"), "failed_before_success") {
		t.Errorf("jobs show --json of a dead job says failed_before_success")
	}
}

// TestRedriveEditKeepsPreviousPayload: after an edit and redrive, the
// job's history (JSON and text) holds the payload it replaced.
func TestRedriveEditKeepsPreviousPayload(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail", "--payload", `{"to":"typo@example"}`)
	bury(t, db, "mail")
	mustCLI(t, "--db", db, "dlq", "redrive", "1", "--payload", `{"to":"a@example.com"}`, "--note", "fixed the address")
	var j struct {
		Payload json.RawMessage `json:"payload"`
		History []map[string]any
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "--db", db, "--json", "jobs", "show", "1")), &j); err != nil {
		t.Fatal(err)
	}
	last := j.History[len(j.History)-1]
	if string(j.Payload) != `{"to":"a@example.com"}` || last["kind"] != "redriven" || last["previous_payload"] != `{"to":"typo@example"}` {
		t.Errorf("after an edit and redrive: payload %s, last event %v; want the new payload, a redriven event with the previous one", j.Payload, last)
	}
	if out := mustCLI(t, "--db", db, "jobs", "show", "1"); !strings.Contains(out, `previous payload: {"to":"typo@example"}`) {
		t.Errorf("jobs show lacks the previous payload:\n%s", out)
	}
}

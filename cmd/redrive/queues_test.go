package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// checkQueuesCLI runs the queues commands through pre (the connection
// flags) and checks their output; db is the SQLite file they work on.
func checkQueuesCLI(t *testing.T, pre []string) {
	t.Helper()
	cli := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{}, pre...), args...)...)
	}
	if out := cli("queues", "ls"); out != "no queues\n" {
		t.Errorf("queues ls on an empty store: %q", out)
	}
	for range 2 {
		cli("enqueue", "email", "--queue", "mail")
	}

	out := cli("queues", "pause", "mail")
	if !strings.Contains(out, "queue mail paused since ") || !strings.Contains(out, "`redrive queues resume mail`") ||
		!strings.Contains(out, "2 pending, 0 scheduled, 0 running") {
		t.Errorf("queues pause: %q", out)
	}
	// Idempotent, and JSON in the API's shape.
	var body struct {
		Queue redrive.Queue `json:"queue"`
	}
	raw := cli("--json", "queues", "pause", "mail")
	if err := json.Unmarshal([]byte(raw), &body); err != nil {
		t.Fatalf("queues pause --json: %v: %s", err, raw)
	}
	if q := body.Queue; q.Name != "mail" || !q.Paused || q.PausedAt == nil || q.Jobs[redrive.Pending] != 2 || len(q.Jobs) != 6 {
		t.Errorf("queues pause --json: %s", raw)
	}
	// A queue with no job and no pause record is refused as a likely
	// typo, pause or resume, and nothing is created.
	for _, action := range []string{"pause", "resume"} {
		_, stderr, err := runCLI(t, append(append([]string{}, pre...), "queues", action, "mial")...)
		if err == nil || !strings.Contains(stderr, "queue mial does not exist") || !strings.Contains(stderr, "known: mail") {
			t.Errorf("queues %s mial: %v %q", action, err, stderr)
		}
	}
	if _, _, err := runCLI(t, append(append([]string{}, pre...), "queues", "pause", "mial")...); err == nil ||
		!strings.Contains(err.Error(), "--create") {
		t.Errorf("queues pause mial: %v, want a hint at --create", err)
	}
	if list := decode[server.QueueList](t, cli("--json", "queues", "ls")); len(list.Queues) != 1 {
		t.Errorf("queues after the refused pauses: %+v", list.Queues)
	}
	// With --create: a queue with no job yet, whose name needs escaping
	// in a URL (and would read ".." if unescaped twice).
	for _, name := range []string{"later?v2 ü#x", "%2E%2E"} {
		q := decode[server.QueueBody](t, cli("--json", "queues", "pause", "--create", name)).Queue
		if q.Name != name || !q.Paused {
			t.Errorf("queues pause %q: %+v", name, q)
		}
	}
	cli("queues", "resume", "%2E%2E")
	// A path-like name is refused by the name rule, not created.
	if _, _, err := runCLI(t, append(append([]string{}, pre...), "queues", "pause", "--create", "..")...); err == nil ||
		!strings.Contains(err.Error(), "looks like a path") {
		t.Errorf("queues pause --create ..: %v", err)
	}

	out = cli("queues", "ls")
	for _, want := range []string{"QUEUE", "STATE", "PAUSED SINCE", "PENDING", "CANCELED", "later?v2 ü#x", "mail", "paused", "active"} {
		if !strings.Contains(out, want) {
			t.Errorf("queues ls lacks %q:\n%s", want, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || strings.Join(strings.Fields(lines[1]), " ") != "%2E%2E active - 0 0 0 0 0 0 -" ||
		!strings.HasPrefix(lines[3], "mail ") || !strings.Contains(strings.Join(strings.Fields(lines[3]), " "), " 2 0 0 0 0 0 ") ||
		strings.Fields(lines[3])[1] != "paused" {
		t.Errorf("queues ls:\n%s", out)
	}
	list := decode[server.QueueList](t, cli("--json", "queues", "ls"))
	if len(list.Queues) != 3 || list.Queues[0].Name != "%2E%2E" || list.Queues[0].Paused || !list.Queues[2].Paused {
		t.Errorf("queues ls --json: %+v", list)
	}

	out = cli("queues", "resume", "mail")
	if !strings.Contains(out, "queue mail resumed") || !strings.Contains(out, "2 pending") {
		t.Errorf("queues resume: %q", out)
	}
	if q := decode[server.QueueBody](t, cli("--json", "queues", "resume", "mail")).Queue; q.Paused || q.PausedAt != nil {
		t.Errorf("queues resume --json: %+v", q)
	}

	// Bad names.
	if _, _, err := runCLI(t, append(append([]string{}, pre...), "queues", "pause", "")...); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("queues pause '': %v", err)
	}
	_, stderr, err := runCLI(t, append(append([]string{}, pre...), "queues", "pause", strings.Repeat("q", 201))...)
	if err == nil || !strings.Contains(stderr, "the limit is 200") {
		t.Errorf("queues pause of a 201-byte name: %v %q", err, stderr)
	}
	if _, _, err := runCLI(t, append(append([]string{}, pre...), "queues", "pause")...); err == nil {
		t.Error("queues pause without a name succeeded")
	}
}

func TestQueuesDirectMode(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	checkQueuesCLI(t, []string{"--db", db})
}

func TestQueuesServerMode(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "s3cret")
	checkQueuesCLI(t, []string{"--server", ts.URL, "--token", "s3cret"})

	// The server's pauses are in its store, as direct mode sees them.
	list := decode[server.QueueList](t, mustCLI(t, "--db", db, "--json", "queues", "ls"))
	if len(list.Queues) != 3 || list.Queues[1].Name != "later?v2 ü#x" || !list.Queues[1].Paused {
		t.Errorf("queues ls on the server's store: %+v", list)
	}
	// The API's errors: a bad token, a name with a control character.
	_, stderr, err := runCLI(t, "--server", ts.URL, "--token", "wrong", "queues", "ls")
	if err == nil || !strings.Contains(stderr, "401") {
		t.Errorf("queues ls with a wrong token: %v %q", err, stderr)
	}
	_, stderr, err = runCLI(t, "--server", ts.URL, "--token", "s3cret", "queues", "pause", "a\x01b")
	if err == nil || !strings.Contains(stderr, "field name") || !strings.Contains(stderr, "400") {
		t.Errorf("queues pause of a name with a control character: %v %q", err, stderr)
	}
}

func TestQueuePausedMetric(t *testing.T) {
	st, err := sqlite.Open(context.Background(), sqlitetest.Path(t), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	c := metrics.NewCollector(client, metrics.CollectorOptions{Logger: slog.New(slog.DiscardHandler)})
	if _, err := client.Enqueue(context.Background(), "x", nil, redrive.InQueue("mail")); err != nil {
		t.Fatal(err)
	}
	if _, err := client.PauseQueue(context.Background(), "later"); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP redrive_queue_paused 1 when the queue is paused (workers fetch none of its jobs), else 0. Store-wide: every process sharing the store reports the same value; aggregate replicas with max, not sum.
# TYPE redrive_queue_paused gauge
redrive_queue_paused{queue="later"} 1
redrive_queue_paused{queue="mail"} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "redrive_queue_paused"); err != nil {
		t.Fatal(err)
	}
}

// TestServePauseQueue: a pause through the API stops serve's own worker at
// once (a job enqueued afterwards waits), shows in the metrics, and the
// resume runs the job.
func TestServePauseQueue(t *testing.T) {
	var hits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer target.Close()
	const token = "tok"
	base, logs := startServe(t, "--token", token)

	if code, b := call(t, "POST", base+"/v1/queues/default/pause", token, ""); code != http.StatusOK || !strings.Contains(string(b), `"paused":true`) {
		t.Fatalf("pause: %d %s", code, b)
	}
	code, b := call(t, "POST", base+"/v1/jobs", token, fmt.Sprintf(`{"kind":"http","payload":{"url":%q}}`, target.URL))
	if code != http.StatusCreated {
		t.Fatalf("enqueue: %d %s", code, b)
	}
	var job struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	// A real wait: that the job does not run is what is tested, over
	// several poll intervals (the worker would have run it by then).
	time.Sleep(300 * time.Millisecond)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the job of a paused queue ran (%d requests)", n)
	}
	code, b = call(t, "GET", base+"/metrics", token, "")
	if code != http.StatusOK || !strings.Contains(string(b), `redrive_queue_paused{queue="default"} 1`) ||
		!strings.Contains(string(b), `redrive_jobs{queue="default",state="pending"} 1`) {
		t.Fatalf("/metrics: %d\n%s", code, grepLines(string(b), "redrive_"))
	}

	if code, b := call(t, "POST", base+"/v1/queues/default/resume", token, ""); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, b)
	}
	waitUntil(t, e2eWait, "the job completed after the resume", func() error {
		_, b = call(t, "GET", fmt.Sprintf("%s/v1/jobs/%d", base, job.ID), token, "")
		if strings.Contains(string(b), `"state":"completed"`) {
			return nil
		}
		return fmt.Errorf("%s\nlogs:\n%s", b, logs)
	})
	if hits.Load() != 1 {
		t.Errorf("%d requests, want 1", hits.Load())
	}
	_, b = call(t, "GET", base+"/metrics", token, "")
	if !strings.Contains(string(b), `redrive_queue_paused{queue="default"} 0`) {
		t.Errorf("/metrics after resume:\n%s", grepLines(string(b), "redrive_queue"))
	}
}

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/kafka"
	"github.com/redrivehq/redrive/store"
)

// registerWorker records a live worker of queues running kinds, as a
// worker's Run does.
func registerWorker(t *testing.T, st store.Store, id string, queues map[string]int, kinds ...string) {
	t.Helper()
	now := time.Now()
	if err := st.RegisterWorker(context.Background(), store.WorkerInfo{ID: id, Host: "h", Queues: queues, Kinds: kinds,
		StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
}

// jobCount is how many jobs the store holds.
func jobCount(t *testing.T, e *env) int64 {
	t.Helper()
	n, err := e.st.Count(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEnqueueUnknownKind: a job whose kind no live worker of its queue
// runs is refused, 400 unknown_kind naming the kind, the queue and the
// kinds its workers run, and nothing is stored (it was accepted, then
// died of "no handler registered", before); in a batch too.
func TestEnqueueUnknownKind(t *testing.T) {
	e := newEnv(t, Options{})
	registerWorker(t, e.st, "serve", map[string]int{"default": 4, "mail": 1}, "http", "download")
	r := e.do("POST", "/v1/jobs", `{"kind":"email","payload":{}}`)
	wantErr(t, r, 400, "unknown_kind", "kind")
	for _, want := range []string{`kind \"email\"`, `queue \"default\"`, "download, http"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("answer %s does not say %s", r.body, want)
		}
	}
	r = e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"http","payload":{"url":"https://example.com/"}},{"kind":"email","queue":"mail"}]}`)
	wantErr(t, r, 400, "unknown_kind", "jobs[1].kind")
	if !strings.Contains(string(r.body), `queue \"mail\"`) {
		t.Errorf("answer %s does not name the queue", r.body)
	}
	if n := jobCount(t, e); n != 0 {
		t.Fatalf("%d jobs stored by refused enqueues", n)
	}
	// The kinds the worker runs are accepted, without a warning.
	var j redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"download","queue":"mail","payload":{"url":"https://example.com/f"}}`), 201, &j)
	if j.Warning != "" {
		t.Errorf("warning %q on a kind a live worker runs", j.Warning)
	}
}

// TestEnqueueWithoutWorkers: with no live worker serving the job's queue
// (none registered yet: producers started first), the job is accepted,
// its answer carrying a warning; a worker that stopped does not count.
func TestEnqueueWithoutWorkers(t *testing.T) {
	e := newEnv(t, Options{})
	var j redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"email","payload":{}}`), 201, &j)
	if !strings.Contains(j.Warning, "no live worker is registered") || !strings.Contains(j.Warning, `"email"`) {
		t.Errorf("warning %q, want one saying no live worker is registered", j.Warning)
	}
	registerWorker(t, e.st, "gone", map[string]int{"default": 1}, "http")
	if err := e.st.StopWorker(context.Background(), "gone", time.Now(), redrive.WorkerStopped); err != nil {
		t.Fatal(err)
	}
	registerWorker(t, e.st, "other", map[string]int{"other": 1}, "http")
	var b struct{ Jobs []redrive.Job }
	e.want(e.do("POST", "/v1/jobs/batch", `{"jobs":[{"kind":"email"},{"kind":"http","queue":"other","payload":{"url":"https://example.com/"}}]}`), 201, &b)
	if len(b.Jobs) != 2 || !strings.Contains(b.Jobs[0].Warning, `no live worker serves queue "default"`) || b.Jobs[1].Warning != "" {
		t.Errorf("batch answer %+v, want a warning on the first job only", b.Jobs)
	}
	if n := jobCount(t, e); n != 3 {
		t.Errorf("%d jobs stored, want 3", n)
	}
}

// TestEnqueueTransportKind: the kind a broker transport registers on the
// store's worker (Kafka's, which produces a dead letter back to its
// topic) is recorded with the worker's kinds, and its jobs are accepted.
func TestEnqueueTransportKind(t *testing.T) {
	e := newEnv(t, Options{})
	w := redrive.NewWorker(e.client, redrive.WorkerOptions{Queues: map[string]int{"orders": 1}, Logger: quiet})
	kafka.RegisterKind(w, func(context.Context, *kgo.Record) error { return nil }, kafka.KindOptions{Topics: []string{"orders"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitRegistered(t, e, w.ID())
	payload, err := json.Marshal(kafka.Record{Topic: "orders", Value: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	var j redrive.Job
	e.want(e.do("POST", "/v1/jobs", `{"kind":"kafka","queue":"orders","payload":`+string(payload)+`}`), 201, &j)
	if j.Warning != "" {
		t.Errorf("warning %q on the transport's kind", j.Warning)
	}
	wantErr(t, e.do("POST", "/v1/jobs", `{"kind":"email","queue":"orders"}`), 400, "unknown_kind", "kind")
}

// waitRegistered waits until the worker id is in the registry.
func waitRegistered(t *testing.T, e *env, id string) {
	t.Helper()
	testwait.Until(t, "worker "+id+" registered", 30*time.Second, func() bool {
		ws, err := e.client.Workers(context.Background())
		return err == nil && slices.ContainsFunc(ws, func(w redrive.WorkerStatus) bool { return w.ID == id })
	})
}

// TestRedriveUnknownKind: a redrive or a replay of dead jobs whose kind
// no live worker of their queue runs is refused as their enqueue is (400
// unknown_kind, on ids or filter.kind), and starts nothing; it was
// accepted before, and the jobs died again of "no handler registered".
func TestRedriveUnknownKind(t *testing.T) {
	e := newEnv(t, Options{})
	ids := buryExamples(t, e, "default", 1) // kind email
	registerWorker(t, e.st, "serve", map[string]int{"default": 4}, "http", "download")
	r := e.do("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[0]))
	wantErr(t, r, 400, "unknown_kind", "ids")
	for _, want := range []string{`queue \"default\"`, "download, http", "no handler registered"} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("answer %s does not say %s", r.body, want)
		}
	}
	r = e.do("POST", "/v1/dlq/redrive", `{"filter":{"kind":"email"}}`)
	wantErr(t, r, 400, "unknown_kind", "filter.kind")
	r = e.do("POST", "/v1/replay", `{"filter":{"kind":"email"}}`)
	wantErr(t, r, 400, "unknown_kind", "filter.kind")
	ops, _, err := e.client.Operations(context.Background(), "", 10)
	if err != nil || len(ops) != 0 {
		t.Fatalf("operations after refused starts: %+v, %v", ops, err)
	}
	// Once a worker of the queue runs the kind: accepted.
	registerWorker(t, e.st, "mailer", map[string]int{"default": 1}, "email")
	if r := e.do("POST", "/v1/dlq/redrive", fmt.Sprintf(`{"ids":[%d]}`, ids[0])); r.status != 202 {
		t.Fatalf("redrive once a worker runs email: %d %s", r.status, r.body)
	}
}

package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// registerKinds records on the SQLite database db a live worker of
// queues running kinds, as serve's worker does when it starts.
func registerKinds(t *testing.T, db string, queues map[string]int, kinds ...string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if err := st.RegisterWorker(ctx, store.WorkerInfo{ID: "serve-1", Host: "h", Queues: queues, Kinds: kinds,
		StartedAt: now, HeartbeatAt: now}); err != nil {
		t.Fatal(err)
	}
}

// TestEnqueueUnknownKindCLI: `redrive enqueue` and `redrive download`
// refuse a kind no live worker of the queue runs, directly on the store
// and through a server alike, storing nothing; with no live worker they
// enqueue and warn on stderr.
func TestEnqueueUnknownKindCLI(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			cli := func(args ...string) (string, string, error) {
				t.Helper()
				return runCLI(t, append(append([]string{}, target...), args...)...)
			}
			// No worker yet: accepted, with a warning.
			out, errOut, err := cli("enqueue", "email", "--queue", "early")
			if err != nil || !strings.Contains(out, "enqueued job 1") || !strings.Contains(errOut, `warning: no live worker`) {
				t.Errorf("enqueue without workers: %v\nstdout %s\nstderr %s", err, out, errOut)
			}
			registerKinds(t, db, map[string]int{"default": 4, "early": 1}, "http")
			_, _, err = cli("enqueue", "email")
			if err == nil || !strings.Contains(err.Error(), `no live worker runs kind "email" in queue "default": its workers run http`) {
				t.Errorf("enqueue email: %v; want a refusal naming the kind, the queue and http", err)
			}
			_, _, err = cli("download", "https://example.com/f.bin")
			if err == nil || !strings.Contains(err.Error(), `kind "download"`) {
				t.Errorf("download without a download kind: %v; want a refusal naming the kind", err)
			}
			if out, errOut, err := cli("--json", "jobs", "ls"); err != nil || strings.Count(out, `"kind"`) != 1 {
				t.Errorf("jobs after the refusals (%v, %s):\n%s; want the first job only", err, errOut, out)
			}
			_, errOut, err = cli("enqueue", "http", "--payload", `{"url":"https://example.com/"}`)
			if err != nil || errOut != "" {
				t.Errorf("enqueue http: %v, stderr %q", err, errOut)
			}
		})
	}
}

// TestServeRefusesKindsItDoesNotRun: serve's worker records the kinds it
// runs, the broker transports' included (RabbitMQ's and Kafka's kinds,
// which publish a redriven dead letter back to its queue or topic, in
// their store queues), so its API accepts those and refuses the others,
// the download kind without --download-dir among them.
func TestServeRefusesKindsItDoesNotRun(t *testing.T) {
	// The brokers are unreachable: serve connects to them in the
	// background, and registers their kinds all the same.
	base, logs := startServe(t, "--kafka-brokers", "127.0.0.1:1", "--kafka-topics", "orders",
		"--amqp-url", "amqp://guest:guest@127.0.0.1:1/", "--amqp-queues", "tasks")
	testwait.Watch(t, "serve's worker live", 30*time.Second, func() (bool, string) {
		code, body := call(t, "GET", base+"/v1/workers", "", "")
		return code == 200 && strings.Contains(string(body), `"state":"live"`), string(body)
	})
	code, body := call(t, "POST", base+"/v1/jobs", "", `{"kind":"email"}`)
	if code != 400 || !strings.Contains(string(body), `"unknown_kind"`) || !strings.Contains(string(body), "amqp, http, kafka") {
		t.Errorf("email: %d %s; want 400 unknown_kind listing amqp, http, kafka", code, body)
	}
	code, body = call(t, "POST", base+"/v1/jobs", "", `{"kind":"download","payload":{"url":"https://example.com/f"}}`)
	if code != 400 || !strings.Contains(string(body), `kind \"download\"`) {
		t.Errorf("download: %d %s; want 400", code, body)
	}
	for _, j := range []string{
		`{"kind":"kafka","queue":"orders","payload":{"topic":"orders","value":"x","value_encoding":"text"}}`,
		`{"kind":"amqp","queue":"tasks","payload":{"queue":"tasks","body":"x","body_encoding":"text"}}`,
		`{"kind":"http","payload":{"url":"https://example.com/"}}`,
	} {
		code, body := call(t, "POST", base+"/v1/jobs", "", j)
		if code != 201 || strings.Contains(string(body), `"warning"`) {
			t.Errorf("%s: %d %s; want 201 without a warning", j, code, body)
		}
	}
	if t.Failed() {
		t.Logf("serve's logs:\n%s", logs)
	}
}

// TestRedriveUnknownKindCLI: `dlq redrive` and `replay` refuse dead jobs
// whose kind no live worker of their queue runs, as `enqueue` refuses
// the kind, directly on the store and through a server alike.
func TestRedriveUnknownKindCLI(t *testing.T) {
	clearConnEnv(t)
	for mode, setup := range countModes(t) {
		t.Run(mode, func(t *testing.T) {
			target, db := setup(t)
			cli := func(args ...string) (string, string, error) {
				t.Helper()
				return runCLI(t, append(append([]string{}, target...), args...)...)
			}
			if _, errOut, err := cli("enqueue", "email", "--queue", "mail"); err != nil {
				t.Fatalf("enqueue: %v %s", err, errOut)
			}
			bury(t, db, "mail")
			registerKinds(t, db, map[string]int{"mail": 1}, "http")
			want := `1 of the selected jobs are in queue "mail" and of kinds no live worker of it runs (its workers run http)`
			if _, _, err := cli("dlq", "redrive", "1"); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("dlq redrive 1: %v; want %q", err, want)
			}
			if _, _, err := cli("replay", "--queue", "mail", "--yes"); err == nil || !strings.Contains(err.Error(), "no live worker of it runs") {
				t.Errorf("replay --queue mail: %v; want a refusal", err)
			}
			if out, _, err := cli("--json", "dlq", "ls"); err != nil || strings.Count(out, `"kind"`) != 1 {
				t.Errorf("dead jobs after the refusals (%v):\n%s; want the one job, still dead", err, out)
			}
		})
	}
}

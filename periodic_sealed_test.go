package redrive_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/seal"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestPeriodicPayloadSealed: the payload of a periodic job of an
// encrypted queue is sealed in the schedule the store keeps, not only in
// the jobs it enqueues: the database files never hold it in clear, while
// Schedule shows it and a trigger enqueues it in plaintext. A store
// without the key reads the schedule with an error naming it
// undecryptable, and a trigger fails instead of enqueuing the envelope.
func TestPeriodicPayloadSealed(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "redrive.db")
	policy := keyPolicy(t, "k1", 1)
	st, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger(), Payloads: policy})
	if err != nil {
		t.Fatal(err)
	}
	secret := json.RawMessage(`{"token":"PLAINTEXT-SCHEDULE-MARK"}`)
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	w := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quietLogger(),
		Periodic: []redrive.Periodic{{Name: "beat", Every: time.Hour, Kind: "beat", Payload: secret}}})
	w.HandleFunc("beat", func(context.Context, *redrive.Job) error { return nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	testwait.Until(t, "the worker to declare its schedule", time.Minute, func() bool {
		s, err := client.Schedule(ctx, "beat")
		return err == nil && s.DeclaredBy != ""
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s, err := client.Schedule(ctx, "beat")
	if err != nil || !jsonSame(s.Payload, secret) || s.Error != "" {
		t.Fatalf("Schedule: payload %s, error %q, %v; want the plaintext", s.Payload, s.Error, err)
	}
	j, err := client.TriggerSchedule(ctx, "beat")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := client.Get(ctx, j.ID); err != nil || !jsonSame(got.Payload, secret) {
		t.Fatalf("triggered job: payload %s, %v; want the plaintext", got.Payload, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte("PLAINTEXT-SCHEDULE")); i >= 0 {
			t.Errorf("%s holds the schedule's payload in clear: %q", filepath.Base(f), b[max(0, i-80):min(len(b), i+40)])
		}
	}

	// Without the key: the schedule reads with an error, and a trigger
	// enqueues nothing.
	other, err := sqlite.Open(ctx, path, sqlite.Options{Logger: quietLogger(), Payloads: keyPolicy(t, "k2", 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c2 := redrive.NewClient(other, redrive.ClientOptions{Logger: quietLogger()})
	s, err = c2.Schedule(ctx, "beat")
	if err != nil || !strings.Contains(s.Error, "undecryptable") || len(s.Payload) != 0 {
		t.Errorf("Schedule without the key: payload %s, error %q, %v; want it undecryptable", s.Payload, s.Error, err)
	}
	if j, err := c2.TriggerSchedule(ctx, "beat"); err == nil || !strings.Contains(err.Error(), "undecryptable") {
		t.Errorf("a trigger without the key: job %+v, %v; want an undecryptable error", j, err)
	}
	if _, ok := seal.KeyID(secret); ok {
		t.Fatal("the test's payload is an envelope")
	}
}

// jsonSame reports whether a and b are the same JSON value.
func jsonSame(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ax, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return string(ax) == string(by)
}

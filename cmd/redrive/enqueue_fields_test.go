package main

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestEnqueueBothWaysKeepsFields: an enqueue request means the same
// directly on a store and through a server: the direct backend once
// dropped dependency, not_reprocessable and run_at (and, in a batch, the
// idempotency key), which the REST path keeps.
func TestEnqueueBothWaysKeepsFields(t *testing.T) {
	ctx := context.Background()
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	req := func(key string) server.EnqueueRequest {
		return server.EnqueueRequest{Kind: "email", Queue: "mail", Payload: []byte(`{"to":"a@example.com"}`),
			RunAt: runAt.Format(time.RFC3339), IdempotencyKey: key, Dependency: "smtp", NotReprocessable: true, Priority: 7}
	}
	backends := map[string]func(t *testing.T) backend{
		"direct": func(t *testing.T) backend {
			log := slog.New(slog.DiscardHandler)
			st, err := sqlite.Open(ctx, sqlitetest.Path(t), sqlite.Options{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			b := &directBackend{c: directClient(st, log), close: st.Close}
			t.Cleanup(func() { b.Close() })
			return b
		},
		"server": func(t *testing.T) backend {
			ts, _ := newTestServer(t, "tok")
			api, err := apiclient.New(ts.URL, apiclient.WithToken("tok"))
			if err != nil {
				t.Fatal(err)
			}
			return &remoteBackend{api: api}
		},
	}
	for mode, open := range backends {
		t.Run(mode, func(t *testing.T) {
			b := open(t)
			one, err := b.Enqueue(ctx, req("one"))
			if err != nil {
				t.Fatal(err)
			}
			batch, err := b.EnqueueBatch(ctx, []apiclient.EnqueueRequest{req("two")})
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range []*redrive.Job{one, batch[0]} {
				got, err := b.Get(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Dependency != "smtp" || got.Reprocessable || !got.RunAt.Equal(runAt) ||
					got.Priority != 7 || got.Queue != "mail" || got.IdempotencyKey == "" {
					t.Errorf("job %d: dependency %q, reprocessable %v, run_at %s (want %s), priority %d, queue %q, key %q",
						got.ID, got.Dependency, got.Reprocessable, got.RunAt, runAt, got.Priority, got.Queue, got.IdempotencyKey)
				}
			}
		})
	}
}

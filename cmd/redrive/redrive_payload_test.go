package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestDLQRedrivePayloadValidated: `dlq redrive --payload` in direct mode
// checks the edited payload with the http kind's validation before
// redriving, by id and with --all; the dead job is left as it was.
func TestDLQRedrivePayloadValidated(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	j, err := c.Enqueue(ctx, "http", map[string]string{"url": "https://example.com/hook"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := st.Fetch(ctx, store.FetchParams{Queue: j.Queue, Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "seed"})
	if err != nil || len(got) != 1 {
		t.Fatalf("fetch: %v %v", got, err)
	}
	if _, err := st.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: j.Queue, Attempt: got[0].Attempt, Lease: got[0].Lease, Worker: "seed",
		Kind: store.Bury, At: now, Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: now}, Error: "boom",
		Class: failure.Permanent, DeadReason: "permanent_error", Fingerprint: "fp"}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	for _, args := range [][]string{
		{"dlq", "redrive", fmt.Sprint(j.ID), "--payload", `{"nope":1}`, "--yes"},
		{"dlq", "redrive", "--all", "--payload", `{"url":"ftp://x"}`, "--yes"},
	} {
		_, _, err := runCLI(t, append([]string{"--db", db}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "payload") {
			t.Errorf("%q: %v; want a refusal of the payload", args, err)
		}
	}
	out := mustCLI(t, "--db", db, "--json", "jobs", "show", fmt.Sprint(j.ID))
	if !strings.Contains(out, `"state": "dead"`) && !strings.Contains(out, `"state":"dead"`) {
		t.Errorf("job no longer dead: %s", out)
	}
	if !strings.Contains(out, "https://example.com/hook") {
		t.Errorf("payload changed: %s", out)
	}
}

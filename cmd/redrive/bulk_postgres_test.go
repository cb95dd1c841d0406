package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// buryStore makes n dead jobs in queue on any store, in bulk.
func buryStore(t *testing.T, st store.Store, queue string, n int) {
	t.Helper()
	ctx := context.Background()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	for done := 0; done < n; {
		reqs := make([]redrive.Request, min(n-done, 1000))
		for i := range reqs {
			reqs[i] = redrive.Request{Kind: "email", Queue: queue, Payload: map[string]int{"n": done + i}}
		}
		if _, err := c.EnqueueMany(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		jobs, err := st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: len(reqs), Now: now, LeaseUntil: now.Add(time.Minute), Worker: "test"})
		if err != nil || len(jobs) != len(reqs) {
			t.Fatalf("fetch: %d jobs, %v", len(jobs), err)
		}
		outs := make([]store.Outcome, len(jobs))
		for i, j := range jobs {
			outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: "test", Kind: store.Bury, At: now,
				Event: &store.Event{Kind: store.EventDead, Attempt: j.Attempt, At: now, Class: "permanent", Error: "bad address"},
				Error: "bad address", Class: failure.Permanent, DeadReason: "permanent_error", Fingerprint: "fp-bad-address"}
		}
		if _, err := st.Finish(ctx, outs); err != nil {
			t.Fatal(err)
		}
		done += len(reqs)
	}
}

// TestBulkOpsPostgres runs redrive, purge and export with their progress
// bars on PostgreSQL, directly and through a server on it; the purge
// spans more than one batch.
func TestBulkOpsPostgres(t *testing.T) {
	u := pgURL(t)
	clearConnEnv(t)
	forceTerminal(t)
	schema := fmt.Sprintf("redrive_bulktest_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	t.Cleanup(func() { dropSchema(t, u, schema) })
	log := slog.New(slog.DiscardHandler)
	st, err := postgres.Open(context.Background(), u, postgres.Options{Schema: schema, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	api := server.New(server.Options{Client: redrive.NewClient(st, redrive.ClientOptions{Logger: log}), Logger: log})
	ts := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Close()
		ts.Close()
		st.Close()
	})

	const n = 1020
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"direct", []string{"--database-url", u, "--schema", schema}},
		{"server", []string{"--server", ts.URL}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cli := func(args ...string) (string, string) {
				t.Helper()
				out, stderr, err := runCLI(t, append(append([]string{}, mode.args...), args...)...)
				if err != nil {
					t.Fatalf("redrive %s: %v\n%s", strings.Join(args, " "), err, stderr)
				}
				return out, stderr
			}
			buryStore(t, st, "pg", n)
			dir := filepath.Join(t.TempDir(), "x")
			out, stderr := cli("dlq", "export", dir, "--queue", "pg")
			if !strings.Contains(out, fmt.Sprintf("exported %d dead job(s)", n)) {
				t.Errorf("export: %q", out)
			}
			wantIn(t, stderr, fmt.Sprintf("100%%  %d/%d", n, n))
			if entries, _ := os.ReadDir(dir); len(entries) != n {
				t.Errorf("export wrote %d folders", len(entries))
			}

			out, stderr = cli("dlq", "redrive", "--all", "--queue", "pg", "--yes")
			wantIn(t, out, fmt.Sprintf("redriven %d of %d matched", n, n))
			wantIn(t, stderr, fmt.Sprintf("100%%  %d/%d", n, n))

			// The redriven jobs are pending; bury them again and purge.
			now := time.Now()
			jobs, err := st.Fetch(context.Background(), store.FetchParams{Queue: "pg", Limit: n, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "test"})
			if err != nil || len(jobs) != n {
				t.Fatalf("fetch the redriven jobs: %d, %v", len(jobs), err)
			}
			outs := make([]store.Outcome, len(jobs))
			for i, j := range jobs {
				outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Worker: "test", Kind: store.Bury, At: now,
					Event: &store.Event{Kind: store.EventDead, Attempt: j.Attempt, At: now}, Error: "again", Class: failure.Permanent,
					DeadReason: "permanent_error", Fingerprint: "fp-again"}
			}
			if _, err := st.Finish(context.Background(), outs); err != nil {
				t.Fatal(err)
			}
			out, stderr = cli("dlq", "purge", "--queue", "pg", "--yes")
			wantIn(t, out, fmt.Sprintf("purged %d dead job(s)", n))
			wantIn(t, stderr, fmt.Sprintf("purge  [========================]  100%%  %d/%d", n, n))
			if c, err := st.Count(context.Background(), store.Filter{Queue: "pg"}); err != nil || c != 0 {
				t.Fatalf("%d jobs left in pg, %v", c, err)
			}
		})
	}
}

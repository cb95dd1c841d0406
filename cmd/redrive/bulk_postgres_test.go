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
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	api := server.New(server.Options{Client: client, Logger: log})
	ts := httptest.NewServer(api)
	// The worker that runs the operations the server starts, as serve's.
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{"operations-only": 1}, PollInterval: 20 * time.Millisecond, Logger: log})
	wctx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan struct{})
	go func() { _ = w.Run(wctx); close(workerDone) }()
	t.Cleanup(func() {
		api.Close()
		ts.Close()
		stopWorker()
		<-workerDone
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
			seedFinished(t, st, "pg", redrive.Dead, n)
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
				outs[i] = store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "test", Kind: store.Bury, At: now,
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

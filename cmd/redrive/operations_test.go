package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// runOperationsWorker runs, until the test ends, a worker on client's
// store that runs the operations the API starts, as serve's worker does.
// Its only queue holds no job: it runs nothing else.
func runOperationsWorker(t *testing.T, client *redrive.Client) {
	t.Helper()
	w := redrive.NewWorker(client, redrive.WorkerOptions{Queues: map[string]int{"operations-only": 1},
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// replayCount returns, per source job, how many jobs of queue replay it.
func replayCount(t *testing.T, db, queue string) map[int64]int {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[int64]int{}
	for _, j := range allJobs(t, st, store.Filter{Queue: queue}) {
		if j.ReplayOf != 0 {
			out[j.ReplayOf]++
		}
	}
	return out
}

// seedDocs makes n completed jobs of queue "docs" in the SQLite db, with
// payloads {"doc": i}.
func seedDocs(t *testing.T, db string, n int) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seedFinished(t, st, "docs", redrive.Completed, n)
}

// opIDIn is the operation id in a CLI line "operation op_... ...".
func opIDIn(t *testing.T, s string) string {
	t.Helper()
	i := strings.Index(s, "op_")
	if i < 0 || len(s) < i+27 || !store.ValidOperationID(s[i:i+27]) {
		t.Fatalf("no operation id in %q", s)
	}
	return s[i : i+27]
}

// TestReplayCLI replays jobs directly on a store and through a server,
// and lists, shows, pauses, resumes, follows and cancels operations.
func TestReplayCLI(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	seedDocs(t, db, 5) // payloads {"doc": 0} .. {"doc": 4}

	// A replay selected by state and a payload field, run by the CLI.
	out := mustCLI(t, "--db", db, "replay", "--queue", "docs", "--state", "completed", "--match", "payload.doc=3", "--note", "fix", "--yes")
	wantIn(t, out, "done: 1/1 (replayed 1)")
	id := opIDIn(t, out)
	if got := replayCount(t, db, "docs"); len(got) != 1 {
		t.Fatalf("replays per source: %v", got)
	}
	out = mustCLI(t, "--db", db, "operations", "ls")
	wantIn(t, out, id, "replay", "done", "1/1 (replayed 1)", "fix")
	out = mustCLI(t, "--db", db, "operations", "show", id)
	wantIn(t, out, "kind:", "replay", `"payload_field":"doc"`, `"payload_value":3`, `"states":["completed"]`)
	var shown server.Operation
	if err := json.Unmarshal([]byte(mustCLI(t, "--db", db, "--json", "operations", "show", id)), &shown); err != nil || shown.Replayed != 1 {
		t.Fatalf("show --json: %+v, %v", shown, err)
	}

	// Detached, it waits for a worker; pause and resume it, then follow
	// it: directly on the store, follow runs it.
	out = mustCLI(t, "--db", db, "replay", "--queue", "docs", "--yes", "--detach")
	id2 := opIDIn(t, out)
	wantIn(t, out, "started")
	wantIn(t, mustCLI(t, "--db", db, "operations", "pause", id2), "is paused")
	wantIn(t, mustCLI(t, "--db", db, "operations", "resume", id2), "is pending")
	out = mustCLI(t, "--db", db, "operations", "follow", id2)
	wantIn(t, out, "done: 6/6 (replayed 6)") // the 5 jobs and the replay made before
	if got := replayCount(t, db, "docs"); len(got) != 6 || got[1] != 1 {
		t.Fatalf("replays per source after the second replay: %v", got)
	}
	if _, _, err := runCLI(t, "--db", db, "operations", "cancel", id2); err == nil || !strings.Contains(err.Error(), "it is done") {
		t.Errorf("cancel of a done operation: %v", err)
	}
	if _, _, err := runCLI(t, "--db", db, "operations", "show", "op_000000000000000000000000"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("show of an unknown operation: %v", err)
	}
	if _, _, err := runCLI(t, "--db", db, "operations", "show", "nope"); err == nil || !strings.Contains(err.Error(), "operation id must be") {
		t.Errorf("show of a malformed id: %v", err)
	}
	if _, _, err := runCLI(t, "--db", db, "replay"); err == nil || !strings.Contains(err.Error(), "say which jobs to replay") {
		t.Errorf("replay without a filter: %v", err)
	}
	if _, _, err := runCLI(t, "--db", db, "replay", "--all", "--match", "doc=1"); err == nil || !strings.Contains(err.Error(), "--match") {
		t.Errorf("replay with a bad --match: %v", err)
	}

	// Through a server, whose worker runs it.
	ts, sdb := newTestServer(t, "tok")
	seedDocs(t, sdb, 4)
	out = mustCLI(t, "--server", ts.URL, "--token", "tok", "replay", "--queue", "docs", "--match", "payload.doc=2", "--rate", "100", "--yes")
	wantIn(t, out, "done: 1/1 (replayed 1)")
	sid := opIDIn(t, out)
	wantIn(t, mustCLI(t, "--server", ts.URL, "--token", "tok", "operations", "ls"), sid, "replay", "done")
	wantIn(t, mustCLI(t, "--server", ts.URL, "--token", "tok", "operations", "follow", sid), "done: 1/1")
	if _, _, err := runCLI(t, "--server", ts.URL, "--token", "tok", "operations", "pause", sid); err == nil || !strings.Contains(err.Error(), "is done") {
		t.Errorf("pause of a done operation through the server: %v", err)
	}
	if got := replayCount(t, sdb, "docs"); len(got) != 1 {
		t.Fatalf("server replays per source: %v", got)
	}
}

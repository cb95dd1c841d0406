package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// clearConnEnv keeps the environment from choosing the backend.
func clearConnEnv(t *testing.T) {
	t.Helper()
	t.Setenv(serverEnv, "")
	t.Setenv(tokenEnv, "")
	t.Setenv(databaseURLEnv, "")
}

// runCLIIn runs the command line with stdin.
func runCLIIn(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	_, err = root.ExecuteContextC(ctx)
	return out.String(), errOut.String(), err
}

// mustCLI runs the command line and fails the test on an error.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("redrive %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// decode decodes one JSON output.
func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// bury leases the due jobs of queue and moves them to the DLQ with a
// permanent error.
func bury(t *testing.T, db, queue string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	jobs, err := st.Fetch(ctx, store.FetchParams{Queue: queue, Limit: 100, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) == 0 {
		t.Fatal("no job to bury")
	}
	var outs []store.Outcome
	for _, j := range jobs {
		outs = append(outs, store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: "test", Kind: store.Bury, At: now,
			Event: &store.Event{Kind: store.EventDead, Attempt: j.Attempt, At: now, Class: "permanent", Error: "bad address", Reason: "permanent_error"},
			Error: "bad address", Class: failure.Permanent, DeadReason: "permanent_error", Fingerprint: "fp-bad-address"})
	}
	applied, err := st.Finish(ctx, outs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("outcome %d not applied", i)
		}
	}
}

func TestDirectMode(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)

	// Enqueue.
	out := mustCLI(t, "--db", db, "enqueue", "email", "--payload", `{"to":"a@example.com"}`, "--queue", "mail", "--max-retries", "2", "--key", "k1")
	if !strings.Contains(out, "enqueued job 1: kind email, queue mail") {
		t.Errorf("enqueue: %q", out)
	}
	out = mustCLI(t, "--db", db, "enqueue", "email", "--payload", `{"to": "a@example.com"}`, "--queue", "mail", "--key", "k1")
	if !strings.Contains(out, "job 1 already holds key") {
		t.Errorf("second enqueue: %q", out)
	}
	if _, _, err := runCLI(t, "--db", db, "enqueue", "email", "--queue", "mail", "--key", "k1"); err == nil ||
		!strings.Contains(err.Error(), `idempotency key "k1" is held by job 1, whose payload differs`) {
		t.Errorf("a different payload under the key: %v", err)
	}
	out = mustCLI(t, "--db", db, "enqueue", "email", "--queue", "mail", "--key", "k1", "--return-existing")
	if !strings.Contains(out, "job 1 already holds key") || !strings.Contains(out, "a different job") {
		t.Errorf("--return-existing: %q", out)
	}
	j := decode[redrive.Job](t, mustCLI(t, "--db", db, "--json", "enqueue", "sms", "--queue", "mail", "--delay", "1h"))
	if j.State != redrive.Scheduled {
		t.Errorf("enqueue --delay: %+v", j)
	}
	smsID := strconv.FormatInt(j.ID, 10)

	// jobs ls / show.
	out = mustCLI(t, "--db", db, "jobs", "ls", "--queue", "mail")
	for _, want := range []string{"ID", "STATE", "email", "sms", "scheduled", "pending"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs ls lacks %q:\n%s", want, out)
		}
	}
	res := decode[redrive.ListResult](t, mustCLI(t, "--db", db, "--json", "jobs", "ls", "--state", "scheduled"))
	if len(res.Jobs) != 1 || res.Jobs[0].Kind != "sms" {
		t.Errorf("jobs ls --state scheduled: %+v", res.Jobs)
	}
	res = decode[redrive.ListResult](t, mustCLI(t, "--db", db, "--json", "jobs", "ls", "--limit", "1"))
	if len(res.Jobs) != 1 || res.Next == "" {
		t.Fatalf("jobs ls --limit 1: %+v", res)
	}
	res = decode[redrive.ListResult](t, mustCLI(t, "--db", db, "--json", "jobs", "ls", "--limit", "1", "--cursor", res.Next))
	if len(res.Jobs) != 1 || res.Jobs[0].ID != 1 {
		t.Errorf("jobs ls page 2: %+v", res)
	}
	out = mustCLI(t, "--db", db, "jobs", "show", "1")
	for _, want := range []string{"id", "email", `{"to":"a@example.com"}`, "idempotency key", "k1", "max retries"} {
		if !strings.Contains(out, want) {
			t.Errorf("jobs show lacks %q:\n%s", want, out)
		}
	}
	if _, stderr, err := runCLI(t, "--db", db, "jobs", "show", "99"); err == nil || !strings.Contains(stderr, "not found") {
		t.Errorf("jobs show 99: err %v, stderr %q", err, stderr)
	}

	// Cancel the scheduled job.
	out = mustCLI(t, "--db", db, "jobs", "cancel", smsID)
	if !strings.Contains(out, "job "+smsID+": canceled") {
		t.Errorf("jobs cancel: %q", out)
	}

	// Make job 1 dead, and two more.
	ids := []int64{1}
	for _, to := range []string{"b", "c"} {
		j := decode[redrive.Job](t, mustCLI(t, "--db", db, "--json", "enqueue", "email", "--queue", "mail", "--payload", `{"to":"`+to+`@example.com"}`))
		ids = append(ids, j.ID)
	}
	bury(t, db, "mail")

	out = mustCLI(t, "--db", db, "dlq", "groups")
	if !strings.Contains(out, "fp-bad-address") || !strings.Contains(out, "3 ") {
		t.Errorf("dlq groups:\n%s", out)
	}
	out = mustCLI(t, "--db", db, "dlq", "ls", "--class", "permanent")
	if !strings.Contains(out, "bad address") || strings.Count(out, "email") != 3 {
		t.Errorf("dlq ls:\n%s", out)
	}
	out = mustCLI(t, "--db", db, "dlq", "show", "1")
	if !strings.Contains(out, "dead reason") || !strings.Contains(out, "history:") {
		t.Errorf("dlq show:\n%s", out)
	}

	// Redrive one by id, with a new payload and a note.
	prog := decode[redrive.RedriveProgress](t, mustCLI(t, "--db", db, "--json", "dlq", "redrive", "1", "--payload", `{"to":"fixed@example.com"}`, "--note", "fixed address"))
	if prog.Redriven != 1 || !prog.Done {
		t.Errorf("redrive 1: %+v", prog)
	}
	j = decode[redrive.Job](t, mustCLI(t, "--db", db, "--json", "jobs", "show", "1"))
	if j.State != redrive.Pending || string(j.Payload) != `{"to":"fixed@example.com"}` || j.Redriven != 1 {
		t.Errorf("after redrive: %+v", j)
	}

	// Redrive by filter needs confirmation: refused without a terminal,
	// done with "y" typed, and with --yes.
	if _, _, err := runCLIIn(t, "n\n", "--db", db, "dlq", "redrive", "--all", "--queue", "mail"); err == nil || !strings.Contains(err.Error(), "not confirmed") {
		t.Errorf("redrive answered n: %v", err)
	}
	out, stderr, err := runCLIIn(t, "y\n", "--db", db, "dlq", "redrive", "--all", "--queue", "mail", "--rate", "1000")
	if err != nil {
		t.Fatalf("redrive --all: %v", err)
	}
	if !strings.Contains(stderr, `Redrive 2 dead jobs matching queue=mail? [y/N]`) {
		t.Errorf("redrive prompt: %q", stderr)
	}
	if !strings.Contains(out, "redriven 2 of 2 matched") {
		t.Errorf("redrive --all: %q", out)
	}

	// Bury them all again; export, then purge.
	bury(t, db, "mail")
	exportDir := filepath.Join(t.TempDir(), "dlq")
	out = mustCLI(t, "--db", db, "dlq", "export", exportDir, "--kind", "email")
	if !strings.Contains(out, "exported 3 dead job(s)") {
		t.Errorf("export: %q", out)
	}
	for _, id := range ids {
		for _, f := range []string{"payload.json", "error.json", "metadata.json"} {
			if _, err := os.Stat(filepath.Join(exportDir, strconv.FormatInt(id, 10), f)); err != nil {
				t.Errorf("export: %v", err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(exportDir, "1", "error.json"))
	if err != nil || !strings.Contains(string(b), "fp-bad-address") {
		t.Errorf("error.json: %s %v", b, err)
	}

	if _, _, err := runCLI(t, "--db", db, "dlq", "purge"); err == nil || !strings.Contains(err.Error(), "--all") {
		t.Errorf("purge without filter: %v", err)
	}
	out = mustCLI(t, "--db", db, "dlq", "purge", "--fingerprint", "fp-bad-address", "--yes")
	if !strings.Contains(out, "purged 3 dead job(s)") {
		t.Errorf("purge: %q", out)
	}

	// stats.
	out = mustCLI(t, "--db", db, "stats")
	if !strings.Contains(out, "QUEUE") || !strings.Contains(out, "mail") || !strings.Contains(out, "purged") {
		t.Errorf("stats:\n%s", out)
	}
}

func TestPurgeRefusedWithoutTerminal(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "k")
	bury(t, db, redrive.DefaultQueue)

	// Standard input that is not a terminal.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer r.Close()
	var out, errOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"--db", db, "dlq", "purge", "--all"})
	root.SetIn(r)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not a terminal") || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("purge without --yes: %v", err)
	}
	// No answer on stdin is refused too.
	if _, _, err := runCLIIn(t, "", "--db", db, "dlq", "purge", "--all"); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("purge with empty stdin: %v", err)
	}
	// Nothing was purged.
	res := decode[redrive.ListResult](t, mustCLI(t, "--db", db, "--json", "dlq", "ls"))
	if len(res.Jobs) != 1 {
		t.Errorf("dlq after refused purge: %d jobs", len(res.Jobs))
	}
}

func TestMissingDatabase(t *testing.T) {
	clearConnEnv(t)
	db := filepath.Join(t.TempDir(), "nope.db")
	_, stderr, err := runCLI(t, "--db", db, "stats")
	if err == nil || !strings.Contains(stderr, "nope.db") {
		t.Errorf("stats on a missing db: %v %q", err, stderr)
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("stats created the database")
	}
}

// newTestServer runs the REST API on a temp SQLite store, with a worker
// that runs its operations.
func newTestServer(t *testing.T, token string) (*httptest.Server, string) {
	t.Helper()
	ts, db, client := newBareTestServer(t, token)
	runOperationsWorker(t, client) // stops before the store closes
	return ts, db
}

// newBareTestServer is newTestServer without a worker: operations started
// through it stay pending.
func newBareTestServer(t *testing.T, token string) (*httptest.Server, string, *redrive.Client) {
	t.Helper()
	db := sqlitetest.Path(t)
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	api := server.New(server.Options{Client: client, Token: token, Logger: log})
	ts := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Close()
		ts.Close()
		st.Close()
	})
	return ts, db, client
}

func TestServerMode(t *testing.T) {
	clearConnEnv(t)
	ts, db := newTestServer(t, "s3cret")
	srv := []string{"--server", ts.URL, "--token", "s3cret"}
	cli := func(args ...string) string {
		t.Helper()
		return mustCLI(t, append(append([]string{}, srv...), args...)...)
	}

	out := mustCLI(t, "enqueue", "email", "--server", ts.URL, "--token", "s3cret", "--payload", `{"to":"a@example.com"}`, "--queue", "mail", "--delay", "1m", "--max-retries", "3")
	if !strings.Contains(out, "enqueued job 1: kind email, queue mail, scheduled") {
		t.Errorf("enqueue: %q", out)
	}
	// The environment selects the server too.
	t.Setenv(serverEnv, ts.URL)
	t.Setenv(tokenEnv, "s3cret")
	j := decode[redrive.Job](t, mustCLI(t, "--json", "jobs", "show", "1"))
	if j.Kind != "email" || j.Queue != "mail" || j.MaxRetries != 3 || string(j.Payload) != `{"to":"a@example.com"}` {
		t.Errorf("jobs show: %+v", j)
	}
	clearConnEnv(t)
	out = cli("stats")
	if !strings.Contains(out, "mail") || !strings.Contains(out, "SCHEDULED") {
		t.Errorf("stats:\n%s", out)
	}
	s := decode[redrive.Stats](t, cli("--json", "stats"))
	if s.Jobs["mail"][redrive.Scheduled] != 1 {
		t.Errorf("stats: %+v", s)
	}

	// 404: the API's message, exit status 1 (run returns an error).
	_, stderr, err := runCLI(t, append(srv, "jobs", "show", "99")...)
	if err == nil || !strings.Contains(stderr, "job 99 not found") || !strings.Contains(stderr, "404") {
		t.Errorf("jobs show 99: %v %q", err, stderr)
	}
	// Two targets at once, and bad input caught before any request.
	if _, _, err := runCLI(t, append(srv, "--db", db, "stats")...); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("--server with --db: %v", err)
	}
	if _, _, err := runCLI(t, append(srv, "enqueue", "k", "--payload", "{nope")...); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("enqueue --payload {nope: %v", err)
	}
	// 401 with a wrong token.
	_, stderr, err = runCLI(t, "--server", ts.URL, "--token", "wrong", "stats")
	if err == nil || !strings.Contains(stderr, "invalid bearer token") || !strings.Contains(stderr, "401") {
		t.Errorf("stats with a wrong token: %v %q", err, stderr)
	}
	// 400 with the field at fault.
	_, stderr, err = runCLI(t, append(srv, "dlq", "ls", "--class", "nonsense")...)
	if err == nil || !strings.Contains(stderr, "unknown class") || !strings.Contains(stderr, "field class") {
		t.Errorf("dlq ls --class nonsense: %v %q", err, stderr)
	}

	// The DLQ over the API: bury the job in the server's store.
	sms := decode[redrive.Job](t, mustCLI(t, "--db", db, "--json", "enqueue", "sms", "--queue", "mail"))
	bury(t, db, "mail")
	out = cli("dlq", "groups")
	if !strings.Contains(out, "fp-bad-address") {
		t.Errorf("dlq groups:\n%s", out)
	}
	exportDir := filepath.Join(t.TempDir(), "out")
	out = cli("dlq", "export", exportDir)
	if !strings.Contains(out, "exported 1 dead job(s)") {
		t.Errorf("export: %q", out)
	}
	if _, err := os.Stat(filepath.Join(exportDir, strconv.FormatInt(sms.ID, 10), "metadata.json")); err != nil {
		t.Error(err)
	}
	prog := decode[redrive.RedriveProgress](t, cli("--json", "dlq", "redrive", "--all", "--yes"))
	if prog.Redriven != 1 {
		t.Errorf("redrive: %+v", prog)
	}
	bury(t, db, "mail")
	out = cli("dlq", "purge", "--all", "--yes")
	if !strings.Contains(out, "purged 1 dead job(s)") {
		t.Errorf("purge: %q", out)
	}
	out = cli("jobs", "cancel", "1")
	if !strings.Contains(out, "job 1: canceled") {
		t.Errorf("cancel: %q", out)
	}
}

// TestInvertedRange: --until before --since is refused in both modes with
// the same meaning, and nothing is purged.
func TestInvertedRange(t *testing.T) {
	clearConnEnv(t)
	ts, srvDB := newTestServer(t, "")
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "k")
	bury(t, db, redrive.DefaultQueue)
	mustCLI(t, "--server", ts.URL, "enqueue", "k")
	bury(t, srvDB, redrive.DefaultQueue)
	rng := []string{"--since", "2026-01-02T00:00:00Z", "--until", "2026-01-01T00:00:00Z"}
	for _, mode := range [][]string{{"--db", db}, {"--server", ts.URL}} {
		for _, cmd := range [][]string{{"dlq", "ls"}, {"dlq", "purge", "--yes"}} {
			args := append(append(append([]string{}, mode...), cmd...), rng...)
			_, stderr, err := runCLI(t, args...)
			if err == nil || !strings.Contains(stderr+err.Error(), "until") {
				t.Errorf("redrive %s: err %v, stderr %q; want a refusal naming until", strings.Join(args, " "), err, stderr)
			}
		}
		res := decode[redrive.ListResult](t, mustCLI(t, append(append([]string{}, mode...), "--json", "dlq", "ls")...))
		if len(res.Jobs) != 1 {
			t.Errorf("%v: %d dead jobs after the refused purge, want 1", mode, len(res.Jobs))
		}
	}
}

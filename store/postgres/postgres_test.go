package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/storetest"
)

// urlEnv names the environment variable holding the test database's URL.
const urlEnv = "REDRIVE_POSTGRES_URL"

// dbURL returns the test database's URL, or skips the test when none is
// configured. CI always sets it, so a skip there is a failure.
func dbURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		if os.Getenv("CI") != "" {
			tb.Fatal(urlEnv + " is not set in CI: the PostgreSQL tests must run there, not skip")
		}
		tb.Skip(urlEnv + " is not set: set it to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL store tests")
	}
	return u
}

// newSchema returns a fresh schema name and drops the schema when the
// test ends (after the stores using it are closed: cleanups run last
// registered first).
func newSchema(tb testing.TB) string {
	tb.Helper()
	url := dbURL(tb)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "redrive_test_" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// open opens a store on schema; the caller closes it.
func open(tb testing.TB, schema string) *postgres.Store {
	tb.Helper()
	s, err := postgres.Open(tb.Context(), dbURL(tb), postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet()})
	if err != nil {
		tb.Fatalf("postgres.Open: %v", err)
	}
	return s
}

// openFresh opens a store on a new schema and closes it when the test
// ends.
func openFresh(tb testing.TB) *postgres.Store {
	tb.Helper()
	s := open(tb, newSchema(tb))
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestErrorPrefixWalk runs the error prefix subtest with every prefix
// "many": its listings walk the newest dead jobs instead of sorting the
// prefix's range of jobs_dead_error.
func TestErrorPrefixWalk(t *testing.T) {
	dbURL(t)
	storetest.RunNamed(t, func(t *testing.T) store.Store {
		schema := newSchema(t)
		t.Cleanup(func() { checkJobCounts(t, schema) })
		s := open(t, schema)
		postgres.SetErrorPrefixFew(s, 1)
		return s
	}, "ListErrorPrefix")
}

// conformanceStore opens the conformance suite's stores at u: each in a
// schema of its own, with its job counts checked against the jobs when
// the test ends.
func conformanceStore(u string) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		schema := newSchema(t)
		t.Cleanup(func() { checkJobCounts(t, schema) })
		s, err := postgres.Open(t.Context(), u, postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet()})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		return s
	}
}

// TestConformance runs the store conformance suite on PostgreSQL, each
// subtest on a schema of its own, with the server's default isolation set
// to repeatable read for the store's sessions (withDefaultIsolation): the
// suite passes there too (the kept idempotency keys among it), since the
// store's sessions default to read committed and every transaction it
// begins is READ COMMITTED explicitly. Under the usual default (read
// committed) the store's statements run at the same level, so one run of
// the suite covers both; TestRepeatableReadDefault checks that the
// option reaches the server and that the store's sessions override it.
func TestConformance(t *testing.T) {
	u := withDefaultIsolation(t, "repeatable read")
	storetest.Run(t, conformanceStore(u))
}

// checkJobCounts fails t when the job counts the triggers keep in schema
// differ from the jobs counted one by one: run after each conformance
// subtest, it checks them against every statement the store runs.
func checkJobCounts(t *testing.T, schema string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := conn.Query(context.Background(), `SELECT coalesce(j.queue, c.queue), coalesce(j.state, c.state), coalesce(j.n, 0), coalesce(c.n, 0)
	FROM (SELECT queue, state, count(*) AS n FROM `+s+`.jobs GROUP BY queue, state) j
	FULL JOIN (SELECT queue, state, sum(n)::bigint AS n FROM `+s+`.job_counts GROUP BY queue, state HAVING sum(n) <> 0) c
		ON c.queue = j.queue AND c.state = j.state
	WHERE coalesce(j.n, 0) <> coalesce(c.n, 0)`)
	if err != nil {
		t.Fatalf("job counts: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q, state string
		var jobs, counted int64
		if err := rows.Scan(&q, &state, &jobs, &counted); err != nil {
			t.Fatal(err)
		}
		t.Errorf("queue %q state %s: %d jobs, job_counts says %d", q, state, jobs, counted)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	checkDeadGroups(t, conn, s)
}

// checkDeadGroups fails t when the dead jobs per cause that dead_groups
// keeps in schema s (sanitized) differ from the dead jobs counted.
func checkDeadGroups(t *testing.T, conn *pgx.Conn, s string) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT coalesce(j.fingerprint, c.fingerprint), coalesce(j.queue, c.queue), coalesce(j.n, 0), coalesce(c.n, 0)
	FROM (SELECT fingerprint, queue, kind, last_error_class, dead_reason, count(*) AS n FROM `+s+`.jobs WHERE state = 'dead'
		GROUP BY fingerprint, queue, kind, last_error_class, dead_reason) j
	FULL JOIN (SELECT fingerprint, queue, kind, last_error_class, dead_reason, sum(n)::bigint AS n FROM `+s+`.dead_groups
		GROUP BY fingerprint, queue, kind, last_error_class, dead_reason HAVING sum(n) <> 0) c
		ON (c.fingerprint, c.queue, c.kind, c.last_error_class, c.dead_reason) = (j.fingerprint, j.queue, j.kind, j.last_error_class, j.dead_reason)
	WHERE coalesce(j.n, 0) <> coalesce(c.n, 0)`)
	if err != nil {
		t.Fatalf("dead groups: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var fp, q string
		var jobs, counted int64
		if err := rows.Scan(&fp, &q, &jobs, &counted); err != nil {
			t.Fatal(err)
		}
		t.Errorf("cause %q of queue %q: %d dead jobs, dead_groups says %d", fp, q, jobs, counted)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateDLQWithData: migration 0014 (the DLQ's indexes and counted
// causes) applies to a schema that already holds dead jobs, and counts
// them: a schema is taken back to version 13 and migrated again.
func TestMigrateDLQWithData(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	var ds []store.DeadJob
	for i := range 40 {
		ds = append(ds, store.DeadJob{Queue: fmt.Sprintf("q%d", i%2), Kind: "k", Payload: []byte(`{}`), MaxRetries: -1,
			DeadAt: t0.Add(time.Duration(i) * time.Second), DeadReason: fmt.Sprintf("r%d", i%3), LastError: "boom",
			LastErrorClass: failure.Transient, Fingerprint: fmt.Sprintf("fp%d", i%5)})
	}
	if _, err := s.AddDead(ctx, ds, t0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`DROP TABLE ` + id + `.dead_groups`, `DROP FUNCTION ` + id + `.dead_group_key`,
		`DROP INDEX ` + id + `.jobs_dead_queue`, `DROP INDEX ` + id + `.jobs_dead_kind`, `DROP INDEX ` + id + `.jobs_dead_class`,
		`DROP INDEX ` + id + `.jobs_dead_reason`, `DROP INDEX ` + id + `.jobs_dead_fingerprint`,
		`CREATE INDEX jobs_dead_fingerprint ON ` + id + `.jobs (fingerprint, dead_at) WHERE state = 'dead'`,
		`DELETE FROM ` + id + `.redrive_migrations WHERE version = 14`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s = open(t, schema)
	defer s.Close()
	checkDeadGroups(t, conn, id)
	dead := []store.State{store.Dead}
	if n, err := s.Count(ctx, store.Filter{States: dead, Queue: "q1", Reason: "r0"}); err != nil || n != 7 {
		t.Errorf("Count after the migration: %d, %v; want 7", n, err)
	}
	if _, err := s.Redrive(ctx, store.RedriveParams{IDs: []int64{1, 2, 3}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	checkDeadGroups(t, conn, id)
}

// BenchmarkStore runs the store-level benchmarks on PostgreSQL.
func BenchmarkStore(b *testing.B) {
	dbURL(b)
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b, newSchema(b)) })
}

var t0 = time.Date(2026, time.January, 2, 3, 4, 5, 678901000, time.UTC)

// TestEnqueueTx: jobs enqueued in a transaction exist if and only if it
// commits, keys included.
func TestEnqueueTx(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()

	enqueueIn := func(finish func(pgx.Tx, context.Context) error, key string) []*store.Job {
		t.Helper()
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		jobs, err := s.EnqueueTx(ctx, tx, []store.NewJob{
			{Queue: "tx", Kind: "k", Payload: []byte(`{"a":1}`)},
			{Queue: "tx", Kind: "k", IdempotencyKey: key},
		}, t0)
		if err != nil {
			t.Fatalf("EnqueueTx: %v", err)
		}
		// Inside the transaction the jobs are there.
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.Schema(), "jobs"}.Sanitize()+` WHERE id = ANY($1)`,
			[]int64{jobs[0].ID, jobs[1].ID}).Scan(&n); err != nil || n != 2 {
			t.Fatalf("inside the transaction: %d of the jobs visible, %v; want 2", n, err)
		}
		if err := finish(tx, ctx); err != nil {
			t.Fatal(err)
		}
		return jobs
	}

	rolled := enqueueIn(pgx.Tx.Rollback, "k1")
	for _, j := range rolled {
		if _, err := s.Get(ctx, j.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("job %d enqueued in a rolled back transaction: Get error %v, want ErrNotFound", j.ID, err)
		}
	}
	if st, err := s.Stats(ctx); err != nil || st.Counters["tx"]["enqueued"] != 0 {
		t.Errorf("after a rollback: counters %v, %v; want no enqueued", st.Counters, err)
	}

	committed := enqueueIn(pgx.Tx.Commit, "k1")
	for _, j := range committed {
		if j.Existing {
			t.Errorf("job %d: Existing after the key's first holder was rolled back", j.ID)
		}
		if g, err := s.Get(ctx, j.ID); err != nil || g.State != store.Pending {
			t.Errorf("job %d enqueued in a committed transaction: %v, %v; want it pending", j.ID, g, err)
		}
	}
	// The committed key is taken for the next callers, in or out of a
	// transaction.
	again, err := s.Enqueue(ctx, []store.NewJob{{Queue: "tx", Kind: "k", IdempotencyKey: "k1"}}, t0)
	if err != nil || !again[0].Existing || again[0].ID != committed[1].ID {
		t.Errorf("Enqueue of the committed key: %+v, %v; want the existing job %d", again, err, committed[1].ID)
	}
	inTx := enqueueIn(pgx.Tx.Commit, "k1")
	if !inTx[1].Existing || inTx[1].ID != committed[1].ID {
		t.Errorf("EnqueueTx of the committed key: id %d, Existing %v; want %d, true", inTx[1].ID, inTx[1].Existing, committed[1].ID)
	}
	if st, err := s.Stats(ctx); err != nil || st.Counters["tx"]["enqueued"] != 3 || st.Counters["tx"]["deduplicated"] != 2 {
		t.Errorf("counters[tx] = %v, %v; want enqueued 3, deduplicated 2", st.Counters["tx"], err)
	}
}

// TestPayloadBytes: payloads and policies come back byte for byte.
func TestPayloadBytes(t *testing.T) {
	s := openFresh(t)
	payload := []byte("{\"b\": 1,\n  \"a\": [1.50, 2e3], \"s\": \"\\u00e9\"}")
	policy := []byte(`{ "z":1, "a":2 }`)
	jobs, err := s.Enqueue(t.Context(), []store.NewJob{{Queue: "q", Kind: "k", Payload: payload, Policy: policy}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Get(t.Context(), jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(g.Payload) != string(payload) || string(g.Policy) != string(policy) {
		t.Errorf("Get: payload %q, policy %q; want %q, %q", g.Payload, g.Policy, payload, policy)
	}
}

// TestBadText: text PostgreSQL cannot store is refused in identifiers and
// cleaned in free text.
func TestBadText(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	for _, nj := range []store.NewJob{
		{Queue: "q\x00", Kind: "k"},
		{Queue: "q", Kind: "k\xff"},
		{Queue: "q", Kind: "k", IdempotencyKey: "a\x00b"},
	} {
		if _, err := s.Enqueue(ctx, []store.NewJob{nj}, t0); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Enqueue(%q, %q, key %q): %v, want ErrInvalid", nj.Queue, nj.Kind, nj.IdempotencyKey, err)
		}
	}
	jobs, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	leased, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"})
	if err != nil || len(leased) != 1 {
		t.Fatalf("Fetch: %v, %v", leased, err)
	}
	msg := "boom\x00 \xff end"
	o := store.Outcome{JobID: jobs[0].ID, Attempt: 1, Lease: 1, Worker: "w", Kind: store.Bury, At: t0, Error: msg, DeadReason: "r", Fingerprint: "f",
		Event: &store.Event{Kind: store.EventDead, Attempt: 1, At: t0, Error: msg}}
	if applied, err := s.Finish(ctx, []store.Outcome{o}); err != nil || !applied[0] {
		t.Fatalf("Finish with a NUL byte in the error: %v, %v", applied, err)
	}
	g, err := s.Get(ctx, jobs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "boom\uFFFD \uFFFD end"; g.LastError != want || len(g.History) != 1 || g.History[0].Error != want {
		t.Errorf("last error %q, history %+v; want %q in both", g.LastError, g.History, want)
	}
}

// TestListen: a notification arrives after an Enqueue made by another
// Store on the same schema, and after the listener's connection is
// killed and re-established.
func TestListen(t *testing.T) {
	schema := newSchema(t)
	logs := &syncBuffer{}
	a, err := postgres.Open(t.Context(), dbURL(t), postgres.Options{Schema: schema, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, schema)
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	got := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- a.Listen(ctx, func(q string) { got <- q })
	}()
	// expect waits for the given notification, skipping others.
	expect := func(what, want string) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case q := <-got:
				if q == want {
					return
				}
			case <-timeout:
				t.Fatalf("%s: no notification %q within 20s", what, want)
			}
		}
	}
	expect("first connection", "")
	if _, err := b.Enqueue(ctx, []store.NewJob{{Queue: "emails", Kind: "send"}}, t0); err != nil {
		t.Fatal(err)
	}
	expect("Enqueue by another store", "emails")

	// A retry notifies.
	var jobs []*store.Job
	retried, err := b.Enqueue(ctx, []store.NewJob{{Queue: "retries", Kind: "k"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	expect("Enqueue", "retries")
	if _, err := b.Fetch(ctx, store.FetchParams{Queue: "retries", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	if applied, err := b.Finish(ctx, []store.Outcome{{JobID: retried[0].ID, Attempt: 1, Lease: 1, Worker: "w", Kind: store.Retry, At: t0, RunAt: t0.Add(time.Second)}}); err != nil || !applied[0] {
		t.Fatalf("Finish(Retry): %v, %v", applied, err)
	}
	expect("Finish with a Retry", "retries")

	// A redrive notifies too.
	jobs, err = b.Enqueue(ctx, []store.NewJob{{Queue: "dlq", Kind: "k"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	expect("Enqueue", "dlq")
	if _, err := b.Fetch(ctx, store.FetchParams{Queue: "dlq", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	// The cancellation of a running job is announced to the workers.
	if j, err := b.Cancel(ctx, jobs[0].ID, t0); err != nil || !j.CancelRequested {
		t.Fatalf("Cancel of a running job: %v", err)
	}
	expect("Cancel of a running job", store.CancelNotice)
	if _, err := b.Finish(ctx, []store.Outcome{{JobID: jobs[0].ID, Attempt: 1, Lease: 1, Worker: "w", Kind: store.Bury, At: t0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Redrive(ctx, store.RedriveParams{IDs: []int64{jobs[0].ID}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	expect("Redrive", "dlq")

	// Kill the listening connection: Listen reconnects and says so.
	var killed bool
	if err := b.Pool().QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{a.Channel()}.Sanitize()).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener's backend: %v, %v", killed, err)
	}
	expect("reconnection", "")
	if l := logs.String(); !strings.Contains(l, "reconnecting") || !strings.Contains(l, "level=WARN") {
		t.Errorf("no warning logged for the reconnection; logs:\n%s", l)
	}
	if _, err := b.Enqueue(ctx, []store.NewJob{{Queue: "after", Kind: "k"}}, t0); err != nil {
		t.Fatal(err)
	}
	expect("Enqueue after the reconnection", "after")

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v after its context was canceled, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after its context was canceled")
	}

	// Closing the store stops a listener too, once it listens (it calls
	// its function with "").
	listening := make(chan struct{}, 1)
	go func() {
		done <- a.Listen(context.Background(), func(q string) {
			if q == "" {
				select {
				case listening <- struct{}{}:
				default:
				}
			}
		})
	}()
	testwait.Recv(t, "the listener to connect", 10*time.Second, listening)
	a.Close()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("Listen returned %v after Close, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after Close")
	}
}

// TestMigrateConcurrent: stores opening one new schema together migrate
// it once.
func TestMigrateConcurrent(t *testing.T) {
	migrateConcurrently(t, dbURL(t))
}

// migrateConcurrently opens six stores on one new schema at once, with
// url, and checks that each opens and the migrations are applied once.
func migrateConcurrently(t *testing.T, url string) {
	t.Helper()
	schema := newSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			s, err := postgres.Open(t.Context(), url, postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	s := open(t, schema)
	defer s.Close()
	var n int
	if err := s.Pool().QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{schema, "redrive_migrations"}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("migrations")
	if n != len(entries) || n == 0 {
		t.Errorf("%d migrations recorded, want %d", n, len(entries))
	}
}

// TestOpenOptions: SkipMigrate needs a migrated schema; bad schema names
// are refused; Migrate logs what it applies.
func TestOpenOptions(t *testing.T) {
	url := dbURL(t)
	ctx := t.Context()
	schema := newSchema(t)
	if s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, SkipMigrate: true, Logger: quiet()}); err == nil {
		s.Close()
		t.Errorf("Open with SkipMigrate on an empty schema succeeded, want an error")
	}
	var logs strings.Builder
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, Logger: slog.New(slog.NewTextHandler(io.Writer(&logs), nil))})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(logs.String(), "0001_jobs.sql") {
		t.Errorf("logs %q do not name the applied migration", logs.String())
	}
	s, err = postgres.Open(ctx, url, postgres.Options{Schema: schema, SkipMigrate: true, Logger: quiet()})
	if err != nil {
		t.Fatalf("Open with SkipMigrate on a migrated schema: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Errorf("Migrate again: %v", err)
	}
	s.Close()
	if err := s.Migrate(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Migrate after Close: %v, want ErrClosed", err)
	}
	for _, bad := range []string{"Redrive", "1abc", "a-b", `x"y`, strings.Repeat("a", 56)} {
		if s, err := postgres.Open(ctx, url, postgres.Options{Schema: bad, Logger: quiet()}); err == nil {
			s.Close()
			t.Errorf("Open with schema %q succeeded, want an error", bad)
		}
	}
}

// TestListenIdle: an idle listener pings its connection and keeps
// receiving.
func TestListenIdle(t *testing.T) {
	defer postgres.SetListenIdle(50 * time.Millisecond)()
	schema := newSchema(t)
	a, b := open(t, schema), open(t, schema)
	t.Cleanup(func() { a.Close(); b.Close() })
	var pings atomic.Int64
	postgres.OnListenPing(a, func() { pings.Add(1) })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := make(chan string, 100)
	go a.Listen(ctx, func(q string) { got <- q })
	if q := <-got; q != "" {
		t.Fatalf("first call %q, want the empty string", q)
	}
	// A listener idle long enough to ping its connection several times.
	testwait.Until(t, "five pings of the idle listener", 20*time.Second, func() bool { return pings.Load() >= 5 })
	if _, err := b.Enqueue(ctx, []store.NewJob{{Queue: "late", Kind: "k"}}, t0); err != nil {
		t.Fatal(err)
	}
	select {
	case q := <-got:
		if q != "late" {
			t.Errorf("notification %q after idle pings, want \"late\" (a reconnection would say \"\")", q)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no notification after idle pings")
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLongDeadReason: a dead reason longer than an index entry can hold
// (jobs_dead_reason) is kept cut to its first 1,000 bytes, at a
// character's boundary, instead of failing the bury or the AddDead; a
// filter by the whole reason finds the job, in listings and counts. A
// kind that long is refused.
func TestLongDeadReason(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	long := strings.Repeat("é", 3000) // 6,000 bytes
	jobs, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 1, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"}); err != nil {
		t.Fatal(err)
	}
	o := store.Outcome{JobID: jobs[0].ID, Queue: "q", Attempt: 1, Lease: 1, Worker: "w", Kind: store.Bury, At: t0, Error: "boom", DeadReason: long, Fingerprint: "f"}
	if applied, err := s.Finish(ctx, []store.Outcome{o}); err != nil || !applied[0] {
		t.Fatalf("Finish with a long reason: %v, %v", applied, err)
	}
	if _, err := s.AddDead(ctx, []store.DeadJob{{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1, DeadAt: t0, DeadReason: long}}, t0); err != nil {
		t.Fatalf("AddDead with a long reason: %v", err)
	}
	f := store.Filter{States: []store.State{store.Dead}, Reason: long}
	res, err := s.List(ctx, f, store.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 2 {
		t.Fatalf("List by the long reason: %d jobs, want 2", len(res.Jobs))
	}
	if r := res.Jobs[0].DeadReason; len(r) != 1000 || !strings.HasPrefix(long, r) {
		t.Errorf("reason kept: %d bytes, want the first 1,000 of the reason", len(r))
	}
	if n, err := s.Count(ctx, f); err != nil || n != 2 {
		t.Errorf("Count by the long reason: %d, %v; want 2", n, err)
	}
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: strings.Repeat("k", 1001)}}, t0); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Enqueue of a 1,001-byte kind: %v, want ErrInvalid", err)
	}
}

// TestMigrateDLQLongReason: a dead reason longer than 1,000 bytes kept
// before migration 0014 is cut as the store cuts the reason of a job
// dying after it (its first 1,000 bytes), so that the jobs of one reason,
// dead before and after the upgrade, keep one reason: a filter by the
// reason (as written in the job's history) finds both.
func TestMigrateDLQLongReason(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	reasons := []string{strings.Repeat("x", 1200), strings.Repeat("é", 600)}
	var ds []store.DeadJob
	for i, r := range reasons {
		ds = append(ds, store.DeadJob{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1,
			DeadAt: t0.Add(time.Duration(i) * time.Second), DeadReason: r, LastError: "boom",
			LastErrorClass: failure.Transient, Fingerprint: fmt.Sprintf("fp%d", i)})
	}
	jobs, err := s.AddDead(ctx, ds, t0)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{schema}.Sanitize()
	// As kept before 0014: the whole reason.
	for i, j := range jobs {
		if _, err := conn.Exec(ctx, `UPDATE `+id+`.jobs SET dead_reason = $1 WHERE id = $2`, reasons[i], j.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`DROP TABLE ` + id + `.dead_groups`, `DROP FUNCTION ` + id + `.dead_group_key`,
		`DROP INDEX ` + id + `.jobs_dead_queue`, `DROP INDEX ` + id + `.jobs_dead_kind`, `DROP INDEX ` + id + `.jobs_dead_class`,
		`DROP INDEX ` + id + `.jobs_dead_reason`, `DROP INDEX ` + id + `.jobs_dead_fingerprint`,
		`CREATE INDEX jobs_dead_fingerprint ON ` + id + `.jobs (fingerprint, dead_at) WHERE state = 'dead'`,
		`DELETE FROM ` + id + `.redrive_migrations WHERE version = 14`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	restoreCountFunctions(t, conn, schema)
	s = open(t, schema)
	defer s.Close()
	checkDeadGroups(t, conn, id)
	// The same reasons die again after the upgrade.
	for i := range ds {
		ds[i].DeadAt = ds[i].DeadAt.Add(time.Hour)
	}
	if _, err := s.AddDead(ctx, ds, t0); err != nil {
		t.Fatal(err)
	}
	dead := []store.State{store.Dead}
	for _, r := range reasons {
		if n, err := s.Count(ctx, store.Filter{States: dead, Reason: r}); err != nil || n != 2 {
			t.Errorf("Count(reason of %d bytes) = %d, %v; want 2 (one dead before the migration, one after)", len(r), n, err)
		}
		res, err := s.List(ctx, store.Filter{States: dead, Reason: r}, store.Page{})
		if err != nil || len(res.Jobs) != 2 {
			t.Errorf("List(reason of %d bytes) = %d jobs, %v; want 2", len(r), len(res.Jobs), err)
		}
	}
}

// restoreCountFunctions puts back, in schema, the job-count trigger
// functions as migration 0011 wrote them (counting jobs only), as in a
// schema at version 13.
func restoreCountFunctions(t *testing.T, conn *pgx.Conn, schema string) {
	t.Helper()
	b, err := os.ReadFile("migrations/0011_job_counts.sql")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(string(b), "CREATE FUNCTION")[1:] {
		end := strings.Index(part, "END $$;")
		if end < 0 {
			t.Fatalf("0011: no end of function in %q", part)
		}
		if _, err := tx.Exec(ctx, "CREATE OR REPLACE FUNCTION"+part[:end+len("END $$;")]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestKeywordSchema: a schema named like an SQL keyword, which PostgreSQL
// quotes in a function's search_path, works (the bulk path included),
// and a second Open leaves the job-count trigger functions as the first
// bound them instead of binding them again.
func TestKeywordSchema(t *testing.T) {
	// A reserved word (quote_ident quotes it); fixed, unlike the random
	// names of the other tests, so it is dropped before and after.
	const schema = "analyse"
	url := dbURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The database is shared: a run of this test from another checkout
	// would drop the schema under this one. They take turns (the lock is
	// the session's, released when conn closes).
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('redrive TestKeywordSchema'))`); err != nil {
		t.Fatal(err)
	}
	drop := func() {
		if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS "analyse" CASCADE`); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	}
	drop()
	defer drop()
	bound := func() map[string]string { // function -> xmin of its pg_proc row
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT proname::text, xmin::text FROM pg_proc
			WHERE pronamespace = '"analyse"'::regnamespace AND proname LIKE 'job\_counts\_%'`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for rows.Next() {
			var name, xmin string
			if err := rows.Scan(&name, &xmin); err != nil {
				t.Fatal(err)
			}
			out[name] = xmin
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	s, err := postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]store.NewJob, 300) // enough for the COPY path
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "q", Kind: "k", Payload: json.RawMessage(`{}`), MaxRetries: -1}
	}
	if _, err := s.Enqueue(ctx, jobs, time.Now()); err != nil {
		t.Fatalf("Enqueue on schema %q: %v", schema, err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Jobs["q"][store.Pending] != int64(len(jobs)) {
		t.Errorf("Stats on schema %q: %v, %v; want %d pending", schema, st.Jobs["q"], err, len(jobs))
	}
	s.Close()
	first := bound()
	if len(first) == 0 {
		t.Fatal("no job_counts_ trigger functions")
	}
	s, err = postgres.Open(ctx, url, postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for fn, xmin := range bound() {
		if first[fn] != xmin {
			t.Errorf("%s was altered again by the second Open (xmin %s, then %s)", fn, first[fn], xmin)
		}
	}
}

// TestMigrateLockTimeout: a migration that needs a lock on jobs while a
// long transaction uses jobs gives up after Options.MigrateLockTimeout
// with an error saying so, leaving the schema as it was (instead of
// queueing every statement on jobs behind it for as long as the
// transaction lasts), and applies once the transaction ends.
// A bound under a millisecond (lock_timeout counts in milliseconds) is
// a bound too, not none.
func TestMigrateLockTimeout(t *testing.T) {
	for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Microsecond} {
		t.Run(d.String(), func(t *testing.T) { migrateLockTimeout(t, d) })
	}
}

func migrateLockTimeout(t *testing.T, timeout time.Duration) {
	schema := newSchema(t)
	url := dbURL(t)
	ctx := context.Background()
	s := open(t, schema)
	s.Close()
	defer postgres.AddMigration("9999_lock.sql", `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE; CREATE TABLE lock_applied ();`)()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	long, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "jobs"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// A liveness bound: without a lock timeout Open waits for the
	// transaction, which lasts until the test ends.
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	opts := postgres.Options{Schema: schema, MaxConns: 2, Logger: quiet(), MigrateLockTimeout: timeout}
	if s, err := postgres.Open(octx, url, opts); err == nil {
		s.Close()
		t.Fatal("Open migrated while a transaction held jobs")
	} else if octx.Err() != nil || !strings.Contains(err.Error(), "9999_lock.sql") || !strings.Contains(err.Error(), "MigrateLockTimeout") {
		t.Fatalf("Open: %v; want the migration to give up on its lock timeout", err)
	}
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var applied bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'lock_applied')`, schema).Scan(&applied); err != nil || applied {
		t.Fatalf("after the failed migration, its table exists: %v, %v", applied, err)
	}
	s, err = postgres.Open(ctx, url, opts)
	if err != nil {
		t.Fatalf("Open once the transaction ended: %v", err)
	}
	s.Close()
}

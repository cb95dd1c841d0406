package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/bench"
	"github.com/redrivehq/redrive/internal/testtopics"
)

// TestMain lets the test binary stand in for redrive when a benchmark
// re-executes it as a worker process (`redrive bench worker`), and
// deletes the Kafka topics the tests made on a real broker.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	removeBuilt()
	if b := os.Getenv("KAFKA_BROKERS"); b != "" {
		// The topics go at the end of the run: see internal/testtopics.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := testtopics.Delete(ctx, strings.Split(b, ",")); err != nil {
			fmt.Fprintf(os.Stderr, "cmd/redrive tests: deleting their Kafka topics: %v\n", err)
		}
		cancel()
	}
	os.Exit(code)
}

// pgURL returns the test database's URL, or skips the test when none is
// configured. CI always sets it, so a skip there is a failure.
func pgURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("REDRIVE_POSTGRES_URL")
	if u == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("REDRIVE_POSTGRES_URL is not set in CI: the PostgreSQL tests must run there, not skip")
		}
		t.Skip("REDRIVE_POSTGRES_URL is not set: set it to a PostgreSQL URL to run the PostgreSQL CLI tests")
	}
	return u
}

// schemaExists reports whether the schema exists in the database at u.
func schemaExists(t *testing.T, u, schema string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func dropSchema(t *testing.T, u, schema string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Error(err)
	}
}

func TestMigrateSQLite(t *testing.T) {
	t.Setenv(databaseURLEnv, "")
	db := t.TempDir() + "/m.db"
	stdout, stderr, err := runCLI(t, "--db", db, "migrate")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if want := "SQLite database " + db + ": opened and migrated"; !strings.Contains(stdout, want) {
		t.Errorf("output lacks %q:\n%s", want, stdout)
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("no database created: %v", err)
	}
}

func TestMigratePostgres(t *testing.T) {
	u := pgURL(t)
	schema := "redrive_migtest_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	t.Cleanup(func() { dropSchema(t, u, schema) })

	stdout, stderr, err := runCLI(t, "migrate", "--database-url", u, "--schema", schema)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	// Every embedded migration is applied, each named.
	entries, err := os.ReadDir("../../store/postgres/migrations")
	if err != nil || len(entries) == 0 {
		t.Fatalf("the migrations: %v", err)
	}
	wants := []string{"schema " + schema + ": applied " + strconv.Itoa(len(entries)) + " migration(s)", "(now)"}
	for _, e := range entries {
		wants = append(wants, e.Name())
	}
	for _, want := range wants {
		if !strings.Contains(stdout, want) {
			t.Errorf("first run: output lacks %q:\n%s", want, stdout)
		}
	}
	// Again, the URL from the environment and JSON: nothing left to apply.
	t.Setenv(databaseURLEnv, u)
	stdout, stderr, err = runCLI(t, "--json", "migrate", "--schema", schema)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rep migrateReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if rep.Store != "postgres" || rep.Schema != schema || rep.AppliedNow != 0 || len(rep.Applied) == 0 || rep.Applied[0].Now {
		t.Errorf("second run: %+v", rep)
	}
	if _, _, err := runCLI(t, "migrate", "--schema", "Bad-Schema"); err == nil {
		t.Error("an invalid schema was accepted")
	}
}

func TestBenchPostgres(t *testing.T) {
	u := pgURL(t)
	for _, procs := range []int{0, 2} {
		r := benchJSON[bench.ThroughputResult](t, "throughput", "-n", "300", "--workers", "20", "--database-url", u,
			"--processes", strconv.Itoa(procs))
		checkMeta(t, r.Meta, "throughput")
		if r.Params.Store != "postgres" || r.Params.Processes != procs || r.StoreCompleted != 300 || r.Handled != 300 ||
			r.Work <= 0 || r.Durable < r.Work {
			t.Errorf("throughput, %d processes: %+v", procs, r)
		}
		if r.Schema == "" || r.SchemaKept || schemaExists(t, u, r.Schema) {
			t.Errorf("schema %q not dropped", r.Schema)
		}
	}
	r := benchJSON[bench.LatenessResult](t, "lateness", "-n", "30", "--interval", "2ms", "--retry-delay", "200ms",
		"--database-url", u, "--processes", "2", "--keep")
	t.Cleanup(func() { dropSchema(t, u, r.Schema) })
	if r.Params.Processes != 2 || r.Completed != 30 || r.SinceFailure.N != 30 || r.StoreSucceededAfterRetry != 30 ||
		r.CrossProcess < 0 || r.CrossProcess > 30 {
		t.Errorf("lateness: %+v", r)
	}
	if !r.SchemaKept || !schemaExists(t, u, r.Schema) {
		t.Errorf("--keep did not keep schema %q", r.Schema)
	}
}

// TestBenchDepthSettlePostgres: --settle vacuums, analyzes and
// checkpoints before the burn-down on PostgreSQL (the table's last
// analyze is then set), and is refused on SQLite.
func TestBenchDepthSettlePostgres(t *testing.T) {
	u := pgURL(t)
	r := benchJSON[bench.DepthResult](t, "depth", "--waiting", "300", "--due", "50", "--compare", "0",
		"--spread", "1h", "--settle", "--database-url", u, "--keep")
	t.Cleanup(func() { dropSchema(t, u, r.Schema) })
	if !r.Params.Settle || r.Run.Settle <= 0 || r.Run.StoreCompleted != 50 || r.Run.StoreScheduled != 300 {
		t.Errorf("settled depth run: %+v", r.Run)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var analyzed bool
	if err := conn.QueryRow(ctx, `SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
		r.Schema).Scan(&analyzed); err != nil || !analyzed {
		t.Errorf("jobs of %s analyzed: %v, %v", r.Schema, analyzed, err)
	}
	if _, stderr, err := runCLI(t, "bench", "depth", "--waiting", "1", "--due", "1", "--settle"); err == nil ||
		!strings.Contains(stderr+err.Error(), "PostgreSQL") {
		t.Errorf("--settle on SQLite: %v, %q", err, stderr)
	}
}

// TestMigratePostgresLockTimeout: `redrive migrate --lock-timeout` bounds
// how long a migration waits for a lock on the store's tables (the deploy
// step the docs recommend for a large table, where the default 5 s may be
// too short or too long): a schema one migration behind, with a long
// transaction holding what the last migration changes, fails within the
// bound, saying so, and migrates once the transaction ends.
func TestMigratePostgresLockTimeout(t *testing.T) {
	u := pgURL(t)
	schema := "redrive_migtest_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "")
	t.Cleanup(func() { dropSchema(t, u, schema) })
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The schema as an older binary left it: every migration but the last.
	entries, err := os.ReadDir("../../store/postgres/migrations")
	if err != nil || len(entries) < 2 {
		t.Fatalf("the migrations: %d, %v", len(entries), err)
	}
	ident := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{`CREATE SCHEMA ` + ident, `SET search_path TO ` + ident,
		`CREATE TABLE redrive_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries[:len(entries)-1] {
		body, err := os.ReadFile("../../store/postgres/migrations/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(body)); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		version, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO redrive_migrations (version, name) VALUES ($1, $2)`, version, e.Name()); err != nil {
			t.Fatal(err)
		}
	}
	long, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// It runs the last migration itself, uncommitted: whatever that
	// migration does (alter a table, create one), migrate waits for the
	// transaction's locks on the same objects.
	last := entries[len(entries)-1].Name()
	body, err := os.ReadFile("../../store/postgres/migrations/" + last)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Exec(ctx, string(body)); err != nil {
		t.Fatalf("%s in the long transaction: %v", last, err)
	}
	_, stderr, err := runCLI(t, "migrate", "--database-url", u, "--schema", schema, "--lock-timeout", "300ms")
	if err == nil || !strings.Contains(err.Error(), last) || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("migrate with a long transaction on jobs: %v\n%s; want %s to give up after 300ms", err, stderr, last)
	}
	if err := long.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := runCLI(t, "migrate", "--database-url", u, "--schema", schema, "--lock-timeout", "300ms")
	if err != nil || !strings.Contains(stdout, "applied 1 migration(s)") {
		t.Fatalf("migrate once the transaction ended: %v\n%s%s", err, stdout, stderr)
	}
}

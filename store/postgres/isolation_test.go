package postgres_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/storetest"
)

// withDefaultIsolation returns the test database's URL with level as the
// sessions' default_transaction_isolation, set through the connection's
// options (as a DBA's ALTER DATABASE or ALTER ROLE would set it), so the
// shared database is left as it is.
func withDefaultIsolation(t *testing.T, level string) string {
	t.Helper()
	raw := dbURL(t)
	opt := "-c default_transaction_isolation=" + strings.ReplaceAll(level, " ", `\ `)
	if !strings.Contains(raw, "://") { // key=value form
		return raw + " options='" + strings.ReplaceAll(opt, `\`, `\\`) + "'"
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", urlEnv, err)
	}
	q := u.Query()
	q.Set("options", strings.TrimSpace(q.Get("options")+" "+opt))
	// pgx reads "+" as itself, not as a space; Encode writes a "+" of
	// the value as %2B.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// TestRepeatableReadDefault: with the server's default isolation set to
// repeatable read, the whole conformance suite passes (the kept
// idempotency keys among it) and stores opening one new schema together
// all open: the store's sessions default to read committed, and every
// transaction it begins is READ COMMITTED explicitly. TestConformance and
// TestMigrateConcurrent run the same under the usual default.
func TestRepeatableReadDefault(t *testing.T) {
	u := withDefaultIsolation(t, "repeatable read")
	// The option must reach the server, or this test tests nothing.
	conn, err := pgx.Connect(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	var level string
	err = conn.QueryRow(t.Context(), `SHOW default_transaction_isolation`).Scan(&level)
	conn.Close(t.Context())
	if err != nil || level != "repeatable read" {
		t.Fatalf("default_transaction_isolation through %q: %q, %v; want repeatable read", u, level, err)
	}
	// The store's own sessions default to read committed, so that its
	// statements outside transactions run as they do by default.
	s, err := postgres.Open(t.Context(), u, postgres.Options{Schema: newSchema(t), MaxConns: 1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Pool().QueryRow(t.Context(), `SHOW default_transaction_isolation`).Scan(&level)
	s.Close()
	if err != nil || level != "read committed" {
		t.Errorf("the store's sessions default to %q, %v; want read committed", level, err)
	}
	t.Run("Open", func(t *testing.T) { migrateConcurrently(t, u) })
	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			schema := newSchema(t)
			t.Cleanup(func() { checkJobCounts(t, schema) })
			s, err := postgres.Open(t.Context(), u, postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet()})
			if err != nil {
				t.Fatalf("postgres.Open: %v", err)
			}
			return s
		})
	})
}

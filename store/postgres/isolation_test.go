package postgres_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
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
// repeatable read, the option reaches the server, the store's sessions
// default to read committed all the same, and stores opening one new
// schema together all open. TestConformance runs the whole conformance
// suite with this default; TestMigrateConcurrent opens stores together
// under the usual one.
func TestRepeatableReadDefault(t *testing.T) {
	u := withDefaultIsolation(t, "repeatable read")
	// The option must reach the server, or this test and TestConformance
	// test nothing of it.
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
}

// TestEnqueueTxStricterIsolation: EnqueueTx in a caller's transaction at
// repeatable read or serializable, with an idempotency key whose job was
// deleted (its key kept) after the transaction took its snapshot, either
// answers with the kept key's job or fails: it never answers the key with
// a second job, as it did by reading the kept keys in the old snapshot.
// At read uncommitted, which PostgreSQL runs as read committed, the kept
// key's job is the answer.
func TestEnqueueTxStricterIsolation(t *testing.T) {
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable, pgx.ReadUncommitted} {
		t.Run(string(level), func(t *testing.T) {
			s := openFresh(t)
			ctx := t.Context()
			first, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: "key"}}, t0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Cancel(ctx, first[0].ID, t0); err != nil {
				t.Fatal(err)
			}
			tx, err := s.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var one int
			if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil { // the snapshot
				t.Fatal(err)
			}
			// Retention deletes the job and keeps its key meanwhile.
			if n, err := s.DeleteFinished(ctx, store.Canceled, t0.Add(time.Hour), 10); err != nil || n != 1 {
				t.Fatalf("DeleteFinished: %d, %v; want 1", n, err)
			}
			out, err := s.EnqueueTx(ctx, tx, []store.NewJob{{Queue: "q", Kind: "k", IdempotencyKey: "key"}}, t0)
			if err != nil && level == pgx.ReadUncommitted {
				t.Fatalf("EnqueueTx at read uncommitted: %v", err)
			}
			if err != nil {
				// Refused as invalid, leaving the transaction usable.
				if !errors.Is(err, store.ErrInvalid) {
					t.Errorf("EnqueueTx: %v; want store.ErrInvalid", err)
				}
				if err := tx.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
					t.Errorf("the transaction after the refusal: %v", err)
				}
				return
			}
			if !out[0].Existing || out[0].ID != first[0].ID {
				err := tx.Commit(ctx)
				t.Errorf("EnqueueTx answered the kept key with job %d (Existing %v), commit %v; want job %d or an error",
					out[0].ID, out[0].Existing, err, first[0].ID)
			}
		})
	}
}

package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// auditDB returns a new SQLite store's file, for the audit entries of
// the broker DLQ commands.
func auditDB(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "audit.db")
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return db
}

// auditEntries returns db's audit entries of action, the newest first.
func auditEntries(t *testing.T, db, action string) []store.AuditEntry {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	entries, _, err := st.ListAudit(ctx, store.AuditFilter{Action: action}, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

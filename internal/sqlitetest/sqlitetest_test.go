package sqlitetest_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store/sqlite"
)

// recorder is a slog.Handler that keeps the messages logged through it.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// applied opens the database at path with a logger of its own, and
// returns how many migrations the open applied, and how many the
// database records as applied in all.
func applied(t *testing.T, path string) (now, all int) {
	t.Helper()
	rec := &recorder{}
	st, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rec.msgs {
		if strings.Contains(m, "applied migration") {
			now++
		}
	}
	st.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM redrive_migrations`).Scan(&all); err != nil {
		t.Fatal(err)
	}
	return now, all
}

// TestPathIsMigrated checks that a database from Path holds every
// migration a new database gets, so that opening it applies none.
func TestPathIsMigrated(t *testing.T) {
	fresh, freshAll := applied(t, filepath.Join(t.TempDir(), "fresh.db"))
	if fresh == 0 || fresh != freshAll {
		t.Fatalf("a new database: %d migrations applied on open, %d recorded", fresh, freshAll)
	}
	for i := range 2 { // the first call builds the template, the second copies it
		now, all := applied(t, sqlitetest.Path(t))
		if now != 0 || all != freshAll {
			t.Fatalf("Path, call %d: opening it applied %d migrations and it records %d; a new database records %d, all applied on open", i+1, now, all, freshAll)
		}
	}
}

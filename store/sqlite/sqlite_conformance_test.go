package sqlite_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
	"github.com/redrivehq/redrive/store/storetest"
)

// open opens a new, empty SQLite store in a fresh temporary directory.
func open(tb testing.TB) store.Store {
	tb.Helper()
	s, err := sqlite.Open(tb.Context(), filepath.Join(tb.TempDir(), "redrive.db"), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatalf("sqlite.Open: %v", err)
	}
	return s
}

// TestConformance runs the store conformance suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// BenchmarkStore runs the store-level benchmarks on SQLite.
func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

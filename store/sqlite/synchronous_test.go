package sqlite

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestSynchronousApplied: Options.Synchronous reaches the connection that
// commits (SQLite's numbers: 1 normal, 2 full), and an unknown mode is
// refused before the file is touched.
func TestSynchronousApplied(t *testing.T) {
	for mode, want := range map[string]int{"": 2, "full": 2, "FULL": 2, "normal": 1} {
		s, err := Open(t.Context(), filepath.Join(t.TempDir(), "redrive.db"),
			Options{Synchronous: mode, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		var got int
		if err := s.wconn.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&got); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if got != want {
			t.Errorf("Synchronous %q: the writer runs synchronous=%d, want %d", mode, got, want)
		}
	}
	path := filepath.Join(t.TempDir(), "redrive.db")
	if _, err := Open(t.Context(), path, Options{Synchronous: "off"}); err == nil {
		t.Fatal(`Synchronous "off" was accepted`)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused mode created the database: %v", err)
	}
}

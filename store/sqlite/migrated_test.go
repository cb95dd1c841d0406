package sqlite

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// migrated is a database file this test process created with Open (which
// applied every migration), for migratedPath to copy: applying the
// migrations to a new file is most of what opening a store costs under
// -race (about 0.8 s of CPU, against 0.1 s to open a copy). This is what
// internal/sqlitetest does for the other packages, which the package's
// own tests cannot import (it imports this package).
var migrated struct {
	once sync.Once
	file []byte
	err  error
}

// migratedPath writes a copy of a migrated, empty database to path (in a
// directory that exists) and returns path: Open on it applies no
// migration. Tests about creating or migrating a database open a new
// file instead.
func migratedPath(tb testing.TB, path string) string {
	tb.Helper()
	migrated.once.Do(func() { migrated.file, migrated.err = migrate() })
	if migrated.err != nil {
		tb.Fatalf("migrating the template database: %v", migrated.err)
	}
	if err := os.WriteFile(path, migrated.file, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// migrate opens a store on a new file, closes it, and returns the file's
// content; it fails if the write-ahead log outlived the close, since the
// file alone would then lack some of it.
func migrate() ([]byte, error) {
	dir, err := os.MkdirTemp("", "redrive-sqlite-template-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "redrive.db")
	s, err := Open(context.Background(), path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s-wal still holds %d bytes after the store closed", path, fi.Size())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return os.ReadFile(path)
}

// Package sqlitetest gives tests a migrated SQLite database without
// migrating one per test. Applying the embedded migrations to a new file
// is most of what opening a store costs under -race (SQLite is C
// transpiled to Go, every memory access of it checked): about 0.8 s of
// CPU, against 0.1 s to open a copy of a database already migrated. The
// first call of Path in a test process opens and closes a store on a new
// file, which applies every migration as production does; each call then
// writes a copy of that file where the test wants its database.
//
// Tests that are about creating or migrating a database open a path of
// their own instead.
package sqlitetest

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

	"github.com/redrivehq/redrive/store/sqlite"
)

var (
	once     sync.Once
	template []byte
	built    error
)

// Path returns the path of a database file named redrive.db in a new
// temporary directory of tb, holding a copy of a database that
// sqlite.Open created and migrated in this process; opening it with
// sqlite.Open applies no migration.
func Path(tb testing.TB) string {
	tb.Helper()
	once.Do(func() { template, built = build() })
	if built != nil {
		tb.Fatalf("sqlitetest: migrating the template database: %v", built)
	}
	path := filepath.Join(tb.TempDir(), "redrive.db")
	if err := os.WriteFile(path, template, 0o600); err != nil {
		tb.Fatalf("sqlitetest: %v", err)
	}
	return path
}

// build opens a store on a new file, which migrates it, closes it, and
// returns the file's content. Closing the last connection checkpoints
// the write-ahead log into the file and removes the log; build fails if
// it is still there, since the file alone would then lack some of it.
func build() ([]byte, error) {
	dir, err := os.MkdirTemp("", "redrive-sqlitetest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "redrive.db")
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s-wal still holds %d bytes after the store closed", path, fi.Size())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return os.ReadFile(path)
}

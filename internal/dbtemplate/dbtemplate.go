// Package dbtemplate keeps, for the tests of one process, the file of a
// SQLite database created once, for each test to start from a copy.
// Applying the embedded migrations to a new file is most of what opening
// a store costs under -race (SQLite is C transpiled to Go, every memory
// access of it checked): about 0.8 s of CPU, against 0.1 s to open a copy
// of a database already migrated.
//
// It does not import the store, so that the store's own tests can use it
// as well as internal/sqlitetest does.
package dbtemplate

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Template is a database file built once, on first use, by opening and
// closing a store on a new file.
type Template struct {
	open func(path string) (io.Closer, error)
	once sync.Once
	file []byte
	err  error
}

// New returns a Template whose file is built by open: it must create
// (and migrate) the database at path, and its Close must leave the
// whole database in the file (SQLite checkpoints the write-ahead log
// into the file when its last connection closes).
func New(open func(path string) (io.Closer, error)) *Template {
	return &Template{open: open}
}

// Copy writes a copy of the template's database to path, in a directory
// that exists, and returns path. It fails tb if the template could not
// be built.
func (t *Template) Copy(tb testing.TB, path string) string {
	tb.Helper()
	t.once.Do(func() { t.file, t.err = t.build() })
	if t.err != nil {
		tb.Fatalf("dbtemplate: building the template database: %v", t.err)
	}
	if err := os.WriteFile(path, t.file, 0o600); err != nil {
		tb.Fatalf("dbtemplate: %v", err)
	}
	return path
}

// build opens a store on a new file, closes it, and returns the file's
// content; it fails if the write-ahead log outlived the close, since the
// file alone would then lack some of it.
func (t *Template) build() ([]byte, error) {
	dir, err := os.MkdirTemp("", "redrive-dbtemplate-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "redrive.db")
	st, err := t.open(path)
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

// Package sqlitetest gives tests a migrated SQLite database without
// migrating one per test (see internal/dbtemplate for what that saves).
// The first call of Path in a test process opens and closes a store on a
// new file, which applies every migration as production does; each call
// then writes a copy of that file where the test wants its database.
//
// Tests that are about creating or migrating a database open a path of
// their own instead.
package sqlitetest

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive/internal/dbtemplate"
	"github.com/redrivehq/redrive/store/sqlite"
)

var template = dbtemplate.New(func(path string) (io.Closer, error) {
	return sqlite.Open(context.Background(), path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
})

// Path returns the path of a database file named redrive.db in a new
// temporary directory of tb, holding a copy of a database that
// sqlite.Open created and migrated in this process; opening it with
// sqlite.Open applies no migration.
func Path(tb testing.TB) string {
	tb.Helper()
	return template.Copy(tb, filepath.Join(tb.TempDir(), "redrive.db"))
}

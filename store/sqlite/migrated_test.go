package sqlite

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/redrivehq/redrive/internal/dbtemplate"
)

// migrated is a database file this test process created with Open (which
// applied every migration), for migratedPath to copy: what
// internal/sqlitetest does for the other packages, which the package's
// own tests cannot import (it imports this package).
var migrated = dbtemplate.New(func(path string) (io.Closer, error) {
	return Open(context.Background(), path, Options{Logger: slog.New(slog.DiscardHandler)})
})

// migratedPath writes a copy of a migrated, empty database to path (in a
// directory that exists) and returns path: Open on it applies no
// migration. Tests about creating or migrating a database open a new
// file instead.
func migratedPath(tb testing.TB, path string) string {
	tb.Helper()
	return migrated.Copy(tb, path)
}

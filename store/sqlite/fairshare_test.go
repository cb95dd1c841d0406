package sqlite_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive/store/sqlite"
	"github.com/redrivehq/redrive/store/storetest"
)

// TestFairTwoProcesses: a store that never enqueued to a fair queue, nor
// was told it is fair, leases its jobs by round robin (it finds the fair
// jobs by its probe).
func TestFairTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "redrive.db")
	opts := sqlite.Options{Logger: slog.New(slog.DiscardHandler)}
	a, err := sqlite.Open(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(t.Context(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	storetest.FairTwoProcesses(t, a, b)
}

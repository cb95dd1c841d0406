package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redrivehq/redrive/store/sqlite"
)

// TestServeSQLiteSynchronous: --sqlite-synchronous reaches the store
// serve opens, and serve's log names the mode when it is not full.
func TestServeSQLiteSynchronous(t *testing.T) {
	for _, mode := range []string{"full", "normal"} {
		cfg, err := loadConfig(t, nil, "--db", filepath.Join(t.TempDir(), "s.db"), "--sqlite-synchronous", mode)
		if err != nil {
			t.Fatal(err)
		}
		st, desc, err := openServeStore(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		got := st.(*sqlite.Store).Synchronous()
		st.Close()
		if got != mode {
			t.Errorf("--sqlite-synchronous %s: the store commits with %q", mode, got)
		}
		if named := strings.Contains(desc, "synchronous=normal"); named != (mode == "normal") {
			t.Errorf("--sqlite-synchronous %s: serve describes the store as %q", mode, desc)
		}
	}
}

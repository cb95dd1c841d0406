package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/config"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestDownloadCheckedBothWays: `redrive download` on a store whose serve
// has no --download-dir is refused before anything is enqueued, with the
// same words through the server (its 400) and directly on the store (the
// kind check: the live workers of the queue do not run the download
// kind); it once enqueued, directly, a job that died with "no handler
// registered".
func TestDownloadCheckedBothWays(t *testing.T) {
	clearConnEnv(t)
	ctx := context.Background()
	db := sqlitetest.Path(t)
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(ctx, db, sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A serve without --download-dir, as serve wires it.
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	w := redrive.NewWorker(client, redrive.WorkerOptions{Logger: log})
	if err := registerDownload(w, &config.Serve{}); err != nil {
		t.Fatal(err)
	}
	api := server.New(server.Options{Client: client, Logger: log})
	ts := httptest.NewServer(api)
	defer func() { api.Close(); ts.Close() }()
	count := func() int {
		t.Helper()
		res, err := st.List(ctx, store.Filter{Kind: downloadKind}, store.Page{})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Jobs)
	}

	_, stderr, err := runCLI(t, "download", "https://example.com/a.csv", "--server", ts.URL)
	if err == nil || !strings.Contains(stderr, errDownloadOff.Error()) {
		t.Errorf("through the server: %v %q", err, stderr)
	}
	registerKinds(t, db, map[string]int{"default": 10}, "http") // the serve's live worker
	_, stderr, err = runCLI(t, "download", "https://example.com/a.csv", "--db", db)
	if err == nil || !strings.Contains(stderr, errDownloadOff.Error()) || !strings.Contains(stderr, `kind "download"`) {
		t.Errorf("directly: %v %q", err, stderr)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d download jobs enqueued by refused commands", n)
	}
}

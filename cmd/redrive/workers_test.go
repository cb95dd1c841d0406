package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestWorkersList: `redrive workers ls` shows the registered workers, on
// the store directly and through a server.
func TestWorkersList(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	if out := mustCLI(t, "--db", db, "enqueue", "k"); !strings.Contains(out, "enqueued") {
		t.Fatal(out)
	}
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: slog.New(slog.DiscardHandler)})
	w := redrive.NewWorker(c, redrive.WorkerOptions{Queues: map[string]int{"default": 3, "mail": 5}, Logger: slog.New(slog.DiscardHandler)})
	w.HandleFunc("send.email", func(context.Context, *redrive.Job) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	waitUntil(t, e2eWait, "the worker registered", func() error {
		if ws, err := c.Workers(context.Background()); err != nil || len(ws) != 1 {
			return fmt.Errorf("%d workers (%v)", len(ws), err)
		}
		return nil
	})
	out := mustCLI(t, "--db", db, "workers", "ls")
	if !strings.Contains(out, w.ID()) || !strings.Contains(out, "live") || !strings.Contains(out, "default=3,mail=5") ||
		!strings.Contains(out, "KINDS") || !strings.Contains(out, "send.email") {
		t.Errorf("workers ls:\n%s", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	list := decode[server.WorkerList](t, mustCLI(t, "--db", db, "--json", "workers", "ls"))
	if len(list.Workers) != 1 || list.Workers[0].State != redrive.WorkerStopped || list.Workers[0].Queues["mail"] != 5 {
		t.Errorf("workers ls --json after the worker stopped: %+v", list)
	}
	ts, _, _ := newBareTestServer(t, "")
	if out := mustCLI(t, "--server", ts.URL, "workers", "ls"); !strings.Contains(out, "No workers registered.") {
		t.Errorf("workers ls on an empty server: %q", out)
	}
}

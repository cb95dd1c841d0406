package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestCLINameRule: the CLI holds the names it is given to the name rule
// before touching the store: nothing invisible, nothing path-like.
func TestCLINameRule(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	mustCLI(t, "--db", db, "enqueue", "email")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"queues", "pause", "..", "--create"}, "looks like a path"},
		{[]string{"queues", "pause", "q\u200d", "--create"}, "cannot be seen"},
		{[]string{"periodic", "pause", ".."}, "looks like a path"},
		{[]string{"periodic", "rm", "s\u200b"}, "cannot be seen"},
		{[]string{"enqueue", "k\u2060"}, "cannot be seen"},
		{[]string{"enqueue", "k", "--queue", "."}, "looks like a path"},
	} {
		_, _, err := runCLI(t, append([]string{"--db", db}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestCLIScheduleOldName: a schedule stored before the name rule under a
// name it now refuses can still be paused and removed with the CLI.
func TestCLIScheduleOldName(t *testing.T) {
	clearConnEnv(t)
	db := sqlitetest.Path(t)
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := st.DeclareSchedule(context.Background(), store.ScheduleDecl{Name: "s\u200b",
		Spec: json.RawMessage(`{"every":"1h","kind":"k"}`), Cursor: now}, now); err != nil {
		t.Fatal(err)
	}
	st.Close()
	mustCLI(t, "--db", db, "periodic", "pause", "s\u200b")
	mustCLI(t, "--db", db, "periodic", "rm", "s\u200b")
	// Gone, the name is held to the rule again.
	if _, _, err := runCLI(t, "--db", db, "periodic", "rm", "s\u200b"); err == nil || !strings.Contains(err.Error(), "cannot be seen") {
		t.Errorf("rm again: %v", err)
	}
}

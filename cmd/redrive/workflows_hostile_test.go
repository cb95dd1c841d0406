package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestWorkflowShowHostileName: workflows show prints a workflow's name
// and idempotency key with their format characters escaped, as ls and
// the jobs' names: a name holding U+202E (which the store takes: it is
// no control character) would reverse what the terminal shows after it.
func TestWorkflowShowHostileName(t *testing.T) {
	db := filepath.Join(t.TempDir(), "redrive.db")
	st, err := sqlite.Open(context.Background(), db, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.EnqueueWorkflow(context.Background(), store.NewWorkflow{Name: "invoice\u202Efdp.exe", IdempotencyKey: "key\u200B\u202E1",
		Jobs: []store.WorkflowNode{{Name: "a\u202Eb", Job: store.NewJob{Queue: "q", Kind: "k"}}}}, time.Now())
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"workflows", "show", "1"}, {"workflows", "ls"}} {
		out, stderr, err := runCLI(t, append([]string{"--db", db}, args...)...)
		if err != nil {
			t.Fatalf("redrive %s: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		if strings.ContainsAny(out, "\u202E\u200B") {
			t.Errorf("redrive %s prints a format character as is:\n%q", strings.Join(args, " "), out)
		}
		if !strings.Contains(out, `invoice\u202efdp.exe`) {
			t.Errorf("redrive %s does not show the name escaped:\n%q", strings.Join(args, " "), out)
		}
	}
}

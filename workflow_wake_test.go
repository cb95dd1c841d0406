package redrive_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestWorkflowReleaseWakesSQLite: on SQLite (no notifications), a
// workflow's dependent released by its dependency's completion, and the
// success callback fired by the last completion, run at once: the
// worker polls once an hour, so only the wake-up the store gives on the
// release (store.Releaser) can start them within the test's bound.
func TestWorkflowReleaseWakesSQLite(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quietLogger()})
	w := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quietLogger(), PollInterval: time.Hour})
	ran := make(chan string, 3)
	for _, kind := range []string{"first", "second", "done"} {
		redrive.Handle(w, kind, func(ctx context.Context, job *redrive.Job, _ struct{}) error {
			ran <- job.Kind
			return nil
		})
	}
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { w.Run(ctx); close(stopped) }()
	defer func() { stop(); <-stopped }()
	// The worker is polling (its first fetch found nothing) before the
	// workflow exists: the enqueue wakes it for the first job only.
	wf := redrive.NewWorkflow("wake").
		Add("first", redrive.Request{Kind: "first", Payload: struct{}{}}).
		Add("second", redrive.Request{Kind: "second", Payload: struct{}{}}, "first").
		OnSuccess(redrive.Request{Kind: "done", Payload: struct{}{}})
	if _, err := client.EnqueueWorkflow(ctx, wf); err != nil {
		t.Fatal(err)
	}
	const bound = 30 * time.Second // liveness only: the poll is an hour
	for _, want := range []string{"first", "second", "done"} {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("ran %s, want %s", got, want)
			}
		case <-time.After(bound):
			t.Fatalf("%s did not run within %s: the release did not wake the worker", want, bound)
		}
	}
}

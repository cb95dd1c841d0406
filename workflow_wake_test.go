package redrive_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/postgres"
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

// TestWorkflowReleaseWakesOtherProcessPostgres: on PostgreSQL, a
// workflow's dependent released by a completion in one process runs at
// once in another. Two workers on one schema, each through its own store
// (as two processes: their own pools, listeners and in-process hooks),
// poll once an hour: worker A runs the dependency, worker B serves the
// dependent's queue alone. The release is committed by A's Finish, which
// announces it after its commit (a NOTIFY of its own): only that
// notification can start the dependent on B within the test's bound.
func TestWorkflowReleaseWakesOtherProcessPostgres(t *testing.T) {
	url := pgTestURL(t)
	stA, schema := pgFreshSchema(t, url, "redrive_wake_")
	stB, err := postgres.Open(t.Context(), url, postgres.Options{Schema: schema, MaxConns: 4, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close()
	clientA := redrive.NewClient(stA, redrive.ClientOptions{Logger: quietLogger()})
	clientB := redrive.NewClient(stB, redrive.ClientOptions{Logger: quietLogger()})
	wA := redrive.NewWorker(clientA, redrive.WorkerOptions{Queues: map[string]int{"a": 1}, Logger: quietLogger(), PollInterval: time.Hour})
	wB := redrive.NewWorker(clientB, redrive.WorkerOptions{Queues: map[string]int{"b": 1}, Logger: quietLogger(), PollInterval: time.Hour})
	hold := make(chan struct{})
	started, probed, ran := make(chan struct{}, 1), make(chan struct{}, 1), make(chan string, 2)
	redrive.Handle(wA, "first", func(ctx context.Context, job *redrive.Job, _ struct{}) error {
		started <- struct{}{}
		select {
		case <-hold:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	redrive.Handle(wB, "probe", func(ctx context.Context, job *redrive.Job, _ struct{}) error {
		probed <- struct{}{}
		return nil
	})
	for _, kind := range []string{"second", "done"} {
		redrive.Handle(wB, kind, func(ctx context.Context, job *redrive.Job, _ struct{}) error {
			ran <- job.Kind
			return nil
		})
	}
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan struct{}, 2)
	for _, w := range []*redrive.Worker{wA, wB} {
		go func() { w.Run(ctx); stopped <- struct{}{} }()
	}
	defer func() { stop(); <-stopped; <-stopped }()
	const bound = 30 * time.Second // liveness only: the poll is an hour
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(bound):
			t.Fatalf("%s did not happen within %s", what, bound)
		}
	}
	wf := redrive.NewWorkflow("wake").
		Add("first", redrive.Request{Kind: "first", Queue: "a", Payload: struct{}{}}).
		Add("second", redrive.Request{Kind: "second", Queue: "b", Payload: struct{}{}}, "first").
		OnSuccess(redrive.Request{Kind: "done", Queue: "b", Payload: struct{}{}})
	if _, err := clientA.EnqueueWorkflow(ctx, wf); err != nil {
		t.Fatal(err)
	}
	wait(started, "the dependency's start on A")
	// B hears A's process: a job A enqueues runs on B (its listener is
	// up), after which B waits for the next notification or its poll.
	if _, err := clientA.Enqueue(ctx, "probe", struct{}{}, redrive.InQueue("b")); err != nil {
		t.Fatal(err)
	}
	wait(probed, "the probe's run on B")
	close(hold)
	for _, want := range []string{"second", "done"} {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("B ran %s, want %s", got, want)
			}
		case <-time.After(bound):
			t.Fatalf("%s did not run on B within %s: the release in A's process did not wake B", want, bound)
		}
	}
}

package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/sqlite"
)

// openStorePair opens two stores on one fresh database, as two processes
// would: SQLite files, or a PostgreSQL schema with
// REDRIVE_ENGINE_STORE=postgres.
func openStorePair(t *testing.T) (a, b store.Store) {
	t.Helper()
	if os.Getenv("REDRIVE_ENGINE_STORE") == "postgres" {
		url := os.Getenv("REDRIVE_POSTGRES_URL")
		if url == "" {
			t.Fatal("REDRIVE_ENGINE_STORE=postgres needs REDRIVE_POSTGRES_URL")
		}
		schema := fmt.Sprintf("redrive_engine_%d_%d", os.Getpid(), schemaSeq.Add(1))
		var stores [2]*postgres.Store
		for i := range stores {
			st, err := postgres.Open(context.Background(), url, postgres.Options{Schema: schema, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			stores[i] = st
		}
		t.Cleanup(func() {
			stores[1].Close()
			stores[0].Pool().Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			stores[0].Close()
		})
		return stores[0], stores[1]
	}
	path := sqlitetest.Path(t)
	var stores [2]*sqlite.Store
	for i := range stores {
		st, err := sqlite.Open(context.Background(), path, sqlite.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		stores[i] = st
	}
	return stores[0], stores[1]
}

// TestCancelRunningJobPromptly checks that a cancellation reaches the
// running handler by a wake-up, not at the next heartbeat: the lease is a
// minute long, so the first heartbeat comes 20 s after the job started,
// long after the 5 s the test waits for the handler to see it.
func TestCancelRunningJobPromptly(t *testing.T) {
	const wait = 5 * time.Second // well below LeaseDuration/3
	for _, tc := range []struct {
		name         string
		otherProcess bool
	}{{"same client", false}, {"other process", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := openStorePair(t)
			client := redrive.NewClient(a, redrive.ClientOptions{Logger: quietLogger()})
			canceler := client
			if tc.otherProcess {
				canceler = redrive.NewClient(b, redrive.ClientOptions{Logger: quietLogger()})
			}
			p := fastPolicy(3)
			w := redrive.NewWorker(client, redrive.WorkerOptions{LeaseDuration: time.Minute, Policy: &p, Logger: quietLogger(),
				Queues: map[string]int{redrive.DefaultQueue: 2}})
			rounds := redrive.EngineSignal(w)
			started := make(chan struct{})
			seen := make(chan error, 1)
			w.HandleFunc("block", func(ctx context.Context, j *redrive.Job) error {
				close(started)
				<-ctx.Done()
				seen <- context.Cause(ctx)
				return context.Cause(ctx)
			})
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("worker.Run: %v", err)
				}
			}()
			job, err := client.Enqueue(context.Background(), "block", nil)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("the handler never started")
			}
			c, err := canceler.Cancel(context.Background(), job.ID)
			if err != nil || !c.CancelRequested {
				t.Fatalf("cancel: %v %+v", err, c)
			}
			select {
			case cause := <-seen:
				if !errors.Is(cause, redrive.ErrJobCanceled) {
					t.Fatalf("handler's context ended with %v, want ErrJobCanceled", cause)
				}
			case <-time.After(wait):
				t.Fatalf("the handler did not see the cancellation within %s (it would at the heartbeat, 20 s in)", wait)
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				j, err := client.Get(context.Background(), job.ID)
				if err != nil {
					t.Fatal(err)
				}
				if j.State == redrive.Canceled {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job %d is %s, want canceled", job.ID, j.State)
				}
				// The canceled attempt's outcome is written in a round of
				// the completer.
				select {
				case <-rounds:
				case <-time.After(time.Until(deadline)):
				}
			}
		})
	}
}

package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
	"github.com/redrivehq/redrive/store/sqlite"
)

// A worker retries a failing job by its policy and moves it to the DLQ when
// retries are exhausted; an operator then redrives it.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "redrive-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})

	policy := retry.DefaultPolicy()
	policy.Initial, policy.Jitter = time.Millisecond, retry.JitterNone // fast, for the example
	worker := redrive.NewWorker(client, redrive.WorkerOptions{Policy: &policy, Logger: quiet})

	type Invoice struct{ Number string }
	fixed := make(chan struct{})
	redrive.Handle(worker, "invoice", func(ctx context.Context, job *redrive.Job, inv Invoice) error {
		select {
		case <-fixed:
			return nil
		default:
			return errors.New("billing API unavailable")
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { worker.Run(runCtx); close(done) }()

	job, _ := client.Enqueue(ctx, "invoice", Invoice{Number: "INV-7"},
		redrive.IdempotencyKey(redrive.KeyOf("invoice", "INV-7")))
	again, _ := client.Enqueue(ctx, "invoice", Invoice{Number: "INV-7"},
		redrive.IdempotencyKey(redrive.KeyOf("invoice", "INV-7")))
	fmt.Println("same job:", again.ID == job.ID, "existing:", again.Existing)

	j := waitFor(client, job.ID, redrive.Dead)
	fmt.Println(j.State, "after", j.Attempt, "attempts:", j.DeadReason)

	close(fixed) // the operator fixes the cause...
	client.Redrive(ctx, redrive.RedriveRequest{IDs: []int64{job.ID}, Note: "billing is back"})
	j = waitFor(client, job.ID, redrive.Completed)
	fmt.Println(j.State, "after redrive, history of", len(j.History), "events")

	stop()
	<-done
	// Output:
	// same job: true existing: true
	// dead after 4 attempts: retries_exhausted
	// completed after redrive, history of 5 events
}

// waitFor reads the job again every millisecond, as a program using the
// Client would (the API tells no one of a job's new state), until it is
// in state; it panics, saying so, if it is not within a generous bound.
func waitFor(c *redrive.Client, id int64, state redrive.State) *redrive.Job {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	bound := time.NewTimer(30 * time.Second)
	defer bound.Stop()
	for {
		j, err := c.Get(context.Background(), id)
		if err == nil && j.State == state {
			return j
		}
		select {
		case <-tick.C:
		case <-bound.C:
			panic(fmt.Sprintf("job %d is not %s after 30s (%+v, %v)", id, state, j, err))
		}
	}
}

// A handler records what its success produced, so the job's history shows
// it next to any failed attempts.
func ExampleRecord() {
	ctx := context.Background()
	client, quiet, done := exampleClient(ctx) // a SQLite store in a temporary folder
	defer done()
	worker := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quiet})

	type Charge struct{ Cents int }
	redrive.Handle(worker, "charge", func(ctx context.Context, job *redrive.Job, c Charge) error {
		receipt := "R-" + strconv.Itoa(c.Cents*7) // what the payment API answered
		redrive.Record(ctx, "charged", fmt.Sprintf("%d cents, receipt %s", c.Cents, receipt))
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { worker.Run(runCtx); close(stopped) }()

	job, _ := client.Enqueue(ctx, "charge", Charge{Cents: 1250})
	j := waitFor(client, job.ID, redrive.Completed)
	ev := j.History[len(j.History)-1]
	fmt.Println(ev.Kind, "attempt", ev.Attempt, ev.Reason+":", ev.Note)

	stop()
	<-stopped
	// Output:
	// completed attempt 1 charged: 1250 cents, receipt R-8750
}

// exampleClient opens a SQLite store in a temporary folder; done closes it
// and removes the folder.
func exampleClient(ctx context.Context) (client *redrive.Client, quiet *slog.Logger, done func()) {
	dir, _ := os.MkdirTemp("", "redrive-example")
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	return redrive.NewClient(st, redrive.ClientOptions{Logger: quiet}), quiet, func() {
		st.Close()
		os.RemoveAll(dir)
	}
}

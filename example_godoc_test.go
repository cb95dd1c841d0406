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
	"github.com/redrivehq/redrive/store/sqlite"
)

// The examples of this file hold the snippets of docs/go.md line for line
// (TestGoDocSnippets checks it), so that go test compiles and runs them.

// errBadAddress is the error of the program's mail sender in
// Example_goDoc.
var errBadAddress = errors.New("bad address")

// Example_goDoc is the first snippet of docs/go.md: a worker, a handler,
// and an enqueue made idempotent by a key built from an int id.
func Example_goDoc() {
	ctx, cancel := context.WithCancel(context.Background())
	dir, _ := os.MkdirTemp("", "redrive-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sentTo := make(chan string, 10)
	send := func(ctx context.Context, m struct{ To string }) error { sentTo <- m.To; return nil }
	userID := 42
	ranDone := make(chan struct{})

	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet}) // WAL, fsync on commit
	if err != nil {
		panic(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	worker := redrive.NewWorker(client, redrive.WorkerOptions{
		Queues: map[string]int{"default": 50}, // queue -> concurrency
		Logger: quiet,
	})

	type Email struct{ To string }
	redrive.Handle(worker, "email", func(ctx context.Context, job *redrive.Job, m Email) error {
		err := send(ctx, m)
		if errors.Is(err, errBadAddress) {
			return redrive.Permanent(err) // straight to the DLQ, no retries
		}
		return err // classified: 503, timeouts, refused connections... are retried
	}, redrive.Timeout(30*time.Second), redrive.UsesDependency("smtp"))

	go func() { worker.Run(ctx); close(ranDone) }() // until ctx ends; then a graceful shutdown
	defer func() { cancel(); <-ranDone }()

	for range 3 {
		client.Enqueue(ctx, "email", Email{To: "a@example.com"},
			redrive.IdempotencyKey(redrive.KeyOf("welcome", strconv.Itoa(userID))), // N enqueues, one job
			redrive.MaxRetries(5))
	}
	fmt.Println("sent to", <-sentTo)
	jobs, _ := client.List(ctx, redrive.Filter{Kind: "email"}, redrive.Page{})
	fmt.Println("jobs:", len(jobs.Jobs))
	// Output:
	// sent to a@example.com
	// jobs: 1
}

// Example_goDocPeriodic is the Periodic snippet of docs/go.md: the worker
// works the queues its schedules enqueue to (Run warns of one it does not
// work: nothing would run its jobs).
func Example_goDocPeriodic() {
	ctx, cancel := context.WithCancel(context.Background())
	dir, _ := os.MkdirTemp("", "redrive-example")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	type Reconcile struct{ Batch int }

	worker := redrive.NewWorker(client, redrive.WorkerOptions{
		Logger: quiet,
		Queues: map[string]int{"default": 10, "ops": 1}, // the queues its schedules enqueue to
		Periodic: []redrive.Periodic{
			{Name: "reconcile-index", Cron: "0 2 * * *", TimeZone: "America/New_York", Kind: "reconcile",
				Payload: Reconcile{Batch: 100}, Missed: redrive.MissedRunOnce},
			{Name: "heartbeat", Every: time.Minute, Kind: "heartbeat", Options: []redrive.Option{redrive.InQueue("ops")}},
		},
	})

	beat := make(chan string, 10)
	worker.HandleFunc("heartbeat", func(ctx context.Context, job *redrive.Job) error { beat <- job.Queue; return nil })
	worker.HandleFunc("reconcile", func(ctx context.Context, job *redrive.Job) error { return nil })
	ranDone := make(chan struct{})
	go func() { worker.Run(ctx); close(ranDone) }()
	defer func() { cancel(); <-ranDone }()
	// The heartbeat's occurrences are on the minute: run one now, once
	// the worker declared its schedules (as it starts).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for _, err := client.TriggerSchedule(ctx, "heartbeat"); err != nil; _, err = client.TriggerSchedule(ctx, "heartbeat") {
		<-tick.C
	}
	fmt.Println("heartbeat ran in queue", <-beat)
	// Output:
	// heartbeat ran in queue ops
}

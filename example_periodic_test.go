package redrive_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store/sqlite"
)

// A reconciliation job runs every night at 2 a.m. New York time, and once
// if the night's run was missed while everything was down; a heartbeat
// job runs every second. Every worker sharing the store may declare the
// same schedules: each occurrence is enqueued once.
func ExamplePeriodic() {
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

	worker := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quiet, Periodic: []redrive.Periodic{
		{Name: "reconcile-index", Cron: "0 2 * * *", TimeZone: "America/New_York", Kind: "reconcile",
			Payload: map[string]int{"batch": 100}, Missed: redrive.MissedRunOnce},
		{Name: "heartbeat", Every: time.Second, Kind: "heartbeat"},
	}})
	beats := make(chan int64, 10)
	worker.HandleFunc("heartbeat", func(ctx context.Context, job *redrive.Job) error {
		beats <- job.ID
		return nil
	})
	worker.HandleFunc("reconcile", func(ctx context.Context, job *redrive.Job) error { return nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { worker.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	<-beats // the first heartbeat ran
	schedules, _ := client.Schedules(ctx)
	for _, s := range schedules {
		fmt.Printf("%s: cron %q every %q in %q, missed runs: %s\n", s.Name, s.Cron, s.Every, s.TimeZone, s.Missed)
	}
	night, _ := client.Schedule(ctx, "reconcile-index")
	fmt.Println("next reconcile at", inZone(night.NextRun, "America/New_York"), "New York time")

	// An admin endpoint runs it now, outside its schedule.
	job, _ := client.TriggerSchedule(ctx, "reconcile-index")
	fmt.Println("triggered:", job.Kind, string(job.Payload))

	paused, _ := client.PauseSchedule(ctx, "heartbeat")
	fmt.Println("heartbeat paused:", paused.Paused)
	// Output:
	// heartbeat: cron "" every "1s" in "", missed runs: skip
	// reconcile-index: cron "0 2 * * *" every "" in "America/New_York", missed runs: run_once
	// next reconcile at 02:00 New York time
	// triggered: reconcile {"batch":100}
	// heartbeat paused: true
}

// inZone formats t as hours and minutes in the named zone.
func inZone(t time.Time, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return err.Error()
	}
	return t.In(loc).Format("15:04")
}

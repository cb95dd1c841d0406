package metrics_test

import (
	"context"
	"github.com/redrivehq/redrive/internal/testwait"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/metrics"
	"github.com/redrivehq/redrive/metrics/internal/metricstest"
	"github.com/redrivehq/redrive/store/sqlite"
)

func TestScheduleMetrics(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "r.db"), sqlite.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	// A worker declares the schedules, then stops: nothing enqueues them
	// any more.
	w := redrive.NewWorker(c, redrive.WorkerOptions{Logger: log, Queues: map[string]int{"idle": 1}, Periodic: []redrive.Periodic{
		{Name: "hourly", Every: time.Hour, Kind: "sweep"},
		{Name: "nightly", Cron: "0 2 * * *", Kind: "reindex"},
	}})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testwait.Until(t, "the worker to declare its 2 schedules", 10*time.Second, func() bool {
		list, _ := c.Schedules(t.Context())
		return len(list) == 2
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSchedule(t.Context(), "nightly"); err != nil {
		t.Fatal(err)
	}
	hourly, err := c.Schedule(t.Context(), "hourly")
	if err != nil {
		t.Fatal(err)
	}
	// 90 s after the hourly schedule's next run, with no process running.
	now := hourly.NextRun.Add(90 * time.Second)
	text := metricstest.Exposition(t, metrics.NewCollector(c, metrics.CollectorOptions{Logger: log, Now: func() time.Time { return now }}))
	metricstest.WantSamples(t, text, map[string]float64{
		`redrive_schedule_paused{schedule="hourly"}`:                     0,
		`redrive_schedule_paused{schedule="nightly"}`:                    1,
		`redrive_schedule_next_run_timestamp_seconds{schedule="hourly"}`: float64(hourly.NextRun.Unix()),
		`redrive_schedule_overdue_seconds{schedule="hourly"}`:            90,
		`redrive_schedule_overdue_seconds{schedule="nightly"}`:           0,
	})
	for _, absent := range []string{`redrive_schedule_next_run_timestamp_seconds{schedule="nightly"}`, `redrive_schedule_last_run_timestamp_seconds`} {
		if strings.Contains(text, absent) {
			t.Errorf("exposition has %s:\n%s", absent, metricstest.GrepLines(text, "redrive_schedule"))
		}
	}
}

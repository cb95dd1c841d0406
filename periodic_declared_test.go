package redrive_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestDeleteDeclaredSchedule: DeleteSchedule refuses a schedule a live
// worker declares, with a *ScheduleDeclaredError naming that worker and
// wrapping ErrConflict, and deletes nothing; once the worker stopped, the
// schedule is deleted. A worker declares its schedules again while it
// runs, so that DeclaredBy names the last one that still does.
func TestDeleteDeclaredSchedule(t *testing.T) {
	ctx := t.Context()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "redrive.db"), sqlite.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := redrive.NewClient(st, redrive.ClientOptions{Logger: quiet})
	w := redrive.NewWorker(client, redrive.WorkerOptions{Logger: quiet,
		Periodic: []redrive.Periodic{{Name: "beat", Every: time.Hour, Kind: "beat"}}})
	w.HandleFunc("beat", func(context.Context, *redrive.Job) error { return nil })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	var first redrive.ScheduleInfo
	testwait.Until(t, "the worker to declare its schedule", time.Minute, func() bool {
		first, err = client.Schedule(ctx, "beat")
		return err == nil && first.DeclaredBy != ""
	})
	err = client.DeleteSchedule(ctx, "beat")
	de, ok := errors.AsType[*redrive.ScheduleDeclaredError](err)
	if !ok || !errors.Is(err, redrive.ErrConflict) || de.Schedule != "beat" || de.Worker.ID != first.DeclaredBy || de.Worker.State != redrive.WorkerLive {
		t.Fatalf("delete of a declared schedule: %v (%+v)", err, de)
	}
	if _, err := client.Schedule(ctx, "beat"); err != nil {
		t.Fatalf("the refused delete deleted it: %v", err)
	}
	// Declared again while the worker runs. Real time passes here: the
	// worker declares again every PeriodicRedeclareEvery of it.
	testwait.Until(t, "the worker to declare its schedule again", redrive.PeriodicRedeclareEvery+time.Minute, func() bool {
		s, err := client.Schedule(ctx, "beat")
		return err == nil && s.DeclaredAt.After(first.DeclaredAt)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the deferred stop
	if err := client.DeleteSchedule(ctx, "beat"); err != nil {
		t.Fatalf("delete once the worker stopped: %v", err)
	}
	if err := client.DeleteSchedule(ctx, "beat"); !errors.Is(err, redrive.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

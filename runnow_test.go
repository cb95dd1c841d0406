package redrive_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/internal/testwait"
)

// TestRunNow: a job delayed an hour runs at once after RunNow, woken
// without waiting for a poll; a job that ran is ErrConflict.
func TestRunNow(t *testing.T) {
	ctx := context.Background()
	c := redrive.NewClient(openStore(t), redrive.ClientOptions{Logger: quietLogger()})
	ran := make(chan int64, 1)
	w := redrive.NewWorker(c, redrive.WorkerOptions{PollInterval: time.Hour, Logger: quietLogger()})
	w.HandleFunc("later", func(ctx context.Context, j *redrive.Job) error {
		ran <- j.ID
		return nil
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	j, err := c.Enqueue(ctx, "later", nil, redrive.After(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if j.State != redrive.Scheduled {
		t.Fatalf("job is %s, want scheduled", j.State)
	}
	got, err := c.RunNow(ctx, j.ID)
	if err != nil || got.State != redrive.Pending {
		t.Fatalf("RunNow: %+v, %v", got, err)
	}
	if id := testwait.Recv(t, "the job's run after RunNow", time.Minute, ran); id != j.ID {
		t.Fatalf("ran job %d, want %d", id, j.ID)
	}
	testwait.Until(t, "the job's completion", time.Minute, func() bool {
		g, err := c.Get(ctx, j.ID)
		return err == nil && g.State == redrive.Completed
	})
	if _, err := c.RunNow(ctx, j.ID); !errors.Is(err, redrive.ErrConflict) {
		t.Errorf("RunNow of a completed job: %v, want ErrConflict", err)
	}
}

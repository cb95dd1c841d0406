package redrive_test

import (
	"context"
	"testing"

	"github.com/redrivehq/redrive"
)

// With KeepProgress, an Executor used alone keeps the progress a handler
// reports, as a Worker does; without it, Progress does nothing.
func TestExecutorKeepProgress(t *testing.T) {
	for _, keep := range []bool{false, true} {
		e := redrive.NewExecutor(redrive.ExecutorOptions{KeepProgress: keep, Logger: quietLogger()})
		e.HandleFunc("p", func(ctx context.Context, job *redrive.Job) error {
			redrive.Progress(ctx, 3, 10)
			return nil
		})
		o := e.Execute(context.Background(), &redrive.Job{ID: 1, Kind: "p", Queue: "default", Attempt: 1, MaxRetries: -1})
		got := o.Progress
		switch {
		case keep && (got == nil || got.Done != 3 || got.Total != 10):
			t.Errorf("KeepProgress: outcome progress %+v, want 3/10", got)
		case !keep && got != nil:
			t.Errorf("without KeepProgress: outcome progress %+v, want none", got)
		}
	}
}

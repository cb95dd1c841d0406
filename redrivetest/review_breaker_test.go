package redrivetest

import (
	"context"
	"errors"
	"testing"

	"github.com/redrivehq/redrive"
)

// A job deferred by its dependency's open breaker runs again once the
// breaker half-opens: on a Worker after BreakDuration of real time, on a
// Runner when its clock reaches the deferral. The breakers must read the
// runner's clock, or a deferred job is deferred for ever.
func TestOpenBreakerHalfOpensOnTheRunnersClock(t *testing.T) {
	r := NewRunner(Options{})
	down := true
	r.HandleFunc("pay", func(ctx context.Context, job *redrive.Job) error {
		if down {
			return errors.New("503")
		}
		return nil
	}, redrive.UsesDependency("payments"))
	br := r.Executor().Breakers().Get("payments")
	for i := 0; br.ReadyAt().IsZero(); i++ {
		if i > 1000 {
			t.Fatal("the breaker did not open after 1000 failures")
		}
		r.Work(t, "pay", nil)
	}
	down = false
	all := r.WorkUntilDone(t, "pay", nil)
	last := all[len(all)-1]
	if last.State() != redrive.Completed || len(all) != 2 {
		t.Fatalf("%d attempts, last %s; want a deferral, then the probe completing", len(all), last.State())
	}
}

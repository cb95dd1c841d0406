package redrivetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/retry"
)

// Planned is one attempt of a job's retry schedule (see Schedule).
type Planned struct {
	// Attempt is the attempt's number, 1 for the first.
	Attempt int
	// At is when the attempt runs, counted from the first attempt (whose
	// At is 0); handlers are taken to return at once.
	At time.Duration
	// Delay is the delay before the attempt, from the failure of the one
	// before (0 for the first).
	Delay time.Duration
}

// Schedule lists the attempts of a job with policy p whose every attempt
// fails with a transient error: at most n, fewer when the policy gives
// up sooner (the last one listed is then the one after which the job is
// dead). The delays are the ones the engine chooses, jitter included,
// drawn from a source seeded with seed, so a schedule is the same on
// every run; the retry budget is left out. An invalid policy panics.
//
// retry.Policy.Schedule gives each retry's bounds; Schedule gives one
// draw of the actual times, as a test or a docs table wants them.
func Schedule(p retry.Policy, n int, seed uint64) []Planned {
	if err := p.Validate(); err != nil {
		panic(fmt.Sprintf("redrivetest: Schedule: %v", err))
	}
	r := NewRunner(Options{Seed: seed, Executor: redrive.ExecutorOptions{Policy: &p, DisableRetryBudget: true}})
	r.HandleFunc("redrivetest.schedule", func(ctx context.Context, job *redrive.Job) error {
		return redrive.Transient(errors.New("fails on every attempt"))
	})
	t := &panicTB{}
	j := r.Job(t, "redrivetest.schedule", nil)
	var plan []Planned
	start := r.clock.Now()
	prev := start
	for len(plan) < n && !done(j.State) {
		res := r.Attempt(t, j)
		plan = append(plan, Planned{Attempt: res.Attempt, At: res.At.Sub(start), Delay: res.At.Sub(prev)})
		prev = res.At
	}
	return plan
}

// panicTB is the testing.TB of Schedule, which has none: a failure is a
// bug of this package, and panics.
type panicTB struct{ testing.TB }

func (*panicTB) Helper() {}

func (*panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (*panicTB) Context() context.Context { return context.Background() }

package redrivetest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/redrivetest"
	"github.com/redrivehq/redrive/retry"
)

// Email is the payload of the example's "email" jobs.
type Email struct{ To string }

// errRelayDown is what the example's relay answers.
var errRelayDown = errors.New("relay: 421 service not available")

// register registers the application's handlers: on a Worker in
// production, on a Runner in tests.
func register(r redrive.Registrar, send func(Email) error) {
	redrive.Handle(r, "email", func(ctx context.Context, job *redrive.Job, m Email) error {
		return send(m)
	})
}

// A handler that fails is retried after the delay the engine's policy
// chooses; the runner's clock then steps to the retry.
func ExampleRunner_Attempt() {
	t := &testing.T{} // in a test, the test's own t
	r := redrivetest.NewRunner(redrivetest.Options{Seed: 1})
	fails := 1
	register(r, func(Email) error {
		if fails > 0 {
			fails--
			return errRelayDown
		}
		return nil
	})

	job := r.Job(t, "email", Email{To: "a@example.com"})
	res := r.Attempt(t, job)
	fmt.Println(res.State(), "retry in", res.Delay().Round(100*time.Millisecond), "class", res.Job.LastErrorClass)
	res = r.Attempt(t, job) // the clock moves to the retry
	fmt.Println(res.State(), "on attempt", res.Attempt, "at start +", res.At.Sub(redrivetest.DefaultStart).Round(100*time.Millisecond))
	// Output:
	// scheduled retry in 900ms class unknown
	// completed on attempt 2 at start + 900ms
}

// WorkUntilDone runs a job's every attempt: here a permanent failure
// sends it to the DLQ at once.
func ExampleRunner_WorkUntilDone() {
	t := &testing.T{}
	r := redrivetest.NewRunner(redrivetest.Options{})
	register(r, func(m Email) error { return redrive.Permanent(fmt.Errorf("no mailbox %s", m.To)) })

	all := r.WorkUntilDone(t, "email", Email{To: "nobody@example.com"})
	last := all[len(all)-1]
	fmt.Println(len(all), "attempt:", last.State(), last.Job.DeadReason, "-", last.Job.LastError)
	// Output: 1 attempt: dead permanent - no mailbox nobody@example.com
}

// Schedule lists when a policy's attempts run, for one seed of jitter.
func ExampleSchedule() {
	p := retry.DefaultPolicy()
	p.Jitter = retry.JitterNone
	for _, a := range redrivetest.Schedule(p, 10, 0) {
		fmt.Printf("attempt %d at +%v (after %v)\n", a.Attempt, a.At, a.Delay)
	}
	// Output:
	// attempt 1 at +0s (after 0s)
	// attempt 2 at +1s (after 1s)
	// attempt 3 at +3s (after 2s)
	// attempt 4 at +7s (after 4s)
}

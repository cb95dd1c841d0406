package anchors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sony/gobreaker/v2"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
)

// These tests check that every library's benchmark setup really runs the
// shared scenario, so that the benchmarks compare like with like.

// checkDelays fails unless got holds the scenario's first delays, 1s, 2s,
// 4s, each within +-10% (and 1ns, for backoff's inclusive upper bound).
func checkDelays(t *testing.T, got []time.Duration, want int) {
	t.Helper()
	if len(got) != want {
		t.Fatalf("%d delays %v, want %d", len(got), got, want)
	}
	for i, d := range got {
		base := initialDelay << i
		lo := time.Duration(float64(base) * (1 - jitterFactor))
		hi := time.Duration(float64(base)*(1+jitterFactor)) + 1
		if d < lo || d > hi {
			t.Errorf("delay %d is %v, want within [%v, %v]", i+1, d, lo, hi)
		}
	}
}

func TestRetryScenario(t *testing.T) {
	t.Run("redrive", func(t *testing.T) {
		p := newRedrivePolicy()
		var delays []time.Duration
		for attempt := 1; attempt <= attemptsPerJob; attempt++ {
			d := p.Decide(retry.Input{Class: failure.Transient, Attempt: attempt}, nil)
			if attempt == attemptsPerJob {
				if d.Retry || d.Reason != retry.ReasonExhausted {
					t.Fatalf("attempt %d: %+v, want to give up", attempt, d)
				}
				break
			}
			if !d.Retry {
				t.Fatalf("attempt %d: %+v, want a retry", attempt, d)
			}
			delays = append(delays, d.Delay)
			// Two independent draws of +-10% jitter around the same base:
			// their ratio lies within 0.9/1.1 and 1.1/0.9 by construction.
			if got := p.Delay(attempt-1, 0, nil); got*11 < d.Delay*9 || got*9 > d.Delay*11 {
				t.Errorf("Delay(%d) = %v, beyond the jitter of Decide's %v", attempt-1, got, d.Delay)
			}
		}
		checkDelays(t, delays, maxRetries)
	})

	t.Run("failsafe", func(t *testing.T) {
		// The benchmarked policy: 4 attempts, then an ExceededError, and a
		// second job on the same policy starts afresh.
		calls := 0
		inner := func(failsafe.Execution[any]) *common.PolicyResult[any] {
			calls++
			return &common.PolicyResult[any]{Error: errDown, Done: true, Success: true, SuccessAll: true}
		}
		rp := newFailsafeRetry(nil)
		exec := newFailsafeExec()
		for job := 1; job <= 2; job++ {
			calls = 0
			res := runFailsafeJob(rp, exec, inner)
			if calls != attemptsPerJob {
				t.Errorf("job %d: %d attempts, want %d", job, calls, attemptsPerJob)
			}
			if !retrypolicy.IsExceededError(res.Error) {
				t.Errorf("job %d ended with %v, want an ExceededError", job, res.Error)
			}
		}

		// The same configuration with a listener shows the delays.
		var delays []time.Duration
		rp = newFailsafeRetry(retrypolicy.NewBuilder[any]().
			OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[any]) { delays = append(delays, e.Delay) }))
		runFailsafeJob(rp, exec, inner)
		checkDelays(t, delays, maxRetries)
	})

	t.Run("failsafe-run", func(t *testing.T) {
		var delays []time.Duration
		var cancel context.CancelFunc
		rp := newFailsafeRetry(retrypolicy.NewBuilder[any]().
			OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[any]) {
				delays = append(delays, e.Delay)
				cancel()
			}))
		ctx, c := context.WithCancel(context.Background())
		cancel = c
		calls := 0
		err := failsafe.With[any](rp).WithContext(ctx).Run(func() error { calls++; return errDown })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
		if calls != 1 {
			t.Errorf("%d attempts, want 1", calls)
		}
		checkDelays(t, delays, 1)
	})

	t.Run("backoff", func(t *testing.T) {
		eb := newBackoff()
		for job := 1; job <= 2; job++ {
			var delays []time.Duration
			for range maxRetries {
				delays = append(delays, eb.NextBackOff())
			}
			checkDelays(t, delays, maxRetries)
			eb.Reset()
		}
	})
}

func TestBreakerScenario(t *testing.T) {
	rd := newRedriveBreaker()
	rdRatio := newRedriveRatioBreaker()
	gb := gobreaker.NewCircuitBreaker[struct{}](gobreakerSettings())
	gbFixed := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreakerFixedSettings())
	fs := newFailsafeBreaker()
	fsCount := newFailsafeCountBreaker()
	redriveFail := func(br *breaker.Breaker) func() error {
		return func() error {
			tok, err := br.Allow()
			if err != nil {
				return err
			}
			br.Record(tok, errDown)
			return nil
		}
	}
	cases := []struct {
		lib    string
		fail   func() error // one failed call; an error if it was refused
		closed func() bool
	}{
		{"redrive", redriveFail(rd), func() bool { return rd.State() == breaker.Closed }},
		{"redrive-ratio", redriveFail(rdRatio), func() bool { return rdRatio.State() == breaker.Closed }},
		{"gobreaker", func() error {
			if _, err := gb.Execute(fail); !errors.Is(err, errDown) {
				return err
			}
			return nil
		}, func() bool { return gb.State() == gobreaker.StateClosed }},
		{"gobreaker-fixed", func() error {
			done, err := gbFixed.Allow()
			if err != nil {
				return err
			}
			done(errDown)
			return nil
		}, func() bool { return gbFixed.State() == gobreaker.StateClosed }},
		{"failsafe", func() error {
			if !fs.TryAcquirePermit() {
				return errors.New("refused")
			}
			fs.RecordFailure()
			return nil
		}, fs.IsClosed},
		{"failsafe-count", func() error {
			if !fsCount.TryAcquirePermit() {
				return errors.New("refused")
			}
			fsCount.RecordFailure()
			return nil
		}, fsCount.IsClosed},
	}
	for _, c := range cases {
		for i := 1; i <= tripFailures; i++ {
			if err := c.fail(); err != nil {
				t.Fatalf("%s: failure %d refused: %v", c.lib, i, err)
			}
			if want := i < tripFailures; c.closed() != want {
				t.Fatalf("%s: closed=%v after %d failures, want %v", c.lib, c.closed(), i, want)
			}
		}
		if c.fail() == nil {
			t.Errorf("%s: open breaker let a call through", c.lib)
		}
	}
}

// TestFailsafeAllocsPerJob logs what one failing job costs failsafe's retry
// executor in allocations, which the per-decision allocs/op rounds down.
func TestFailsafeAllocsPerJob(t *testing.T) {
	rp := newFailsafeRetry(nil)
	exec := newFailsafeExec()
	inner := failedAttempt()
	n := testing.AllocsPerRun(1000, func() { sinkResult = runFailsafeJob(rp, exec, inner) })
	t.Logf("failsafe-go retry executor: %.0f allocations per job of %d decisions", n, attemptsPerJob)
}

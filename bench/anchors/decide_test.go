package anchors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
)

// BenchmarkDecide measures "given failed attempt n, decide whether to retry
// and compute the jittered delay". One op is one decision. Every library
// walks the same job that fails every time: attempts 1, 2 and 3 are retried
// after a jittered delay, attempt 4 gives up, then the next job starts. All
// of them draw their jitter from the global math/rand/v2 source.
func BenchmarkDecide(b *testing.B) {
	// redrive: Policy.Decide, the whole decision (failure class, attempt
	// budget, delay with jitter, Retry-After clamp), with a nil Source.
	b.Run("lib=redrive", func(b *testing.B) {
		p := newRedrivePolicy()
		b.ReportAllocs()
		attempt := 0
		for b.Loop() {
			if attempt++; attempt > attemptsPerJob {
				attempt = 1
			}
			sinkDecision = p.Decide(retry.Input{Class: failure.Transient, Attempt: attempt}, nil)
		}
	})

	// redrive, like for like with backoff's row: Policy.Delay (the delay
	// with jitter alone) plus the attempt check, without the rest of Decide.
	b.Run("lib=redrive-delay", func(b *testing.B) {
		p := newRedrivePolicy()
		b.ReportAllocs()
		attempt := 0
		for b.Loop() {
			if attempt++; attempt > p.MaxRetries {
				// Last attempt failed: give up, and the next job starts.
				sinkDuration = -1
				attempt = 0
				continue
			}
			sinkDuration = p.Delay(attempt-1, 0, nil)
		}
	})

	// failsafe-go: the retry executor's Apply loop over a job of 4 failed
	// attempts, amortised over its 4 decisions: one op is a quarter of a job.
	// Per job this includes creating the executor (ToExecutor, which
	// failsafe does once per execution), and per retry a time.NewTimer for
	// the delay that is stopped at once (see failsafeExec). It is the
	// smallest public path that includes failsafe's decision and delay.
	b.Run("lib=failsafe", func(b *testing.B) {
		rp := newFailsafeRetry(nil)
		exec := newFailsafeExec()
		inner := failedAttempt()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += attemptsPerJob {
			sinkResult = runFailsafeJob(rp, exec, inner)
		}
	})

	// failsafe-go as its users call it: failsafe.With(rp).WithContext(ctx).
	// Run(fn) where fn fails. One op is one whole execution: the first
	// attempt fails, the policy decides to retry and computes the delay, an
	// OnRetryScheduled listener reads the delay and cancels the context, and
	// the wait ends at once. So one decision (always attempt 1), plus the
	// execution, context and listener event around it: an upper bound on
	// what a failsafe user pays per failed attempt.
	b.Run("lib=failsafe-run", func(b *testing.B) {
		var cancel context.CancelFunc
		rp := newFailsafeRetry(retrypolicy.NewBuilder[any]().
			OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[any]) {
				sinkDuration = e.Delay
				cancel()
			}))
		ex := failsafe.With[any](rp)
		fn := func() error { return errDown }
		b.ReportAllocs()
		for b.Loop() {
			ctx, c := context.WithCancel(context.Background())
			cancel = c
			if err := ex.WithContext(ctx).Run(fn); !errors.Is(err, context.Canceled) {
				b.Fatalf("Run returned %v, want context.Canceled", err)
			}
		}
	})

	// cenkalti/backoff v5: ExponentialBackOff.NextBackOff plus the attempt
	// count check that backoff.Retry makes with WithMaxTries(4), and Reset
	// when a new job starts. Not included: the rest of backoff.Retry's
	// per-attempt work (errors.As for PermanentError and RetryAfterError,
	// context.Cause, time.Since for MaxElapsedTime).
	b.Run("lib=backoff", func(b *testing.B) {
		eb := newBackoff()
		b.ReportAllocs()
		tries := 0
		for b.Loop() {
			if tries++; tries >= attemptsPerJob {
				// Last attempt failed: give up, and the next job starts afresh.
				sinkDuration = backoff.Stop
				tries = 0
				eb.Reset()
				continue
			}
			d := eb.NextBackOff()
			if d == backoff.Stop {
				b.Fatal("ExponentialBackOff stopped")
			}
			sinkDuration = d
		}
	})
}

// BenchmarkRefTimer is a reference, not a library: the time.NewTimer and Stop
// that failsafe-go's retry executor does for every retry it schedules.
func BenchmarkRefTimer(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		t := time.NewTimer(time.Second)
		t.Stop()
	}
}

// BenchmarkRefClock is a reference, not a library: one time.Now, which every
// breaker here reads on its rejection path (and gobreaker and failsafe-go,
// or redrive in ratio mode, on the success path too).
func BenchmarkRefClock(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sinkTime = time.Now()
	}
}

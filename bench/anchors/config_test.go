package anchors

import (
	"errors"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/common"
	"github.com/failsafe-go/failsafe-go/policy"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sony/gobreaker/v2"

	"github.com/redrivehq/redrive/breaker"
	"github.com/redrivehq/redrive/retry"
)

// The shared scenario, in redrive's defaults:
//
//   - retry: 3 retries (4 attempts), 1s initial delay doubling up to 30s,
//     +-10% proportional jitter;
//   - breaker: 5 failures within 30s trip it, it stays open 60s, then lets
//     1 probe through.
//
// Every library below is configured as close to that as it allows; the
// differences are spelled out next to each constructor and in
// docs/BENCHMARKS.md.
const (
	maxRetries     = 3
	attemptsPerJob = maxRetries + 1
	initialDelay   = time.Second
	maxDelay       = 30 * time.Second
	jitterFactor   = 0.1

	tripFailures  = 5
	failureWindow = 30 * time.Second
	breakDuration = 60 * time.Second
	probes        = 1
)

var errDown = errors.New("dependency down")

// Sinks keep the compiler from discarding benchmarked results.
var (
	sinkDecision retry.Decision
	sinkDuration time.Duration
	sinkResult   *common.PolicyResult[any]
	sinkTime     time.Time
)

// --- retry decision -------------------------------------------------------

// newRedrivePolicy is redrive's default policy, which is the scenario.
func newRedrivePolicy() retry.Policy { return retry.DefaultPolicy() }

// newFailsafeRetry is a failsafe-go retry policy for the same scenario:
// WithMaxRetries(3) is 4 attempts, WithBackoff doubles from 1s up to 30s and
// WithJitterFactor(0.1) spreads each delay by +-10%, like redrive's
// proportional jitter. Like failsafe's default, it returns an ExceededError
// when retries run out.
func newFailsafeRetry(b retrypolicy.Builder[any]) retrypolicy.RetryPolicy[any] {
	if b == nil {
		b = retrypolicy.NewBuilder[any]()
	}
	return b.WithMaxRetries(maxRetries).
		WithBackoff(initialDelay, maxDelay).
		WithJitterFactor(jitterFactor).
		Build()
}

// newBackoff is a cenkalti/backoff v5 ExponentialBackOff for the same
// scenario. Its randomisation is the same +-10% (plus at most 1ns, from its
// inclusive upper bound). The retry count is not part of ExponentialBackOff:
// backoff.Retry checks WithMaxTries(4) in its loop, and the benchmark does
// the same check.
func newBackoff() *backoff.ExponentialBackOff {
	eb := &backoff.ExponentialBackOff{
		InitialInterval:     initialDelay,
		RandomizationFactor: jitterFactor,
		Multiplier:          2,
		MaxInterval:         maxDelay,
	}
	eb.Reset()
	return eb
}

// failsafeExec is the smallest execution that failsafe-go's retry executor
// can run on. failsafe-go computes the retry decision and delay inside its
// executor's Apply loop, which then waits on a time.Timer for the delay; no
// public function returns the decision alone. This execution makes that loop
// run without sleeping: Canceled is an already-closed channel, so the wait
// ends at once, and InitializeRetry lets the next attempt go ahead. It does
// none of the locking, clock reads or bookkeeping of failsafe's own
// execution, so it favours failsafe. CopyWithResult, which failsafe calls
// only to hand an event to a listener, returns the stand-in itself; the
// benchmarked policy has no listener, the tests' policy has one.
//
// The embedded interface is nil: the executor calling any method not
// overridden here panics, which would show that this stand-in no longer
// matches the library.
type failsafeExec struct {
	policy.ExecutionInternal[any]
	retries  int
	canceled chan struct{}
}

func newFailsafeExec() *failsafeExec {
	c := make(chan struct{})
	close(c)
	return &failsafeExec{canceled: c}
}

func (e *failsafeExec) Retries() int                                                     { return e.retries }
func (e *failsafeExec) ElapsedTime() time.Duration                                       { return 0 }
func (e *failsafeExec) Canceled() <-chan struct{}                                        { return e.canceled }
func (e *failsafeExec) IsCanceledWithResult() (bool, *common.PolicyResult[any])          { return false, nil }
func (e *failsafeExec) RecordResult(*common.PolicyResult[any]) *common.PolicyResult[any] { return nil }
func (e *failsafeExec) CopyWithResult(*common.PolicyResult[any]) failsafe.Execution[any] { return e }
func (e *failsafeExec) InitializeRetry() *common.PolicyResult[any] {
	e.retries++
	return nil
}

// failedAttempt is what failsafe-go's innermost function hands to the
// policies for a call that returned errDown.
func failedAttempt() func(failsafe.Execution[any]) *common.PolicyResult[any] {
	r := &common.PolicyResult[any]{Error: errDown, Done: true, Success: true, SuccessAll: true}
	return func(failsafe.Execution[any]) *common.PolicyResult[any] { return r }
}

// runFailsafeJob runs one job that fails every attempt through rp's executor
// on exec: 4 attempts, so 3 retry decisions with a delay and 1 decision to
// give up. It returns the executor's final result.
func runFailsafeJob(rp retrypolicy.RetryPolicy[any], exec *failsafeExec, inner func(failsafe.Execution[any]) *common.PolicyResult[any]) *common.PolicyResult[any] {
	exec.retries = 0
	pe := rp.ToExecutor(nil).(policy.Executor[any])
	return pe.Apply(inner)(exec)
}

// --- circuit breaker ------------------------------------------------------

// newRedriveBreaker is redrive's count-only breaker, which is the
// scenario: 5 failures within 30s, where a success on a closed breaker is
// not recorded at all (redrive's default before the ratio was added).
func newRedriveBreaker() *breaker.Breaker {
	return breaker.New("dep", breaker.Config{
		CountOnly:      true,
		Failures:       tripFailures,
		Window:         failureWindow,
		BreakDuration:  breakDuration,
		HalfOpenProbes: probes,
	})
}

// newRedriveRatioBreaker is redrive's default breaker: at least 5 failures
// and at least 50% of the calls in the window, which counts every success
// in a time bucket, like the other libraries do.
func newRedriveRatioBreaker() *breaker.Breaker {
	return breaker.New("dep", breaker.Config{
		Failures:       tripFailures,
		Window:         failureWindow,
		FailureRatio:   0.5,
		BreakDuration:  breakDuration,
		HalfOpenProbes: probes,
	})
}

// gobreakerSettings is the closest sony/gobreaker v2 configuration: Timeout
// 60s open, MaxRequests 1 half-open request, and a rolling window of 30
// buckets of 1s (Interval 30s, BucketPeriod 1s) whose TotalFailures trip it
// at 5. gobreaker's default would be instead more than 5 *consecutive*
// failures, with counts never cleared while closed. ReadyToTrip is only
// consulted on a failure, so it costs nothing on the success path.
func gobreakerSettings() gobreaker.Settings {
	return gobreaker.Settings{
		Name:         "dep",
		MaxRequests:  probes,
		Interval:     failureWindow,
		BucketPeriod: time.Second,
		Timeout:      breakDuration,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.TotalFailures >= tripFailures
		},
	}
}

// gobreakerFixedSettings is gobreakerSettings with a fixed 30s window (counts
// cleared every 30s) instead of the rolling one: gobreaker's cheaper mode,
// measured to show what the rolling window costs.
func gobreakerFixedSettings() gobreaker.Settings {
	s := gobreakerSettings()
	s.BucketPeriod = 0
	return s
}

// newFailsafeBreaker is the closest failsafe-go circuit breaker:
// WithFailureThresholdPeriod(5, 30s) trips on 5 failures (out of at least 5
// executions) within 30s, counted in 10 time buckets of 3s; WithDelay(60s)
// stays open 60s; WithSuccessThreshold(1) lets 1 trial execution through
// when half-open and closes on its success.
func newFailsafeBreaker() circuitbreaker.CircuitBreaker[any] {
	return circuitbreaker.NewBuilder[any]().
		WithFailureThresholdPeriod(tripFailures, failureWindow).
		WithDelay(breakDuration).
		WithSuccessThreshold(probes).
		Build()
}

// newFailsafeCountBreaker is newFailsafeBreaker with failsafe-go's
// count-based threshold, WithFailureThreshold(5): it trips when the last 5
// executions all failed, with no time window. It does not match the
// scenario (a success resets the streak); it shows failsafe's cheaper mode,
// which reads no clock on the success path.
func newFailsafeCountBreaker() circuitbreaker.CircuitBreaker[any] {
	return circuitbreaker.NewBuilder[any]().
		WithFailureThreshold(tripFailures).
		WithDelay(breakDuration).
		WithSuccessThreshold(probes).
		Build()
}

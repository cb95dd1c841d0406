// Package breaker implements circuit breakers that fence off a failing
// dependency, and a registry of named breakers.
//
// A Breaker has three states. While Closed, calls pass and failures are
// counted. When too many calls fail within a sliding window the breaker trips
// to Open: calls are rejected at once with an *OpenError, which says when the
// breaker will let calls through again. Once the break duration has elapsed
// the breaker becomes HalfOpen and lets a few probe calls through. If every
// probe succeeds it closes; if any probe fails it opens again for a fresh break.
//
// The defaults follow the redrive design: trip after 5 failures within 30s,
// stay open for 60s, then let 1 probe through.
//
// # Two ways to call
//
// Do wraps a call:
//
//	err := b.Do(ctx, func(ctx context.Context) error {
//		return callPayments(ctx)
//	})
//	if errors.Is(err, breaker.ErrOpen) {
//		// not called: the dependency is fenced off
//	}
//
// Allow and Record split the call in two, for code that cannot be wrapped in a
// closure (an http.RoundTripper, a job engine deciding whether to lease a job):
//
//	tok, err := b.Allow()
//	if err != nil {
//		return err // *OpenError
//	}
//	err = call()
//	b.Record(tok, err)
//
// Every token handed out by Allow must be passed to Record exactly once. A
// token belongs to the state the breaker was in when Allow returned it: once
// the breaker has moved on (tripped, half-opened, closed or been Reset), a
// late Record with that token changes nothing.
//
// # What counts as a failure
//
// By default any non-nil error is a failure, except context.Canceled (the
// caller gave up, which says nothing about the dependency) and errors wrapped
// with Ignore (the dependency answered; the error is the caller's business,
// such as a 404 for a missing record). Config.IsFailure replaces that rule.
//
// Each outcome is one of three kinds:
//   - a failure: IsFailure(err) is true;
//   - neutral: IsFailure(err) is false and err is context.Canceled. It is not
//     counted at all; a neutral probe frees its slot for another probe;
//   - a success: anything else, including nil and ignored errors.
//
// # Count mode and ratio mode
//
// In count mode (the default) the breaker trips when Config.Failures failures
// fall within the last Config.Window, whatever number of successes came in
// between. Failure times are kept exactly, so the window slides precisely.
// Successes are not tracked at all: on a closed breaker Allow is one atomic
// load and Record(tok, nil) writes nothing, so the success path costs a few
// nanoseconds and scales across cores.
//
// Setting Config.FailureRatio adds ratio mode: the breaker also trips when at
// least Config.MinRequests calls completed within the window and the share of
// failures among them reached the ratio. Calls are counted in 20 time buckets
// per window, so the window slides in steps of Window/20, and each recorded
// call reads the clock once. When FailureRatio is set and Failures is zero,
// only the ratio trips the breaker.
//
// # Half-open probes
//
// A breaker whose break has elapsed reports HalfOpen from State, Status and
// ReadyAt at once, but it changes state, and calls Config.OnStateChange, on
// the next Allow. While half-open, Allow hands out at most
// Config.HalfOpenProbes probe tokens and rejects other calls with an
// *OpenError whose HalfOpen field is true. If the probe slots stay taken with
// no probe handed out or reported for a whole BreakDuration, the outstanding
// probes are presumed failed and the breaker opens again, so that a lost token
// cannot fence a dependency off forever.
package breaker

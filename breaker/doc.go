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
// The defaults follow the redrive design: trip once at least 5 failures make
// up at least half of the calls within 30s, stay open for 60s, then let 1
// probe through.
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
// caller gave up, which says nothing about the dependency), errors wrapped
// with Ignore (the dependency answered; the error is the caller's business,
// such as a 404 for a missing record) and rate-limited answers (an HTTP 429,
// a 503 with Retry-After, a failure.WrapRateLimited error, an error marked
// with MarkRateLimited): the dependency is up and asks callers to slow down,
// which their Retry-After handling does. Config.IsFailure replaces the
// failure rule, Config.IsRateLimited the rate-limit rule, and
// Config.CountRateLimited counts rate-limited answers like any other error.
//
// Each outcome is one of three kinds:
//   - neutral: err is rate-limited (and Config.CountRateLimited is not set),
//     or IsFailure(err) is false and err is context.Canceled. It is not
//     counted at all, neither as a failure nor as a call for the ratio; a
//     neutral probe frees its slot for another probe;
//   - a failure: IsFailure(err) is true;
//   - a success: anything else, including nil and ignored errors.
//
// # The trip rule
//
// By default the breaker trips when, within the last Config.Window, at least
// Config.Failures calls failed and failures make up at least
// Config.FailureRatio of the calls that completed: 5 failures and 50% within
// 30s. Both must hold, so a busy dependency that fails 1% of its calls never
// trips the breaker, and one that is down trips it at its 5th failure. The
// ratio is judged over the whole window: a dependency that goes down after
// serving many calls trips once its failures outweigh (at the default ratio)
// the successes still in the window, which at a steady call rate takes about
// FailureRatio × Window. Shorten Window to fence busy dependencies off sooner.
// Config.MinRequests, when set, also requires that many calls in the window.
// Calls are counted in 20 time buckets per window, so the window slides in
// steps of Window/20. Every outcome is counted at once in the bucket of the
// moment it is recorded, so the counts are exact at bucket granularity
// whatever the call rate and however long the quiet spells: a success costs
// a read of the monotonic clock and one atomic add (and the lock once per
// bucket period), a failure the lock.
//
// With Config.CountOnly the breaker trips when Config.Failures failures fall
// within the last Config.Window, whatever number of successes came in
// between; this was the default before the ratio was added. Failure times
// are kept exactly, so the window slides precisely, and successes are not
// tracked at all: on a closed breaker Allow is one atomic load and
// Record(tok, nil) writes nothing.
//
// Config.Trips applies the rule to counts kept elsewhere, such as a fleet's.
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

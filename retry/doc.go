// Package retry decides whether and when a failed job runs again.
//
// It is pure decision code: it performs no I/O, never sleeps and keeps no
// global mutable state. The engine asks a [Policy] for a [Decision] after each
// failed attempt, records the delay it was given and schedules the job (or
// sends it to the dead-letter queue) accordingly.
//
// # Backoff
//
// The delay before retry n (n = 0 for the first retry) is
//
//	delay(n) = min(Initial * Multiplier^n, MaxDelay)
//
// followed by jitter, so that many jobs failing together do not come back
// together. The default policy retries 3 times (at most 4 attempts) after
// 1s, 2s and 4s, each within +-10%.
//
// # Failure classes
//
// Permanent and NeedsAuth failures are never retried. Transient, RateLimited
// and Unknown failures are retried until MaxRetries is used up. A server's
// Retry-After raises the delay, clamped to MaxRetryAfter so that a hostile
// header cannot park a job for years; it never lowers the delay.
//
// # Retry budget
//
// A [Budget] keeps the retries of a queue below a share of its recent
// attempts, so that a failing dependency does not turn into a retry storm.
// Retries over the budget are spread out at the budget's rate, never dropped.
package retry

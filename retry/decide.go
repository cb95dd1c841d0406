package retry

import (
	"math/bits"
	"math/rand/v2"
	"time"

	"github.com/redrivehq/redrive/failure"
)

// Input describes a failed attempt for [Policy.Decide].
type Input struct {
	// Class is the failure class of the attempt's error.
	Class failure.Class
	// Attempt is the 1-based number of the attempt that just failed. Values
	// below 1 count as 1.
	Attempt int
	// RetryAfter is the minimum delay the server asked for (Retry-After),
	// or 0 if it asked for none.
	RetryAfter time.Duration
	// PrevDelay is the delay chosen before the attempt that just failed, or
	// 0 if none. JitterDecorrelated needs it; other kinds ignore it.
	PrevDelay time.Duration
}

// Decision is the outcome of [Policy.Decide].
type Decision struct {
	// Retry reports whether the job runs again.
	Retry bool
	// Delay is how long to wait before the next attempt, when Retry is true.
	Delay time.Duration
	// Reason is one of the Reason constants: why the job is retried with
	// this delay, or why it gives up.
	Reason string
}

// Decision reasons. They are stable strings, stored with each attempt and
// shown in logs, metrics and the API.
const (
	// ReasonBackoff: retry after the policy's own delay.
	ReasonBackoff = "backoff"
	// ReasonRetryAfter: retry after the server's Retry-After (clamped to
	// MaxRetryAfter), which was longer than the policy's delay.
	ReasonRetryAfter = "retry_after"
	// ReasonPermanent: give up, the failure is Permanent.
	ReasonPermanent = "permanent"
	// ReasonNeedsAuth: give up, the failure needs new credentials.
	ReasonNeedsAuth = "needs_auth"
	// ReasonExhausted: give up, the attempt that failed was the last one
	// the policy allows (Attempt > MaxRetries).
	ReasonExhausted = "retries_exhausted"
)

// Decide says whether the job whose attempt in.Attempt just failed runs
// again, and after what delay.
//
// Permanent and NeedsAuth failures give up at once. Any other class is
// retried while in.Attempt <= MaxRetries, after
// Delay(in.Attempt-1, in.PrevDelay, r). A server's Retry-After, clamped to
// MaxRetryAfter, raises that delay when it is longer and never lowers it;
// the delay it decides gets positive jitter (see RetryAfterJitter), so it
// is never shorter than the server asked. r supplies the jitter's
// randomness; nil means the global math/rand/v2 source.
//
// Decide allocates nothing and is safe for concurrent use as long as r is
// (nil is).
func (p *Policy) Decide(in Input, r Source) Decision {
	if !in.Class.Retryable() {
		if in.Class == failure.NeedsAuth {
			return Decision{Reason: ReasonNeedsAuth}
		}
		return Decision{Reason: ReasonPermanent}
	}
	attempt := max(in.Attempt, 1)
	if attempt > p.MaxRetries {
		return Decision{Reason: ReasonExhausted}
	}
	// Fast path for the default shape (proportional jitter, doubling, no
	// Retry-After), straight-line; it computes exactly what Delay does.
	if p.Jitter == JitterProportional && p.Multiplier == 2 && in.RetryAfter <= 0 && r == nil {
		n := uint(attempt - 1)
		d, limit := p.Initial, p.MaxDelay
		if d > 0 && limit > 0 && d < limit && n < 62 && d <= limit>>n {
			d <<= n
			if f := p.JitterFactor; f > 0 && f <= 1 && d < 1<<61 {
				// d - span + rand[0, 2*span): the high word of a 64x64-bit
				// product scales a uniform 64-bit draw without floats.
				span := time.Duration(float64(d) * f)
				hi, _ := bits.Mul64(uint64(2*span), rand.Uint64())
				d = d - span + time.Duration(hi)
			}
			return Decision{Retry: true, Delay: d, Reason: ReasonBackoff}
		}
	}
	d := p.Delay(attempt-1, in.PrevDelay, r)
	if ra := p.clampRetryAfter(in.RetryAfter); ra > d {
		return Decision{Retry: true, Delay: satAdd(ra, scale(p.RetryAfterSpread(ra), uniform(r))), Reason: ReasonRetryAfter}
	}
	return Decision{Retry: true, Delay: d, Reason: ReasonBackoff}
}

// clampRetryAfter bounds a server's Retry-After by MaxRetryAfter (or
// DefaultMaxRetryAfter when that is zero). Negative values count as none.
func (p *Policy) clampRetryAfter(ra time.Duration) time.Duration {
	if ra <= 0 {
		return 0
	}
	limit := p.MaxRetryAfter
	if limit <= 0 {
		limit = DefaultMaxRetryAfter
	}
	return min(ra, limit)
}

// RetryAfterSpread returns the window of the jitter added to a server's
// Retry-After of ra (already clamped to MaxRetryAfter): a retry it decides
// waits ra plus a uniform random part of the window, so between ra and ra +
// RetryAfterSpread(ra). It is min(RetryAfterJitterFactor*ra,
// RetryAfterJitter) with their defaults for zero values, and 0 when the
// jitter is off or ra is not positive.
func (p *Policy) RetryAfterSpread(ra time.Duration) time.Duration {
	limit := p.RetryAfterJitter
	switch {
	case ra <= 0 || limit < 0:
		return 0
	case limit == 0:
		limit = DefaultRetryAfterJitter
	}
	f := p.RetryAfterJitterFactor
	switch {
	case f == 0:
		f = DefaultRetryAfterJitterFactor
	case !(f > 0):
		return 0 // negative or NaN: rejected by Validate
	case f > 1:
		f = 1
	}
	return min(time.Duration(f*float64(ra)), limit)
}

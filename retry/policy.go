package retry

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// maxDuration is the longest representable delay. Every computation in this
// package saturates at it instead of overflowing.
const maxDuration = time.Duration(math.MaxInt64)

// DefaultMaxRetryAfter is the clamp applied to a server's Retry-After when
// Policy.MaxRetryAfter is zero.
const DefaultMaxRetryAfter = time.Hour

// Defaults of the jitter added to a server's Retry-After (see
// Policy.RetryAfterJitter): up to 10% of the delay, at most 1s.
const (
	DefaultRetryAfterJitter       = time.Second
	DefaultRetryAfterJitterFactor = 0.1
)

// NoRetryAfterJitter, as Policy.RetryAfterJitter, turns the jitter added to
// a server's Retry-After off: every retry comes back exactly when the server
// said. Any negative value does the same.
const NoRetryAfterJitter time.Duration = -1

// Policy says how often and how late a failed job is retried.
//
// The delay before retry n (n = 0 for the first retry) is
// min(Initial*Multiplier^n, MaxDelay), randomised by Jitter. Check a policy
// built from configuration with [Policy.Validate]; [Policy.Delay] and
// [Policy.Decide] do not validate, but still return a non-negative delay for
// an invalid policy.
//
// A Policy is a plain value: copy it, compare it, keep one per queue or per
// job kind.
type Policy struct {
	// MaxRetries is the number of retries after the first attempt: 3 means
	// at most 4 attempts. 0 means the first failure is final.
	MaxRetries int
	// Initial is the base delay before the first retry.
	Initial time.Duration
	// Multiplier is the growth factor of the base delay from one retry to
	// the next. 1 gives a constant delay; it must not be below 1.
	Multiplier float64
	// MaxDelay caps the base delay before jitter is applied. It must be at
	// least Initial. Proportional and additive jitter can exceed it by at
	// most their own spread; the other kinds never do. (Delay treats a
	// value <= 0 as no cap; Validate rejects it unless Initial is 0.)
	MaxDelay time.Duration
	// Jitter selects how the delay is randomised.
	Jitter Jitter
	// JitterFactor is the spread of JitterProportional, between 0 and 1:
	// 0.1 means +-10%. Other kinds ignore it.
	JitterFactor float64
	// JitterMax is the largest amount JitterAdditive adds to the delay.
	// Other kinds ignore it.
	JitterMax time.Duration
	// MaxRetryAfter clamps a server's Retry-After, so that a hostile or
	// broken header cannot park a job for years. Zero means
	// DefaultMaxRetryAfter (1h).
	MaxRetryAfter time.Duration
	// RetryAfterJitter caps the random delay added to a server's
	// Retry-After, so that the calls a server turned away together do not
	// all come back at the same moment. A retry the Retry-After decides
	// waits ra + rand(0, w), where ra is the Retry-After (clamped to
	// MaxRetryAfter) and w = min(RetryAfterJitterFactor*ra,
	// RetryAfterJitter): never less than the server asked. Zero means
	// DefaultRetryAfterJitter (1s); a negative value (NoRetryAfterJitter)
	// turns the jitter off.
	RetryAfterJitter time.Duration
	// RetryAfterJitterFactor is the largest share of the Retry-After added
	// to it, between 0 and 1 (see RetryAfterJitter). Zero means
	// DefaultRetryAfterJitterFactor (0.1, that is up to 10%).
	RetryAfterJitterFactor float64
}

// DefaultPolicy returns redrive's default policy: 3 retries (4 attempts),
// 1s initial delay doubling each time and capped at 30s, proportional jitter
// of +-10%, and Retry-After honoured up to 1h, plus up to 10% of it (at most
// 1s) of jitter (the zero RetryAfterJitter fields). Without jitter its delays are 1s, 2s, 4s. JitterMax is
// preset to 500ms so that switching Jitter to JitterAdditive gives a
// sensible spread.
func DefaultPolicy() Policy {
	return Policy{
		MaxRetries:    3,
		Initial:       time.Second,
		Multiplier:    2,
		MaxDelay:      30 * time.Second,
		Jitter:        JitterProportional,
		JitterFactor:  0.1,
		JitterMax:     500 * time.Millisecond,
		MaxRetryAfter: DefaultMaxRetryAfter,
		// RetryAfterJitter and RetryAfterJitterFactor are left at zero,
		// their defaults, as in a policy stored before they existed.
	}
}

// Validate reports every field of p that holds an unusable value, one line
// per problem, each naming the field and the value found. It returns nil for
// a valid policy.
func (p Policy) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("retry: invalid policy: %s %s", field, fmt.Sprintf(format, args...)))
	}
	if p.MaxRetries < 0 {
		bad("MaxRetries", "must not be negative, got %d", p.MaxRetries)
	}
	if p.Initial < 0 {
		bad("Initial", "must not be negative, got %v", p.Initial)
	}
	switch {
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0):
		bad("Multiplier", "must be a finite number, got %v", p.Multiplier)
	case p.Multiplier < 1:
		bad("Multiplier", "must be at least 1, got %v", p.Multiplier)
	}
	switch {
	case p.MaxDelay < 0:
		bad("MaxDelay", "must not be negative, got %v", p.MaxDelay)
	case p.MaxDelay < p.Initial:
		bad("MaxDelay", "must be at least Initial (%v), got %v", p.Initial, p.MaxDelay)
	}
	if !p.Jitter.valid() {
		bad("Jitter", "is not a known jitter kind, got %d", uint8(p.Jitter))
	}
	if math.IsNaN(p.JitterFactor) || p.JitterFactor < 0 || p.JitterFactor > 1 {
		bad("JitterFactor", "must be between 0 and 1, got %v", p.JitterFactor)
	}
	if p.JitterMax < 0 {
		bad("JitterMax", "must not be negative, got %v", p.JitterMax)
	}
	if p.MaxRetryAfter < 0 {
		bad("MaxRetryAfter", "must not be negative, got %v", p.MaxRetryAfter)
	}
	if math.IsNaN(p.RetryAfterJitterFactor) || p.RetryAfterJitterFactor < 0 || p.RetryAfterJitterFactor > 1 {
		bad("RetryAfterJitterFactor", "must be between 0 and 1, got %v", p.RetryAfterJitterFactor)
	}
	return errors.Join(errs...)
}

// Source supplies the randomness for jitter: Float64 returns a value in
// [0, 1). A *math/rand/v2.Rand satisfies it; pass one with a fixed seed for
// reproducible delays. A nil Source means the global math/rand/v2 source,
// which is safe for concurrent use (a *rand.Rand is not).
type Source interface {
	Float64() float64
}

// Delay returns the delay before retry n (n = 0 for the first retry), jitter
// included. prev is the delay chosen before this one, or 0 if none; only
// JitterDecorrelated uses it. r supplies the randomness; nil means the global
// math/rand/v2 source.
//
// The result is never negative and saturates instead of overflowing, for any
// n and any multiplier. A negative n counts as 0.
func (p *Policy) Delay(n int, prev time.Duration, r Source) time.Duration {
	switch p.Jitter {
	case JitterProportional:
		d := p.base(n)
		f := p.JitterFactor
		if !(f > 0) || d == 0 {
			return d
		}
		f = min(f, 1)
		if d < 1<<61 {
			// d - span + rand(0, 2*span): no data-dependent branch, and no
			// overflow since span <= d < 2^61.
			span := time.Duration(float64(d) * f)
			return d - span + scale(2*span, uniform(r))
		}
		// Astronomically long delays: d + rand(-f*d, f*d), saturating.
		off := float64(d) * f * (2*uniform(r) - 1)
		if off >= 0 {
			return satAdd(d, time.Duration(off))
		}
		return max(d+time.Duration(off), 0)
	case JitterFull:
		return scale(p.base(n), uniform(r))
	case JitterEqual:
		d := p.base(n)
		return d/2 + scale(d-d/2, uniform(r))
	case JitterDecorrelated:
		lo := max(p.Initial, 0)
		if prev <= 0 {
			prev = lo
		}
		hi := max(satMul3(prev), lo)
		return min(satAdd(lo, scale(hi-lo, uniform(r))), p.limit())
	case JitterAdditive:
		d := p.base(n)
		if p.JitterMax <= 0 {
			return d
		}
		return satAdd(d, scale(p.JitterMax, uniform(r)))
	default: // JitterNone and undeclared kinds
		return p.base(n)
	}
}

// limit is the effective cap on the base delay. A non-positive MaxDelay
// (rejected by Validate unless Initial is 0 too) means no cap.
func (p *Policy) limit() time.Duration {
	if p.MaxDelay <= 0 {
		return maxDuration
	}
	return p.MaxDelay
}

// base returns min(Initial*Multiplier^n, limit) without jitter, exactly for
// integral multipliers and via math.Pow otherwise. A multiplier below 1 or
// NaN counts as 1.
func (p *Policy) base(n int) time.Duration {
	d := max(p.Initial, 0)
	limit := p.limit()
	if d >= limit {
		return limit
	}
	if n <= 0 || d == 0 {
		return d
	}
	m := p.Multiplier
	switch {
	case m == 2: // the common case: a shift, exact
		if n >= 63 || d > limit>>uint(n) {
			return limit
		}
		return d << uint(n)
	case !(m > 1): // 1, below 1, or NaN: constant
		return d
	case m < 1<<53 && m == math.Trunc(m): // integral: exact, at most 63 steps
		k := time.Duration(m)
		for ; n > 0; n-- {
			if d > limit/k {
				return limit
			}
			d *= k
		}
		return d
	default:
		x := math.Round(float64(d) * math.Pow(m, float64(n)))
		if !(x < float64(limit)) { // also catches +Inf
			return limit
		}
		return time.Duration(x)
	}
}

// uniform draws a value in [0, 1) from r, or from the global source when r is
// nil. A misbehaving Source is clamped into range.
func uniform(r Source) float64 {
	if r == nil {
		return rand.Float64() // always in range
	}
	u := r.Float64()
	if u >= 0 && u < 1 {
		return u
	}
	return clampUnit(u)
}

// clampUnit brings a value from a misbehaving Source into [0, 1).
func clampUnit(u float64) float64 {
	if u >= 1 {
		return 1 - 0x1p-53 // the largest float64 below 1
	}
	return 0 // negative or NaN
}

// scale returns u*d for d >= 0 and u in [0, 1). The product is at most
// 2^63 - 2^10, so the conversion back to a Duration cannot overflow.
func scale(d time.Duration, u float64) time.Duration {
	return time.Duration(u * float64(d))
}

// satAdd returns a+b for non-negative a and b, saturating at maxDuration.
func satAdd(a, b time.Duration) time.Duration {
	if a > maxDuration-b {
		return maxDuration
	}
	return a + b
}

// satMul3 returns 3*d for non-negative d, saturating at maxDuration.
func satMul3(d time.Duration) time.Duration {
	if d > maxDuration/3 {
		return maxDuration
	}
	return 3 * d
}

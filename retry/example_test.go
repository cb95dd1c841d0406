package retry_test

import (
	"fmt"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/retry"
)

func ExamplePolicy_Decide() {
	p := retry.DefaultPolicy()
	p.Jitter = retry.JitterNone                   // for a reproducible output
	p.RetryAfterJitter = retry.NoRetryAfterJitter // likewise (see ExamplePolicy_RetryAfterSpread)

	// A job that keeps failing with a transient error.
	for attempt := 1; ; attempt++ {
		d := p.Decide(retry.Input{Class: failure.Transient, Attempt: attempt}, nil)
		if !d.Retry {
			fmt.Printf("attempt %d failed: give up (%s)\n", attempt, d.Reason)
			break
		}
		fmt.Printf("attempt %d failed: retry in %v (%s)\n", attempt, d.Delay, d.Reason)
	}

	// The server asked for 10s: longer than the backoff, so it wins.
	d := p.Decide(retry.Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: 10 * time.Second}, nil)
	fmt.Printf("rate limited: retry in %v (%s)\n", d.Delay, d.Reason)

	// Permanent failures never retry.
	d = p.Decide(retry.Input{Class: failure.Permanent, Attempt: 1}, nil)
	fmt.Printf("permanent: retry %v (%s)\n", d.Retry, d.Reason)

	// Output:
	// attempt 1 failed: retry in 1s (backoff)
	// attempt 2 failed: retry in 2s (backoff)
	// attempt 3 failed: retry in 4s (backoff)
	// attempt 4 failed: give up (retries_exhausted)
	// rate limited: retry in 10s (retry_after)
	// permanent: retry false (permanent)
}

func ExamplePolicy_Explain() {
	fmt.Print(retry.DefaultPolicy().Explain())

	// Output:
	// policy: 3 retries (4 attempts), backoff min(1s * 2^n, 30s), jitter proportional +-10%, Retry-After honoured up to 1h
	// retry  base  delay        cumulative
	// 1      1s    900ms..1.1s  900ms..1.1s
	// 2      2s    1.8s..2.2s   2.7s..3.3s
	// 3      4s    3.6s..4.4s   6.3s..7.7s
	// attempt 4 is the last: if it fails, give up (retries_exhausted)
	// permanent and needs_auth failures give up at once
	// a Retry-After ra longer than the backoff waits ra + rand(0, min(10% of ra, 1s)), never less than ra
}

// fixed is a jitter source that always draws the same value.
type fixed float64

func (f fixed) Float64() float64 { return float64(f) }

func ExamplePolicy_RetryAfterSpread() {
	p := retry.DefaultPolicy()
	// A burst of 429s with Retry-After: 2 comes back spread over 200ms
	// (10% of 2s), never before the 2s the server asked for; a longer
	// Retry-After is spread over at most 1s.
	fmt.Println(p.RetryAfterSpread(2*time.Second), p.RetryAfterSpread(time.Minute))
	for _, u := range []fixed{0, 0.5, 0.999} {
		d := p.Decide(retry.Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: 2 * time.Second}, u)
		fmt.Println(d.Delay.Round(time.Millisecond), d.Reason)
	}
	// Output:
	// 200ms 1s
	// 2s retry_after
	// 2.1s retry_after
	// 2.2s retry_after
}

func ExampleBudget() {
	// A stopped clock, so that the output does not depend on timing.
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := retry.NewBudget(retry.BudgetConfig{
		Ratio:      0.2,
		MinRetries: 2,
		Window:     10 * time.Second,
		Now:        func() time.Time { return now },
	})

	// 20 attempts allow 20% of 20 = 4 retries per window.
	for range 20 {
		b.Attempt()
	}
	// A burst of 7 retries, each wanting 1s: the first 4 keep their delay,
	// the other 3 are spread 10s/4 = 2.5s apart.
	for i := 1; i <= 7; i++ {
		fmt.Printf("retry %d: %v\n", i, b.Retry(time.Second))
	}
	s := b.Snapshot()
	fmt.Printf("retries %d of %d allowed, %d pushed out, over budget %v\n", s.Retries, s.Allowed, s.Deferred, s.Over)

	// Output:
	// retry 1: 1s
	// retry 2: 1s
	// retry 3: 1s
	// retry 4: 1s
	// retry 5: 3.5s
	// retry 6: 6s
	// retry 7: 8.5s
	// retries 7 of 4 allowed, 3 pushed out, over budget true
}

package retry

import (
	"math"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
)

const transient = failure.Transient

func TestDecideGivesUpAtOnce(t *testing.T) {
	p := DefaultPolicy()
	for _, tt := range []struct {
		class  failure.Class
		reason string
	}{
		{failure.Permanent, ReasonPermanent},
		{failure.NeedsAuth, ReasonNeedsAuth},
	} {
		for _, attempt := range []int{1, 2, 3, 100} {
			in := Input{Class: tt.class, Attempt: attempt, RetryAfter: time.Minute}
			if d := p.Decide(in, nil); d != (Decision{Reason: tt.reason}) {
				t.Errorf("Decide(%v, attempt %d) = %+v, want give up with %q", tt.class, attempt, d, tt.reason)
			}
		}
	}
}

func TestDecideRetriesExactlyMaxRetries(t *testing.T) {
	for _, class := range []failure.Class{failure.Transient, failure.RateLimited, failure.Unknown} {
		for _, maxRetries := range []int{0, 1, 3, 5, 10} {
			p := DefaultPolicy()
			p.MaxRetries = maxRetries
			retries := 0
			var prev time.Duration
			for attempt := 1; ; attempt++ {
				d := p.Decide(Input{Class: class, Attempt: attempt, PrevDelay: prev}, nil)
				if !d.Retry {
					if d.Reason != ReasonExhausted || d.Delay != 0 {
						t.Fatalf("%v: gave up with %+v", class, d)
					}
					if attempt != maxRetries+1 {
						t.Fatalf("%v, MaxRetries %d: gave up after attempt %d", class, maxRetries, attempt)
					}
					break
				}
				if d.Reason != ReasonBackoff || d.Delay <= 0 {
					t.Fatalf("%v: retry decision %+v", class, d)
				}
				retries++
				prev = d.Delay
			}
			if retries != maxRetries {
				t.Fatalf("%v: %d retries, want %d", class, retries, maxRetries)
			}
		}
	}
}

func TestDecideRetryAfter(t *testing.T) {
	p := noJitter(DefaultPolicy()) // 1s, 2s, 4s; Retry-After clamped to 1h
	tests := []struct {
		name       string
		attempt    int
		retryAfter time.Duration
		maxRA      time.Duration
		want       Decision
	}{
		{"raises", 1, 10 * time.Second, time.Hour, Decision{true, 10 * time.Second, ReasonRetryAfter}},
		{"never lowers", 3, time.Second, time.Hour, Decision{true, 4 * time.Second, ReasonBackoff}},
		{"equal keeps backoff", 2, 2 * time.Second, time.Hour, Decision{true, 2 * time.Second, ReasonBackoff}},
		{"clamped", 1, 1000 * time.Hour, time.Hour, Decision{true, time.Hour, ReasonRetryAfter}},
		{"clamped by custom max", 1, time.Hour, 5 * time.Minute, Decision{true, 5 * time.Minute, ReasonRetryAfter}},
		{"clamp below backoff", 3, time.Hour, 3 * time.Second, Decision{true, 4 * time.Second, ReasonBackoff}},
		{"zero max means 1h", 1, 1000 * time.Hour, 0, Decision{true, time.Hour, ReasonRetryAfter}},
		{"may exceed MaxDelay", 1, 45 * time.Second, time.Hour, Decision{true, 45 * time.Second, ReasonRetryAfter}},
		{"negative ignored", 1, -time.Hour, time.Hour, Decision{true, time.Second, ReasonBackoff}},
		{"huge", 1, maxDuration, time.Hour, Decision{true, time.Hour, ReasonRetryAfter}},
		{"not past exhaustion", 4, time.Minute, time.Hour, Decision{false, 0, ReasonExhausted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := p
			q.MaxRetryAfter = tt.maxRA
			for _, class := range []failure.Class{failure.RateLimited, failure.Transient, failure.Unknown} {
				got := q.Decide(Input{Class: class, Attempt: tt.attempt, RetryAfter: tt.retryAfter}, nil)
				if got != tt.want {
					t.Fatalf("%v: Decide = %+v, want %+v", class, got, tt.want)
				}
			}
		})
	}
}

func TestDecideRetryAfterWithJitter(t *testing.T) {
	p := DefaultPolicy()
	for range 1000 {
		d := p.Decide(Input{Class: failure.RateLimited, Attempt: 3, RetryAfter: 4 * time.Second}, nil)
		// backoff is 4s +- 10%: the result is never below 4s.
		if d.Delay < 4*time.Second || d.Delay > 4400*time.Millisecond {
			t.Fatalf("Decide = %+v, want delay in [4s, 4.4s]", d)
		}
		// A Retry-After of 4s gets up to min(10% of 4s, 1s) of
		// jitter: the same bounds.
		if d.Reason != ReasonRetryAfter && d.Reason != ReasonBackoff {
			t.Fatalf("Decide = %+v: unexpected reason", d)
		}
	}
}

func TestDecideEdges(t *testing.T) {
	p := noJitter(DefaultPolicy())
	// Attempt below 1 counts as the first attempt.
	for _, attempt := range []int{0, -1, math.MinInt} {
		if d := p.Decide(Input{Class: transient, Attempt: attempt}, nil); d != (Decision{true, time.Second, ReasonBackoff}) {
			t.Errorf("Decide(attempt %d) = %+v, want retry after 1s", attempt, d)
		}
	}
	// MaxRetries 0 or negative: the first failure is final.
	for _, mr := range []int{0, -5} {
		q := p
		q.MaxRetries = mr
		if d := q.Decide(Input{Class: transient, Attempt: 1}, nil); d != (Decision{Reason: ReasonExhausted}) {
			t.Errorf("MaxRetries %d: Decide = %+v, want give up", mr, d)
		}
	}
	// Huge attempt numbers under a huge MaxRetries: capped, never negative.
	q := DefaultPolicy()
	q.MaxRetries = math.MaxInt
	for _, j := range allJitters {
		q.Jitter = j
		for _, attempt := range []int{64, 65, 1 << 40, math.MaxInt} {
			d := q.Decide(Input{Class: transient, Attempt: attempt, PrevDelay: maxDuration}, nil)
			if !d.Retry || d.Delay < 0 || d.Delay > 33*time.Second {
				t.Errorf("%v attempt %d: Decide = %+v, want a retry within the cap", j, attempt, d)
			}
		}
	}
	// An unknown class value is retried (only Permanent and NeedsAuth are not).
	if d := p.Decide(Input{Class: failure.Class(200), Attempt: 1}, nil); !d.Retry {
		t.Errorf("unknown class: Decide = %+v, want retry", d)
	}
}

func TestDecideDecorrelatedUsesPrevDelay(t *testing.T) {
	p := DefaultPolicy()
	p.Jitter = JitterDecorrelated
	p.MaxRetries = 10
	var prev time.Duration
	for attempt := 1; attempt <= 10; attempt++ {
		d := p.Decide(Input{Class: transient, Attempt: attempt, PrevDelay: prev}, nil)
		hi := 3 * max(prev, p.Initial)
		if d.Delay < p.Initial || d.Delay > min(hi, p.MaxDelay) {
			t.Fatalf("attempt %d after %v: delay %v outside [1s, %v]", attempt, prev, d.Delay, min(hi, p.MaxDelay))
		}
		prev = d.Delay
	}
}

func TestDecideAllocatesNothing(t *testing.T) {
	p := DefaultPolicy()
	r := newBenchSource()
	for _, src := range []Source{r, nil} {
		allocs := testing.AllocsPerRun(1000, func() {
			_ = p.Decide(Input{Class: transient, Attempt: 2}, src)
		})
		if allocs != 0 {
			t.Fatalf("Decide allocates %v times per call", allocs)
		}
	}
}

// TestDecideFastPathMatchesDelay checks that the straight-line path Decide
// takes for the default policy shape (nil Source) draws from the same
// distribution as Delay: within d*(1±f), mean d, for every retry.
func TestDecideFastPathMatchesDelay(t *testing.T) {
	p := DefaultPolicy()
	p.MaxRetries = 8
	p.MaxDelay = 10 * time.Second // the cap applies from the fifth retry on
	for attempt := 1; attempt <= p.MaxRetries; attempt++ {
		np := p
		np.Jitter = JitterNone
		base := np.Delay(attempt-1, 0, nil)
		lo, hi := time.Duration(float64(base)*0.9), time.Duration(float64(base)*1.1)
		var sum float64
		const n = 10000
		for range n {
			d := p.Decide(Input{Class: failure.Transient, Attempt: attempt}, nil)
			if !d.Retry || d.Reason != ReasonBackoff {
				t.Fatalf("attempt %d: %+v", attempt, d)
			}
			if d.Delay < lo || d.Delay > hi {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d.Delay, lo, hi)
			}
			sum += float64(d.Delay)
		}
		// The mean of a uniform over ±10% has a standard error of
		// 0.1*base/sqrt(3n); allow 6 of them.
		if mean, tol := sum/n, 6*0.1*float64(base)/math.Sqrt(3*n); math.Abs(mean-float64(base)) > tol {
			t.Fatalf("attempt %d: mean %v, want %v ± %v", attempt, time.Duration(mean), base, time.Duration(tol))
		}
	}
}

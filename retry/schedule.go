package retry

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redrivehq/redrive/internal/shortdur"
)

// MaxScheduleSteps is the most steps [Policy.Schedule] returns and
// [Policy.Explain] shows; a policy with more retries is cut short there (and
// only there).
const MaxScheduleSteps = 100

// Step is one retry in a policy's schedule, as returned by [Policy.Schedule].
type Step struct {
	// Retry is the 1-based number of the retry.
	Retry int
	// AfterAttempt is the number of the failed attempt this retry follows;
	// the retry itself is attempt AfterAttempt+1.
	AfterAttempt int
	// Base is the delay before jitter: min(Initial*Multiplier^(Retry-1),
	// MaxDelay). JitterDecorrelated does not use it.
	Base time.Duration
	// Min and Max bound every delay the jitter can produce for this retry,
	// assuming no Retry-After. For JitterDecorrelated, Max follows from the
	// largest possible previous delays.
	Min, Max time.Duration
	// CumMin and CumMax bound the total delay from the first failure to
	// this retry: the sums of Min and of Max over this and earlier steps.
	// Handler run time is not included.
	CumMin, CumMax time.Duration
}

// Schedule returns the delays p produces without Retry-After: one step per
// retry, MaxRetries of them but at most MaxScheduleSteps. All sums saturate
// instead of overflowing.
func (p Policy) Schedule() []Step {
	n := min(max(p.MaxRetries, 0), MaxScheduleSteps)
	steps := make([]Step, n)
	initial := max(p.Initial, 0)
	limit := p.limit()
	walk := min(initial, limit) // largest possible previous delay, decorrelated
	var cumMin, cumMax time.Duration
	for i := range steps {
		base := p.base(i)
		lo, hi := base, base
		switch p.Jitter {
		case JitterProportional:
			if f := p.JitterFactor; f > 0 {
				off := time.Duration(float64(base) * min(f, 1))
				lo, hi = max(base-off, 0), satAdd(base, off)
			}
		case JitterFull:
			lo = 0
		case JitterEqual:
			lo = base / 2
		case JitterDecorrelated:
			walk = min(max(satMul3(walk), initial), limit)
			lo, hi = min(initial, limit), walk
		case JitterAdditive:
			hi = satAdd(base, max(p.JitterMax, 0))
		}
		cumMin, cumMax = satAdd(cumMin, lo), satAdd(cumMax, hi)
		steps[i] = Step{
			Retry:        i + 1,
			AfterAttempt: i + 1,
			Base:         base,
			Min:          lo,
			Max:          hi,
			CumMin:       cumMin,
			CumMax:       cumMax,
		}
	}
	return steps
}

// Explain describes p for a human: a summary line, a table with one row per
// retry (its base delay, the range jitter gives it and the cumulative time
// since the first failure) and a line saying when the job gives up. Problems
// found by Validate are listed first. It backs `redrive policy explain`.
func (p Policy) Explain() string {
	var b strings.Builder
	if err := p.Validate(); err != nil {
		b.WriteString("invalid policy:\n")
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(&b, "  - %s\n", strings.TrimPrefix(line, "retry: invalid policy: "))
		}
	}
	b.WriteString(p.summary())
	b.WriteByte('\n')

	retries := max(p.MaxRetries, 0)
	if retries == 0 {
		b.WriteString("no retries: the first failure is final (retries_exhausted)\n")
		return b.String()
	}
	steps := p.Schedule()
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "retry\tbase\tdelay\tcumulative")
	for _, s := range steps {
		base := shortdur.String(s.Base)
		if p.Jitter == JitterDecorrelated {
			base = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Retry, base, fmtRange(s.Min, s.Max), fmtRange(s.CumMin, s.CumMax))
	}
	tw.Flush()
	if len(steps) < retries {
		fmt.Fprintf(&b, "... %d more retries not shown (first %d of %d)\n", retries-len(steps), len(steps), retries)
	}
	fmt.Fprintf(&b, "attempt %d is the last: if it fails, give up (retries_exhausted)\n", retries+1)
	b.WriteString("permanent and needs_auth failures give up at once\n")
	b.WriteString(p.retryAfterLine())
	return b.String()
}

// summary is Explain's header line.
func (p Policy) summary() string {
	retries := max(p.MaxRetries, 0)
	var b strings.Builder
	fmt.Fprintf(&b, "policy: %d %s (%d %s)", retries, plural(retries, "retry", "retries"),
		retries+1, plural(retries+1, "attempt", "attempts"))
	initial := max(p.Initial, 0)
	capText := "no cap"
	if p.MaxDelay > 0 {
		capText = shortdur.String(p.MaxDelay)
	}
	switch {
	case p.Jitter == JitterDecorrelated:
		// the exponential base is not used
	case !(p.Multiplier > 1) || initial == 0:
		fmt.Fprintf(&b, ", backoff constant %s", shortdur.String(p.base(0)))
	default:
		fmt.Fprintf(&b, ", backoff min(%s * %s^n, %s)", shortdur.String(initial), fmtFloat(p.Multiplier), capText)
	}
	switch p.Jitter {
	case JitterNone:
		b.WriteString(", no jitter")
	case JitterProportional:
		fmt.Fprintf(&b, ", jitter proportional +-%s%%", fmtFloat(100*max(min(p.JitterFactor, 1), 0)))
	case JitterFull:
		b.WriteString(", jitter full rand(0, d)")
	case JitterEqual:
		b.WriteString(", jitter equal d/2 + rand(0, d/2)")
	case JitterDecorrelated:
		fmt.Fprintf(&b, ", jitter decorrelated min(%s, rand(%s, 3 * previous))", capText, shortdur.String(initial))
	case JitterAdditive:
		fmt.Fprintf(&b, ", jitter additive d + rand(0, %s)", shortdur.String(max(p.JitterMax, 0)))
	default:
		fmt.Fprintf(&b, ", unknown %s (treated as none)", p.Jitter)
	}
	fmt.Fprintf(&b, ", Retry-After honoured up to %s", shortdur.String(p.clampRetryAfter(maxDuration)))
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// fmtFloat formats a multiplier or a percentage without float noise:
// 2, 1.5, 10, 7.
func fmtFloat(f float64) string {
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// fmtRange formats a delay range, or a single delay when it has no spread.
func fmtRange(lo, hi time.Duration) string {
	if lo == hi {
		return shortdur.String(lo)
	}
	return shortdur.String(lo) + ".." + shortdur.String(hi)
}

// retryAfterLine is Explain's line about a server's Retry-After: the jitter
// added to the delay it asks for.
func (p Policy) retryAfterLine() string {
	if p.RetryAfterSpread(time.Hour) == 0 {
		return "a Retry-After longer than the backoff is waited exactly, no jitter\n"
	}
	f := p.RetryAfterJitterFactor
	if f == 0 {
		f = DefaultRetryAfterJitterFactor
	}
	limit := p.RetryAfterJitter
	if limit == 0 {
		limit = DefaultRetryAfterJitter
	}
	return fmt.Sprintf("a Retry-After ra longer than the backoff waits ra + rand(0, min(%s%% of ra, %s)), never less than ra\n",
		fmtFloat(100*min(f, 1)), shortdur.String(limit))
}

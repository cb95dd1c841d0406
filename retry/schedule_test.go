package retry

import (
	"strings"
	"testing"
	"time"
)

func TestExplainDefaultPolicy(t *testing.T) {
	const golden = `policy: 3 retries (4 attempts), backoff min(1s * 2^n, 30s), jitter proportional +-10%, Retry-After honoured up to 1h
retry  base  delay        cumulative
1      1s    900ms..1.1s  900ms..1.1s
2      2s    1.8s..2.2s   2.7s..3.3s
3      4s    3.6s..4.4s   6.3s..7.7s
attempt 4 is the last: if it fails, give up (retries_exhausted)
permanent and needs_auth failures give up at once
a Retry-After ra longer than the backoff waits ra + rand(0, min(10% of ra, 1s)), never less than ra
`
	if got := DefaultPolicy().Explain(); got != golden {
		t.Fatalf("Explain() =\n%s\nwant\n%s", got, golden)
	}
}

func TestExplainVariants(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want []string // lines that must appear
	}{
		{"publisher retry, no jitter", Policy{MaxRetries: 5, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute}, []string{
			"policy: 5 retries (6 attempts), backoff min(1s * 2^n, 1m), no jitter, Retry-After honoured up to 1h\n",
			"5      16s   16s    31s\n",
			"attempt 6 is the last",
		}},
		{"no retries", Policy{Initial: time.Second, Multiplier: 2, MaxDelay: time.Second}, []string{
			"policy: 0 retries (1 attempt)",
			"no retries: the first failure is final (retries_exhausted)\n",
		}},
		{"one retry", Policy{MaxRetries: 1, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second}, []string{
			"policy: 1 retry (2 attempts), backoff constant 1s",
		}},
		{"decorrelated", Policy{MaxRetries: 4, Initial: time.Second, Multiplier: 2, MaxDelay: 10 * time.Second, Jitter: JitterDecorrelated}, []string{
			"jitter decorrelated min(10s, rand(1s, 3 * previous))",
			"1      -     1s..3s   1s..3s\n",
			"4      -     1s..10s  4s..32s\n",
		}},
		{"additive", Policy{MaxRetries: 2, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: JitterAdditive, JitterMax: 500 * time.Millisecond}, []string{
			"jitter additive d + rand(0, 500ms)",
			"2      2s    2s..2.5s  3s..4s\n",
		}},
		{"full", Policy{MaxRetries: 1, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: JitterFull}, []string{
			"jitter full rand(0, d)", "1      1s    0s..1s  0s..1s\n",
		}},
		{"equal", Policy{MaxRetries: 1, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: JitterEqual}, []string{
			"jitter equal d/2 + rand(0, d/2)", "1      1s    500ms..1s  500ms..1s\n",
		}},
		{"unknown jitter", Policy{MaxRetries: 1, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: 9}, []string{
			"  - Jitter is not a known jitter kind, got 9\n", "unknown jitter(9) (treated as none)",
		}},
		{"uncapped", Policy{MaxRetries: 1, Multiplier: 2, Jitter: JitterDecorrelated, MaxRetryAfter: 5 * time.Minute}, []string{
			"jitter decorrelated min(no cap, rand(0s, 3 * previous)), Retry-After honoured up to 5m",
		}},
		{"truncated", Policy{MaxRetries: 250, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute}, []string{
			"\n100    1m    1m     1h35m3s\n",
			"... 150 more retries not shown (first 100 of 250)\n",
			"attempt 251 is the last",
		}},
		{"invalid", Policy{MaxRetries: 2, Initial: time.Second, Multiplier: 0.5, MaxDelay: time.Minute}, []string{
			"invalid policy:\n  - Multiplier must be at least 1, got 0.5\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Explain()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Explain() =\n%s\nmissing %q", got, w)
				}
			}
			for line := range strings.SplitSeq(got, "\n") {
				if strings.TrimRight(line, " ") != line {
					t.Errorf("line %q has trailing spaces", line)
				}
			}
		})
	}
}

func TestSchedule(t *testing.T) {
	p := DefaultPolicy()
	got := p.Schedule()
	want := []Step{
		{Retry: 1, AfterAttempt: 1, Base: time.Second, Min: 900 * time.Millisecond, Max: 1100 * time.Millisecond,
			CumMin: 900 * time.Millisecond, CumMax: 1100 * time.Millisecond},
		{Retry: 2, AfterAttempt: 2, Base: 2 * time.Second, Min: 1800 * time.Millisecond, Max: 2200 * time.Millisecond,
			CumMin: 2700 * time.Millisecond, CumMax: 3300 * time.Millisecond},
		{Retry: 3, AfterAttempt: 3, Base: 4 * time.Second, Min: 3600 * time.Millisecond, Max: 4400 * time.Millisecond,
			CumMin: 6300 * time.Millisecond, CumMax: 7700 * time.Millisecond},
	}
	if len(got) != len(want) {
		t.Fatalf("Schedule() has %d steps, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	p.MaxRetries = 1 << 40
	if n := len(p.Schedule()); n != MaxScheduleSteps {
		t.Fatalf("huge MaxRetries: %d steps, want %d", n, MaxScheduleSteps)
	}
	p.MaxRetries = -1
	if n := len(p.Schedule()); n != 0 {
		t.Fatalf("negative MaxRetries: %d steps", n)
	}
}

func TestScheduleSaturates(t *testing.T) {
	p := Policy{MaxRetries: 100, Initial: time.Hour, Multiplier: 10, Jitter: JitterAdditive, JitterMax: maxDuration}
	steps := p.Schedule()
	last := steps[len(steps)-1]
	if last.Base != maxDuration || last.Max != maxDuration || last.CumMax != maxDuration || last.CumMin != maxDuration {
		t.Fatalf("last step = %+v, want saturated at %v", last, maxDuration)
	}
	for i := 1; i < len(steps); i++ {
		if steps[i].CumMin < steps[i-1].CumMin || steps[i].CumMax < steps[i-1].CumMax {
			t.Fatalf("cumulative went down at step %d: %+v after %+v", i, steps[i], steps[i-1])
		}
	}
}

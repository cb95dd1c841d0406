package retry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const samples = 10_000

// distribution is what a jitter formula promises: every sample in [lo, hi],
// and a mean with the given expected value and standard deviation.
type distribution struct {
	lo, hi     time.Duration
	mean, sdev float64 // nanoseconds
}

// uniformDist is the distribution of rand(lo, hi).
func uniformDist(lo, hi time.Duration) distribution {
	w := float64(hi - lo)
	return distribution{lo: lo, hi: hi, mean: float64(lo) + w/2, sdev: w / math.Sqrt(12)}
}

// cappedUniformDist is the distribution of min(c, rand(a, b)) with a <= c <= b:
// uniform below c, with the mass (b-c)/(b-a) sitting at c.
func cappedUniformDist(a, b, c time.Duration) distribution {
	fa, fb, fc := float64(a), float64(b), float64(c)
	w := fb - fa
	mean := ((fc*fc-fa*fa)/2 + (fb-fc)*fc) / w
	second := ((fc*fc*fc-fa*fa*fa)/3 + (fb-fc)*fc*fc) / w
	return distribution{lo: a, hi: c, mean: mean, sdev: math.Sqrt(second - mean*mean)}
}

// check draws samples from draw and checks bounds and mean. The mean must lie
// within 5 standard errors of the expected value: with a fixed seed the test
// is deterministic, and a formula off by even a few percent of its spread
// fails.
func (want distribution) check(t *testing.T, draw func() time.Duration) {
	t.Helper()
	var sum float64
	for i := range samples {
		d := draw()
		if d < want.lo || d > want.hi {
			t.Fatalf("sample %d = %v, outside [%v, %v]", i, d, want.lo, want.hi)
		}
		sum += float64(d)
	}
	mean := sum / samples
	tol := 5*want.sdev/math.Sqrt(samples) + 1 // +1ns for truncation
	if math.Abs(mean-want.mean) > tol {
		t.Fatalf("mean = %v, want %v +- %v", time.Duration(mean), time.Duration(want.mean), time.Duration(tol))
	}
}

func TestJitterDistributions(t *testing.T) {
	const (
		initial = time.Second
		cap     = 30 * time.Second
		d       = 4 * time.Second // base for n = 2
	)
	policy := func(j Jitter) Policy {
		return Policy{MaxRetries: 10, Initial: initial, Multiplier: 2, MaxDelay: cap,
			Jitter: j, JitterFactor: 0.2, JitterMax: 500 * time.Millisecond}
	}
	tests := []struct {
		name string
		j    Jitter
		prev time.Duration
		n    int
		want distribution
	}{
		{"none", JitterNone, 0, 2, distribution{lo: d, hi: d, mean: float64(d)}},
		// d * (1 + rand(-0.2, 0.2))
		{"proportional", JitterProportional, 0, 2, uniformDist(d-d/5, d+d/5)},
		// rand(0, d)
		{"full", JitterFull, 0, 2, uniformDist(0, d)},
		// d/2 + rand(0, d/2)
		{"equal", JitterEqual, 0, 2, uniformDist(d/2, d)},
		// d + rand(0, 500ms), the download manager's thundering-herd jitter (mean 250ms over base)
		{"additive", JitterAdditive, 0, 2, uniformDist(d, d+500*time.Millisecond)},
		// rand(1s, 3*2s), below the cap
		{"decorrelated", JitterDecorrelated, 2 * time.Second, 2, uniformDist(initial, 6*time.Second)},
		// first retry: prev = Initial, rand(1s, 3s)
		{"decorrelated-first", JitterDecorrelated, 0, 0, uniformDist(initial, 3*time.Second)},
		// min(30s, rand(1s, 45s)): a third of the mass lands on the cap
		{"decorrelated-capped", JitterDecorrelated, 15 * time.Second, 7, cappedUniformDist(initial, 45*time.Second, cap)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(tt.j)
			r := rand.New(rand.NewPCG(42, uint64(tt.j)))
			tt.want.check(t, func() time.Duration { return p.Delay(tt.n, tt.prev, r) })
		})
	}
}

// Every jitter kind, at every step of a long schedule, stays within the
// bounds Schedule reports and averages what its formula says.
func TestJitterMatchesScheduleBounds(t *testing.T) {
	for _, j := range allJitters {
		t.Run(j.String(), func(t *testing.T) {
			p := Policy{MaxRetries: 12, Initial: 250 * time.Millisecond, Multiplier: 2.5, MaxDelay: time.Minute,
				Jitter: j, JitterFactor: 0.3, JitterMax: time.Second}
			r := rand.New(rand.NewPCG(3, 4))
			steps := p.Schedule()
			for range 2000 {
				var prev, cum time.Duration
				for i, s := range steps {
					d := p.Delay(i, prev, r)
					cum += d
					if d < s.Min || d > s.Max {
						t.Fatalf("retry %d: delay %v outside step range [%v, %v]", s.Retry, d, s.Min, s.Max)
					}
					if cum < s.CumMin || cum > s.CumMax {
						t.Fatalf("retry %d: cumulative %v outside [%v, %v]", s.Retry, cum, s.CumMin, s.CumMax)
					}
					prev = d
				}
			}
		})
	}
}

func TestJitterMeansAtEveryStep(t *testing.T) {
	p := Policy{MaxRetries: 8, Initial: 300 * time.Millisecond, Multiplier: 3, MaxDelay: 20 * time.Second,
		JitterFactor: 0.1, JitterMax: 2 * time.Second}
	for _, j := range []Jitter{JitterProportional, JitterFull, JitterEqual, JitterAdditive} {
		for n := range p.MaxRetries {
			t.Run(fmt.Sprintf("%v/n=%d", j, n), func(t *testing.T) {
				q := p
				q.Jitter = j
				d := q.base(n)
				var want distribution
				switch j {
				case JitterProportional:
					off := time.Duration(float64(d) * q.JitterFactor)
					want = uniformDist(d-off, d+off)
				case JitterFull:
					want = uniformDist(0, d)
				case JitterEqual:
					want = uniformDist(d/2, d)
				case JitterAdditive:
					want = uniformDist(d, d+q.JitterMax)
				}
				r := rand.New(rand.NewPCG(uint64(n), 99))
				want.check(t, func() time.Duration { return q.Delay(n, 0, r) })
			})
		}
	}
}

func TestNilSourceUsesGlobalRand(t *testing.T) {
	p := Policy{MaxRetries: 1, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute, Jitter: JitterFull}
	uniformDist(0, time.Second).check(t, func() time.Duration { return p.Delay(0, 0, nil) })
}

func TestZeroSpreadNeedsNoRandomness(t *testing.T) {
	// A Source that fails the test if used.
	p := Policy{MaxRetries: 3, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute}
	for _, j := range []Jitter{JitterNone, JitterProportional, JitterAdditive} {
		p.Jitter = j // JitterFactor and JitterMax are 0
		if d := p.Delay(2, 0, panicSource{}); d != 4*time.Second {
			t.Fatalf("%v with zero spread: Delay = %v, want 4s", j, d)
		}
	}
}

type panicSource struct{}

func (panicSource) Float64() float64 { panic("randomness used") }

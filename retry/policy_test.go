package retry

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// noJitter returns p with jitter turned off.
func noJitter(p Policy) Policy {
	p.Jitter = JitterNone
	p.RetryAfterJitter = NoRetryAfterJitter
	return p
}

// delays returns the delays p gives for each retry, without jitter.
func delays(p Policy) []time.Duration {
	var out []time.Duration
	for n := range p.MaxRetries {
		out = append(out, p.Delay(n, 0, nil))
	}
	return out
}

func secs(ss ...int) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s) * time.Second
	}
	return out
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDefaultPolicyIsClassicProfile(t *testing.T) {
	p := DefaultPolicy()
	if err := p.Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
	want := Policy{
		MaxRetries: 3, Initial: time.Second, Multiplier: 2, MaxDelay: 30 * time.Second,
		Jitter: JitterProportional, JitterFactor: 0.1, JitterMax: 500 * time.Millisecond,
		MaxRetryAfter: time.Hour,
	}
	if p != want {
		t.Fatalf("DefaultPolicy() = %+v, want %+v", p, want)
	}
}

func TestExactSchedules(t *testing.T) {
	tests := []struct {
		name string
		p    Policy
		want []time.Duration
	}{
		// the classic RabbitMQ retry profile: 3 retries, 1s, x2, 30s cap: 1s, 2s, 4s, then dead.
		{"classic", noJitter(DefaultPolicy()), secs(1, 2, 4)},
		// a publisher's retry: 1s, 2s, 4s, 8s, 16s, then raise.
		{"publish", Policy{MaxRetries: 5, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute}, secs(1, 2, 4, 8, 16)},
		// a download retried up to 3 times, 1s, 2s, 4s.
		{"download", Policy{MaxRetries: 3, Initial: time.Second, Multiplier: 2, MaxDelay: time.Minute}, secs(1, 2, 4)},
		// an ingestion pipeline's: base 1s, cap 60s, 5 retries.
		{"ingestion", Policy{MaxRetries: 5, Initial: time.Second, Multiplier: 2, MaxDelay: 60 * time.Second}, secs(1, 2, 4, 8, 16)},
		// a download manager's: 3 retries, 1s, x2, 32s max.
		{"download-manager", Policy{MaxRetries: 3, Initial: time.Second, Multiplier: 2, MaxDelay: 32 * time.Second}, secs(1, 2, 4)},
		{"capped", Policy{MaxRetries: 8, Initial: time.Second, Multiplier: 2, MaxDelay: 30 * time.Second}, secs(1, 2, 4, 8, 16, 30, 30, 30)},
		{"constant", Policy{MaxRetries: 3, Initial: 5 * time.Second, Multiplier: 1, MaxDelay: 5 * time.Second}, secs(5, 5, 5)},
		{"triple", Policy{MaxRetries: 5, Initial: time.Second, Multiplier: 3, MaxDelay: time.Minute}, secs(1, 3, 9, 27, 60)},
		{"one-and-a-half", Policy{MaxRetries: 4, Initial: 4 * time.Second, Multiplier: 1.5, MaxDelay: time.Minute},
			[]time.Duration{4 * time.Second, 6 * time.Second, 9 * time.Second, 13500 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := delays(tt.p); !equalDurations(got, tt.want) {
				t.Fatalf("delays = %v, want %v", got, tt.want)
			}
			// Decide agrees, and gives up on the attempt after the last retry.
			for i, want := range tt.want {
				d := tt.p.Decide(Input{Class: transient, Attempt: i + 1}, nil)
				if !d.Retry || d.Delay != want || d.Reason != ReasonBackoff {
					t.Fatalf("Decide(attempt %d) = %+v, want retry after %v", i+1, d, want)
				}
			}
			last := len(tt.want) + 1
			if d := tt.p.Decide(Input{Class: transient, Attempt: last}, nil); d.Retry || d.Reason != ReasonExhausted {
				t.Fatalf("Decide(attempt %d) = %+v, want give up (%s)", last, d, ReasonExhausted)
			}
		})
	}
}

// refBase computes min(initial*m^n, limit) with big integers.
func refBase(initial int64, m int64, n int, limit int64) int64 {
	x := new(big.Int).Exp(big.NewInt(m), big.NewInt(int64(n)), nil)
	x.Mul(x, big.NewInt(initial))
	if x.Cmp(big.NewInt(limit)) > 0 {
		return limit
	}
	return x.Int64()
}

func TestBaseExactForIntegralMultipliers(t *testing.T) {
	limits := []time.Duration{30 * time.Second, 1000 * time.Hour, maxDuration, maxDuration - 1, 1<<53 + 1}
	for _, m := range []int64{1, 2, 3, 7, 10, 1000, 1 << 40} {
		for _, initial := range []time.Duration{1, 7, time.Millisecond, 3 * time.Second, 1<<53 + 1} {
			for _, limit := range limits {
				if limit < initial {
					continue
				}
				p := Policy{Initial: initial, Multiplier: float64(m), MaxDelay: limit}
				for n := range 70 {
					want := time.Duration(refBase(int64(initial), m, n, int64(limit)))
					if got := p.base(n); got != want {
						t.Fatalf("m=%d initial=%d limit=%d n=%d: base = %d, want %d", m, initial, limit, n, got, want)
					}
				}
			}
		}
	}
}

func TestBaseNonIntegralMultiplier(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Multiplier: 1.1, MaxDelay: time.Hour}
	for n := range 200 {
		got := p.base(n)
		want := math.Min(float64(100*time.Millisecond)*math.Pow(1.1, float64(n)), float64(time.Hour))
		if math.Abs(float64(got)-want) > 1 {
			t.Fatalf("n=%d: base = %v, want %v", n, got, time.Duration(want))
		}
		if n > 0 && got < p.base(n-1) {
			t.Fatalf("n=%d: base decreased: %v after %v", n, got, p.base(n-1))
		}
	}
}

func TestDelayNeverOverflows(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	multipliers := []float64{1, 1.0000001, 1.5, 2, 3, 10, 1 << 52, 1 << 60, 1e300, math.MaxFloat64, math.Inf(1), math.NaN(), 0, -2}
	limits := []time.Duration{30 * time.Second, maxDuration, 0}
	ns := []int{0, 1, 62, 63, 64, 1000, math.MaxInt32, math.MaxInt, -1, math.MinInt}
	for _, j := range allJitters {
		for _, m := range multipliers {
			for _, limit := range limits {
				p := Policy{Initial: time.Second, Multiplier: m, MaxDelay: limit, Jitter: j, JitterFactor: 1, JitterMax: maxDuration}
				for _, n := range ns {
					for _, prev := range []time.Duration{0, time.Second, maxDuration} {
						if d := p.Delay(n, prev, r); d < 0 {
							t.Fatalf("%v m=%v limit=%v n=%d prev=%v: negative delay %v", j, m, limit, n, prev, d)
						}
					}
				}
			}
		}
	}
	// Saturation, not wrap-around, for an uncapped policy.
	p := Policy{Initial: time.Second, Multiplier: 2}
	if d := p.Delay(math.MaxInt, 0, nil); d != maxDuration {
		t.Fatalf("uncapped Delay(MaxInt) = %v, want %v", d, maxDuration)
	}
	p.Jitter, p.JitterMax = JitterAdditive, time.Hour
	if d := p.Delay(100, 0, r); d != maxDuration {
		t.Fatalf("uncapped additive Delay(100) = %v, want %v", d, maxDuration)
	}
}

var allJitters = []Jitter{JitterNone, JitterProportional, JitterFull, JitterEqual, JitterDecorrelated, JitterAdditive}

func TestCapHoldsForLongSchedules(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const maxDelay = 30 * time.Second
	for _, j := range allJitters {
		p := Policy{MaxRetries: 20, Initial: time.Second, Multiplier: 2, MaxDelay: maxDelay,
			Jitter: j, JitterFactor: 0.2, JitterMax: 500 * time.Millisecond}
		limit := maxDelay
		switch j {
		case JitterProportional:
			limit = maxDelay + maxDelay/5
		case JitterAdditive:
			limit = maxDelay + 500*time.Millisecond
		}
		for range 200 {
			var prev time.Duration
			for n := range p.MaxRetries {
				d := p.Delay(n, prev, r)
				base := p.base(n)
				if d < 0 || d > limit {
					t.Fatalf("%v: retry %d delay %v outside [0, %v]", j, n+1, d, limit)
				}
				if j == JitterProportional && (d-base > base/5 || base-d > base/5) {
					t.Fatalf("%v: retry %d delay %v strays from base %v by more than 20%%", j, n+1, d, base)
				}
				if j == JitterAdditive && (d < base || d-base > 500*time.Millisecond) {
					t.Fatalf("%v: retry %d delay %v not within base %v + [0, 500ms]", j, n+1, d, base)
				}
				prev = d
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		field string
		value string
		edit  func(*Policy)
	}{
		{"MaxRetries", "-1", func(p *Policy) { p.MaxRetries = -1 }},
		{"Initial", "-1s", func(p *Policy) { p.Initial = -time.Second }},
		{"Multiplier", "0.5", func(p *Policy) { p.Multiplier = 0.5 }},
		{"Multiplier", "0", func(p *Policy) { p.Multiplier = 0 }},
		{"Multiplier", "NaN", func(p *Policy) { p.Multiplier = math.NaN() }},
		{"Multiplier", "+Inf", func(p *Policy) { p.Multiplier = math.Inf(1) }},
		{"MaxDelay", "-1s", func(p *Policy) { p.MaxDelay = -time.Second }},
		{"MaxDelay", "500ms", func(p *Policy) { p.MaxDelay = 500 * time.Millisecond }},
		{"MaxDelay", "0s", func(p *Policy) { p.MaxDelay = 0 }},
		{"Jitter", "42", func(p *Policy) { p.Jitter = 42 }},
		{"JitterFactor", "-0.1", func(p *Policy) { p.JitterFactor = -0.1 }},
		{"JitterFactor", "1.5", func(p *Policy) { p.JitterFactor = 1.5 }},
		{"JitterFactor", "NaN", func(p *Policy) { p.JitterFactor = math.NaN() }},
		{"JitterMax", "-1ms", func(p *Policy) { p.JitterMax = -time.Millisecond }},
		{"MaxRetryAfter", "-1h0m0s", func(p *Policy) { p.MaxRetryAfter = -time.Hour }},
	}
	for _, tt := range tests {
		t.Run(tt.field+"="+tt.value, func(t *testing.T) {
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want an error about %s", tt.field)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.field+" ") || !strings.Contains(msg, tt.value) {
				t.Fatalf("Validate() = %q, want it to name %s and %s", msg, tt.field, tt.value)
			}
			if strings.Count(msg, "\n") != 0 {
				t.Fatalf("Validate() = %q, want exactly one problem", msg)
			}
		})
	}

	t.Run("several", func(t *testing.T) {
		p := Policy{MaxRetries: -1, Multiplier: 0.5, JitterFactor: 2}
		err := p.Validate()
		if err == nil {
			t.Fatal("Validate() = nil")
		}
		for _, field := range []string{"MaxRetries", "Multiplier", "JitterFactor"} {
			if !strings.Contains(err.Error(), field) {
				t.Errorf("Validate() = %q, missing %s", err, field)
			}
		}
	})

	t.Run("valid edges", func(t *testing.T) {
		for _, p := range []Policy{
			{Multiplier: 1},                   // immediate retries, none
			{MaxRetries: 1000, Multiplier: 1}, // zero delays
			{MaxRetries: 5, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, JitterFactor: 1},
			{MaxRetries: 3, Initial: time.Second, Multiplier: 1e6, MaxDelay: maxDuration, Jitter: JitterAdditive},
		} {
			if err := p.Validate(); err != nil {
				t.Errorf("Validate(%+v) = %v, want nil", p, err)
			}
		}
	})
}

func TestJitterNames(t *testing.T) {
	for _, j := range allJitters {
		got, err := ParseJitter(j.String())
		if err != nil || got != j {
			t.Fatalf("ParseJitter(%q) = %v, %v", j.String(), got, err)
		}
		upper, err := ParseJitter(" " + strings.ToUpper(j.String()) + " ")
		if err != nil || upper != j {
			t.Fatalf("ParseJitter(upper %q) = %v, %v", j.String(), upper, err)
		}
	}
	if _, err := ParseJitter("exponential"); err == nil || !strings.Contains(err.Error(), "exponential") {
		t.Fatalf("ParseJitter(exponential) error = %v", err)
	}
	if s := Jitter(9).String(); s != "jitter(9)" {
		t.Fatalf("Jitter(9).String() = %q", s)
	}

	type config struct{ Jitter Jitter }
	b, err := json.Marshal(config{JitterDecorrelated})
	if err != nil || string(b) != `{"Jitter":"decorrelated"}` {
		t.Fatalf("json.Marshal = %s, %v", b, err)
	}
	var c config
	if err := json.Unmarshal([]byte(`{"Jitter":"equal"}`), &c); err != nil || c.Jitter != JitterEqual {
		t.Fatalf("json.Unmarshal = %v, %v", c.Jitter, err)
	}
	if err := json.Unmarshal([]byte(`{"Jitter":"bogus"}`), &c); err == nil {
		t.Fatal("json.Unmarshal(bogus) succeeded")
	}
	if _, err := json.Marshal(config{Jitter(9)}); err == nil {
		t.Fatal("json.Marshal(Jitter(9)) succeeded")
	}
}

// badSource returns values outside [0, 1).
type badSource []float64

func (s *badSource) Float64() float64 {
	v := (*s)[0]
	*s = (*s)[1:]
	return v
}

func TestMisbehavingSourceIsClamped(t *testing.T) {
	p := Policy{MaxRetries: 1, Initial: time.Second, Multiplier: 2, MaxDelay: 30 * time.Second, Jitter: JitterFull}
	src := badSource{-1, 1, 2, math.NaN(), math.Inf(1)}
	for range len(src) {
		if d := p.Delay(0, 0, &src); d < 0 || d > time.Second {
			t.Fatalf("Delay with bad source = %v, want within [0, 1s]", d)
		}
	}
}

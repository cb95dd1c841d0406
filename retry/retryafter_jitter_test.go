package retry

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
)

// seq is a jitter source that draws the given values in turn.
type seq struct {
	vals []float64
	i    int
}

func (s *seq) Float64() float64 {
	v := s.vals[s.i%len(s.vals)]
	s.i++
	return v
}

func TestRetryAfterSpread(t *testing.T) {
	def := DefaultPolicy()
	for _, tc := range []struct {
		p    Policy
		ra   time.Duration
		want time.Duration
	}{
		{def, 2 * time.Second, 200 * time.Millisecond},       // 10% of 2s
		{def, 10 * time.Second, time.Second},                 // 10% = 1s = the cap
		{def, time.Minute, time.Second},                      // capped at 1s
		{def, 100 * time.Millisecond, 10 * time.Millisecond}, // 10%
		{def, 0, 0},
		{def, -time.Second, 0},
		{Policy{}, 2 * time.Second, 200 * time.Millisecond}, // zero fields: the defaults
		{Policy{RetryAfterJitter: NoRetryAfterJitter}, time.Minute, 0},
		{Policy{RetryAfterJitter: -time.Hour}, time.Minute, 0},
		{Policy{RetryAfterJitter: 5 * time.Second, RetryAfterJitterFactor: 0.5}, 4 * time.Second, 2 * time.Second},
		{Policy{RetryAfterJitter: 5 * time.Second, RetryAfterJitterFactor: 1}, time.Minute, 5 * time.Second},
		{Policy{RetryAfterJitterFactor: math.NaN()}, time.Minute, 0},
	} {
		if got := tc.p.RetryAfterSpread(tc.ra); got != tc.want {
			t.Errorf("%+v.RetryAfterSpread(%v) = %v, want %v", tc.p, tc.ra, got, tc.want)
		}
	}
}

// TestRetryAfterJitterIsPositive is the pure test of the Retry-After
// jitter: with injected randomness, the delay is the Retry-After plus the
// drawn share of the window, never less than the Retry-After and never at
// the window's end.
func TestRetryAfterJitterIsPositive(t *testing.T) {
	p := DefaultPolicy()
	p.Jitter = JitterNone
	ra := 2 * time.Second
	draws := []float64{0, 0.25, 0.5, 0.75, 1 - 0x1p-53, -3, 7, math.NaN()}
	want := []time.Duration{2 * time.Second, 2050 * time.Millisecond, 2100 * time.Millisecond, 2150 * time.Millisecond,
		2200*time.Millisecond - 1, 2 * time.Second, 2200*time.Millisecond - 1, 2 * time.Second}
	src := &seq{vals: draws}
	for i := range draws {
		d := p.Decide(Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: ra}, src)
		if d.Reason != ReasonRetryAfter || !d.Retry {
			t.Fatalf("draw %v: Decide = %+v, want a retry_after retry", draws[i], d)
		}
		// Allow 1ns of float rounding.
		if diff := d.Delay - want[i]; diff < -1 || diff > 1 {
			t.Errorf("draw %v: delay %v, want %v", draws[i], d.Delay, want[i])
		}
		if d.Delay < ra || d.Delay >= ra+p.RetryAfterSpread(ra) {
			t.Errorf("draw %v: delay %v outside [%v, %v)", draws[i], d.Delay, ra, ra+p.RetryAfterSpread(ra))
		}
	}

	// The clamp applies first; the jitter comes on top of it.
	p.MaxRetryAfter = 5 * time.Second
	d := p.Decide(Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: time.Hour}, &seq{vals: []float64{0.5}})
	if d.Delay != 5*time.Second+250*time.Millisecond {
		t.Errorf("clamped: delay %v, want 5.25s", d.Delay)
	}

	// Off: exactly the Retry-After.
	p.RetryAfterJitter = NoRetryAfterJitter
	if d := p.Decide(Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: ra}, &seq{vals: []float64{0.9}}); d.Delay != ra {
		t.Errorf("off: delay %v, want %v", d.Delay, ra)
	}
}

// TestRetryAfterJitterSpreads draws 1,000 delays for one Retry-After from
// the global source: all within [ra, ra+window), and spread over it.
func TestRetryAfterJitterSpreads(t *testing.T) {
	p := DefaultPolicy()
	ra := 2 * time.Second
	w := p.RetryAfterSpread(ra)
	var got []time.Duration
	for range 1000 {
		d := p.Decide(Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: ra}, nil)
		if d.Delay < ra || d.Delay >= ra+w {
			t.Fatalf("delay %v outside [%v, %v)", d.Delay, ra, ra+w)
		}
		got = append(got, d.Delay)
	}
	slices.Sort(got)
	// Each tenth of the window holds some of the 1,000 (about 100 each;
	// fewer than 50 is a 1e-9 event for a uniform draw).
	for k := range 10 {
		lo, hi := ra+w*time.Duration(k)/10, ra+w*time.Duration(k+1)/10
		n := 0
		for _, d := range got {
			if d >= lo && d < hi {
				n++
			}
		}
		if n < 50 {
			t.Errorf("only %d of 1000 delays in [%v, %v): not spread", n, lo, hi)
		}
	}
}

func TestRetryAfterJitterValidateAndJSON(t *testing.T) {
	for _, f := range []float64{-0.1, 1.5, math.NaN()} {
		p := DefaultPolicy()
		p.RetryAfterJitterFactor = f
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "RetryAfterJitterFactor") {
			t.Errorf("factor %v: Validate = %v, want an error naming RetryAfterJitterFactor", f, err)
		}
	}
	for _, p := range []Policy{
		DefaultPolicy(),
		{MaxRetries: 1, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, RetryAfterJitter: NoRetryAfterJitter},
		{MaxRetries: 1, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second, RetryAfterJitter: 3 * time.Second, RetryAfterJitterFactor: 0.3},
		{MaxRetries: 1, Initial: time.Second, Multiplier: 1, MaxDelay: time.Second}, // zero: the defaults
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back Policy
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if back != p {
			t.Errorf("round trip of %s = %+v, want %+v", b, back, p)
		}
		if p.RetryAfterJitter == 0 && strings.Contains(string(b), "retry_after_jitter") {
			t.Errorf("%s: zero Retry-After jitter fields must be left out", b)
		}
	}
	var p Policy
	if err := json.Unmarshal([]byte(`{"retry_after_jitter":"off"}`), &p); err != nil || p.RetryAfterJitter >= 0 {
		t.Fatalf(`"off" = %v, %v; want a negative RetryAfterJitter`, p.RetryAfterJitter, err)
	}
	if err := json.Unmarshal([]byte(`{"retry_after_jitter":"soon"}`), &p); err == nil || !strings.Contains(err.Error(), "retry_after_jitter") {
		t.Fatalf("bad duration: %v, want an error naming retry_after_jitter", err)
	}
}

// FuzzPolicyJSON: a policy that decodes survives a round trip through its
// JSON, and its Retry-After jitter never shortens nor more than doubles a
// Retry-After.
func FuzzPolicyJSON(f *testing.F) {
	for _, s := range []string{
		`{"max_retries":3,"initial":"1s","multiplier":2,"max_delay":"30s","jitter":"proportional","jitter_factor":0.1,"jitter_max":"500ms","max_retry_after":"1h0m0s"}`,
		`{"retry_after_jitter":"off"}`,
		`{"retry_after_jitter":"2s","retry_after_jitter_factor":0.5}`,
		`{"retry_after_jitter":"-3s","retry_after_jitter_factor":-1}`,
		`{"RetryAfterJitter":5,"MaxRetries":2}`,
		`{"retry_after_jitter":"later"}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Policy
		if json.Unmarshal(b, &p) != nil {
			return
		}
		out, err := json.Marshal(p)
		if err != nil {
			if p.Validate() == nil {
				t.Fatalf("%s: a valid policy %+v does not encode: %v", b, p, err)
			}
			return
		}
		var back Policy
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s: its encoding %s does not decode: %v", b, out, err)
		}
		if back != p && !(math.IsNaN(p.Multiplier) || math.IsNaN(p.JitterFactor) || math.IsNaN(p.RetryAfterJitterFactor)) {
			t.Fatalf("%s: %+v became %+v through %s", b, p, back, out)
		}
		if p.Validate() != nil {
			return
		}
		for _, ra := range []time.Duration{time.Nanosecond, time.Second, time.Hour} {
			w := p.RetryAfterSpread(ra)
			if w < 0 || w > ra {
				t.Fatalf("%+v: spread of %v is %v", p, ra, w)
			}
			d := p.Decide(Input{Class: failure.RateLimited, Attempt: 1, RetryAfter: ra}, nil)
			if d.Retry && d.Reason == ReasonRetryAfter && (d.Delay < p.clampRetryAfter(ra) || d.Delay > 2*p.clampRetryAfter(ra)) {
				t.Fatalf("%+v: Retry-After %v gave %+v", p, ra, d)
			}
		}
	})
}

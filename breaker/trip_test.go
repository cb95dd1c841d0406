package breaker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	fc "github.com/redrivehq/redrive/failure"
)

// TestDefaultNeverTripsOnOnePercent is the volume proof: a dependency that
// fails 1% of 10,000 calls never trips the default breaker, at several call
// rates and with failures spread evenly or at random.
func TestDefaultNeverTripsOnOnePercent(t *testing.T) {
	for _, rate := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		for _, spread := range []string{"every_100th", "random"} {
			t.Run(fmt.Sprintf("%v/%s", rate, spread), func(t *testing.T) {
				b, clk := newTest(t, Config{})
				rng := rand.New(rand.NewPCG(1, uint64(rate)))
				failed := 0
				for i := range 10_000 {
					fail := i%100 == 99
					if spread == "random" {
						fail = rng.IntN(100) == 0
					}
					var err error
					if fail {
						err = errBoom
						failed++
					}
					if rerr := call(b, err); rerr != nil {
						t.Fatalf("call %d rejected after %d failures: %v (status %+v)", i+1, failed, rerr, b.Status())
					}
					clk.Advance(rate)
				}
				if st := b.Status(); st.Trips != 0 || st.State != Closed {
					t.Fatalf("status = %+v, want never tripped", st)
				}
				if failed < 50 {
					t.Fatalf("only %d failures in 10,000 calls: the test is not testing 1%%", failed)
				}
			})
		}
	}
}

// TestOutageAfterBusySpellTripsWithinN: a dependency that goes down right
// after thousands of successes (all still in the window, so the window's
// ratio stays far below 50% for a long time) trips on Failures failures in
// a row, and an outage broken by one success does not.
func TestOutageAfterBusySpellTripsWithinN(t *testing.T) {
	b, clk := newTest(t, Config{})
	for range 5000 {
		call(b, nil)
		clk.Advance(time.Millisecond)
	}
	for i := range 4 {
		if err := call(b, errBoom); err != nil {
			t.Fatalf("failure %d rejected: %v", i+1, err)
		}
		clk.Advance(time.Millisecond)
	}
	call(b, nil) // one success breaks the run
	for i := range 4 {
		if err := call(b, errBoom); err != nil {
			t.Fatalf("failure %d after the success rejected: %v", i+1, err)
		}
		clk.Advance(time.Millisecond)
	}
	mustState(t, b, Closed)
	if err := call(b, errBoom); err != nil {
		t.Fatalf("5th failure in a row rejected before it ran: %v", err)
	}
	mustState(t, b, Open)
	if st := b.Status(); st.Failures != 9 || st.Requests < 5009 {
		t.Fatalf("status = %+v, want 9 failures of at least 5009 calls in the window", st)
	}
	// A run whose failures are more than a window apart starts again.
	b, clk = newTest(t, Config{})
	for i := range 8 {
		if err := call(b, errBoom); err != nil {
			t.Fatalf("failure %d rejected: %v", i+1, err)
		}
		clk.Advance(31 * time.Second)
	}
	mustState(t, b, Closed)
	// Consecutive: NoConsecutive leaves the window's ratio alone to decide.
	b, clk = newTest(t, Config{Consecutive: NoConsecutive})
	for range 5000 {
		call(b, nil)
		clk.Advance(time.Millisecond)
	}
	for i := range 50 {
		if err := call(b, errBoom); err != nil {
			t.Fatalf("failure %d rejected without the consecutive rule: %v", i+1, err)
		}
	}
	mustState(t, b, Closed)
	// Consecutive: 3 trips on 3 in a row.
	b, _ = newTest(t, Config{Consecutive: 3})
	for range 100 {
		call(b, nil)
	}
	for range 3 {
		call(b, errBoom)
	}
	mustState(t, b, Open)
}

// TestDefaultTripsOnOutageWithinN: a dependency failing 100% trips the
// default breaker within the first 5 calls, and lets no 6th through.
func TestDefaultTripsOnOutageWithinN(t *testing.T) {
	for _, warm := range []int{0, 1, 3, 1000} {
		t.Run(fmt.Sprintf("after_%d_successes", warm), func(t *testing.T) {
			b, clk := newTest(t, Config{})
			for range warm {
				call(b, nil)
				clk.Advance(time.Millisecond)
			}
			if warm >= 5 {
				// A long healthy history slides out of the window
				// before the outage: successes older than the window
				// do not delay the trip.
				clk.Advance(31 * time.Second)
			}
			calls := 0
			for range 100 {
				if err := call(b, errBoom); err != nil {
					break
				}
				calls++
				clk.Advance(time.Millisecond)
			}
			if calls > 5 {
				t.Fatalf("%d calls went through before the breaker opened, want at most 5", calls)
			}
			mustState(t, b, Open)
		})
	}
}

func TestRateLimitedIsNeutralByDefault(t *testing.T) {
	limited := []error{
		fc.WrapRateLimited(errBoom, 2*time.Second),
		&fc.StatusError{Code: 429, Status: "429 Too Many Requests", RetryAfter: time.Second},
		&fc.StatusError{Code: 503, RetryAfter: time.Second},
		fmt.Errorf("call: %w", &fc.StatusError{Code: 429}),
		MarkRateLimited(errors.New("slow down, said the server")),
	}
	for i, rl := range limited {
		b, _ := newTest(t, Config{Failures: 1})
		for range 50 {
			if err := call(b, rl); err != nil {
				t.Fatalf("error %d (%v): rejected: %v", i, rl, err)
			}
		}
		mustState(t, b, Closed)
		if st := b.Status(); st.Failures != 0 || st.Requests != 0 {
			t.Fatalf("error %d (%v): status = %+v, want neither failures nor requests counted", i, rl, st)
		}
		// Counted when asked to.
		b, _ = newTest(t, Config{Failures: 1, CountRateLimited: true})
		call(b, rl)
		mustState(t, b, Open)
	}

	// Not rate-limited: a plain 503 and a 500 count.
	for _, e := range []error{&fc.StatusError{Code: 503}, &fc.StatusError{Code: 500}} {
		b, _ := newTest(t, Config{Failures: 1})
		call(b, e)
		mustState(t, b, Open)
	}

	// A custom rule replaces the default.
	errSlow := errors.New("slow down")
	b, _ := newTest(t, Config{Failures: 2, IsRateLimited: func(err error) bool { return errors.Is(err, errSlow) }})
	for range 10 {
		call(b, errSlow)
	}
	mustState(t, b, Closed)
	call(b, &fc.StatusError{Code: 429}) // no longer rate-limited for this breaker
	call(b, &fc.StatusError{Code: 429})
	mustState(t, b, Open)

	// MarkRateLimited keeps the error's message and cause.
	if m := MarkRateLimited(errBoom); m.Error() != errBoom.Error() || !errors.Is(m, errBoom) {
		t.Fatalf("MarkRateLimited hides its cause: %v", m)
	}
	if MarkRateLimited(nil) != nil {
		t.Fatal("MarkRateLimited(nil) != nil")
	}
	if DefaultIsRateLimited(nil) {
		t.Fatal("DefaultIsRateLimited(nil) = true")
	}
}

func TestRateLimitedProbeFreesItsSlot(t *testing.T) {
	b, clk := newTest(t, Config{})
	trip(t, b)
	clk.Advance(time.Minute)
	p, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.Record(p, &fc.StatusError{Code: 429, RetryAfter: time.Second})
	mustState(t, b, HalfOpen)
	p, err = b.Allow()
	if err != nil {
		t.Fatalf("slot not freed by a rate-limited probe: %v", err)
	}
	b.Record(p, nil)
	mustState(t, b, Closed)
}

func TestRatioWindowIgnoresRateLimited(t *testing.T) {
	// 5 failures and 10 rate-limited answers: the ratio is 5/5, not 5/15.
	b, _ := newTest(t, Config{})
	for range 10 {
		call(b, &fc.StatusError{Code: 429})
	}
	for range 5 {
		call(b, errBoom)
	}
	mustState(t, b, Open)
}

// windowCalls counts the calls of times (relative to the start) that a
// window of 20 buckets ending at now covers: at least the last 19 buckets'
// worth, at most the last 20.
func windowCalls(times []time.Duration, now, window time.Duration) (lo, hi int) {
	width := window / 20
	cur := now / width
	for _, at := range times {
		e := at / width
		if e > cur-19 {
			lo++
		}
		if e > cur-20 {
			hi++
		}
	}
	return lo, hi
}

// TestSuccessCountsAreAccurate: the successes a default breaker counts land
// in the buckets they came in, at high and low call rates, across a change
// of rate, and after a burst followed by silence.
func TestSuccessCountsAreAccurate(t *testing.T) {
	type phase struct {
		calls int
		every time.Duration
	}
	for _, tc := range []struct {
		name   string
		phases []phase
	}{
		{"high rate", []phase{{200_000, 10 * time.Microsecond}}},
		{"low rate", []phase{{200, 700 * time.Millisecond}}},
		{"slowing down", []phase{{100_000, 20 * time.Microsecond}, {100, 300 * time.Millisecond}}},
		{"speeding up", []phase{{50, time.Second}, {100_000, 50 * time.Microsecond}}},
		{"burst then silence", []phase{{10_000, 100 * time.Microsecond}, {1, 40 * time.Second}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, clk := newTest(t, Config{})
			var times []time.Duration
			at := time.Duration(0)
			for _, ph := range tc.phases {
				for range ph.calls {
					at += ph.every
					clk.ns.Store(int64(at))
					call(b, nil)
					times = append(times, at)
				}
				lo, hi := windowCalls(times, at, 30*time.Second)
				got := b.Status().Requests
				if got < lo || got > hi {
					t.Fatalf("after %d calls every %v: %d requests counted, want %d to %d", ph.calls, ph.every, got, lo, hi)
				}
			}
		})
	}
}

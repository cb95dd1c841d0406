package breaker

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	fc "github.com/redrivehq/redrive/failure"
)

// model is the naive account of a ratio-mode breaker's window: every
// outcome with its time, recounted from scratch.
type model struct {
	window time.Duration
	calls  []modelCall
}

type modelCall struct {
	at     time.Duration
	failed bool
}

// counts recounts the calls and failures a window of numBuckets buckets
// ending with now's bucket holds.
func (m *model) counts(now time.Duration) (reqs, fails int) {
	width := m.window / numBuckets
	cur := now / width
	for _, c := range m.calls {
		if e := c.at / width; e > cur-numBuckets && e <= cur {
			reqs++
			if c.failed {
				fails++
			}
		}
	}
	return reqs, fails
}

// streak returns the length of the run of failures that ends the history,
// with no success between them and each in the window that ends with the
// bucket of the one after it.
func (m *model) streak() int {
	width := m.window / numBuckets
	n := 0
	for i := len(m.calls) - 1; i >= 0 && m.calls[i].failed; i-- {
		if i+1 < len(m.calls) && m.calls[i+1].at/width-m.calls[i].at/width >= numBuckets {
			break
		}
		n++
	}
	return n
}

// randomGap draws the time before the next call: mostly a busy rate, with
// pauses, quiet spells longer than the window and the odd call at the same
// instant.
func randomGap(r *rand.Rand, window time.Duration) time.Duration {
	switch p := r.IntN(1000); {
	case p < 20:
		return 0
	case p < 700:
		return time.Duration(r.Int64N(int64(2 * time.Millisecond)))
	case p < 940:
		return time.Duration(r.Int64N(int64(window / 10)))
	case p < 990:
		return time.Duration(r.Int64N(int64(window)))
	default:
		return window + time.Duration(r.Int64N(int64(10*window)))
	}
}

// TestWindowCountsMatchRecount is a property test: for random sequences of
// successes, failures and neutral outcomes (rate-limited answers) at random
// rates, with quiet spells longer than the window among them, the counts
// a ratio-mode breaker reports equal a naive recount of the outcomes in its
// window, whenever they are read.
func TestWindowCountsMatchRecount(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 41))
			window := []time.Duration{time.Second, 30 * time.Second, time.Minute}[r.IntN(3)]
			b, clk := newTest(t, Config{Window: window, Failures: 1 << 30, Consecutive: NoConsecutive})
			m := &model{window: window}
			failRate := r.Float64() * 0.3
			at := time.Duration(0)
			for step := range 3000 {
				at += randomGap(r, window)
				clk.ns.Store(int64(at))
				switch p := r.Float64(); {
				case p < failRate:
					call(b, errBoom)
					m.calls = append(m.calls, modelCall{at, true})
				case p < failRate+0.02:
					call(b, &fc.StatusError{Code: 429}) // neutral: not counted
				default:
					call(b, nil)
					m.calls = append(m.calls, modelCall{at, false})
				}
				if r.IntN(100) != 0 && step != 2999 {
					continue
				}
				if r.IntN(2) == 0 { // read later, after some time without calls
					at += randomGap(r, window)
					clk.ns.Store(int64(at))
				}
				reqs, fails := m.counts(at)
				st := b.Status()
				if st.Requests != reqs || st.Failures != fails {
					t.Fatalf("step %d at %v: breaker counts %d calls, %d failures; recount %d, %d",
						step, at, st.Requests, st.Failures, reqs, fails)
				}
			}
		})
	}
}

// TestRatioTripsMatchModel is a property test of the default trip rule: a
// breaker fed random outcomes at random rates opens exactly when the
// recount says it should (at least Failures failures making up at least
// FailureRatio of the window's calls, or Failures failures in a row).
func TestRatioTripsMatchModel(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 4141))
			window := []time.Duration{time.Second, 30 * time.Second}[r.IntN(2)]
			b, clk := newTest(t, Config{Window: window})
			s := b.cfg
			m := &model{window: window}
			failRate := r.Float64() * 0.5
			at := time.Duration(0)
			trips := 0
			for step := range 3000 {
				at += randomGap(r, window)
				clk.ns.Store(int64(at))
				failed := r.Float64() < failRate
				call(b, map[bool]error{true: errBoom, false: nil}[failed])
				m.calls = append(m.calls, modelCall{at, failed})
				want := false
				if failed {
					reqs, fails := m.counts(at)
					want = s.trips(int64(fails), int64(reqs)) ||
						(m.streak() >= s.consecutive && reqs >= s.minRequests)
				}
				if got := b.State() == Open; got != want {
					reqs, fails := m.counts(at)
					st := b.Status()
					t.Fatalf("step %d at %v: open = %v, want %v (recount %d calls, %d failures, run %d; breaker %d, %d)",
						step, at, got, want, reqs, fails, m.streak(), st.Requests, st.Failures)
				}
				if want {
					trips++
					b.Reset()
					m.calls = m.calls[:0]
				}
			}
			t.Logf("%d trips", trips)
		})
	}
}

// TestRatioCountsSuccessesAfterQuietSpell is the case of issue 41: a busy
// spell, a quiet minute, then a healthy morning: 60 successes, then 5
// failures alternating with successes (5 failures in 69 calls, 7%). The
// successes after the quiet spell count, so the default breaker stays
// closed. (Batched successes used to be dated before the quiet spell and
// dropped: the breaker counted 9 calls and 5 failures and opened.)
func TestRatioCountsSuccessesAfterQuietSpell(t *testing.T) {
	b, clk := newTest(t, Config{})
	for range 5000 {
		clk.Advance(time.Millisecond)
		call(b, nil)
	}
	clk.Advance(time.Minute)
	for range 60 {
		clk.Advance(10 * time.Millisecond)
		call(b, nil)
	}
	for i := range 9 {
		clk.Advance(10 * time.Millisecond)
		if i%2 == 0 {
			call(b, errBoom)
		} else {
			call(b, nil)
		}
	}
	st := b.Status()
	if st.State != Closed || st.Requests != 69 || st.Failures != 5 {
		t.Fatalf("status = %+v, want closed with 69 calls and 5 failures", st)
	}
}

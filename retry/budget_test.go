package retry

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a concurrency-safe manual clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestBudgetDefaults(t *testing.T) {
	b := NewBudget(BudgetConfig{Ratio: -1, MinRetries: -3, Window: -time.Second})
	if b.ratio != DefaultBudgetRatio || b.minRetries != DefaultBudgetMinRetries || b.window != DefaultBudgetWindow {
		t.Fatalf("defaults not applied: ratio %v, min %d, window %v", b.ratio, b.minRetries, b.window)
	}
	s := NewBudget(BudgetConfig{}).Snapshot()
	if s != (BudgetStatus{Allowed: 100}) {
		t.Fatalf("fresh Snapshot = %+v", s)
	}
}

func TestBudgetAbsurdRatio(t *testing.T) {
	b := NewBudget(BudgetConfig{Ratio: 1e300, Now: newFakeClock().Now})
	b.Attempt()
	if s := b.Snapshot(); s.Allowed != 1<<62 || s.Over {
		t.Fatalf("Snapshot = %+v", s)
	}
	if d := b.Retry(time.Second); d != time.Second {
		t.Fatalf("delay %v, want 1s", d)
	}
}

func TestBudgetWithinBudgetKeepsDelays(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 0.2, MinRetries: 10, Window: 10 * time.Second, Now: clock.Now})
	for range 100 {
		b.Attempt()
	}
	for i := range 20 { // 20% of 100
		want := time.Duration(i+1) * time.Second
		if got := b.Retry(want); got != want {
			t.Fatalf("retry %d within budget: delay %v, want %v", i+1, got, want)
		}
		clock.Advance(10 * time.Millisecond)
	}
	s := b.Snapshot()
	want := BudgetStatus{Attempts: 100, Retries: 20, Allowed: 20, Over: true}
	if s != want {
		t.Fatalf("Snapshot = %+v, want %+v", s, want)
	}
}

func TestBudgetFloor(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Now: clock.Now}) // 20%, floor 100, 10s
	// A quiet queue: 3 attempts would allow 0 retries by ratio; the floor allows 100.
	for range 3 {
		b.Attempt()
	}
	for i := range 100 {
		if got := b.Retry(2 * time.Second); got != 2*time.Second {
			t.Fatalf("retry %d under the floor: delay %v, want 2s", i+1, got)
		}
	}
	// The 101st waits for the first slot, 10s/100 = 100ms away, then its own delay.
	if got := b.Retry(2 * time.Second); got != 2100*time.Millisecond {
		t.Fatalf("first retry over the floor: delay %v, want 2.1s", got)
	}
}

func TestBudgetBurstIsSpread(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 0.2, MinRetries: 10, Window: 10 * time.Second, Now: clock.Now})
	for range 100 {
		b.Attempt()
	}
	// allowed = 20; interval = 10s / 20 = 500ms.
	const n = 50
	const delay = 3 * time.Second
	got := make([]time.Duration, 0, n)
	for range n {
		got = append(got, b.Retry(delay))
	}
	if len(got) != n {
		t.Fatalf("%d delays for %d retries", len(got), n)
	}
	for i, d := range got[:20] {
		if d != delay {
			t.Fatalf("retry %d within budget: delay %v, want %v", i+1, d, delay)
		}
	}
	for k, d := range got[20:] {
		want := delay + time.Duration(k+1)*500*time.Millisecond
		if d != want {
			t.Fatalf("excess retry %d: delay %v, want %v", k+1, d, want)
		}
		if prev := got[20+k-1]; d <= prev {
			t.Fatalf("excess retry %d: delay %v not after %v", k+1, d, prev)
		}
	}
	s := b.Snapshot()
	want := BudgetStatus{Attempts: 100, Retries: 50, Deferred: 30, Allowed: 20, Over: true, Backlog: 15 * time.Second}
	if s != want {
		t.Fatalf("Snapshot = %+v, want %+v", s, want)
	}

	// Mixed delays: each excess retry keeps its own delay on top of its slot,
	// so a long Retry-After does not hold back the retries behind it.
	if d := b.Retry(time.Hour); d != time.Hour+15500*time.Millisecond {
		t.Fatalf("long excess retry: delay %v", d)
	}
	if d := b.Retry(time.Second); d != time.Second+16*time.Second {
		t.Fatalf("short excess retry after a long one: delay %v", d)
	}
}

func TestBudgetWindowSlides(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 0.5, MinRetries: 2, Window: 10 * time.Second, Now: clock.Now})
	for range 10 {
		b.Attempt()
	}
	for range 5 { // allowed = 5
		if d := b.Retry(time.Second); d != time.Second {
			t.Fatalf("within budget: %v", d)
		}
	}
	if d := b.Retry(time.Second); d != 3*time.Second { // slot 10s/5 = 2s away
		t.Fatalf("over budget: %v, want 3s", d)
	}

	// Half a window later the counts are still there.
	clock.Advance(5 * time.Second)
	if s := b.Snapshot(); s.Attempts != 10 || s.Retries != 6 || !s.Over {
		t.Fatalf("after 5s: %+v", s)
	}
	// New attempts in the second half raise the allowance.
	for range 10 {
		b.Attempt()
	}
	if s := b.Snapshot(); s.Attempts != 20 || s.Allowed != 10 || s.Over {
		t.Fatalf("after more attempts: %+v", s)
	}

	// A full window after the first burst, only the second half remains.
	clock.Advance(5 * time.Second)
	s := b.Snapshot()
	if s.Attempts != 10 || s.Retries != 0 || s.Deferred != 0 || s.Over {
		t.Fatalf("after the window slid: %+v", s)
	}
	// The budget has recovered: retries pass unchanged again.
	if d := b.Retry(time.Second); d != time.Second {
		t.Fatalf("after recovery: delay %v, want 1s", d)
	}

	// Long idle: everything expires, the floor still applies.
	clock.Advance(time.Hour)
	if s := b.Snapshot(); s != (BudgetStatus{Allowed: 2}) {
		t.Fatalf("after an hour: %+v", s)
	}
}

func TestBudgetClockGoingBack(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{MinRetries: 1, Window: 10 * time.Second, Now: clock.Now})
	clock.Advance(30 * time.Second)
	b.Attempt()
	clock.Advance(-20 * time.Second) // wall clock stepped back
	b.Attempt()
	if d := b.Retry(time.Second); d != time.Second {
		t.Fatalf("delay %v, want 1s", d)
	}
	if s := b.Snapshot(); s.Attempts != 2 || s.Retries != 1 {
		t.Fatalf("Snapshot = %+v: counts lost when the clock went back", s)
	}
}

func TestBudgetNil(t *testing.T) {
	var b *Budget
	b.Attempt()
	if d := b.Retry(time.Second); d != time.Second {
		t.Fatalf("nil budget changed the delay to %v", d)
	}
	if d := b.Retry(-time.Second); d != 0 {
		t.Fatalf("nil budget with negative delay: %v", d)
	}
	if s := b.Snapshot(); s != (BudgetStatus{}) {
		t.Fatalf("nil Snapshot = %+v", s)
	}
}

func TestBudgetConcurrent(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 0.2, MinRetries: 10, Window: 10 * time.Second, Now: clock.Now})
	const workers, each = 8, 1000
	var wg sync.WaitGroup
	var pushed atomic.Int64
	for range workers {
		wg.Go(func() {
			for range each {
				b.Attempt()
				d := b.Retry(time.Second)
				if d < time.Second {
					t.Errorf("delay %v shortened", d)
					return
				}
				if d > time.Second {
					pushed.Add(1)
				}
				clock.Advance(time.Microsecond) // 8ms in all: well within the window
				_ = b.Snapshot()
			}
		})
	}
	wg.Wait()
	s := b.Snapshot()
	if s.Attempts != workers*each || s.Retries != workers*each {
		t.Fatalf("Snapshot = %+v, want %d attempts and retries", s, workers*each)
	}
	if int64(s.Deferred) != pushed.Load() || s.Deferred == 0 {
		t.Fatalf("Deferred = %d, %d delays were pushed", s.Deferred, pushed.Load())
	}
}

// TestBudgetBacklogRunsBesideFreshRetries pins what the budget bounds: the
// retries scheduled in a window, each counted once, where it was
// scheduled. A burst's excess runs later at the budget's rate, and
// meanwhile the fresh retries of the next window are within budget and
// keep their delays: right after a burst, retries start at up to twice the
// budget's rate, for as long as the backlog lasts.
func TestBudgetBacklogRunsBesideFreshRetries(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(BudgetConfig{Ratio: 0.01, MinRetries: 100, Window: 10 * time.Second, Now: clock.Now})
	var starts []time.Duration // when each retry's own delay starts
	for range 1000 {
		starts = append(starts, b.Retry(0))
	}
	clock.Advance(10 * time.Second)
	for range 100 {
		if d := b.Retry(0); d != 0 {
			t.Fatalf("fresh retry a window after the burst: delay %v, want 0", d)
		}
		starts = append(starts, 10*time.Second)
	}
	// The 101st fresh retry of the window is over budget and queues
	// behind the burst's backlog (its last slot at 90s).
	if d := b.Retry(0); d != 80*time.Second+100*time.Millisecond {
		t.Fatalf("excess fresh retry: delay %v, want 80.1s", d)
	}
	n := 0
	for _, s := range starts {
		if s >= 10*time.Second && s < 20*time.Second {
			n++
		}
	}
	if n != 200 {
		t.Fatalf("%d retries start in [10s, 20s), want 200: the backlog's 100 and the fresh 100", n)
	}
}

// TestBudgetBound is a property test of the bound the budget keeps, for
// random bursts at random times: over any window of the budget's buckets,
// at most allowed retries pass unchanged, at most allowed+1 pushed-out ones
// start (their slots Window/allowed apart, in order), so at most
// 2*allowed+1 start in all.
func TestBudgetBound(t *testing.T) {
	const allowed = 50
	const window = 10 * time.Second
	const width = window / budgetBuckets
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		clock := newFakeClock()
		b := NewBudget(BudgetConfig{Ratio: 1e-9, MinRetries: allowed, Window: window, Now: clock.Now})
		type start struct {
			at     time.Duration
			pushed bool
		}
		var starts []start
		var off, lastSlot time.Duration
		for range 300 {
			switch p := r.IntN(10); {
			case p < 7:
				off += time.Duration(r.Int64N(int64(3 * time.Second)))
			case p < 9:
				off += time.Duration(r.Int64N(int64(window)))
			default:
				off += window + time.Duration(r.Int64N(int64(5*window)))
			}
			clock.ns.Store(newFakeClock().ns.Load() + int64(off))
			for range r.IntN(120) {
				delay := time.Duration(r.Int64N(int64(time.Minute)))
				got := b.Retry(delay)
				s := start{at: off + got - delay, pushed: got != delay}
				if s.pushed {
					if s.at <= off || s.at < lastSlot+window/allowed {
						t.Fatalf("seed %d: pushed-out retry starts at %v (now %v), the slot before at %v", seed, s.at, off, lastSlot)
					}
					lastSlot = s.at
				}
				starts = append(starts, s)
			}
		}
		// Per bucket, then over every run of budgetBuckets buckets.
		n := int((lastSlot+window)/width) + 1
		fresh, pushed := make([]int, n+budgetBuckets), make([]int, n+budgetBuckets)
		for _, s := range starts {
			if s.pushed {
				pushed[s.at/width]++
			} else {
				fresh[s.at/width]++
			}
		}
		for from := range n {
			fresh, pushed := sum(fresh[from:from+budgetBuckets]), sum(pushed[from:from+budgetBuckets])
			if fresh > allowed || pushed > allowed+1 {
				t.Fatalf("seed %d: window from %v: %d retries unchanged, %d pushed out; want at most %d and %d",
					seed, time.Duration(from)*width, fresh, pushed, allowed, allowed+1)
			}
		}
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

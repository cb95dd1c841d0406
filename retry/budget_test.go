package retry

import (
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

package limiter

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// TestRemoteRefusalWakesNoWaiter: a job whose rate the Remote refuses
// frees nothing, so it must not wake the jobs waiting on its group.
// Waking them makes two waiters on a rate-held group ping-pong: each
// refusal wakes the other, which asks the Remote (a store transaction)
// at once, and so on until the rate allows a start, with every look
// counted as throttled. With Slots besides, each look is also a take
// and a release of a store slot.
func TestRemoteRefusalWakesNoWaiter(t *testing.T) {
	for _, withSlots := range []bool{false, true} {
		clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		var refuse atomic.Bool
		var calls atomic.Int64
		remote := func(_ context.Context, _ redrive.SelectedLimit, clock func() time.Time) (bool, time.Time, error) {
			calls.Add(1)
			if refuse.Load() {
				return false, clock().Add(time.Hour), nil
			}
			return true, time.Time{}, nil
		}
		l := New(clk.now)
		l.SetRemote(remote)
		if withSlots {
			l.SetSlots(newModelSlots())
		}
		sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 5, Rate: store.LimitRate{N: 1, Per: time.Second, Burst: 1}}
		// One job of the group runs: the group is kept.
		if ok, _, _ := l.Try(context.Background(), sel); !ok {
			t.Fatal("the first start was refused")
		}
		refuse.Store(true)
		ok, next, freed := l.Try(context.Background(), sel)
		if ok || next.IsZero() {
			t.Fatalf("slots %v: the held start: ok %v, next %v", withSlots, ok, next)
		}
		// A second waiter looks and is refused in turn.
		if ok, _, _ := l.Try(context.Background(), sel); ok {
			t.Fatalf("slots %v: the second held start was granted", withSlots)
		}
		if freed != nil {
			select {
			case <-freed:
				t.Fatalf("slots %v: a refused start woke the waiters of its group, though it freed nothing", withSlots)
			default:
			}
		}
		var throttled int64
		for _, s := range l.Stats() {
			throttled += s.Throttled
		}
		if throttled != 2 {
			t.Errorf("slots %v: throttled %d, want 2 (one per refused look)", withSlots, throttled)
		}
		l.Release(sel)
	}
}

// TestRemoteRefusalWakesFullWaiter: a job refused as full while another
// held its group's last slot only for the Remote's answer is woken when
// that answer refuses and gives the slot back (else it would wait for a
// release that may never come).
func TestRemoteRefusalWakesFullWaiter(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	asked := make(chan struct{})
	answer := make(chan bool)
	remote := func(_ context.Context, _ redrive.SelectedLimit, clock func() time.Time) (bool, time.Time, error) {
		asked <- struct{}{}
		if <-answer {
			return true, time.Time{}, nil
		}
		return false, clock().Add(time.Hour), nil
	}
	l := New(clk.now)
	l.SetRemote(remote)
	sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 1, Rate: store.LimitRate{N: 1, Per: time.Second, Burst: 1}}
	done := make(chan bool)
	go func() {
		ok, _, _ := l.Try(context.Background(), sel)
		done <- ok
	}()
	<-asked // the goroutine holds the group's only slot while the Remote answers
	ok, next, freed := l.Try(context.Background(), sel)
	if ok || !next.IsZero() || freed == nil {
		t.Fatalf("the look while the slot is held: ok %v, next %v, freed %v; want refused as full", ok, next, freed)
	}
	answer <- false
	if <-done {
		t.Fatal("the Remote refused, yet the start was granted")
	}
	select {
	case <-freed:
	case <-time.After(time.Minute): // a liveness bound only
		t.Fatal("the job refused as full was not woken when the slot came back")
	}
}

// TestRemoteRefusalConcurrent: jobs acquiring one group at once, with a
// Remote that refuses at random (and says to look again soon), never
// run more than the max together, and every one is granted in the end:
// a refusal wakes the waiters it held off as full, and no others.
func TestRemoteRefusalConcurrent(t *testing.T) {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(7, 7))
	remote := func(_ context.Context, _ redrive.SelectedLimit, clock func() time.Time) (bool, time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(2) == 0 {
			return false, clock().Add(time.Millisecond), nil
		}
		return true, time.Time{}, nil
	}
	l := New(nil)
	l.SetRemote(remote)
	sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 2, Rate: store.LimitRate{N: 1, Per: time.Second, Burst: 1}}
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				if out, _ := l.Acquire(context.Background(), sel, time.Time{}, nil); out != Granted {
					t.Errorf("Acquire = %v, want Granted", out)
					return
				}
				n := running.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				runtime.Gosched()
				running.Add(-1)
				l.Release(sel)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute): // a liveness bound only
		t.Fatal("a job waiting on the group was never granted")
	}
	if p := peak.Load(); p > int64(sel.Max) {
		t.Errorf("%d jobs ran at once, max %d", p, sel.Max)
	}
	for _, s := range l.Stats() {
		if s.InUse != 0 || s.Waiting != 0 {
			t.Errorf("stats after every job ended: %+v", s)
		}
	}
}

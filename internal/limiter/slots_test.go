package limiter

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// modelSlots are Slots kept in memory, shared by several limiters as a
// store is by several processes: max per group, a token per slot.
type modelSlots struct {
	mu       sync.Mutex
	max      map[string]int // a max set at run time, over sel.Max
	held     map[int64]string
	next     int64
	failing  bool
	peak     map[string]int
	takes    atomic.Int64
	refusals chan struct{} // a send per refused Take, when not nil
}

func newModelSlots() *modelSlots {
	return &modelSlots{max: map[string]int{}, held: map[int64]string{}, peak: map[string]int{}}
}

func (m *modelSlots) count(group string) int {
	n := 0
	for _, g := range m.held {
		if g == group {
			n++
		}
	}
	return n
}

func (m *modelSlots) Take(_ context.Context, sel redrive.SelectedLimit) (int64, error) {
	m.takes.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failing {
		return 0, errors.New("store down")
	}
	g := sel.Name + "/" + sel.Group
	limit := sel.Max
	if n := m.max[sel.Name]; n > 0 {
		limit = n
	}
	if m.count(g) >= limit {
		if m.refusals != nil {
			select {
			case m.refusals <- struct{}{}:
			default:
			}
		}
		return 0, nil
	}
	m.next++
	m.held[m.next] = g
	m.peak[g] = max(m.peak[g], m.count(g))
	return m.next, nil
}

func (m *modelSlots) Release(token int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.held[token]; !ok {
		panic("release of a token not held")
	}
	delete(m.held, token)
}

// TestLimiterSlotsModel: three limiters (three processes) share one
// keeper of slots, as consumers on one store do: over random tries,
// releases, failures of the keeper and a rate besides, the jobs running
// in all of them together never exceed the group's max (the keeper's, a
// max set at run time winning over the limiter's), every running job
// holds exactly one of the keeper's slots, a refused or failed try holds
// none, and once every job ended no slot is held.
func TestLimiterSlotsModel(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		ms := newModelSlots()
		sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 1 + rng.IntN(4)}
		if rng.IntN(3) == 0 {
			sel.Rate = store.LimitRate{N: 1 + rng.IntN(10), Per: time.Duration(10+rng.IntN(500)) * time.Millisecond, Burst: 1 + rng.IntN(4)}
		}
		if rng.IntN(4) == 0 {
			ms.max["l"] = 1 + rng.IntN(4)
		}
		max := sel.Max
		if n := ms.max["l"]; n > 0 {
			max = n
		}
		var ls [3]*Limiter
		var running [3]int
		for i := range ls {
			ls[i] = New(clk.now)
			ls[i].SetSlots(ms)
		}
		total := func() int { return running[0] + running[1] + running[2] }
		for step := range 1500 {
			i := rng.IntN(3)
			switch op := rng.IntN(10); {
			case op < 5:
				ok, next, _ := ls[i].Try(context.Background(), sel)
				if ok {
					running[i]++
				} else if next.IsZero() {
					t.Fatalf("seed %d step %d: refused without a time to look again", seed, step)
				}
				if total() > max {
					t.Fatalf("seed %d step %d: %d run, max %d", seed, step, total(), max)
				}
			case op < 8:
				if running[i] > 0 {
					ls[i].Release(sel)
					running[i]--
				}
			case op < 9:
				clk.advance(time.Duration(rng.IntN(200)) * time.Millisecond)
			default:
				ms.mu.Lock()
				ms.failing = !ms.failing
				ms.mu.Unlock()
			}
			ms.mu.Lock()
			held := len(ms.held)
			ms.mu.Unlock()
			if held != total() {
				t.Fatalf("seed %d step %d: %d slots held for %d running jobs", seed, step, held, total())
			}
			var inUse int64
			for _, l := range ls {
				for _, s := range l.Stats() {
					inUse += s.InUse
				}
			}
			if inUse != int64(total()) {
				t.Fatalf("seed %d step %d: stats say %d in use, %d run", seed, step, inUse, total())
			}
		}
		for i := range ls {
			for ; running[i] > 0; running[i]-- {
				ls[i].Release(sel)
			}
			if n := len(ls[i].groups); n != 0 && sel.Rate.IsZero() {
				t.Fatalf("seed %d: process %d keeps %d groups with nothing running", seed, i, n)
			}
		}
		if len(ms.held) != 0 {
			t.Fatalf("seed %d: %d slots held after every job ended", seed, len(ms.held))
		}
	}
}

// TestLimiterSlotsConcurrent: processes acquiring and releasing one
// group's fleet-wide slots at once, waiting for them with Acquire, never
// run more than the max together, and every waiter is granted in the
// end (a local release wakes the local waiters; the others poll).
func TestLimiterSlotsConcurrent(t *testing.T) {
	ms := newModelSlots()
	sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 2}
	var running, peak, granted atomic.Int64
	var wg sync.WaitGroup
	for p := range 3 {
		l := New(nil)
		l.SetSlots(ms)
		for range 4 {
			wg.Go(func() {
				for range 10 {
					o, _ := l.Acquire(t.Context(), sel, time.Time{}, nil)
					if o != Granted {
						t.Errorf("process %d: outcome %v", p, o)
						return
					}
					n := running.Add(1)
					for {
						pk := peak.Load()
						if n <= pk || peak.CompareAndSwap(pk, n) {
							break
						}
					}
					granted.Add(1)
					running.Add(-1)
					l.Release(sel)
				}
			})
		}
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("peak %d running, max 2", p)
	}
	if g := granted.Load(); g != 120 {
		t.Errorf("%d granted, want 120", g)
	}
}

// TestLimiterSlotsLocalWake: a job waiting on a group whose slot this
// process holds is granted once that slot is released (the release
// wakes it, or its next poll finds the slot free).
func TestLimiterSlotsLocalWake(t *testing.T) {
	ms := newModelSlots()
	ms.refusals = make(chan struct{}, 1)
	sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 1}
	l := New(nil)
	l.SetSlots(ms)
	if ok, _, _ := l.Try(t.Context(), sel); !ok {
		t.Fatal("the first try was refused")
	}
	done := make(chan Outcome, 1)
	go func() {
		o, _ := l.Acquire(t.Context(), sel, time.Time{}, nil)
		done <- o
	}()
	<-ms.refusals // the waiter found the group full
	l.Release(sel)
	select {
	case o := <-done:
		if o != Granted {
			t.Fatalf("outcome %v", o)
		}
	case <-time.After(time.Minute):
		t.Fatal("the release did not wake the waiter")
	}
	l.Release(sel)
}

// killable is a store whose slot renewals and releases fail once killed:
// the process that holds its slots is gone, as far as the store sees.
type killable struct {
	store.Limits
	dead atomic.Bool
}

func (k *killable) RenewLimitSlots(ctx context.Context, tokens []int64, now, until time.Time) ([]int64, error) {
	if k.dead.Load() {
		return nil, errors.New("killed")
	}
	return k.Limits.RenewLimitSlots(ctx, tokens, now, until)
}

func (k *killable) ReleaseLimitSlot(ctx context.Context, token int64, now time.Time) (bool, error) {
	if k.dead.Load() {
		return false, errors.New("killed")
	}
	return k.Limits.ReleaseLimitSlot(ctx, token, now)
}

// TestStoreSlotsLeases: two processes on one SQLite store share a max of
// 2: the first takes both slots, and keeps them over several leases by
// its renewals while the second is held; once the first dies (its
// renewals and releases stop), the second gets both slots when their
// leases end. Real time passes here: leases end by the clock.
func TestStoreSlotsLeases(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Long enough that a loaded machine's writer renews in time.
	const lease = 3 * time.Second
	k := &killable{Limits: st}
	a, b := New(nil), New(nil)
	as := NewStoreSlots(k, "a", lease, nil)
	a.SetSlots(as)
	b.SetSlots(NewStoreSlots(st, "b", lease, nil))
	sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 2}
	for range 2 {
		if o, _ := a.Acquire(t.Context(), sel, time.Time{}, nil); o != Granted {
			t.Fatalf("a: %v", o)
		}
	}
	// Held over more than a lease: every renewal keeps them.
	for range 4 {
		as.mu.Lock()
		renewed := as.renewed
		as.mu.Unlock()
		<-renewed
		if ok, _, _ := b.Try(t.Context(), sel); ok {
			t.Fatal("b took a slot a holds and renews")
		}
	}
	if n := as.Lost(); n != 0 {
		t.Fatalf("a lost %d slots while renewing", n)
	}
	k.dead.Store(true)
	for range 2 {
		o, _ := b.Acquire(t.Context(), sel, time.Now().Add(time.Minute), nil)
		if o != Granted {
			t.Fatalf("b, after a died: %v, want its slots back once their leases ended", o)
		}
	}
	if ok, _, _ := b.Try(t.Context(), sel); ok {
		t.Fatal("b took a third slot")
	}
	b.Release(sel)
	b.Release(sel)
	a.Release(sel) // a's late releases fail (it is dead) and free nothing
	a.Release(sel)
	if o, _ := b.Acquire(t.Context(), sel, time.Time{}, nil); o != Granted {
		t.Fatalf("b after its releases: %v", o)
	}
	b.Release(sel)
}

package limiter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// modelGroup is the model's state of one group: the contract, written
// independently of the limiter (the starts, not a tat).
type modelGroup struct {
	running int
	starts  []time.Time
}

// TestLimiterModel drives the limiter with random arrivals, finishes and
// clock moves over several limits and groups, and checks each answer
// against a model: a start is granted exactly when the group has a free
// slot and the rate allows one (the GCRA's tat, recomputed from the
// model's own record of starts), a group never runs more than its max,
// and in every window of length d a group started at most
// burst + d/interval jobs.
func TestLimiterModel(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { modelRun(t, seed) })
	}
}

func modelRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := New(clk.now)
	var sels []redrive.SelectedLimit
	for i := range 1 + rng.IntN(3) {
		max := rng.IntN(4) // 0: no cap (then a rate)
		var r store.LimitRate
		if max == 0 || rng.IntN(2) == 0 {
			r = store.LimitRate{N: 1 + rng.IntN(20), Per: time.Duration(1+rng.IntN(1000)) * time.Millisecond, Burst: 1 + rng.IntN(5)}
		}
		for g := range 1 + rng.IntN(3) {
			sels = append(sels, redrive.SelectedLimit{Name: fmt.Sprint("l", i), Group: fmt.Sprint("g", g), Max: max, Rate: r})
		}
	}
	model := map[groupKey]*modelGroup{}
	for _, s := range sels {
		model[groupKey{s.Name, s.Group}] = &modelGroup{}
	}
	// tat recomputes the GCRA's tat from the starts: each start at t
	// moves it to max(tat, t) + interval.
	tat := func(s redrive.SelectedLimit, m *modelGroup) time.Time {
		var tt time.Time
		for _, st := range m.starts {
			tt = later(tt, st).Add(s.Rate.Interval())
		}
		return tt
	}
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case op < 5: // an arrival
			s := sels[rng.IntN(len(sels))]
			m := model[groupKey{s.Name, s.Group}]
			now := clk.now()
			want := s.Max == 0 || m.running < s.Max
			if !s.Rate.IsZero() {
				tau := time.Duration(s.Rate.Burst-1) * s.Rate.Interval()
				if now.Before(tat(s, m).Add(-tau)) {
					want = false
				}
			}
			ok, next, _ := l.Try(context.Background(), s)
			if ok != want {
				t.Fatalf("step %d: Try(%+v) = %v, the model says %v (running %d)", step, s, ok, want, m.running)
			}
			if !ok && !next.IsZero() && !next.After(now) {
				t.Fatalf("step %d: held until %v, not after now %v", step, next, now)
			}
			if ok {
				m.running++
				m.starts = append(m.starts, now)
			}
		case op < 8: // a finish
			s := sels[rng.IntN(len(sels))]
			m := model[groupKey{s.Name, s.Group}]
			if m.running > 0 {
				l.Release(s)
				m.running--
			}
		default: // time passes
			clk.advance(time.Duration(rng.IntN(300)) * time.Millisecond)
		}
		for _, s := range sels {
			if m := model[groupKey{s.Name, s.Group}]; s.Max > 0 && m.running > s.Max {
				t.Fatalf("step %d: group %+v runs %d", step, s, m.running)
			}
		}
	}
	// The rate's bound, in every window that starts and ends at a start.
	for _, s := range sels {
		if s.Rate.IsZero() {
			continue
		}
		st := model[groupKey{s.Name, s.Group}].starts
		for i := range st {
			for j := i; j < len(st); j++ {
				d := st[j].Sub(st[i])
				bound := int64(s.Rate.Burst) + int64(d/s.Rate.Interval())
				if n := int64(j - i + 1); n > bound {
					t.Fatalf("group %+v: %d starts in %v, bound %d", s, n, d, bound)
				}
			}
		}
	}
	// Every job ended: the use is back to nothing.
	for _, s := range sels {
		for m := model[groupKey{s.Name, s.Group}]; m.running > 0; m.running-- {
			l.Release(s)
		}
	}
	for _, st := range l.Stats() {
		if st.InUse != 0 || st.Waiting != 0 {
			t.Fatalf("after the end: %+v", st)
		}
	}
}

// TestAcquireConcurrent runs many goroutines through Acquire on a few
// groups of a limit of 2 and checks, from inside the "jobs", that no
// group ever runs more than 2 and that every job ran.
func TestAcquireConcurrent(t *testing.T) {
	l := New(nil)
	const max, groups, jobs = 2, 3, 300
	var running [groups]atomic.Int32
	var ran atomic.Int32
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			g := i % groups
			sel := redrive.SelectedLimit{Name: "c", Group: fmt.Sprint(g), Max: max}
			o, release := l.Acquire(context.Background(), sel, time.Time{}, nil)
			if o != Granted {
				t.Errorf("outcome %v", o)
				return
			}
			release()
			if n := running[g].Add(1); n > max {
				t.Errorf("group %d runs %d", g, n)
			}
			ran.Add(1)
			running[g].Add(-1)
			l.Release(sel)
		})
	}
	wg.Wait()
	if ran.Load() != jobs {
		t.Fatalf("%d of %d jobs ran", ran.Load(), jobs)
	}
}

// TestAcquireHeldAndStopped: a job of a full group is Held at its
// deadline, Stopped at its context's end, and holds no slot of its own
// meanwhile (the slot function's release runs).
func TestAcquireHeldAndStopped(t *testing.T) {
	l := New(nil)
	sel := redrive.SelectedLimit{Name: "c", Group: "g", Max: 1}
	if ok, _, _ := l.Try(context.Background(), sel); !ok {
		t.Fatal("first start refused")
	}
	var taken, given atomic.Int32
	slot := func() (func(), bool) { taken.Add(1); return func() { given.Add(1) }, true }
	o, _ := l.Acquire(context.Background(), sel, time.Now().Add(time.Millisecond), slot)
	if o != Held {
		t.Fatalf("outcome %v, want Held", o)
	}
	if taken.Load() != given.Load() {
		t.Fatalf("slots taken %d, given back %d", taken.Load(), given.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Outcome)
	go func() {
		o, _ := l.Acquire(ctx, sel, time.Time{}, nil)
		done <- o
	}()
	cancel()
	select {
	case o := <-done:
		if o != Stopped {
			t.Fatalf("outcome %v, want Stopped", o)
		}
	case <-time.After(time.Minute):
		t.Fatal("Acquire did not stop")
	}
	// A release wakes a waiter, which then starts.
	go func() {
		o, _ := l.Acquire(context.Background(), sel, time.Time{}, nil)
		done <- o
	}()
	l.Release(sel)
	select {
	case o := <-done:
		if o != Granted {
			t.Fatalf("outcome %v, want Granted", o)
		}
	case <-time.After(time.Minute):
		t.Fatal("a release did not wake the waiter")
	}
}

// TestLimiterRemoteModel: three limiters (three processes) share one
// remote rate state, as consumers on one store do: over random arrivals,
// finishes and clock moves, the starts of all of them together keep the
// rate's bound (burst + d/interval in any window), each keeps its own
// slots, and a start the remote refuses takes no slot.
func TestLimiterRemoteModel(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		r := store.LimitRate{N: 1 + rng.IntN(10), Per: time.Duration(10+rng.IntN(500)) * time.Millisecond, Burst: 1 + rng.IntN(4)}
		sel := redrive.SelectedLimit{Name: "l", Group: "g", Max: 1 + rng.IntN(3), Rate: r}
		var mu sync.Mutex
		var tat time.Time
		var starts []time.Time
		failing := false
		remote := func(_ context.Context, s redrive.SelectedLimit, clock func() time.Time) (bool, time.Time, error) {
			mu.Lock()
			defer mu.Unlock()
			now := clock()
			if failing {
				return false, time.Time{}, fmt.Errorf("store down")
			}
			took, nt, next := s.Rate.Take(tat, now, 1)
			tat = nt
			if took == 1 {
				starts = append(starts, now)
			}
			return took == 1, next, nil
		}
		var ls [3]*Limiter
		var running [3]int
		for i := range ls {
			ls[i] = New(clk.now)
			ls[i].SetRemote(remote)
		}
		for step := range 2000 {
			i := rng.IntN(3)
			switch op := rng.IntN(10); {
			case op < 5:
				before := len(starts)
				ok, next, _ := ls[i].Try(context.Background(), sel)
				if ok {
					running[i]++
				} else if next.IsZero() && running[i] < sel.Max {
					t.Fatalf("seed %d step %d: refused with a free slot and no next start", seed, step)
				}
				if ok != (len(starts) > before) && !failing {
					t.Fatalf("seed %d step %d: granted %v, the remote took %d", seed, step, ok, len(starts)-before)
				}
				if running[i] > sel.Max {
					t.Fatalf("seed %d step %d: process %d runs %d, max %d", seed, step, i, running[i], sel.Max)
				}
			case op < 8:
				if running[i] > 0 {
					ls[i].Release(sel)
					running[i]--
				}
			case op < 9:
				clk.advance(time.Duration(rng.IntN(200)) * time.Millisecond)
			default:
				mu.Lock()
				failing = !failing
				mu.Unlock()
			}
		}
		for a := range starts {
			for b := a; b < len(starts); b++ {
				d := starts[b].Sub(starts[a])
				if got, bound := b-a+1, r.Burst+int(d/r.Interval()); got > bound {
					t.Fatalf("seed %d: %d starts in %v, bound %d", seed, got, d, bound)
				}
			}
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

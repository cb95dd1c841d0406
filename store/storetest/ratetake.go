package storetest

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitsTakeStarts: TakeLimitStarts takes a group's starts under its
// rate as the GCRA allows (a burst, then one per interval), says when the
// next is allowed, uses the limit's stored rate over the caller's, shares
// the group's rate state with the limited fetches both ways, never grants
// more than the burst to concurrent callers at one instant, and agrees
// with LimitRate.Take over a random sequence; bad arguments are
// ErrInvalid and take nothing.
func testLimitsTakeStarts(x *h) {
	r := store.LimitRate{N: 10, Per: time.Second, Burst: 2} // T 100ms, τ 100ms
	take := func(name, key string, r store.LimitRate, n int, now time.Time) (int, time.Time) {
		x.t.Helper()
		took, next, err := x.s.TakeLimitStarts(x.ctx, name, key, r, n, func() time.Time { return now })
		if err != nil {
			x.t.Fatalf("TakeLimitStarts(%s, %s, %d): %v", name, key, n, err)
		}
		return took, next
	}
	if took, next := take("take", "a", r, 5, at(0)); took != 2 || !sameTime(next, at(100*time.Millisecond)) {
		x.t.Errorf("first take: %d, next %s; want 2, %s", took, fmtTime(next), fmtTime(at(100*time.Millisecond)))
	}
	if took, next := take("take", "a", r, 1, at(99*time.Millisecond)); took != 0 || !sameTime(next, at(100*time.Millisecond)) {
		x.t.Errorf("take while held: %d, next %s", took, fmtTime(next))
	}
	if took, next := take("take", "a", r, 1, at(100*time.Millisecond)); took != 1 || !next.IsZero() {
		x.t.Errorf("take at the next start: %d, next %s", took, fmtTime(next))
	}
	if took, _ := take("take", "b", r, 1, at(99*time.Millisecond)); took != 1 {
		x.t.Errorf("another group: took %d", took)
	}

	// Bad arguments.
	for _, c := range []struct {
		name, key string
		r         store.LimitRate
		n         int
	}{{"", "a", r, 1}, {"take", "a", r, 0}, {"take", "a", store.LimitRate{}, 1}, {"take", "a", store.LimitRate{N: 1, Per: time.Second}, 1},
		{"take", string(make([]byte, store.MaxLimitName+1)), r, 1}} {
		if _, _, err := x.s.TakeLimitStarts(x.ctx, c.name, c.key, c.r, c.n, time.Now); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("TakeLimitStarts(%q, %d bytes, %v, %d) = %v, want ErrInvalid", c.name, len(c.key), c.r, c.n, err)
		}
	}
	if took, _ := take("take", "a", r, 2, at(time.Hour)); took != 2 {
		x.t.Errorf("after refused calls: took %d, want the whole burst", took)
	}

	// The stored rate wins over the caller's.
	if _, err := x.s.SetLimitRate(x.ctx, "slow", store.LimitRate{N: 1, Per: time.Second, Burst: 1}, at(0)); err != nil {
		x.t.Fatal(err)
	}
	if took, next := take("slow", "g", store.LimitRate{N: 100, Per: time.Second, Burst: 5}, 5, at(0)); took != 1 || !sameTime(next, at(time.Second)) {
		x.t.Errorf("stored rate: took %d, next %s; want 1, %s", took, fmtTime(next), fmtTime(at(time.Second)))
	}

	// One rate state with the limited fetches, both ways.
	hourly := store.LimitRate{N: 1, Per: time.Hour, Burst: 1}
	jobs := x.enqueue(at(0), rated("tq", "shared", "g", 0, hourly), rated("tq", "shared", "h", 0, hourly))
	if took, _ := take("shared", "g", hourly, 1, at(0)); took != 1 {
		x.t.Errorf("shared: took %d", took)
	}
	p := store.FetchParams{Queue: "tq", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1"}
	x.fetchWant(p, jobs[1].ID) // g's start went to the take: only h's job starts
	if took, next := take("shared", "h", hourly, 1, at(2*time.Second)); took != 0 || !sameTime(next, at(time.Hour+time.Second)) {
		x.t.Errorf("after the fetch's start: took %d, next %s", took, fmtTime(next))
	}

	// Concurrent callers at one instant share the burst.
	burst := store.LimitRate{N: 1, Per: time.Hour, Burst: 3}
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 4 {
				took, _, err := x.s.TakeLimitStarts(x.ctx, "conc", "c", burst, 1, func() time.Time { return at(time.Minute) })
				if err != nil {
					x.t.Errorf("concurrent take: %v", err)
					return
				}
				mu.Lock()
				total += took
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if total != 3 {
		x.t.Errorf("concurrent takes got %d starts, want the burst, 3", total)
	}

	// A random sequence agrees with LimitRate.Take, and keeps the bound.
	rng := rand.New(rand.NewPCG(7, 11))
	rr := store.LimitRate{N: 3, Per: 100 * time.Millisecond, Burst: 4}
	var tat time.Time
	now := at(2 * time.Hour)
	var starts []time.Time
	for i := range 200 {
		now = now.Add(time.Duration(rng.IntN(60_000)) * time.Microsecond)
		n := 1 + rng.IntN(5)
		wantTook, wantTat, wantNext := rr.Take(tat, now, n)
		took, next := take("model", "m", rr, n, now)
		if took != wantTook || !sameTime(next, wantNext) {
			x.t.Fatalf("step %d: took %d next %s, the model %d %s", i, took, fmtTime(next), wantTook, fmtTime(wantNext))
		}
		tat = wantTat
		for range took {
			starts = append(starts, now)
		}
	}
	for i := range starts {
		for j := i; j < len(starts); j++ {
			d := starts[j].Sub(starts[i])
			if got, bound := j-i+1, rr.Burst+int(d/rr.Interval()); got > bound {
				x.t.Fatalf("%d starts in %v, bound %d", got, d, bound)
			}
		}
	}
}

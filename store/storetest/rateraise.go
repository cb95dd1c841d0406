package storetest

import (
	"time"

	"github.com/redrivehq/redrive/store"
)

// testLimitsRateRaise: raising a rate at run time takes effect at once:
// a group that started under a slow rate is not held for the old
// interval, and lowering one holds a group no longer than the new
// rate's burst of intervals.
func testLimitsRateRaise(x *h) {
	slow := store.LimitRate{N: 1, Per: 24 * time.Hour, Burst: 1}
	jobs := x.enqueue(at(0), rated("rr", "raise", "a", 0, slow), rated("rr", "raise", "a", 0, slow), rated("rr", "raise", "a", 0, slow))
	var next time.Time
	p := store.FetchParams{Queue: "rr", Limit: 10, Now: at(time.Second), LeaseUntil: at(48 * time.Hour), Worker: "w", NextStart: &next}
	x.fetchWant(p, jobs[0].ID)
	fast := store.LimitRate{N: 10, Per: time.Second, Burst: 1} // T 100ms
	if _, err := x.s.SetLimitRate(x.ctx, "raise", fast, at(2*time.Second)); err != nil {
		x.t.Fatal(err)
	}
	p.Now = at(2*time.Second + 100*time.Millisecond)
	x.fetchWant(p, jobs[1].ID)
	p.Now = at(2*time.Second + 150*time.Millisecond)
	x.fetchWant(p)
	if want := at(2*time.Second + 200*time.Millisecond); !sameTime(next, want) {
		x.t.Errorf("NextStart after raising the rate = %s, want %s", fmtTime(next), fmtTime(want))
	}

	// Lowering: a burst of 100 at 10/s, then 1/s: the next start is
	// one new interval after the change, not after the old burst's
	// intervals.
	burst := store.LimitRate{N: 10, Per: time.Second, Burst: 100}
	var nj []store.NewJob
	for range 101 {
		nj = append(nj, rated("rl", "lower", "a", 0, burst))
	}
	low := x.enqueue(at(0), nj...)
	p = store.FetchParams{Queue: "rl", Limit: 200, Now: at(time.Second), LeaseUntil: at(48 * time.Hour), Worker: "w", NextStart: &next}
	if got := x.fetch(p); len(got) != 100 {
		x.t.Fatalf("a burst of 100 leased %d", len(got))
	}
	// TAT is now 1s + 100·100ms = 11s: kept, the next start under 1/s
	// would be at 11s; after the change at 1s it is at most 1s later.
	if _, err := x.s.SetLimitRate(x.ctx, "lower", store.LimitRate{N: 1, Per: time.Second, Burst: 1}, at(time.Second)); err != nil {
		x.t.Fatal(err)
	}
	p.Now = at(2 * time.Second)
	x.fetchWant(p, low[100].ID)
}

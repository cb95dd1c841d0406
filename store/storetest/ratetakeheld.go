package storetest

import (
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testLimitsTakeStartsHeld: a group a Retry-After holds (an outcome with
// HoldUntil of a job under a limit that holds on Retry-After) gives
// TakeLimitStarts no start before the hold's end, whatever its rate
// allows, and says the next is at the hold's end; the limit's other
// groups take theirs; the hold's end allows the starts again; turning
// the hold off ends it for TakeLimitStarts too.
func testLimitsTakeStartsHeld(x *h) {
	r := store.LimitRate{N: 10, Per: time.Second, Burst: 5}
	take := func(key string, n int, now time.Time) (int, time.Time) {
		x.t.Helper()
		took, next, err := x.s.TakeLimitStarts(x.ctx, "held", key, r, n, func() time.Time { return now })
		if err != nil {
			x.t.Fatalf("TakeLimitStarts(%s, %d): %v", key, n, err)
		}
		return took, next
	}
	jobs := x.enqueue(at(0), held("tq", "held", "a", 0, r))
	leased := x.fetchWant(store.FetchParams{Queue: "tq", Limit: 1, Now: at(0), LeaseUntil: at(time.Hour), Worker: "w1"}, jobs[0].ID)
	o := retryOf(leased[0], at(time.Second), at(time.Minute), failure.RateLimited, "429")
	o.HoldUntil = at(time.Minute)
	x.finish(o)

	if took, next := take("a", 2, at(2*time.Second)); took != 0 || !sameTime(next, at(time.Minute)) {
		x.t.Errorf("take while held: %d, next %s; want 0, %s", took, fmtTime(next), fmtTime(at(time.Minute)))
	}
	if took, _ := take("b", 2, at(2*time.Second)); took != 2 {
		x.t.Errorf("another group while a is held: took %d, want 2", took)
	}
	if took, next := take("a", 2, at(time.Minute)); took != 2 || !next.IsZero() {
		x.t.Errorf("take at the hold's end: %d, next %s; want 2", took, fmtTime(next))
	}

	// A hold of a limit without a rate: the caller's rate, held.
	jobs = x.enqueue(at(0), held("mq", "capped", "k", 1, store.LimitRate{}))
	leased = x.fetchWant(store.FetchParams{Queue: "mq", Limit: 1, Now: at(0), LeaseUntil: at(time.Hour), Worker: "w1"}, jobs[0].ID)
	o = retryOf(leased[0], at(time.Second), at(time.Hour), failure.RateLimited, "429")
	o.HoldUntil = at(time.Hour)
	x.finish(o)
	took, next, err := x.s.TakeLimitStarts(x.ctx, "capped", "k", r, 1, func() time.Time { return at(time.Minute) })
	if err != nil || took != 0 || !sameTime(next, at(time.Hour)) {
		x.t.Errorf("take of a held group of a limit without a rate: %d, next %s, %v; want 0, %s", took, fmtTime(next), err, fmtTime(at(time.Hour)))
	}
	// Turning the hold off ends it.
	if _, err := x.s.SetLimitHold(x.ctx, "capped", false, at(time.Minute)); err != nil {
		x.t.Fatal(err)
	}
	if took, _, err := x.s.TakeLimitStarts(x.ctx, "capped", "k", r, 1, func() time.Time { return at(time.Minute) }); err != nil || took != 1 {
		x.t.Errorf("take after the hold was turned off: %d, %v; want 1", took, err)
	}
}

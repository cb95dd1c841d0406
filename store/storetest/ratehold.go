package storetest

import (
	"errors"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// held is a new job of queue under the limit name, group key, with max
// max, the rate r and the hold on Retry-After.
func held(queue, name, key string, max int, r store.LimitRate) store.NewJob {
	nj := rated(queue, name, key, max, r)
	nj.LimitHold = true
	return nj
}

// testLimitsHold: a retry or bury with a HoldUntil of a job under a limit
// that holds on Retry-After holds the job's group, fleet-wide, until
// then: no job of the group is leased before (its slots free or not, its
// rate allowing or not), the fetch says when it can start, the other
// groups run on, the hold is listed; a later hold wins over an earlier
// one, a stale outcome or a limit without the hold holds nothing, and
// turning the hold off ends the holds at once.
func testLimitsHold(x *h) {
	// A limit with a max only.
	var nj []store.NewJob
	for range 3 {
		nj = append(nj, held("hq", "hold", "a", 2, store.LimitRate{}))
	}
	for range 3 {
		nj = append(nj, held("hq", "hold", "b", 2, store.LimitRate{}))
	}
	jobs := x.enqueue(at(0), nj...)
	a, b := jobs[:3], jobs[3:]
	var next time.Time
	p := store.FetchParams{Queue: "hq", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next}
	leased := x.fetchWant(p, a[0].ID, a[1].ID, b[0].ID, b[1].ID)
	if l := x.limitState("hold", at(time.Second)); !l.HoldOnRetryAfter || l.HeldGroups != 0 || len(l.Holds) != 0 {
		x.t.Errorf("limit before a hold: %+v, want the hold on and no group held", l)
	}
	// a's first job gets a 429 with Retry-After 10s.
	o := retryOf(leased[0], at(2*time.Second), at(12*time.Second), failure.RateLimited, "429")
	o.HoldUntil = at(12 * time.Second)
	x.finish(o, completeOf(leased[1], at(2*time.Second)), completeOf(leased[2], at(2*time.Second)))
	p.Now = at(3 * time.Second)
	x.fetchWant(p, b[2].ID) // a has free slots, but is held; b runs on
	if !sameTime(next, at(12*time.Second)) {
		x.t.Errorf("NextStart with a group held = %s, want %s", fmtTime(next), fmtTime(at(12*time.Second)))
	}
	l := x.limitState("hold", at(3*time.Second))
	if l.HeldGroups != 1 || len(l.Holds) != 1 || l.Holds[0].Key != "a" || !sameTime(l.Holds[0].Until, at(12*time.Second)) {
		x.t.Errorf("limit with a held: held %d, holds %+v; want a until %s", l.HeldGroups, l.Holds, fmtTime(at(12*time.Second)))
	}
	// A shorter hold does not shorten it; a stale outcome holds nothing.
	stale := retryOf(leased[1], at(4*time.Second), at(4*time.Second), failure.RateLimited, "429")
	stale.HoldUntil = at(time.Hour)
	if applied := x.finishApplied(stale); applied[0] {
		x.t.Fatalf("a stale retry applied")
	}
	p.Now = at(11*time.Second + 999*time.Millisecond)
	x.fetchWant(p)
	p.Now = at(12 * time.Second)
	x.fetchWant(p, a[2].ID, a[0].ID)
	if l := x.limitState("hold", at(12*time.Second)); l.HeldGroups != 0 || len(l.Holds) != 0 {
		x.t.Errorf("limit after the hold: held %d, holds %+v; want none", l.HeldGroups, l.Holds)
	}

	// A limit with a rate: the hold holds past what the rate allows, and
	// a bury holds as a retry does.
	r := store.LimitRate{N: 10, Per: time.Second, Burst: 1}
	rj := x.enqueue(at(0), held("hr", "hrate", "", 0, r), held("hr", "hrate", "", 0, r), held("hr", "hrate", "", 0, r))
	p = store.FetchParams{Queue: "hr", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next}
	got := x.fetchWant(p, rj[0].ID)
	bo := buryOf(got[0], at(time.Second), failure.RateLimited, "exhausted", "fp", "429")
	bo.HoldUntil = at(5 * time.Second)
	x.finish(bo)
	p.Now = at(2 * time.Second)
	x.fetchWant(p)
	if !sameTime(next, at(5*time.Second)) {
		x.t.Errorf("NextStart of a rated group held = %s, want %s", fmtTime(next), fmtTime(at(5*time.Second)))
	}
	// Turning the hold off ends the holds at once.
	st, err := x.s.SetLimitHold(x.ctx, "hrate", false, at(2*time.Second))
	if err != nil || st.HoldOnRetryAfter || st.HeldGroups != 0 {
		x.t.Fatalf("SetLimitHold(hrate, false) = %+v, %v; want the hold off, no group held", st, err)
	}
	got = x.fetchWant(p, rj[1].ID)
	// Off, a Retry-After holds nothing.
	o = retryOf(got[0], at(2*time.Second), at(2*time.Second), failure.RateLimited, "429")
	o.HoldUntil = at(time.Hour)
	x.finish(o)
	p.Now = at(3 * time.Second)
	x.fetchWant(p, rj[2].ID)
	if l := x.limitState("hrate", at(3*time.Second)); l.HeldGroups != 0 {
		x.t.Errorf("limit with the hold off: held %d, want 0", l.HeldGroups)
	}
	// On again, from then on.
	if st, err := x.s.SetLimitHold(x.ctx, "hrate", true, at(3*time.Second)); err != nil || !st.HoldOnRetryAfter {
		x.t.Errorf("SetLimitHold(hrate, true) = %+v, %v", st, err)
	}
	if _, err := x.s.SetLimitHold(x.ctx, "nosuch", true, at(0)); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("SetLimitHold(nosuch) = %v, want ErrNotFound", err)
	}
	// A job whose limit does not hold, and a job under no limit, with a
	// HoldUntil: nothing held.
	plain := x.enqueue(at(0), rated("hp", "nohold", "", 1, store.LimitRate{}), rated("hp", "nohold", "", 1, store.LimitRate{}),
		store.NewJob{Queue: "hp", Kind: "k"})
	p = store.FetchParams{Queue: "hp", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next}
	got = x.fetchWant(p, plain[0].ID, plain[2].ID)
	for _, j := range got {
		o := retryOf(j, at(time.Second), at(time.Hour), failure.RateLimited, "429")
		o.HoldUntil = at(time.Hour)
		x.finish(o)
	}
	x.fetchWant(p, plain[1].ID)
	if l := x.limitState("nohold", at(time.Second)); l.HoldOnRetryAfter || l.HeldGroups != 0 {
		x.t.Errorf("limit without the hold: %+v, want no hold", l)
	}
}

// testLimitsEdit: a limit's max can be removed while it has a rate, not
// otherwise; its rate removed while it has a max, not otherwise; a rate
// set without a burst keeps the limit's burst.
func testLimitsEdit(x *h) {
	r := store.LimitRate{N: 5, Per: time.Second, Burst: 4}
	if _, err := x.s.SetLimit(x.ctx, "e", 3, at(0)); err != nil {
		x.t.Fatal(err)
	}
	if _, err := x.s.SetLimit(x.ctx, "e", 0, at(0)); !errors.Is(err, store.ErrNoCapNoRate) || !errors.Is(err, store.ErrInvalid) {
		x.t.Errorf("SetLimit(e, 0) without a rate = %v, want ErrNoCapNoRate", err)
	}
	if _, err := x.s.SetLimit(x.ctx, "fresh", 0, at(0)); !errors.Is(err, store.ErrNoCapNoRate) {
		x.t.Errorf("SetLimit(fresh, 0) = %v, want ErrNoCapNoRate", err)
	}
	if _, err := x.s.SetLimitRate(x.ctx, "e", r, at(0)); err != nil {
		x.t.Fatal(err)
	}
	st, err := x.s.SetLimit(x.ctx, "e", 0, at(time.Second))
	if err != nil || st.Max != 0 || st.Rate == nil || *st.Rate != r {
		x.t.Errorf("SetLimit(e, 0) with a rate = %+v, %v; want max 0, rate %v", st, err, r)
	}
	// The rate of a limit without a max cannot go.
	if _, err := x.s.SetLimitRate(x.ctx, "e", store.LimitRate{}, at(time.Second)); !errors.Is(err, store.ErrNoCapNoRate) {
		x.t.Errorf("SetLimitRate(e, none) without a max = %v, want ErrNoCapNoRate", err)
	}
	if _, err := x.s.SetLimitRate(x.ctx, "fresh", store.LimitRate{}, at(time.Second)); !errors.Is(err, store.ErrNoCapNoRate) {
		x.t.Errorf("SetLimitRate(fresh, none) = %v, want ErrNoCapNoRate", err)
	}
	// A new rate without a burst keeps the burst.
	st, err = x.s.SetLimitRate(x.ctx, "e", store.LimitRate{N: 9, Per: time.Minute}, at(2*time.Second))
	if want := (store.LimitRate{N: 9, Per: time.Minute, Burst: 4}); err != nil || st.Rate == nil || *st.Rate != want {
		x.t.Errorf("SetLimitRate(e, 9/m, no burst) = %+v (rate %v), %v; want rate %v", st, st.Rate, err, want)
	}
	// A limit that had no rate gets burst 1.
	if _, err := x.s.SetLimit(x.ctx, "n", 2, at(0)); err != nil {
		x.t.Fatal(err)
	}
	st, err = x.s.SetLimitRate(x.ctx, "n", store.LimitRate{N: 9, Per: time.Minute}, at(0))
	if want := (store.LimitRate{N: 9, Per: time.Minute, Burst: 1}); err != nil || st.Rate == nil || *st.Rate != want || st.Max != 2 {
		x.t.Errorf("SetLimitRate(n, 9/m, no burst) = %+v (rate %v), %v; want max 2, rate %v", st, st.Rate, err, want)
	}
	for _, name := range []string{"e", "n"} {
		if l := x.limitState(name, at(3*time.Second)); l.Max == 0 && l.Rate == nil {
			x.t.Errorf("limit %s has neither max nor rate: %+v", name, l)
		}
	}
}

// testLimitsSlotWait: a fetch says whether due limited jobs of its queue
// wait on a full group's slot (which a worker polls for), apart from
// those only a rate holds (which start at NextStart), also when it skips
// the selection because nothing changed.
func testLimitsSlotWait(x *h) {
	slots := x.enqueue(at(0), rated("sq", "slots", "a", 1, store.LimitRate{}), rated("sq", "slots", "a", 1, store.LimitRate{}))
	slow := store.LimitRate{N: 1, Per: time.Hour, Burst: 1}
	rates := x.enqueue(at(0), rated("rq", "slow", "a", 0, slow), rated("rq", "slow", "a", 0, slow))
	x.enqueue(at(0), store.NewJob{Queue: "pq", Kind: "k"})
	var next time.Time
	slotWait := true
	fetch := func(q string, now time.Duration, want ...int64) {
		x.t.Helper()
		x.fetchWant(store.FetchParams{Queue: q, Limit: 10, Now: at(now), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next, SlotWait: &slotWait}, want...)
	}
	fetch("sq", time.Second, slots[0].ID)
	for i := range 2 { // the selection, then the fetch that skips it
		fetch("sq", time.Second+time.Duration(i)*time.Millisecond)
		if !slotWait || !next.IsZero() {
			x.t.Errorf("fetch %d of a queue waiting on a slot: SlotWait %v, NextStart %s; want true, zero", i, slotWait, fmtTime(next))
		}
	}
	fetch("rq", time.Second, rates[0].ID)
	for i := range 2 {
		slotWait = true
		fetch("rq", time.Second+time.Duration(i)*time.Millisecond)
		if slotWait || !sameTime(next, at(time.Second+time.Hour)) {
			x.t.Errorf("fetch %d of a queue held by a rate: SlotWait %v, NextStart %s; want false, %s", i, slotWait, fmtTime(next), fmtTime(at(time.Second+time.Hour)))
		}
	}
	slotWait = true
	fetch("pq", time.Second, x.listIDs(store.Filter{Queue: "pq"}, 10)...)
	if slotWait {
		x.t.Errorf("fetch of a queue without limits: SlotWait true")
	}
}

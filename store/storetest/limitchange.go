package storetest

import (
	"errors"
	"math/rand/v2"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testLimitsChange: ChangeLimit applies all of its changes (max, rate,
// hold) in one transaction or none: a change checked on the limit as it
// would be after all of them (max 0 with a new rate, a rate removed with
// a new max), a refused one (neither a max nor a rate left, a bad field,
// a hold alone on a limit not kept) changes and creates nothing; turning
// the hold off with a new rate ends the holds; and a random sequence of
// changes agrees with a model of the limit's settings.
func testLimitsChange(x *h) {
	ip := func(n int) *int { return &n }
	bp := func(b bool) *bool { return &b }
	rp := func(r store.LimitRate) *store.LimitRate { return &r }
	change := func(name string, ch store.LimitChange, now time.Time) (store.LimitState, error) {
		return x.s.ChangeLimit(x.ctx, name, ch, now)
	}
	ten := store.LimitRate{N: 10, Per: time.Second, Burst: 3}

	// All three on a new limit.
	l, err := change("all", store.LimitChange{Max: ip(4), Rate: rp(ten), Hold: bp(true)}, at(0))
	if err != nil {
		x.t.Fatal(err)
	}
	if l.Max != 4 || l.Rate == nil || *l.Rate != ten || !l.HoldOnRetryAfter {
		x.t.Errorf("ChangeLimit(all three) = %+v", l)
	}
	// Max 0 with a new rate on a limit with only a max; a rate removed
	// with a new max on a limit with only a rate: fine in one change.
	if _, err := x.s.SetLimit(x.ctx, "maxonly", 3, at(0)); err != nil {
		x.t.Fatal(err)
	}
	if l, err := change("maxonly", store.LimitChange{Max: ip(0), Rate: rp(ten)}, at(0)); err != nil || l.Max != 0 || l.Rate == nil {
		x.t.Errorf("max 0 with a rate = %+v, %v", l, err)
	}
	if _, err := x.s.SetLimitRate(x.ctx, "rateonly", ten, at(0)); err != nil {
		x.t.Fatal(err)
	}
	if l, err := change("rateonly", store.LimitChange{Max: ip(2), Rate: rp(store.LimitRate{})}, at(0)); err != nil || l.Max != 2 || l.Rate != nil {
		x.t.Errorf("a rate removed with a max = %+v, %v", l, err)
	}
	// Burst 0 keeps the limit's burst.
	if l, err := change("all", store.LimitChange{Rate: rp(store.LimitRate{N: 5, Per: time.Second})}, at(0)); err != nil || l.Rate == nil || l.Rate.Burst != 3 {
		x.t.Errorf("a rate without a burst = %+v, %v; want burst 3 kept", l, err)
	}

	// Refused changes change nothing.
	before := x.limitState("all", at(0))
	for _, c := range []struct {
		what string
		ch   store.LimitChange
		want error
	}{
		{"max 0 and no rate", store.LimitChange{Max: ip(0), Rate: rp(store.LimitRate{}), Hold: bp(false)}, store.ErrNoCapNoRate},
		{"a bad max with a rate", store.LimitChange{Max: ip(store.MaxLimit + 1), Rate: rp(ten), Hold: bp(false)}, store.ErrInvalid},
		{"a max with a bad rate", store.LimitChange{Max: ip(1), Rate: rp(store.LimitRate{N: 1, Per: time.Nanosecond, Burst: 1})}, store.ErrInvalid},
		{"nothing", store.LimitChange{}, store.ErrInvalid},
	} {
		if _, err := change("all", c.ch, at(time.Second)); !errors.Is(err, c.want) {
			x.t.Errorf("ChangeLimit(%s) = %v, want %v", c.what, err, c.want)
		}
	}
	if after := x.limitState("all", at(0)); after.Max != before.Max || *after.Rate != *before.Rate || after.HoldOnRetryAfter != before.HoldOnRetryAfter ||
		!after.UpdatedAt.Equal(before.UpdatedAt) {
		x.t.Errorf("after refused changes: %+v, want %+v", after, before)
	}
	if _, err := change("none", store.LimitChange{Hold: bp(true)}, at(0)); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("a hold alone on a limit not kept = %v, want ErrNotFound", err)
	}
	if _, err := change("", store.LimitChange{Max: ip(1)}, at(0)); !errors.Is(err, store.ErrInvalid) {
		x.t.Errorf("no name = %v, want ErrInvalid", err)
	}
	ls, err := x.s.ListLimits(x.ctx, at(0))
	if err != nil {
		x.t.Fatal(err)
	}
	for _, l := range ls {
		if l.Name == "none" || l.Name == "" {
			x.t.Errorf("a refused change created limit %q", l.Name)
		}
	}

	// The hold off, with a rate, ends the holds in the same change.
	jobs := x.enqueue(at(0), held("cq", "held", "a", 1, store.LimitRate{}))
	leased := x.fetchWant(store.FetchParams{Queue: "cq", Limit: 1, Now: at(0), LeaseUntil: at(time.Hour), Worker: "w1"}, jobs[0].ID)
	o := retryOf(leased[0], at(time.Second), at(time.Second), failure.RateLimited, "429")
	o.HoldUntil = at(time.Hour)
	x.finish(o)
	if l := x.limitState("held", at(2*time.Second)); l.HeldGroups != 1 {
		x.t.Fatalf("held groups = %d, want 1", l.HeldGroups)
	}
	if l, err := change("held", store.LimitChange{Rate: rp(ten), Hold: bp(false)}, at(2*time.Second)); err != nil || l.HeldGroups != 0 || l.HoldOnRetryAfter || l.Rate == nil {
		x.t.Errorf("the hold off with a rate = %+v, %v", l, err)
	}

	// A random sequence against a model of the settings.
	type model struct {
		exists        bool
		max, n, burst int
		per           time.Duration
		hold          bool
	}
	var m model
	rng := rand.New(rand.NewPCG(7, 28))
	for i := range 300 {
		var ch store.LimitChange
		if rng.IntN(2) == 0 {
			ch.Max = ip([]int{0, 1, 3, store.MaxLimit + 1}[rng.IntN(4)])
		}
		if rng.IntN(2) == 0 {
			ch.Rate = rp([]store.LimitRate{{}, ten, {N: 2, Per: time.Minute}, {N: 1, Per: time.Hour, Burst: 5}, {N: 0, Per: time.Second, Burst: 1}}[rng.IntN(5)])
		}
		if rng.IntN(3) == 0 {
			ch.Hold = bp(rng.IntN(2) == 0)
		}
		// The model: check, then apply all or nothing.
		next, want := m, error(nil)
		switch {
		case ch.Max == nil && ch.Rate == nil && ch.Hold == nil:
			want = store.ErrInvalid
		case ch.Max != nil && *ch.Max > store.MaxLimit:
			want = store.ErrInvalid
		case ch.Rate != nil && ch.Rate.N == 0 && *ch.Rate != (store.LimitRate{}):
			want = store.ErrInvalid
		case !m.exists && ch.Max == nil && ch.Rate == nil:
			want = store.ErrNotFound
		default:
			if !m.exists {
				next = model{exists: true}
			}
			if ch.Max != nil {
				next.max = *ch.Max
			}
			if ch.Rate != nil {
				next.n, next.per = ch.Rate.N, ch.Rate.Per
				if ch.Rate.N == 0 {
					next.burst = 0
				} else if ch.Rate.Burst != 0 {
					next.burst = ch.Rate.Burst
				} else {
					next.burst = max(m.burst, 1)
				}
			}
			if ch.Hold != nil {
				next.hold = *ch.Hold
			}
			if next.max == 0 && next.n == 0 {
				want = store.ErrNoCapNoRate
			}
		}
		if want == nil {
			m = next
		}
		_, err := change("rand", ch, at(time.Duration(i)*time.Millisecond))
		if (want == nil) != (err == nil) || (want != nil && !errors.Is(err, want)) {
			x.t.Fatalf("step %d: ChangeLimit(max %v, rate %v, hold %v) = %v, want %v", i, ch.Max, ch.Rate, ch.Hold, err, want)
		}
		if !m.exists {
			continue
		}
		l := x.limitState("rand", at(time.Hour))
		gotN, gotPer, gotBurst := 0, time.Duration(0), 0
		if l.Rate != nil {
			gotN, gotPer, gotBurst = l.Rate.N, l.Rate.Per, l.Rate.Burst
		}
		wantBurst := m.burst
		if m.n == 0 {
			wantBurst = 0
		}
		if l.Max != m.max || gotN != m.n || gotPer != m.per || gotBurst != wantBurst || l.HoldOnRetryAfter != m.hold {
			x.t.Fatalf("step %d: limit %+v (rate %d/%s burst %d), model %+v", i, l, gotN, gotPer, gotBurst, m)
		}
	}
}

package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/store"
)

// The slots of the broker transports' consumers (store.Limits's
// TakeLimitSlot, RenewLimitSlots, ReleaseLimitSlot): leases of a limit's
// group's slots, fenced by tokens.

func (x *h) takeSlot(name, key string, max int, holder string, now, until time.Time) int64 {
	x.t.Helper()
	tok, err := x.s.TakeLimitSlot(x.ctx, name, key, max, holder, now, until)
	if err != nil {
		x.t.Fatalf("TakeLimitSlot(%s, %s, %d, %s): %v", name, key, max, holder, err)
	}
	return tok
}

func (x *h) renewSlots(tokens []int64, now, until time.Time) []int64 {
	x.t.Helper()
	lost, err := x.s.RenewLimitSlots(x.ctx, tokens, now, until)
	if err != nil {
		x.t.Fatalf("RenewLimitSlots(%v): %v", tokens, err)
	}
	return lost
}

func (x *h) releaseSlot(token int64, now time.Time) bool {
	x.t.Helper()
	held, err := x.s.ReleaseLimitSlot(x.ctx, token, now)
	if err != nil {
		x.t.Fatalf("ReleaseLimitSlot(%d): %v", token, err)
	}
	return held
}

// testLimitSlots: a group's slots are taken up to its max, each under a
// token of its own, then refused; a release frees one; a renewal extends
// a lease and reports the tokens whose lease ended; an ended lease frees
// its slot, and its old token can neither renew nor release the slot
// taken since; groups and limits are apart; a stored max wins over the
// caller's; bad arguments are ErrInvalid and take nothing.
func testLimitSlots(x *h) {
	t0 := at(0)
	lease := at(10 * time.Second)
	a1 := x.takeSlot("s", "k", 2, "p1", t0, lease)
	a2 := x.takeSlot("s", "k", 2, "p2", t0, lease)
	if a1 == 0 || a2 == 0 || a1 == a2 {
		x.t.Fatalf("two takes of a max of 2: tokens %d, %d; want two distinct", a1, a2)
	}
	if tok := x.takeSlot("s", "k", 2, "p3", t0, lease); tok != 0 {
		x.t.Fatalf("a third take of a max of 2: token %d, want 0 (full)", tok)
	}
	if tok := x.takeSlot("s", "other", 2, "p3", t0, lease); tok == 0 {
		x.t.Error("another group of the limit is full too")
	}
	if tok := x.takeSlot("t", "k", 2, "p3", t0, lease); tok == 0 {
		x.t.Error("another limit's group of the same key is full too")
	}
	if !x.releaseSlot(a1, at(time.Second)) {
		x.t.Error("release of a held slot: not held")
	}
	if x.releaseSlot(a1, at(time.Second)) {
		x.t.Error("a second release of one token: held")
	}
	a3 := x.takeSlot("s", "k", 2, "p3", at(time.Second), lease)
	if a3 == 0 || a3 == a1 || a3 == a2 {
		x.t.Fatalf("take after a release: token %d (released %d, held %d)", a3, a1, a2)
	}

	// A renewal extends; an ended lease is lost and frees its slot.
	if lost := x.renewSlots([]int64{a2}, at(5*time.Second), at(30*time.Second)); len(lost) != 0 {
		x.t.Fatalf("renewal of a live lease: lost %v", lost)
	}
	// At 20s a3 (until 10s) has ended, a2 (until 30s) has not.
	a4 := x.takeSlot("s", "k", 2, "p4", at(20*time.Second), at(40*time.Second))
	if a4 == 0 {
		x.t.Fatal("the slot of an ended lease was not taken")
	}
	if tok := x.takeSlot("s", "k", 2, "p5", at(20*time.Second), at(40*time.Second)); tok != 0 {
		x.t.Fatalf("the renewed lease's slot was taken: token %d", tok)
	}
	if lost := x.renewSlots([]int64{a3, a2, 987654321}, at(21*time.Second), at(50*time.Second)); !slices.Equal(lost, []int64{a3, 987654321}) {
		x.t.Errorf("renewal of an ended lease, a live one and an unknown token: lost %v, want [%d 987654321]", lost, a3)
	}
	if x.releaseSlot(a3, at(21*time.Second)) {
		x.t.Error("the release of an ended lease freed a slot")
	}
	if tok := x.takeSlot("s", "k", 2, "p5", at(22*time.Second), at(40*time.Second)); tok != 0 {
		x.t.Fatalf("the old holder's release freed the new holder's slot: token %d", tok)
	}
	// An ended lease not yet taken over is lost to a renewal too.
	b := x.takeSlot("s", "z", 1, "p1", at(0), at(time.Second))
	if lost := x.renewSlots([]int64{b}, at(time.Second), at(time.Minute)); !slices.Equal(lost, []int64{b}) {
		x.t.Errorf("renewal at its lease's end: lost %v, want [%d]", lost, b)
	}
	if tok := x.takeSlot("s", "z", 1, "p2", at(2*time.Second), at(time.Minute)); tok == 0 {
		x.t.Error("a lost lease's slot is still held")
	}
	if lost := x.renewSlots(nil, at(0), at(time.Second)); len(lost) != 0 {
		x.t.Errorf("an empty renewal lost %v", lost)
	}

	// The stored max wins over the caller's.
	if _, err := x.s.SetLimit(x.ctx, "stored", 1, t0); err != nil {
		x.t.Fatal(err)
	}
	if tok := x.takeSlot("stored", "k", 5, "p1", t0, lease); tok == 0 {
		x.t.Fatal("stored max 1: first take refused")
	}
	if tok := x.takeSlot("stored", "k", 5, "p1", t0, lease); tok != 0 {
		x.t.Error("stored max 1, the caller's 5: a second slot was taken")
	}
	if _, err := x.s.SetLimitRate(x.ctx, "rateonly", store.LimitRate{N: 1, Per: time.Second, Burst: 1}, t0); err != nil {
		x.t.Fatal(err)
	}
	for i := range 2 {
		if tok := x.takeSlot("rateonly", "k", 2, "p1", t0, lease); tok == 0 {
			x.t.Errorf("a stored limit without a max: take %d of the caller's 2 refused", i+1)
		}
	}
	if tok := x.takeSlot("rateonly", "k", 2, "p1", t0, lease); tok != 0 {
		x.t.Error("a stored limit without a max: the caller's max 2 was exceeded")
	}
	ls, err := x.s.ListLimits(x.ctx, t0)
	if err != nil {
		x.t.Fatal(err)
	}
	for _, l := range ls {
		if l.Name != "stored" && l.Name != "rateonly" {
			x.t.Errorf("a take created limit %q", l.Name)
		}
	}

	// Bad arguments.
	for _, c := range []struct {
		name, key  string
		max        int
		holder     string
		now, until time.Time
	}{
		{"", "k", 1, "p", t0, lease},
		{"s", "k", 0, "p", t0, lease},
		{"s", "k", store.MaxLimit + 1, "p", t0, lease},
		{"s", "k", 1, "", t0, lease},
		{"s", "k", 1, strings.Repeat("h", store.MaxLimitName+1), t0, lease},
		{"s", "k", 1, "p", t0, t0},
		{"s", strings.Repeat("k", store.MaxLimitName+1), 1, "p", t0, lease},
		{"s", "a\x00b", 1, "p", t0, lease},
	} {
		if tok, err := x.s.TakeLimitSlot(x.ctx, c.name, c.key, c.max, c.holder, c.now, c.until); !errors.Is(err, store.ErrInvalid) || tok != 0 {
			x.t.Errorf("TakeLimitSlot(%q, %d bytes, %d, %d bytes, %s, %s) = %d, %v; want ErrInvalid",
				c.name, len(c.key), c.max, len(c.holder), fmtTime(c.now), fmtTime(c.until), tok, err)
		}
	}
	if _, err := x.s.RenewLimitSlots(x.ctx, []int64{a2}, at(22*time.Second), at(22*time.Second)); !errors.Is(err, store.ErrInvalid) {
		x.t.Errorf("RenewLimitSlots with until = now: %v, want ErrInvalid", err)
	}
	if _, err := x.s.RenewLimitSlots(x.ctx, make([]int64, store.MaxSlotTokens+1), at(0), at(time.Second)); !errors.Is(err, store.ErrInvalid) {
		x.t.Errorf("RenewLimitSlots of %d tokens: %v, want ErrInvalid", store.MaxSlotTokens+1, err)
	}
	// The refused renewal renewed nothing: a2 (until 50s) ends at 50s.
	if tok := x.takeSlot("s", "k", 2, "p6", at(50*time.Second), at(time.Minute)); tok == 0 {
		x.t.Error("after a refused renewal: the slot of a lease that ended is still held")
	}
}

// testLimitSlotsConcurrent: holders taking and releasing one group's
// slots at once never hold more than its max, by the store's own count:
// every token a take returns is held until its release, and the holders
// count those held between a take and its release.
func testLimitSlotsConcurrent(x *h) {
	const max, holders, rounds = 3, 8, 15
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	now, until := at(0), at(time.Hour)
	for i := range holders {
		wg.Go(func() {
			holder := fmt.Sprintf("p%d", i)
			for range rounds {
				tok, err := x.s.TakeLimitSlot(x.ctx, "conc", "k", max, holder, now, until)
				if err != nil {
					x.t.Errorf("take: %v", err)
					return
				}
				if tok == 0 {
					continue
				}
				n := held.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				held.Add(-1) // before the release: the count never lags the store
				if ok, err := x.s.ReleaseLimitSlot(x.ctx, tok, now); err != nil || !ok {
					x.t.Errorf("release %d: %v, %v", tok, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > max || p == 0 {
		x.t.Errorf("peak holders %d, want 1 to %d", p, max)
	}
}

// The slots model: what the contract says of each token, checked
// against the store over random interleavings.
type slotModel struct {
	group  string
	holder string
	until  time.Time
	done   bool // released or lost to a renewal
}

// testLimitSlotsModel: random interleavings of takes, renewals (batched
// per holder), releases, clock moves and crashes (a holder that stops
// renewing and releasing) by several holders on a few groups, checked
// step by step against an in-memory model of the contract: a take
// succeeds exactly when fewer than max leases of the group are live at
// its time, a renewal extends exactly the live leases among its tokens,
// a release reports exactly whether its lease was live, a token never
// comes twice; and at no time are more than max leases of a group live.
func testLimitSlotsModel(x *h) {
	for seed := range uint64(4) {
		slotsModelRun(x, seed)
	}
}

func slotsModelRun(x *h, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5107))
	name := fmt.Sprintf("m%d", seed)
	groups := []string{"g1", "g2", "g3"}
	maxOf := map[string]int{"g1": 1, "g2": 2, "g3": 3}
	holders := []string{"h1", "h2", "h3", "h4"}
	crashed := map[string]bool{}
	tokens := map[int64]*slotModel{}
	held := map[string][]int64{} // holder -> tokens it believes it holds
	now := at(time.Duration(seed) * time.Hour)
	var steps []string
	fail := func(format string, args ...any) {
		x.t.Helper()
		last := steps[max(0, len(steps)-15):]
		x.t.Fatalf("seed %d step %d: %s\nlast steps:\n  %s", seed, len(steps), fmt.Sprintf(format, args...), strings.Join(last, "\n  "))
	}
	live := func(g string) int {
		n := 0
		for _, s := range tokens {
			if s.group == g && !s.done && s.until.After(now) {
				n++
			}
		}
		return n
	}
	for range 400 {
		h := holders[rng.IntN(len(holders))]
		switch op := rng.IntN(10); {
		case op < 4: // take
			if crashed[h] {
				continue
			}
			g := groups[rng.IntN(len(groups))]
			lease := time.Duration(1+rng.IntN(5)) * time.Second
			want := live(g) < maxOf[g]
			tok := x.takeSlot(name, g, maxOf[g], h, now, now.Add(lease))
			steps = append(steps, fmt.Sprintf("%s take %s at %s for %s: %d (want ok %v)", h, g, fmtTime(now), lease, tok, want))
			if (tok != 0) != want {
				fail("take: token %d, want a slot %v (%d of %d live)", tok, want, live(g), maxOf[g])
			}
			if tok != 0 {
				if tokens[tok] != nil {
					fail("token %d given twice", tok)
				}
				tokens[tok] = &slotModel{group: g, holder: h, until: now.Add(lease)}
				held[h] = append(held[h], tok)
			}
		case op < 6: // renew the holder's batch
			if crashed[h] || len(held[h]) == 0 {
				continue
			}
			until := now.Add(time.Duration(1+rng.IntN(5)) * time.Second)
			var want []int64
			for _, tok := range held[h] {
				if s := tokens[tok]; s.done || !s.until.After(now) {
					want = append(want, tok)
				}
			}
			lost := x.renewSlots(held[h], now, until)
			steps = append(steps, fmt.Sprintf("%s renew %v at %s to %s: lost %v", h, held[h], fmtTime(now), fmtTime(until), lost))
			if !slices.Equal(sorted(lost), sorted(want)) {
				fail("renew: lost %v, want %v", lost, want)
			}
			var keep []int64
			for _, tok := range held[h] {
				if slices.Contains(lost, tok) {
					tokens[tok].done = true
				} else {
					tokens[tok].until = until
					keep = append(keep, tok)
				}
			}
			held[h] = keep
		case op < 8: // release one
			if crashed[h] || len(held[h]) == 0 {
				continue
			}
			i := rng.IntN(len(held[h]))
			tok := held[h][i]
			s := tokens[tok]
			want := !s.done && s.until.After(now)
			got := x.releaseSlot(tok, now)
			steps = append(steps, fmt.Sprintf("%s release %d at %s: %v", h, tok, fmtTime(now), got))
			if got != want {
				fail("release %d: held %v, want %v", tok, got, want)
			}
			s.done = true
			held[h] = slices.Delete(held[h], i, i+1)
		case op < 9: // the clock moves
			now = now.Add(time.Duration(rng.IntN(2500)) * time.Millisecond)
			steps = append(steps, fmt.Sprintf("clock %s", fmtTime(now)))
		default: // a crash: the holder stops renewing and releasing; a restart
			if crashed[h] {
				crashed[h] = false
				held[h] = nil
				steps = append(steps, h+" restarts")
			} else {
				crashed[h] = true
				steps = append(steps, h+" crashes")
			}
		}
		for _, g := range groups {
			if n := live(g); n > maxOf[g] {
				fail("group %s: %d live leases, max %d", g, n, maxOf[g])
			}
		}
	}
	// Once every lease has ended, every group has all its slots back.
	now = now.Add(time.Minute)
	for _, g := range groups {
		for i := range maxOf[g] {
			if tok := x.takeSlot(name, g, maxOf[g], "end", now, now.Add(time.Second)); tok == 0 {
				fail("after every lease ended: group %s's slot %d of %d not free", g, i+1, maxOf[g])
			}
		}
	}
}

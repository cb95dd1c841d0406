package storetest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testLimitsHoldModel: random interleavings of fetches, outcomes (some
// stale, some holding their group on a Retry-After), enqueues, the hold
// turned off and on, and a clock moving on, against a model of the
// contract: a fetch leases, of each group its hold does not hold at its
// time, as many due jobs as the group's free slots allow, and none of a
// held group; a hold is the latest applied one of the group, ends at its
// time or when the hold is turned off, and a stale outcome holds
// nothing; NextStart is the earliest end of the holds of the groups that
// keep due jobs from starting (none full), SlotWait whether a full group
// has due jobs.
func testLimitsHoldModel(x *h) {
	const max = 2
	groups := []string{"a", "b", "c"}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 28))
		queue, limit := fmt.Sprintf("hm%d", seed), fmt.Sprintf("hmod%d", seed)
		type wait struct {
			group string
			runAt time.Time
		}
		waiting := map[int64]wait{}
		running := map[int64]*store.Job{}
		groupOf := map[int64]string{}
		holds := map[string]time.Time{}
		holdOn := true
		now := at(time.Second)
		enqueue := func(g string, runAt time.Time) {
			nj := held(queue, limit, g, max, store.LimitRate{})
			nj.RunAt = runAt
			j := x.enqueue(now, nj)[0]
			waiting[j.ID] = wait{g, runAt}
			groupOf[j.ID] = g
		}
		for _, g := range groups {
			for range 3 {
				enqueue(g, now)
			}
		}
		var next time.Time
		var slotWait bool
		for step := range 150 {
			where := fmt.Sprintf("seed %d step %d at %s", seed, step, fmtTime(now))
			switch op := r.IntN(10); {
			case op < 3: // fetch
				runs := map[string]int{}
				for _, j := range running {
					runs[groupOf[j.ID]]++
				}
				due := map[string]int{}
				for _, w := range waiting {
					if !w.runAt.After(now) {
						due[w.group]++
					}
				}
				want := map[string]int{}
				var wantNext time.Time
				wantSlot := false
				for _, g := range groups {
					held := holds[g].After(now)
					if runs[g] >= max && due[g] > 0 {
						wantSlot = true
					}
					if held && runs[g] < max && due[g] > 0 && (wantNext.IsZero() || holds[g].Before(wantNext)) {
						wantNext = holds[g]
					}
					if !held {
						want[g] = min(max-runs[g], due[g])
					}
				}
				got := x.fetch(store.FetchParams{Queue: queue, Limit: 50, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w1",
					NextStart: &next, SlotWait: &slotWait})
				x.t.Logf("%s: fetch leased %d, next %s, slotWait %v", where, len(got), fmtTime(next), slotWait)
				leased := map[string]int{}
				for _, j := range got {
					w, ok := waiting[j.ID]
					if !ok || w.runAt.After(now) {
						x.t.Fatalf("%s: fetch leased job %d, not a due waiting job", where, j.ID)
					}
					delete(waiting, j.ID)
					running[j.ID] = j
					leased[w.group]++
				}
				for _, g := range groups {
					if leased[g] != want[g] {
						x.t.Fatalf("%s: fetch leased %d jobs of group %s (running %d, due %d, held until %s), want %d",
							where, leased[g], g, runs[g], due[g], fmtTime(holds[g]), want[g])
					}
				}
				if !sameTime(next, wantNext) && !(next.IsZero() && wantNext.IsZero()) {
					x.t.Fatalf("%s: NextStart %s, want %s", where, fmtTime(next), fmtTime(wantNext))
				}
				if slotWait != wantSlot {
					x.t.Fatalf("%s: SlotWait %v, want %v", where, slotWait, wantSlot)
				}
			case op < 6 && len(running) > 0: // an outcome, maybe stale
				var j *store.Job
				for _, c := range running {
					if j == nil || c.ID < j.ID || r.IntN(3) == 0 {
						j = c
					}
				}
				var o store.Outcome
				if r.IntN(3) == 0 {
					o = completeOf(j, now)
				} else {
					o = retryOf(j, now, now.Add(time.Duration(r.IntN(3))*time.Second), failure.RateLimited, "429")
					o.HoldUntil = now.Add(time.Duration(r.IntN(6)) * time.Second)
				}
				stale := r.IntN(4) == 0
				if stale {
					o.Worker = "w-other"
				}
				x.t.Logf("%s: outcome %v of job %d (group %s) run at %s hold %s stale %v", where, o.Kind, j.ID, groupOf[j.ID], fmtTime(o.RunAt), fmtTime(o.HoldUntil), stale)
				applied := x.finishApplied(o)
				if applied[0] == stale {
					x.t.Fatalf("%s: outcome of job %d (stale %v) applied %v", where, j.ID, stale, applied[0])
				}
				if stale {
					continue
				}
				delete(running, j.ID)
				if o.Kind == store.Retry {
					waiting[j.ID] = wait{groupOf[j.ID], o.RunAt}
					if g := groupOf[j.ID]; holdOn && o.HoldUntil.After(holds[g]) {
						holds[g] = o.HoldUntil
					}
				}
			case op < 7: // the hold turned off or on
				holdOn = r.IntN(2) == 0
				x.t.Logf("%s: hold %v", where, holdOn)
				if _, err := x.s.SetLimitHold(x.ctx, limit, holdOn, now); err != nil {
					x.t.Fatalf("%s: SetLimitHold(%v): %v", where, holdOn, err)
				}
				if !holdOn {
					clear(holds)
				}
			case op < 8: // a new job, due now or later
				x.t.Logf("%s: enqueue", where)
				enqueue(groups[r.IntN(len(groups))], now.Add(time.Duration(r.IntN(3))*time.Second))
			default: // time passes
				now = now.Add(time.Duration(r.IntN(2000)) * time.Millisecond)
			}
		}
	}
}

// testLimitsRetryDue: a limited job retried after its queue's fetches
// found no limited job waiting is leased by the next fetch from its due
// time, at once (the store's hint that the queue has no limited job due
// must not hide it).
func testLimitsRetryDue(x *h) {
	j := x.enqueue(at(0), rated("rd", "rdl", "a", 1, store.LimitRate{}))[0]
	p := store.FetchParams{Queue: "rd", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1"}
	got := x.fetchWant(p, j.ID)
	x.fetchWant(p) // none waiting
	x.finish(retryOf(got[0], at(time.Second), at(time.Second), failure.Transient, "boom"))
	p.Now = at(2 * time.Second)
	x.fetchWant(p, j.ID)
}

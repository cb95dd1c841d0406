package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// rated is a new job of queue under the limit name, group key, with the
// rate r and max max (0: none).
func rated(queue, name, key string, max int, r store.LimitRate) store.NewJob {
	return store.NewJob{Queue: queue, Kind: "k", Limit: name, LimitKey: key, LimitMax: max, LimitRate: r}
}

// testLimitsRate: a group's rate lets a burst start at once, then one job
// per emission interval; a held job waits due without using an attempt,
// the fetch says when it can start, and it starts at that time exactly,
// the group's first by priority then due time; groups are apart; the
// rate is listed and the delayed starts counted.
func testLimitsRate(x *h) {
	r := store.LimitRate{N: 2, Per: time.Second, Burst: 2} // T 500ms, 2 at once
	var nj []store.NewJob
	for range 5 {
		nj = append(nj, rated("rq", "rate", "a", 0, r))
	}
	nj = append(nj, rated("rq", "rate", "b", 0, r))
	hi := rated("rq", "rate", "a", 0, r)
	hi.Priority = 5
	hi.RunAt = at(time.Second)
	nj = append(nj, hi)
	jobs := x.enqueue(at(0), nj...)
	a, b, high := jobIDs(jobs[:5]), jobs[5].ID, jobs[6].ID
	var next time.Time
	p := store.FetchParams{Queue: "rq", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next}
	x.fetchWant(p, high, a[0], b)
	if !sameTime(next, at(1500*time.Millisecond)) {
		x.t.Errorf("NextStart after a burst = %s, want %s", fmtTime(next), fmtTime(at(1500*time.Millisecond)))
	}
	p.Now = at(1499 * time.Millisecond)
	x.fetchWant(p)
	if !sameTime(next, at(1500*time.Millisecond)) {
		x.t.Errorf("NextStart while held = %s, want %s", fmtTime(next), fmtTime(at(1500*time.Millisecond)))
	}
	if j := x.get(a[1]); j.Attempt != 0 || j.State != store.Pending {
		x.t.Errorf("held job: attempt %d, state %s; want 0, pending", j.Attempt, j.State)
	}
	p.Now = at(1500 * time.Millisecond)
	x.fetchWant(p, a[1])
	// Idle for long: the burst is back, no more.
	p.Now = at(time.Minute)
	x.fetchWant(p, a[2], a[3])
	if !sameTime(next, at(time.Minute+500*time.Millisecond)) {
		x.t.Errorf("NextStart = %s, want %s", fmtTime(next), fmtTime(at(time.Minute+500*time.Millisecond)))
	}
	l := x.limitState("rate", p.Now)
	if l.Max != 0 || l.Rate == nil || *l.Rate != r {
		x.t.Errorf("limit rate = %+v (rate %v), want max 0, rate %v", l, l.Rate, r)
	}
	// a[1] (due at 0) was held until 1.5s; a[2], a[3] were due at 0
	// and held (their group's next start was at 2s, past their due time).
	if l.Throttled < 1 {
		x.t.Errorf("limit rate: throttled %d, want at least 1", l.Throttled)
	}
	p.Now = at(time.Minute + 500*time.Millisecond)
	x.fetchWant(p, a[4])
	if !next.IsZero() {
		x.t.Errorf("NextStart with nothing held = %s, want zero", fmtTime(next))
	}

	// A fetch that waited for its turn counts its starts at its Clock's
	// time once it holds the lock, not at the Now it asked at.
	late := at(2 * time.Minute)
	c := x.enqueue(at(0), rated("rq", "rate", "c", 0, r), rated("rq", "rate", "c", 0, r), rated("rq", "rate", "c", 0, r))
	p = store.FetchParams{Queue: "rq", Limit: 10, Now: at(time.Minute + 600*time.Millisecond), LeaseUntil: at(time.Hour), Worker: "w1",
		NextStart: &next, Clock: func() time.Time { return late }}
	for _, j := range x.fetchWant(p, c[0].ID, c[1].ID) {
		if j.AttemptedAt == nil || !sameTime(*j.AttemptedAt, late) {
			x.t.Errorf("job leased with a Clock: attempted at %v, want %s", j.AttemptedAt, fmtTime(late))
		}
	}
	if !sameTime(next, late.Add(500*time.Millisecond)) {
		x.t.Errorf("NextStart after a Clock's fetch = %s, want %s", fmtTime(next), fmtTime(late.Add(500*time.Millisecond)))
	}

	// A rate with a max: both hold.
	both := store.LimitRate{N: 10, Per: time.Second, Burst: 5}
	var bj []store.NewJob
	for range 4 {
		bj = append(bj, rated("rq2", "both", "", 2, both))
	}
	got := x.enqueue(at(0), bj...)
	ids := jobIDs(got)
	p = store.FetchParams{Queue: "rq2", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1", NextStart: &next}
	leased := x.fetchWant(p, ids[0], ids[1])
	x.finish(completeOf(leased[0], at(time.Second)))
	x.fetchWant(p, ids[2])
}

// testLimitsRateSet: SetLimitRate sets, changes and removes a rate (the
// limit's max kept), creates a rate-only limit, wins over the rate a new
// job brings, and refuses bad rates, storing nothing.
func testLimitsRateSet(x *h) {
	r := store.LimitRate{N: 50, Per: time.Second, Burst: 10}
	st, err := x.s.SetLimitRate(x.ctx, "rs", r, at(0))
	if err != nil || st.Name != "rs" || st.Max != 0 || st.Rate == nil || *st.Rate != r {
		x.t.Fatalf("SetLimitRate(rs, %v) = %+v, %v", r, st, err)
	}
	if _, err := x.s.SetLimit(x.ctx, "rs", 3, at(time.Second)); err != nil {
		x.t.Fatal(err)
	}
	if l := x.limitState("rs", at(time.Second)); l.Max != 3 || l.Rate == nil || *l.Rate != r {
		x.t.Errorf("after SetLimit(rs, 3): %+v, want max 3 and rate %v", l, r)
	}
	// A job bringing another rate: the store's stands.
	x.enqueue(at(0), rated("rsq", "rs", "", 7, store.LimitRate{N: 1, Per: time.Minute, Burst: 1}))
	if l := x.limitState("rs", at(time.Second)); l.Max != 3 || l.Rate == nil || *l.Rate != r {
		x.t.Errorf("after a job with another rate: %+v, want max 3 and rate %v", l, r)
	}
	for _, bad := range []struct {
		r     store.LimitRate
		field string
	}{
		{store.LimitRate{N: 0, Per: time.Second, Burst: 1}, "rate"},
		{store.LimitRate{N: -1, Per: time.Second, Burst: 1}, "rate"},
		{store.LimitRate{N: 1, Per: 0, Burst: 1}, "interval"},
		{store.LimitRate{N: 1, Per: 25 * time.Hour, Burst: 1}, "interval"},
		{store.LimitRate{N: 1, Per: time.Microsecond * 999, Burst: 1}, "interval"},
		{store.LimitRate{N: 1, Per: time.Second + 1, Burst: 1}, "interval"},
		{store.LimitRate{N: 1, Per: time.Second, Burst: 0}, "burst"}, // SetLimitRate keeps the burst (LimitsEdit)
		{store.LimitRate{N: 2000, Per: time.Millisecond, Burst: 1}, "rate"},
	} {
		if bad.r.Burst != 0 {
			_, err := x.s.SetLimitRate(x.ctx, "rs", bad.r, at(2*time.Second))
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), bad.field) {
				x.t.Errorf("SetLimitRate(rs, %+v) = %v, want ErrInvalid naming %s", bad.r, err, bad.field)
			}
		}
		if _, err := x.s.Enqueue(x.ctx, []store.NewJob{rated("rsq", "rsbad", "", 0, bad.r)}, at(0)); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("Enqueue with rate %+v = %v, want ErrInvalid", bad.r, err)
		}
	}
	if _, err := x.s.Enqueue(x.ctx, []store.NewJob{rated("rsq", "rsbad", "", 0, store.LimitRate{})}, at(0)); !errors.Is(err, store.ErrInvalid) {
		x.t.Errorf("Enqueue with neither max nor rate = %v, want ErrInvalid", err)
	}
	if l := x.limitState("rs", at(time.Second)); l.Max != 3 || l.Rate == nil || *l.Rate != r {
		x.t.Errorf("after bad rates: %+v, want max 3 and rate %v", l, r)
	}
	ls, err := x.s.ListLimits(x.ctx, at(0))
	if err != nil {
		x.t.Fatal(err)
	}
	for _, l := range ls {
		if l.Name == "rsbad" {
			x.t.Errorf("a refused job stored its limit: %+v", l)
		}
	}
	st, err = x.s.SetLimitRate(x.ctx, "rs", store.LimitRate{}, at(3*time.Second))
	if err != nil || st.Rate != nil || st.Max != 3 {
		x.t.Errorf("SetLimitRate(rs, none) = %+v, %v; want max 3, no rate", st, err)
	}
}

// The rate model: several workers fetch, in random interleavings at
// random (microsecond) times, the jobs of groups under rates (some with a
// max too); the model runs the GCRA of store.LimitRate and says exactly
// which jobs each fetch leases and when the next held one can start.

type rmJob struct {
	id      int64
	group   string
	prio    int
	runAt   time.Time
	running bool
	done    bool
	job     *store.Job
}

type rmGroup struct {
	limit string
	key   string
	rate  store.LimitRate
	max   int
	tat   int64 // unix µs; 0: none
	start []int64
}

// testLimitsRateModel: random interleavings of enqueues, fetches by three
// workers and completions against the model: each fetch leases exactly
// the jobs the model's GCRA allows (the first of each group by priority
// then due time, within the fetch's limit), never a job before it is due,
// and none without its attempt; when it leases none of a held group, it
// says when the next can start; in every window of every group the
// starts are at most burst + rate·t.
func testLimitsRateModel(x *h) {
	for _, seed := range modelSeeds(x, 1) {
		runRateModel(x, seed)
		if x.t.Failed() {
			return
		}
	}
}

func runRateModel(x *h, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x7a7e))
	queue := fmt.Sprint("rmq", seed)
	groups := []*rmGroup{
		{limit: fmt.Sprint("rm-a", seed), key: "x", rate: store.LimitRate{N: 5, Per: time.Second, Burst: 1}},
		{limit: fmt.Sprint("rm-a", seed), key: "y", rate: store.LimitRate{N: 5, Per: time.Second, Burst: 1}},
		{limit: fmt.Sprint("rm-b", seed), rate: store.LimitRate{N: 3, Per: 700 * time.Millisecond, Burst: 4}},
		{limit: fmt.Sprint("rm-c", seed), rate: store.LimitRate{N: 20, Per: time.Second, Burst: 3}, max: 2},
	}
	now := at(time.Duration(seed) * time.Hour)
	var steps []string
	logf := func(f string, a ...any) {
		steps = append(steps, fmt.Sprintf("%s: ", now.Sub(base))+fmt.Sprintf(f, a...))
	}
	fail := func(f string, a ...any) {
		x.t.Fatalf("seed %d: %s\nsteps:\n%s", seed, fmt.Sprintf(f, a...), strings.Join(steps, "\n"))
	}
	jobs := map[int64]*rmJob{}
	gOf := map[string]*rmGroup{}
	for _, g := range groups {
		gOf[g.limit+"/"+g.key] = g
	}
	running := func(g *rmGroup) int {
		n := 0
		for _, j := range jobs {
			if j.running && j.group == g.limit+"/"+g.key {
				n++
			}
		}
		return n
	}
	for step := range 600 {
		switch k := rng.IntN(10); {
		case k < 3: // enqueue a few
			var nj []store.NewJob
			var gs []*rmGroup
			for range 1 + rng.IntN(4) {
				g := groups[rng.IntN(len(groups))]
				j := rated(queue, g.limit, g.key, g.max, g.rate)
				j.Priority = rng.IntN(2)
				j.RunAt = now.Add(time.Duration(rng.IntN(400)-100) * time.Millisecond)
				nj = append(nj, j)
				gs = append(gs, g)
			}
			got := x.enqueue(now, nj...)
			for i, j := range got {
				jobs[j.ID] = &rmJob{id: j.ID, group: gs[i].limit + "/" + gs[i].key, prio: nj[i].Priority, runAt: j.RunAt}
			}
			logf("enqueue %d", len(got))
		case k < 4: // complete some running jobs
			for _, j := range jobs {
				if j.running && rng.IntN(2) == 0 {
					x.finish(completeOf(j.job, now))
					j.running, j.done = false, true
					logf("complete %d", j.id)
				}
			}
		case k < 7: // time passes
			now = now.Add(time.Duration(rng.IntN(300_000)) * time.Microsecond)
		default: // a worker fetches
			limit := 1 + rng.IntN(4)
			nowUS := now.UnixMicro()
			// The model: each group's first jobs, as many as its rate
			// and slots allow, then the fetch's limit over them all.
			var cand []*rmJob
			allow := map[*rmGroup]int{}
			for _, g := range groups {
				var due []*rmJob
				for _, j := range jobs {
					if !j.running && !j.done && j.group == g.limit+"/"+g.key && !j.runAt.After(now) {
						due = append(due, j)
					}
				}
				slices.SortFunc(due, rmOrder)
				ti := g.rate.Interval().Microseconds()
				tau := int64(g.rate.Burst-1) * ti
				baseT := max(g.tat, nowUS)
				n := 0
				if nowUS+tau >= baseT {
					n = int((nowUS+tau-baseT)/ti) + 1
				}
				if g.max > 0 {
					n = min(n, g.max-running(g))
				}
				n = max(0, min(n, len(due)))
				allow[g] = n
				cand = append(cand, due[:n]...)
			}
			slices.SortFunc(cand, rmOrder)
			want := cand[:min(limit, len(cand))]
			var next time.Time
			p := store.FetchParams{Queue: queue, Limit: limit, Now: now, LeaseUntil: now.Add(time.Hour), Worker: lmWorkers[rng.IntN(len(lmWorkers))], NextStart: &next}
			wantIDs := make([]int64, len(want))
			for i, j := range want {
				wantIDs[i] = j.id
			}
			got := x.fetch(p)
			logf("fetch %s limit %d: %v (want %v)", p.Worker, limit, sortedIDs(got), sorted(wantIDs))
			if !slices.Equal(sortedIDs(got), sorted(wantIDs)) {
				fail("step %d: fetch leased %v, the model says %v", step, sortedIDs(got), sorted(wantIDs))
			}
			per := map[*rmGroup]int{}
			for _, gj := range got {
				j := jobs[gj.ID]
				if gj.Attempt != 1 {
					fail("job %d leased with attempt %d, want 1: a held job used an attempt", j.id, gj.Attempt)
				}
				if j.runAt.After(now) {
					fail("job %d leased before it was due", j.id)
				}
				j.running, j.job = true, gj
				g := gOf[j.group]
				per[g]++
				g.start = append(g.start, nowUS)
			}
			for g, n := range per {
				g.tat = max(g.tat, nowUS) + int64(n)*g.rate.Interval().Microseconds()
			}
			if len(got) < limit {
				// The next start of a group its rate holds.
				var hint int64
				for _, g := range groups {
					waiting := 0
					for _, j := range jobs {
						if !j.running && !j.done && j.group == g.limit+"/"+g.key && !j.runAt.After(now) {
							waiting++
						}
					}
					ti := g.rate.Interval().Microseconds()
					if at := g.tat - int64(g.rate.Burst-1)*ti; waiting > 0 && at > nowUS && (g.max == 0 || running(g) < g.max) && (hint == 0 || at < hint) {
						hint = at
					}
				}
				if hint != 0 && (next.IsZero() || next.UnixMicro() > hint) {
					fail("step %d: NextStart %s, want at or before %s", step, fmtTime(next), fmtTime(time.UnixMicro(hint)))
				}
				if !next.IsZero() && !next.After(now) {
					fail("step %d: NextStart %s is not after now", step, fmtTime(next))
				}
			}
		}
	}
	// The contract over every window of every group.
	for _, g := range groups {
		ti := g.rate.Interval().Microseconds()
		for i := range g.start {
			for k := i; k < len(g.start); k++ {
				if n, allowed := int64(k-i+1), int64(g.rate.Burst)+(g.start[k]-g.start[i])/ti; n > allowed {
					fail("group %s/%s: %d starts in %dµs, above burst %d + rate·t = %d", g.limit, g.key, n, g.start[k]-g.start[i], g.rate.Burst, allowed)
				}
			}
		}
		if len(g.start) == 0 {
			fail("group %s/%s never started a job", g.limit, g.key)
		}
	}
}

func rmOrder(a, b *rmJob) int {
	if c := cmp.Compare(b.prio, a.prio); c != 0 {
		return c
	}
	if c := a.runAt.Compare(b.runAt); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// limited is a new job of queue under limit name, group key, max max.
func limited(queue, name, key string, max int) store.NewJob {
	return store.NewJob{Queue: queue, Kind: "k", Limit: name, LimitKey: key, LimitMax: max}
}

// limitState returns the state of the limit named name, failing when
// there is none.
func (x *h) limitState(name string, now time.Time) store.LimitState {
	x.t.Helper()
	ls, err := x.s.ListLimits(x.ctx, now)
	if err != nil {
		x.t.Fatalf("ListLimits: %v", err)
	}
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	x.t.Fatalf("ListLimits = %+v: no limit %q", ls, name)
	return store.LimitState{}
}

// testLimitsFetch: a fetch leases, of each limited group, only as many of
// its oldest due jobs as it has free slots, fills the rest with unlimited
// jobs, and leases a waiting job of a group once one of its jobs ends.
func testLimitsFetch(x *h) {
	var nj []store.NewJob
	for range 4 {
		nj = append(nj, limited("q", "cust", "a", 2))
	}
	nj = append(nj, limited("q", "cust", "b", 2), store.NewJob{Queue: "q", Kind: "k"}, limited("q", "one", "", 1), limited("q", "one", "", 1))
	jobs := x.enqueue(at(0), nj...)
	a, b, free, one := jobIDs(jobs[:4]), jobs[4].ID, jobs[5].ID, jobIDs(jobs[6:])
	p := store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w1"}
	got := x.fetchWant(p, a[0], a[1], b, free, one[0])
	l := x.limitState("cust", at(time.Second))
	if l.Max != 2 || l.InUse != 3 || l.Busiest != 2 || l.Groups != 2 || l.Waiting != 2 {
		x.t.Errorf("limit cust = %+v, want max 2, in use 3, busiest 2, groups 2, waiting 2", l)
	}
	x.fetchWant(p)
	// The first job of group a ends: its oldest waiting job starts.
	x.finish(completeOf(got[0], at(2*time.Second)))
	p.Now = at(3 * time.Second)
	x.fetchWant(p, a[2])
	// A retry frees the slot too, and the retried job waits its turn.
	x.finish(retryOf(got[1], at(4*time.Second), at(4*time.Second), failure.Transient, "boom"))
	p.Now = at(5 * time.Second)
	x.fetchWant(p, a[3])
	x.fetchWant(p)
	if j := x.get(a[1]); j.State != store.Pending && j.State != store.Scheduled {
		x.t.Errorf("retried job %d is %s, want waiting", a[1], j.State)
	}
	// A job waiting on a limit used no attempt.
	if j := x.get(one[1]); j.Attempt != 0 {
		x.t.Errorf("job %d waiting on a limit has attempt %d, want 0", one[1], j.Attempt)
	}
	// An enqueue naming another max keeps the limit's.
	x.enqueue(at(5*time.Second), limited("q", "cust", "c", 7))
	if l := x.limitState("cust", at(5*time.Second)); l.Max != 2 {
		x.t.Errorf("limit cust max = %d after an enqueue naming 7, want 2 kept", l.Max)
	}
}

// testLimitsRescue: an expired lease keeps its slot until it is rescued;
// the rescue frees it, the next job starts, and the old run's outcomes
// and heartbeats are stale: the old run holds no slot.
func testLimitsRescue(x *h) {
	jobs := x.enqueue(at(0), limited("q", "one", "k", 1), limited("q", "one", "k", 1))
	p := store.FetchParams{Queue: "q", Limit: 5, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w1"}
	old := x.fetchWant(p, jobs[0].ID)[0]
	// Expired, not yet rescued: the slot is still taken.
	p.Now, p.Worker, p.LeaseUntil = at(2*time.Minute), "w2", at(3*time.Minute)
	x.fetchWant(p)
	exp := x.expired(at(2*time.Minute), 10)
	if len(exp) != 1 || exp[0].ID != old.ID {
		x.t.Fatalf("Expired = %v, want job %d", jobIDs(exp), old.ID)
	}
	x.finish(rescueOf(exp[0], at(2*time.Minute)))
	// The slot is free: the next due job of the group starts (the
	// rescued one, due at once, is the oldest).
	next := x.fetch(p)
	if len(next) != 1 {
		x.t.Fatalf("after the rescue, Fetch leased %v, want one job", jobIDs(next))
	}
	// The old run cannot take it back.
	if res := x.heartbeatLeases("w1", leasesOf(old), at(10*time.Minute)); len(res.Lost) != 1 {
		x.t.Errorf("heartbeat of the rescued lease = %+v, want it lost", res)
	}
	if applied := x.finishApplied(completeOf(old, at(2*time.Minute+time.Second))); applied[0] {
		x.t.Errorf("the rescued run's completion applied")
	}
	if l := x.limitState("one", at(2*time.Minute)); l.InUse != 1 || l.Busiest != 1 {
		x.t.Errorf("limit one = %+v, want in use 1", l)
	}
	x.fetchWant(p)
}

// testLimitsSet: SetLimit changes the max for the next fetch, creates a
// limit, and refuses bad input, storing nothing.
func testLimitsSet(x *h) {
	var nj []store.NewJob
	for range 5 {
		nj = append(nj, limited("q", "l", "", 1))
	}
	jobs := x.enqueue(at(0), nj...)
	p := store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w1"}
	first := x.fetchWant(p, jobs[0].ID)
	st, err := x.s.SetLimit(x.ctx, "l", 3, at(time.Second))
	if err != nil {
		x.t.Fatalf("SetLimit: %v", err)
	}
	if st.Name != "l" || st.Max != 3 || st.InUse != 1 || st.Waiting != 4 || !sameTime(st.UpdatedAt, at(time.Second)) {
		x.t.Errorf("SetLimit = %+v, want l, max 3, in use 1, waiting 4, updated at 1s", st)
	}
	got := x.fetchWant(p, jobs[1].ID, jobs[2].ID)
	// Lowered below the running count: no start until enough end.
	if _, err := x.s.SetLimit(x.ctx, "l", 1, at(2*time.Second)); err != nil {
		x.t.Fatalf("SetLimit: %v", err)
	}
	x.finish(completeOf(first[0], at(3*time.Second)), completeOf(got[0], at(3*time.Second)))
	x.fetchWant(p)
	x.finish(completeOf(got[1], at(4*time.Second)))
	x.fetchWant(p, jobs[3].ID)
	if _, err := x.s.SetLimit(x.ctx, "new", 4, at(0)); err != nil {
		x.t.Fatalf("SetLimit of a new limit: %v", err)
	}
	for _, bad := range []struct {
		name string
		max  int
	}{{"", 1}, {"x", 0}, {"x", -1}, {"x", store.MaxLimit + 1}, {strings.Repeat("n", store.MaxLimitName+1), 1}, {"a\nb", 1}, {"\xff", 1}} {
		if _, err := x.s.SetLimit(x.ctx, bad.name, bad.max, at(0)); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("SetLimit(%q, %d) = %v, want ErrInvalid", bad.name, bad.max, err)
		}
	}
	ls, err := x.s.ListLimits(x.ctx, at(5*time.Second))
	if err != nil {
		x.t.Fatal(err)
	}
	if names := limitNames(ls); !slices.Equal(names, []string{"l", "new"}) {
		x.t.Errorf("ListLimits names = %v, want [l new]: nothing stored by bad input", names)
	}
}

func limitNames(ls []store.LimitState) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	return out
}

// testLimitsInvalid: Enqueue refuses bad limit fields, storing nothing
// of the call.
func testLimitsInvalid(x *h) {
	for _, nj := range []store.NewJob{
		{Queue: "q", Kind: "k", LimitKey: "a"},
		{Queue: "q", Kind: "k", LimitMax: 2},
		limited("q", "l", "", 0),
		limited("q", "l", "", -3),
		limited("q", "l", "", store.MaxLimit+1),
		limited("q", "", "a", 2),
		limited("q", "l\x00", "", 2),
		limited("q", "l", strings.Repeat("k", store.MaxLimitName+1), 2),
	} {
		_, err := x.s.Enqueue(x.ctx, []store.NewJob{{Queue: "q", Kind: "ok"}, nj}, at(0))
		if !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("Enqueue(limit %q, key %q, max %d) = %v, want ErrInvalid", nj.Limit, nj.LimitKey, nj.LimitMax, err)
		}
	}
	if n, err := x.s.Count(x.ctx, store.Filter{}); err != nil || n != 0 {
		x.t.Errorf("Count = %d, %v after refused enqueues, want 0", n, err)
	}
	if ls, err := x.s.ListLimits(x.ctx, at(0)); err != nil || len(ls) != 0 {
		x.t.Errorf("ListLimits = %+v, %v after refused enqueues, want none", ls, err)
	}
}

// testLimitsIdempotent: a job whose idempotency key is taken changes no
// limit and no job.
func testLimitsIdempotent(x *h) {
	j1 := limited("q", "l", "a", 1)
	j1.IdempotencyKey = "key"
	first := x.enqueue(at(0), j1)[0]
	j2 := limited("q", "m", "b", 5)
	j2.IdempotencyKey = "key"
	again := x.enqueue(at(0), j2)[0]
	if !again.Existing || again.ID != first.ID {
		x.t.Fatalf("second enqueue = job %d existing %v, want job %d existing", again.ID, again.Existing, first.ID)
	}
	ls, err := x.s.ListLimits(x.ctx, at(0))
	if err != nil {
		x.t.Fatal(err)
	}
	if names := limitNames(ls); !slices.Equal(names, []string{"l"}) {
		x.t.Errorf("limits = %v, want [l]", names)
	}
}

// testLimitsConcurrent: workers fetching and finishing at once never run
// more than a group's max: each fetch is checked against the count the
// workers keep (taken when a fetch returns, given back before the
// outcome is sent, so it never counts more than run), and the store's
// own count after the fetch.
func testLimitsConcurrent(x *h) {
	const keys, perKey, max, workers = 2, 40, 2, 8
	var nj []store.NewJob
	for i := range keys * perKey {
		if i%3 == 0 {
			nj = append(nj, store.NewJob{Queue: "q", Kind: "free"})
		}
		l := limited("q", "l", fmt.Sprint("k", i%keys), max)
		l.Payload = raw(fmt.Sprintf(`{"key":%q}`, l.LimitKey))
		nj = append(nj, l)
	}
	x.enqueueMany(at(0), nj)
	var mu sync.Mutex
	running := map[string]int{}
	done := 0
	var wg sync.WaitGroup
	errc := make(chan error, 10_000)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprint("w", w)
			for idle := 0; idle < 200; {
				jobs, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "q", Limit: 4, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: worker})
				if err != nil {
					errc <- err
					return
				}
				mu.Lock()
				if done == len(nj) {
					mu.Unlock()
					return
				}
				for _, j := range jobs {
					if j.Kind == "free" {
						continue
					}
					key := payloadKey(j)
					running[key]++
					if running[key] > max {
						errc <- fmt.Errorf("group %s runs %d jobs, max %d", key, running[key], max)
					}
				}
				mu.Unlock()
				if len(jobs) == 0 {
					idle++
					continue
				}
				ls, err := x.s.ListLimits(x.ctx, at(time.Second))
				if err != nil {
					errc <- err
					return
				}
				for _, l := range ls {
					if l.Busiest > max {
						errc <- fmt.Errorf("limit %s: a group runs %d jobs, max %d", l.Name, l.Busiest, max)
					}
				}
				idle = 0
				var outs []store.Outcome
				mu.Lock()
				for _, j := range jobs {
					if j.Kind != "free" {
						running[payloadKey(j)]--
					}
					outs = append(outs, completeOf(j, at(2*time.Second)))
				}
				mu.Unlock()
				if _, err := x.s.Finish(x.ctx, outs); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				done += len(jobs)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		x.t.Error(err)
	}
	if done != len(nj) {
		x.t.Errorf("%d of %d jobs completed", done, len(nj))
	}
	if l := x.limitState("l", at(time.Second)); l.InUse != 0 || l.Waiting != 0 {
		x.t.Errorf("limit l = %+v at the end, want none in use or waiting", l)
	}
}

// payloadKey returns the "key" field of a job's payload.
func payloadKey(j *store.Job) string {
	var v struct{ Key string }
	if err := json.Unmarshal(j.Payload, &v); err != nil {
		return "?"
	}
	return v.Key
}

// testLimitsRace: many fetches at once of a group with one slot lease one
// job between them all, round after round.
func testLimitsRace(x *h) {
	const fetchers, rounds = 8, 10
	for r := range rounds {
		var nj []store.NewJob
		for range fetchers * 2 {
			nj = append(nj, limited("q", "race", fmt.Sprint("r", r), 1))
		}
		x.enqueue(at(0), nj...)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		var leased []*store.Job
		for w := range fetchers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				jobs, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "q", Limit: 2, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: fmt.Sprint("w", w)})
				if err != nil {
					x.t.Error(err)
				}
				mu.Lock()
				leased = append(leased, jobs...)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		if len(leased) != 1 {
			x.t.Fatalf("round %d: %d fetches at once of a group with one slot leased %v, want one job", r, fetchers, jobIDs(leased))
		}
		x.finish(completeOf(leased[0], at(2*time.Second)))
		// The rest of the round's jobs: drained one by one.
		for {
			got := x.fetch(store.FetchParams{Queue: "q", Limit: 5, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
			if len(got) == 0 {
				break
			}
			if len(got) != 1 {
				x.t.Fatalf("round %d: drain leased %v, want one job", r, jobIDs(got))
			}
			x.finish(completeOf(got[0], at(2*time.Second)))
		}
	}
}

// testLimitsPriority: the jobs of a limited group waiting on a full
// group start by priority, then due time, then id, whatever order they
// were enqueued and came due in: when a slot frees, the highest priority
// waiting job takes it, and a priority changed while the job waits
// counts. A fetch with free slots in several groups returns the jobs in
// (priority descending, run_at, id) order, with the unlimited ones.
func testLimitsPriority(x *h) {
	pri := func(nj store.NewJob, prio int, runAt time.Time) store.NewJob {
		nj.Priority, nj.RunAt = prio, runAt
		return nj
	}
	first := x.enqueue(at(0), limited("q", "one", "g", 1))
	p := store.FetchParams{Queue: "q", Limit: 5, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1"}
	run := x.fetchWant(p, first[0].ID)[0]
	// Waiting on the full group: the low one is the oldest due and was
	// enqueued first, the high ones came due later.
	jobs := x.enqueue(at(time.Second),
		pri(limited("q", "one", "g", 1), -10, at(0)),
		pri(limited("q", "one", "g", 1), 0, at(2*time.Second)),
		pri(limited("q", "one", "g", 1), 10, at(3*time.Second)),
		pri(limited("q", "one", "g", 1), 10, at(2*time.Second)),
		pri(limited("q", "one", "g", 1), 5, at(time.Second)))
	low, mid, highLate, highEarly, five := jobs[0].ID, jobs[1].ID, jobs[2].ID, jobs[3].ID, jobs[4].ID
	p.Now = at(4 * time.Second)
	x.fetchWant(p)
	// The middle one is raised above all while it waits.
	if _, err := x.s.SetPriority(x.ctx, mid, 20); err != nil {
		x.t.Fatalf("SetPriority(%d, 20): %v", mid, err)
	}
	for i, want := range []int64{mid, highEarly, highLate, five, low} {
		x.finish(completeOf(run, p.Now))
		p.Now = p.Now.Add(time.Second)
		run = x.fetchWant(p, want)[0]
		x.fetchWant(p)
		if i == 0 && run.Priority != 20 {
			x.t.Errorf("job %d leased with priority %d, want 20", run.ID, run.Priority)
		}
	}
	x.finish(completeOf(run, p.Now))
	// Free slots in two groups and an unlimited job: one fetch, in
	// (priority descending, run_at, id) order.
	jobs = x.enqueue(p.Now,
		pri(limited("q", "two", "a", 2), 0, time.Time{}),
		pri(limited("q", "two", "a", 2), 7, time.Time{}),
		pri(limited("q", "two", "a", 2), 3, time.Time{}),
		pri(store.NewJob{Queue: "q", Kind: "k"}, 5, time.Time{}),
		pri(limited("q", "two", "b", 2), 9, time.Time{}))
	p.Now = p.Now.Add(time.Second)
	got := x.fetch(p)
	want := []int64{jobs[4].ID, jobs[1].ID, jobs[3].ID, jobs[2].ID}
	if !slices.Equal(jobIDs(got), want) {
		x.t.Errorf("Fetch leased %v, want %v in that order (group a's priority 0 job waiting)", jobIDs(got), want)
	}
}

// testLimitsPriorityWindow: a limited job of a lower priority, behind
// 1,000 waiting jobs of a higher priority whose group is full, starts at
// the next fetch (the window leaves out the full group's jobs); once
// every group is full a fetch leases none, and a job of a new group
// enqueued then starts at the next fetch all the same.
func testLimitsPriorityWindow(x *h) {
	first := x.enqueue(at(0), limited("q", "one", "a", 1))
	p := store.FetchParams{Queue: "q", Limit: 5, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w1"}
	x.fetchWant(p, first[0].ID)
	nj := make([]store.NewJob, 0, 1002)
	for range 1000 {
		nj = append(nj, limited("q", "one", "a", 1))
	}
	low := limited("q", "one", "b", 1)
	low.Priority = -1
	lower := limited("q", "one", "c", 1)
	lower.Priority = -2
	jobs := x.enqueue(at(time.Second), append(nj, low, lower)...)
	b, c := jobs[len(jobs)-2].ID, jobs[len(jobs)-1].ID
	p.Now = at(2 * time.Second)
	x.fetchWant(p, b, c)
	x.fetchWant(p)
	// Every group full: that fetch leased none, and the ones after skip
	// the selection until a change; an enqueue is one.
	more := x.enqueue(at(time.Second), limited("q", "one", "d", 1))[0].ID
	x.fetchWant(p, more)
}

// testLimitsWindowStarve: a group with a free slot starts even when its
// job is behind more than the fetch's window (1,000) of older jobs that
// wait on another, full group: one customer's flood must not hold back
// the others (the isolation a per-key limit is for).
func testLimitsWindowStarve(x *h) {
	const flood = 1100
	nj := make([]store.NewJob, flood)
	for i := range nj {
		nj[i] = limited("q", "cust", "big", 1)
	}
	x.enqueueMany(at(0), nj)
	late := x.enqueue(at(time.Second), limited("q", "cust", "small", 1))[0]
	p := store.FetchParams{Queue: "q", Limit: 10, Now: at(2 * time.Second), LeaseUntil: at(time.Hour), Worker: "w"}
	// The first fetch sees big's oldest jobs only and starts one; the
	// next, with big full, must start small's.
	ids := jobIDs(x.fetch(p))
	ids = append(ids, jobIDs(x.fetch(p))...)
	if len(ids) != 2 || !slices.Contains(ids, late.ID) {
		x.t.Fatalf("two fetches with group big full behind its %d waiting jobs leased %v, want one of big and group small's job %d", flood, ids, late.ID)
	}
}

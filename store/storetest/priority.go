package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// fetchOrdered fetches with p and fails unless exactly the jobs with the
// given ids come back, in that order (highest priority first, then due
// time, then id).
func (x *h) fetchOrdered(what string, p store.FetchParams, want ...int64) []*store.Job {
	x.t.Helper()
	got := x.fetch(p)
	if !slices.Equal(jobIDs(got), want) {
		x.t.Fatalf("%s: Fetch(queue %q, limit %d, now %s) leased ids %v in this order, want %v",
			what, p.Queue, p.Limit, p.Now.Sub(base), jobIDs(got), want)
	}
	return got
}

// testPriorityOrder: Fetch leases the due jobs of the highest priority
// first, by due time within a priority; a higher priority's jobs due
// later wait for their time and do not hold back the due jobs below them;
// a batch of one fetch spans priorities.
func testPriorityOrder(x *h) {
	now := at(0)
	jobs := x.enqueue(now,
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-2 * time.Hour)},                                // a: 0
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-time.Hour), Priority: 5},                       // b: 5
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-3 * time.Hour), Priority: 5},                   // c: 5, older
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(time.Minute), Priority: 10},                     // d: 10, scheduled
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-5 * time.Hour), Priority: -3},                  // e: -3
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-time.Hour)},                                    // f: 0
		store.NewJob{Queue: "pq2", Kind: "k", RunAt: at(-time.Hour), Priority: store.MaxPriority},      // g: other queue
		store.NewJob{Queue: "pq", Kind: "k", Priority: 10},                                             // h: 10, now
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-9 * time.Hour), Priority: store.MinPriority},   // i: lowest
		store.NewJob{Queue: "pq", Kind: "k", RunAt: at(-time.Second), Priority: store.MaxPriority - 1}, // k: 99
	)
	a, b, c, d, e, f, g, hh, i, k := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5], jobs[6], jobs[7], jobs[8], jobs[9]
	for _, j := range jobs {
		if got := x.get(j.ID).Priority; got != j.Priority {
			x.t.Errorf("Get(%d).Priority = %d, Enqueue returned %d", j.ID, got, j.Priority)
		}
	}
	p := func(now time.Time, limit int) store.FetchParams {
		return store.FetchParams{Queue: "pq", Limit: limit, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}
	}
	x.fetchOrdered("limit 3 spans priorities 99, 10, 5", p(now, 3), k.ID, hh.ID, c.ID)
	x.fetchOrdered("the rest of priority 5 and part of 0", p(now, 2), b.ID, a.ID)
	x.fetchOrdered("the rest", p(now, 10), f.ID, e.ID, i.ID)
	x.fetchOrdered("d is due only at +1m", p(now, 10))
	x.fetchOrdered("d once due", p(at(time.Minute), 10), d.ID)
	if got := x.get(g.ID); got.State != store.Pending {
		x.t.Errorf("job %d of another queue is %s after fetches of pq, want pending", g.ID, got.State)
	}
}

// testPriorityTies: jobs of one priority and one due time are leased in
// id order, whether pending or scheduled when enqueued, one at a time or
// together.
func testPriorityTies(x *h) {
	due := at(time.Minute)
	var nj []store.NewJob
	for n := range 12 {
		nj = append(nj, store.NewJob{Queue: "tq", Kind: "k", RunAt: due, Priority: []int{3, -1}[n%4/2]})
	}
	// Half enqueued before their due time (scheduled), half after
	// (pending), interleaved, in two calls.
	first := x.enqueue(at(0), nj[:6]...)
	second := x.enqueue(at(2*time.Minute), nj[6:]...)
	all := append(first, second...)
	var want []int64
	for _, prio := range []int{3, -1} {
		for _, j := range all {
			if j.Priority == prio {
				want = append(want, j.ID)
			}
		}
	}
	now := at(2 * time.Minute)
	var got []int64
	for len(got) < len(want) {
		js := x.fetch(store.FetchParams{Queue: "tq", Limit: 1 + len(got)%3, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
		if len(js) == 0 {
			break
		}
		got = append(got, jobIDs(js)...)
	}
	x.checkIDs("leased in turn", got, want)
}

// testPriorityBehindBacklog: a job of a higher priority enqueued behind a
// backlog of due jobs of a lower one is the next leased; a backlog of a
// higher priority's jobs due later does not hide the due jobs below it.
func testPriorityBehindBacklog(x *h) {
	now := at(0)
	var low, later []store.NewJob
	for range 1000 {
		low = append(low, store.NewJob{Queue: "bq", Kind: "k", RunAt: at(-time.Hour), Priority: -1})
		later = append(later, store.NewJob{Queue: "bq", Kind: "k", RunAt: at(time.Hour), Priority: 50})
	}
	lows := x.enqueueMany(now, low)
	x.enqueueMany(now, later)
	urgent := x.enqueue(now, store.NewJob{Queue: "bq", Kind: "k", Priority: 1})[0]
	p := store.FetchParams{Queue: "bq", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}
	x.fetchOrdered("the urgent job first", p, urgent.ID)
	p.Limit = 3
	x.fetchOrdered("then the oldest low", p, lows[0].ID, lows[1].ID, lows[2].ID)
}

// testSetPriority: a waiting job's priority changes, and Fetch orders by
// the new one; a running or finished job's cannot (ErrConflict), an
// unknown job is ErrNotFound, a priority out of range is ErrInvalid, and
// a refusal changes nothing.
func testSetPriority(x *h) {
	now := at(0)
	jobs := x.enqueue(now,
		store.NewJob{Queue: "sq", Kind: "k", RunAt: at(-time.Hour)},   // a
		store.NewJob{Queue: "sq", Kind: "k", RunAt: at(-time.Minute)}, // b
		store.NewJob{Queue: "sq", Kind: "k", RunAt: at(time.Hour)},    // c: scheduled
	)
	a, b, c := jobs[0], jobs[1], jobs[2]
	set := func(id int64, prio int) *store.Job {
		x.t.Helper()
		j, err := x.s.SetPriority(x.ctx, id, prio)
		if err != nil {
			x.t.Fatalf("SetPriority(%d, %d): %v", id, prio, err)
		}
		return j
	}
	got := set(b.ID, 7)
	want := clone(x.get(b.ID))
	if got.Priority != 7 || want.Priority != 7 {
		x.t.Errorf("SetPriority(%d, 7) returned priority %d, Get %d; want 7", b.ID, got.Priority, want.Priority)
	}
	x.checkJob("SetPriority result", got, want)
	if got := set(c.ID, store.MaxPriority); got.State != store.Scheduled || got.Priority != store.MaxPriority {
		x.t.Errorf("SetPriority of scheduled job %d: state %s, priority %d; want scheduled, %d", c.ID, got.State, got.Priority, store.MaxPriority)
	}
	// Back and forth: the last one holds.
	set(a.ID, store.MinPriority)
	set(a.ID, 3)
	set(a.ID, store.DefaultPriority)
	p := store.FetchParams{Queue: "sq", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}
	running := x.fetchOrdered("b first, by its new priority", p, b.ID)[0]
	if running.Priority != 7 {
		x.t.Errorf("Fetch returned job %d with priority %d, want 7", running.ID, running.Priority)
	}

	refuse := func(what string, id int64, prio int, target error) {
		x.t.Helper()
		var before *store.Job
		if id != missingID {
			before = x.get(id)
		}
		j, err := x.s.SetPriority(x.ctx, id, prio)
		if j != nil || err == nil {
			x.t.Errorf("%s: SetPriority(%d, %d) = job %v, %v; want an error", what, id, prio, j, err)
		}
		x.checkErr(what, err, target)
		if before != nil {
			x.checkJob(what+": job after the refusal", x.get(id), before)
		}
	}
	refuse("running job", b.ID, 1, store.ErrConflict)
	refuse("unknown job", missingID, 1, store.ErrNotFound)
	refuse("priority above the range", a.ID, store.MaxPriority+1, store.ErrInvalid)
	refuse("priority below the range", a.ID, store.MinPriority-1, store.ErrInvalid)
	x.finish(completeOf(running, at(time.Second)))
	refuse("completed job", b.ID, 1, store.ErrConflict)
	x.cancel(a.ID, at(time.Second))
	refuse("canceled job", a.ID, 1, store.ErrConflict)
	dead := x.leaseNew(at(2*time.Second), "w", store.NewJob{Queue: "sq-dead", Kind: "k"})[0]
	x.finish(buryOf(dead, at(3*time.Second), failure.Permanent, "r", "fp", "boom"))
	refuse("dead job", dead.ID, 1, store.ErrConflict)
}

// testPriorityKept: a job keeps its priority through every write path of
// Enqueue (single, keyed, large batches), a retry, a snooze, a burial
// and a redrive; a key answered by an existing job returns that job's
// priority.
func testPriorityKept(x *h) {
	now := at(0)
	var batch []store.NewJob
	for n := range 450 {
		batch = append(batch, store.NewJob{Queue: "kq", Kind: "k", Priority: n%201 - 100})
	}
	for _, js := range [][]*store.Job{x.enqueue(now, batch...), x.enqueue(now, batch[:3]...)} {
		for i, j := range js {
			if got := x.get(j.ID).Priority; j.Priority != batch[i].Priority || got != batch[i].Priority {
				x.t.Fatalf("job %d of a batch: Enqueue returned priority %d, Get %d; want %d", i, j.Priority, got, batch[i].Priority)
			}
		}
	}
	keyed := x.enqueue(now, store.NewJob{Queue: "kq2", Kind: "k", IdempotencyKey: "p-key", Priority: 42})[0]
	again := x.enqueue(now, store.NewJob{Queue: "kq2", Kind: "k", IdempotencyKey: "p-key", Priority: 1})[0]
	if keyed.Priority != 42 || !again.Existing || again.Priority != 42 {
		x.t.Errorf("keyed job: priority %d; again: existing %v, priority %d; want 42, true, 42", keyed.Priority, again.Existing, again.Priority)
	}
	j := x.fetchOrdered("keyed", store.FetchParams{Queue: "kq2", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"}, keyed.ID)[0]
	x.finish(retryOf(j, at(time.Second), at(time.Minute), failure.Transient, "e"))
	if got := x.get(j.ID); got.State != store.Scheduled || got.Priority != 42 {
		x.t.Errorf("after a retry: %s, priority %d; want scheduled, 42", got.State, got.Priority)
	}
	j = x.fetch(store.FetchParams{Queue: "kq2", Limit: 1, Now: at(time.Minute), LeaseUntil: at(2 * time.Minute), Worker: "w"})[0]
	snooze := outcome(j, store.Snooze, at(time.Minute))
	snooze.RunAt = at(2 * time.Minute)
	x.finish(snooze)
	j = x.fetch(store.FetchParams{Queue: "kq2", Limit: 1, Now: at(2 * time.Minute), LeaseUntil: at(3 * time.Minute), Worker: "w"})[0]
	x.finish(buryOf(j, at(2*time.Minute), failure.Permanent, "r", "fp", "e"))
	x.redrive(store.RedriveParams{IDs: []int64{j.ID}, Now: at(3 * time.Minute)})
	if got := x.get(j.ID); got.State != store.Pending || got.Priority != 42 {
		x.t.Errorf("after a snooze, a burial and a redrive: %s, priority %d; want pending, 42", got.State, got.Priority)
	}
}

// The priority model: an in-memory statement of the order contract.
type prioJob struct {
	id       int64
	priority int
	runAt    time.Time
	state    store.State
	lease    *store.Job
}

// testPriorityModel: random interleavings of enqueues (random priorities
// and due times, pending and scheduled), fetches of random limits at
// advancing times, priority changes of waiting and running jobs, and
// completions, checked step by step against the model: each fetch leases
// exactly the jobs the model says, in its order. Fixed seeds keep it
// reproducible.
func testPriorityModel(x *h) {
	prios := []int{store.MinPriority, -1, 0, 0, 0, 2, 3, store.MaxPriority}
	for _, seed := range []uint64{1, 2, 3} {
		r := rand.New(rand.NewPCG(seed, 0x9a10))
		queue := fmt.Sprintf("pm%d", seed)
		now := at(time.Duration(seed) * time.Hour)
		jobs := map[int64]*prioJob{}
		var ids []int64
		var steps []string
		logf := func(format string, args ...any) {
			steps = append(steps, fmt.Sprintf("%s: ", now.Sub(base))+fmt.Sprintf(format, args...))
		}
		fail := func(format string, args ...any) {
			x.t.Fatalf("seed %d: "+format+"\nsteps:\n%s", append([]any{seed}, append(args, strings.Join(steps, "\n"))...)...)
		}
		for range 300 {
			switch op := r.IntN(10); {
			case op < 4: // enqueue 1-3 jobs
				var nj []store.NewJob
				for range 1 + r.IntN(3) {
					nj = append(nj, store.NewJob{Queue: queue, Kind: "k", Priority: prios[r.IntN(len(prios))],
						RunAt: now.Add(time.Duration(r.IntN(21)-10) * time.Second)})
				}
				for i, j := range x.enqueue(now, nj...) {
					jobs[j.ID] = &prioJob{id: j.ID, priority: nj[i].Priority, runAt: nj[i].RunAt, state: dueState(nj[i].RunAt, now)}
					ids = append(ids, j.ID)
					logf("enqueue job %d priority %d due %s", j.ID, nj[i].Priority, nj[i].RunAt.Sub(base))
				}
			case op < 7: // fetch
				limit := 1 + r.IntN(4)
				var due []*prioJob
				for _, id := range ids {
					if j := jobs[id]; (j.state == store.Pending || j.state == store.Scheduled) && !j.runAt.After(now) {
						due = append(due, j)
					}
				}
				slices.SortFunc(due, func(a, b *prioJob) int {
					if c := cmp.Compare(b.priority, a.priority); c != 0 {
						return c
					}
					if c := a.runAt.Compare(b.runAt); c != 0 {
						return c
					}
					return cmp.Compare(a.id, b.id)
				})
				var want []int64
				for _, j := range due[:min(limit, len(due))] {
					want = append(want, j.id)
				}
				got := x.fetch(store.FetchParams{Queue: queue, Limit: limit, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
				logf("fetch limit %d: %v", limit, jobIDs(got))
				if !slices.Equal(jobIDs(got), want) {
					fail("Fetch(limit %d) leased %v in this order, want %v", limit, jobIDs(got), want)
				}
				for _, g := range got {
					if g.Priority != jobs[g.ID].priority {
						fail("Fetch returned job %d with priority %d, want %d", g.ID, g.Priority, jobs[g.ID].priority)
					}
					jobs[g.ID].state, jobs[g.ID].lease = store.Running, g
				}
			case op < 8: // change a priority
				if len(ids) == 0 {
					continue
				}
				j := jobs[ids[r.IntN(len(ids))]]
				prio := prios[r.IntN(len(prios))]
				got, err := x.s.SetPriority(x.ctx, j.id, prio)
				logf("set priority of job %d (%s) to %d: %v", j.id, j.state, prio, err)
				if j.state == store.Pending || j.state == store.Scheduled {
					if err != nil || got.Priority != prio {
						fail("SetPriority(%d, %d) of a waiting job = %v, %v; want the job with its new priority", j.id, prio, got, err)
					}
					j.priority = prio
				} else {
					x.checkErr(fmt.Sprintf("seed %d: SetPriority of a %s job", seed, j.state), err, store.ErrConflict)
				}
			case op < 9: // complete a running job
				for _, id := range ids {
					if j := jobs[id]; j.state == store.Running {
						x.finish(completeOf(j.lease, now))
						j.state = store.Completed
						logf("complete job %d", id)
						break
					}
				}
			default:
				now = now.Add(time.Duration(1+r.IntN(5)) * time.Second)
			}
		}
	}
}

// testPriorityDueTimes: NextDue and OldestDue see the waiting jobs of
// every priority: the earliest is found whatever its priority, and a job
// due later is not due, whatever its priority.
func testPriorityDueTimes(x *h) {
	now := at(0)
	x.enqueue(now,
		store.NewJob{Queue: "dq", Kind: "k", RunAt: at(-time.Minute), Priority: 50},
		store.NewJob{Queue: "dq", Kind: "k", RunAt: at(-time.Hour), Priority: store.MinPriority},
		store.NewJob{Queue: "dq", Kind: "k", RunAt: at(-2 * time.Minute)},
		store.NewJob{Queue: "dq2", Kind: "k", RunAt: at(time.Hour), Priority: store.MaxPriority},
		store.NewJob{Queue: "dq2", Kind: "k", RunAt: at(2 * time.Hour), Priority: -5},
		store.NewJob{Queue: "dq2", Kind: "k", RunAt: at(-time.Second), Priority: -7},
	)
	for _, c := range []struct {
		queue string
		want  time.Time
	}{{"dq", at(-time.Hour)}, {"dq2", at(-time.Second)}} {
		got, ok, err := x.s.NextDue(x.ctx, c.queue)
		if err != nil || !ok || !sameTime(got, c.want) {
			x.t.Errorf("NextDue(%q) = %s, %v, %v; want %s", c.queue, fmtTime(got), ok, err, fmtTime(c.want))
		}
	}
	got, err := x.s.OldestDue(x.ctx, []string{"dq", "dq2", "none"}, now)
	if err != nil {
		x.t.Fatalf("OldestDue: %v", err)
	}
	if len(got) != 2 || !sameTime(got["dq"], at(-time.Hour)) || !sameTime(got["dq2"], at(-time.Second)) {
		x.t.Errorf("OldestDue = %v; want dq %s, dq2 %s", got, fmtTime(at(-time.Hour)), fmtTime(at(-time.Second)))
	}
	// The only job of dq2 due now leaves: dq2's next is the top priority's, an hour ahead.
	x.fetch(store.FetchParams{Queue: "dq2", Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	if got, ok, err := x.s.NextDue(x.ctx, "dq2"); err != nil || !ok || !sameTime(got, at(time.Hour)) {
		x.t.Errorf("NextDue(dq2) after its due job left = %s, %v, %v; want %s", fmtTime(got), ok, err, fmtTime(at(time.Hour)))
	}
	if got, err := x.s.OldestDue(x.ctx, []string{"dq2"}, now); err != nil || len(got) != 0 {
		x.t.Errorf("OldestDue(dq2) with nothing due = %v, %v; want none", got, err)
	}
}

// testSetPriorityConcurrent: SetPriority races fetches on goroutines.
// Whatever the interleaving, a change that succeeded was made while the
// job waited, so the job is leased with the last priority a change gave
// it; once a change is refused (the job leased) no later one succeeds;
// a change is refused only with ErrConflict; every job is leased once;
// and each fetch returns its jobs in (priority descending, due time,
// id) order.
func testSetPriorityConcurrent(x *h) {
	const n, setters, fetchers = 240, 2, 3
	now := at(0)
	var nj []store.NewJob
	for i := range n {
		nj = append(nj, store.NewJob{Queue: "spc", Kind: "k", Priority: i%7 - 3, RunAt: now.Add(-time.Duration(i%5) * time.Second)})
	}
	jobs := x.enqueue(now, nj...)
	// last[i] is the priority job i was last given (by its setter only).
	last := make([]int, n)
	for i, j := range jobs {
		last[i] = j.Priority
	}
	leased := make([]*store.Job, n)
	index := map[int64]int{}
	for i, j := range jobs {
		index[j.ID] = i
	}
	var mu sync.Mutex
	var errs []string
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	for f := range fetchers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(f), 7))
			for total.Load() < n {
				got, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "spc", Limit: 1 + r.IntN(5), Now: now, LeaseUntil: now.Add(time.Hour), Worker: fmt.Sprintf("f%d", f)})
				if err != nil {
					fail("Fetch: %v", err)
					return
				}
				for k, j := range got {
					if k > 0 {
						p := got[k-1]
						if p.Priority < j.Priority || p.Priority == j.Priority && (p.RunAt.After(j.RunAt) || p.RunAt.Equal(j.RunAt) && p.ID > j.ID) {
							fail("Fetch returned job %d (priority %d) before job %d (priority %d)", p.ID, p.Priority, j.ID, j.Priority)
						}
					}
					mu.Lock()
					i := index[j.ID]
					if leased[i] != nil {
						errs = append(errs, fmt.Sprintf("job %d leased twice", j.ID))
					}
					leased[i] = j
					mu.Unlock()
				}
				total.Add(int64(len(got)))
			}
		})
	}
	for s := range setters {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(s), 11))
			refused := map[int]bool{}
			for total.Load() < n {
				i := s + setters*r.IntN(n/setters)
				p := r.IntN(store.MaxPriority-store.MinPriority+1) + store.MinPriority
				j, err := x.s.SetPriority(x.ctx, jobs[i].ID, p)
				switch {
				case err == nil:
					if refused[i] {
						fail("SetPriority of job %d succeeded after it was refused", jobs[i].ID)
					}
					if j.Priority != p || (j.State != store.Pending && j.State != store.Scheduled) {
						fail("SetPriority(%d, %d) returned %s, priority %d", jobs[i].ID, p, j.State, j.Priority)
					}
					mu.Lock()
					last[i] = p
					mu.Unlock()
				case errors.Is(err, store.ErrConflict):
					refused[i] = true
				default:
					fail("SetPriority(%d, %d): %v", jobs[i].ID, p, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, e := range errs {
		x.t.Error(e)
	}
	for i, j := range leased {
		if j == nil {
			x.t.Errorf("job %d never leased", jobs[i].ID)
			continue
		}
		if j.Priority != last[i] {
			x.t.Errorf("job %d leased with priority %d; the last change that succeeded gave it %d", j.ID, j.Priority, last[i])
		}
		if got := x.get(j.ID); got.State != store.Running || got.Priority != last[i] {
			x.t.Errorf("job %d: %s, priority %d; want running, %d", j.ID, got.State, got.Priority, last[i])
		}
	}
}

// testPriorityModelLevels: random enqueues over many priority levels
// (most of whose jobs are due later), fetches with a random look-ahead
// (DueBy past Now) and random limits, checked against the model: each
// fetch leases exactly the due-by jobs the model says, in its order, so
// no level is skipped and none taken out of turn however the due and
// not-yet-due levels interleave. Fixed seeds keep it reproducible.
func testPriorityModelLevels(x *h) {
	for _, seed := range []uint64{4, 5} {
		r := rand.New(rand.NewPCG(seed, 0x1e7e1))
		queue := fmt.Sprintf("pl%d", seed)
		now := at(time.Duration(seed) * time.Hour)
		type mj struct {
			id       int64
			priority int
			runAt    time.Time
			waiting  bool
		}
		var jobs []*mj
		for range 200 {
			if op := r.IntN(3); op == 0 {
				var nj []store.NewJob
				for range 1 + r.IntN(20) {
					nj = append(nj, store.NewJob{Queue: queue, Kind: "k", Priority: r.IntN(201) - 100,
						RunAt: now.Add(time.Duration(r.IntN(120)-20) * time.Second)})
				}
				for i, j := range x.enqueue(now, nj...) {
					jobs = append(jobs, &mj{id: j.ID, priority: nj[i].Priority, runAt: nj[i].RunAt, waiting: true})
				}
				continue
			} else if op == 1 {
				now = now.Add(time.Duration(1+r.IntN(10)) * time.Second)
				continue
			}
			dueBy := now.Add(time.Duration(r.IntN(3)) * time.Second)
			limit := 1 + r.IntN(10)
			var due []*mj
			for _, j := range jobs {
				if j.waiting && !j.runAt.After(dueBy) {
					due = append(due, j)
				}
			}
			slices.SortFunc(due, func(a, b *mj) int {
				if c := cmp.Compare(b.priority, a.priority); c != 0 {
					return c
				}
				if c := a.runAt.Compare(b.runAt); c != 0 {
					return c
				}
				return cmp.Compare(a.id, b.id)
			})
			var want []int64
			for _, j := range due[:min(limit, len(due))] {
				want = append(want, j.id)
				j.waiting = false
			}
			got := x.fetch(store.FetchParams{Queue: queue, Limit: limit, Now: now, DueBy: dueBy, LeaseUntil: now.Add(time.Hour), Worker: "w"})
			if !slices.Equal(jobIDs(got), want) {
				x.t.Fatalf("seed %d: Fetch(limit %d, due by now+%s) leased %v, want %v", seed, limit, dueBy.Sub(now), jobIDs(got), want)
			}
		}
	}
}

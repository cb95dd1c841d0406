package storetest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testFetch: due jobs of one queue, oldest run_at first then id, up to the
// limit; each leased with its fields set; future jobs and other queues left
// alone.
func testFetch(x *h) {
	now := at(0)
	jobs := x.enqueue(now,
		store.NewJob{Queue: "fq", Kind: "k", RunAt: at(-time.Hour)},            // a
		store.NewJob{Queue: "fq", Kind: "k", RunAt: at(-2 * time.Hour)},        // b
		store.NewJob{Queue: "fq", Kind: "k"},                                   // c: now
		store.NewJob{Queue: "fq", Kind: "k", RunAt: at(time.Minute)},           // d: scheduled
		store.NewJob{Queue: "fq", Kind: "k", RunAt: at(-2 * time.Hour)},        // e: ties b, larger id
		store.NewJob{Queue: "fq", Kind: "k", RunAt: at(time.Hour)},             // f: scheduled
		store.NewJob{Queue: "fq2", Kind: "k", RunAt: at(-3 * time.Hour)},       // g: other queue
		store.NewJob{Queue: "fq-suffix", Kind: "k", RunAt: at(-3 * time.Hour)}, // h: queue name sharing a prefix
	)
	a, b, c, d, e, f, g, hh := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5], jobs[6], jobs[7]
	before := map[int64]*store.Job{}
	for _, j := range jobs {
		before[j.ID] = x.get(j.ID)
	}

	type step struct {
		now    time.Time
		limit  int
		worker string
		want   []int64
	}
	steps := []step{
		{now, 2, "w1", []int64{b.ID, e.ID}},
		{now, 1, "w2", []int64{a.ID}},
		{now, 10, "w3", []int64{c.ID}}, // d is due only at now+1m
		{at(time.Minute), 10, "w4", []int64{d.ID}},
		{at(time.Minute), 10, "w5", nil},
	}
	for i, s := range steps {
		lease := s.now.Add(30 * time.Second)
		got := x.fetchWant(store.FetchParams{Queue: "fq", Limit: s.limit, Now: s.now, LeaseUntil: lease, Worker: s.worker}, s.want...)
		for _, j := range got {
			want := clone(before[j.ID])
			want.State = store.Running
			want.Attempt = 1
			want.AttemptedAt = tp(s.now)
			want.LeaseUntil = tp(lease)
			want.Worker = s.worker
			x.checkJob(fmt.Sprintf("Fetch step %d result", i), j, want, "History")
			x.checkJob(fmt.Sprintf("Get after Fetch step %d", i), x.get(j.ID), want)
		}
	}
	for _, j := range []*store.Job{f, g, hh} {
		x.checkJob("job not fetched", x.get(j.ID), before[j.ID])
	}
	if n := x.counter("fq", store.StatAttempts); n != 5 {
		x.t.Errorf("counter fq/attempts = %d, want 5", n)
	}
	for _, q := range []string{"fq2", "fq-suffix"} {
		if n := x.counter(q, store.StatAttempts); n != 0 {
			x.t.Errorf("counter %s/attempts = %d, want 0", q, n)
		}
	}
}

// testFetchConcurrent: 8 workers fetching 2,000 jobs ten at a time lease
// each job exactly once.
func testFetchConcurrent(x *h) {
	const total, workers = 2000, 8
	var jobs []store.NewJob
	for i := range total {
		jobs = append(jobs, store.NewJob{Queue: "cq", Kind: "k", Payload: raw(fmt.Sprintf(`{"i":%d}`, i))})
	}
	created := x.enqueueMany(at(0), jobs)
	type lease struct {
		id      int64
		attempt int
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   [workers][]lease
		errs  [workers]error
	)
	for w := range workers {
		wg.Go(func() {
			<-start
			name := fmt.Sprintf("w%d", w)
			for range total {
				js, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: "cq", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: name})
				if err != nil {
					errs[w] = err
					return
				}
				if len(js) > 10 {
					errs[w] = fmt.Errorf("fetch with Limit 10 returned %d jobs", len(js))
					return
				}
				if len(js) == 0 {
					return
				}
				for _, j := range js {
					if j.Worker != name || j.State != store.Running {
						errs[w] = fmt.Errorf("fetch by %s returned job %d with worker %q, state %s", name, j.ID, j.Worker, j.State)
						return
					}
					got[w] = append(got[w], lease{j.ID, j.Attempt})
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			x.t.Fatalf("worker %d: %v", w, err)
		}
	}
	owner := map[int64]string{}
	seen := map[lease]bool{}
	for w, ls := range got {
		for _, l := range ls {
			if seen[l] {
				x.t.Errorf("job %d attempt %d leased twice", l.id, l.attempt)
			}
			seen[l] = true
			if l.attempt != 1 {
				x.t.Errorf("job %d leased with attempt %d, want 1", l.id, l.attempt)
			}
			owner[l.id] = fmt.Sprintf("w%d", w)
		}
	}
	if len(owner) != total {
		x.t.Errorf("%d distinct jobs leased, want %d", len(owner), total)
	}
	for _, j := range created {
		if _, ok := owner[j.ID]; !ok {
			x.t.Errorf("job %d was never leased", j.ID)
			break
		}
	}
	if rest := x.fetch(store.FetchParams{Queue: "cq", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour), Worker: "late"}); len(rest) != 0 {
		x.t.Errorf("a Fetch after the workers drained the queue leased %v", jobIDs(rest))
	}
	// The store agrees on who holds each job.
	for _, j := range x.listAll(store.Filter{Queue: "cq"}, store.MaxPageSize) {
		if j.State != store.Running || j.Worker != owner[j.ID] || j.Attempt != 1 {
			x.t.Errorf("job %d: state %s, worker %q, attempt %d; want running, %q, 1", j.ID, j.State, j.Worker, j.Attempt, owner[j.ID])
		}
	}
	if n := x.counter("cq", store.StatAttempts); n != total {
		x.t.Errorf("counter cq/attempts = %d, want %d", n, total)
	}
}

// testTimeZones: times given in other zones are the same instants: due
// checks, ordering and NextDue compare instants, not local wall times.
func testTimeZones(x *h) {
	east := time.FixedZone("UTC+5", 5*3600)
	west := time.FixedZone("UTC-8", -8*3600)
	jobs := x.enqueue(base.In(east),
		store.NewJob{Queue: "tz", Kind: "k", RunAt: at(time.Hour).In(west)},
		store.NewJob{Queue: "tz", Kind: "k", RunAt: at(30 * time.Minute).In(east)},
		store.NewJob{Queue: "tz", Kind: "k", RunAt: at(45 * time.Minute)},
	)
	for _, j := range jobs {
		if j.State != store.Scheduled || !sameTime(j.CreatedAt, base) {
			x.t.Errorf("job %d enqueued at base in UTC+5 with a later RunAt: state %s, CreatedAt %s; want scheduled, %s", j.ID, j.State, fmtTime(j.CreatedAt), fmtTime(base))
		}
	}
	if t, ok, err := x.s.NextDue(x.ctx, "tz"); err != nil || !ok || !sameTime(t, at(30*time.Minute)) {
		x.t.Errorf("NextDue(tz) = %s, %v, %v; want %s, true, nil", fmtTime(t), ok, err, fmtTime(at(30*time.Minute)))
	}
	// Just before the earliest instant, written in a zone whose wall clock
	// reads later than every run_at's.
	p := store.FetchParams{Queue: "tz", Limit: 1, Now: at(30*time.Minute - time.Microsecond).In(east), LeaseUntil: at(3 * time.Hour), Worker: "w"}
	x.fetchWant(p)
	p.Now = at(2 * time.Hour).In(west)
	for _, j := range []*store.Job{jobs[1], jobs[2], jobs[0]} {
		x.fetchWant(p, j.ID)
	}
}

// testNextDue: the earliest run_at of the queue's pending and scheduled
// jobs.
func testNextDue(x *h) {
	nextDue := func(q string, want time.Time, wantOK bool) {
		x.t.Helper()
		t, ok, err := x.s.NextDue(x.ctx, q)
		if err != nil {
			x.t.Fatalf("NextDue(%s): %v", q, err)
		}
		if ok != wantOK || (ok && !sameTime(t, want)) {
			x.t.Errorf("NextDue(%s) = %s, %v; want %s, %v", q, fmtTime(t), ok, fmtTime(want), wantOK)
		}
	}
	nextDue("nq", time.Time{}, false)
	jobs := x.enqueue(at(0),
		store.NewJob{Queue: "nq", Kind: "k", RunAt: at(time.Hour)},
		store.NewJob{Queue: "nq", Kind: "k", RunAt: at(-time.Minute)},
		store.NewJob{Queue: "other", Kind: "k", RunAt: at(-time.Hour)},
	)
	nextDue("nq", at(-time.Minute), true)
	nextDue("other", at(-time.Hour), true)
	x.fetchWant(store.FetchParams{Queue: "nq", Limit: 10, Now: at(0), LeaseUntil: at(time.Minute), Worker: "w"}, jobs[1].ID)
	nextDue("nq", at(time.Hour), true) // running jobs do not count
	j := x.fetchWant(store.FetchParams{Queue: "nq", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour), Worker: "w"}, jobs[0].ID)[0]
	nextDue("nq", time.Time{}, false) // all running
	x.finish(completeOf(j, at(time.Hour)))
	nextDue("nq", time.Time{}, false) // running and completed
	nextDue("other", at(-time.Hour), true)
}

// testHeartbeat: only running jobs held by the worker are extended; the
// ones among them whose cancellation was requested are reported.
func testHeartbeat(x *h) {
	ab := x.leaseNew(at(0), "w1", store.NewJob{Queue: "hq", Kind: "k"}, store.NewJob{Queue: "hq", Kind: "k"})
	a, b := ab[0], ab[1]
	c := x.leaseNew(at(0), "w2", store.NewJob{Queue: "hq", Kind: "k"})[0]
	d := x.leaseNew(at(0), "w1", store.NewJob{Queue: "hq", Kind: "k"})[0]
	x.finish(completeOf(d, at(time.Second)))
	if got := x.heartbeat("w1", []*store.Job{a, b}, at(45*time.Second)); len(got) != 0 {
		x.t.Errorf("Heartbeat before any cancel returned %v, want none", got)
	}
	x.cancel(b.ID, at(2*time.Second))
	x.cancel(c.ID, at(2*time.Second))
	beforeC, beforeD := x.get(c.ID), x.get(d.ID)

	missing := &store.Job{ID: missingID, Lease: 1}
	res := x.heartbeatLeases("w1", leasesOf(a, b, c, d, missing), at(90*time.Second))
	if want := (store.HeartbeatResult{Canceled: leasesOf(b), Lost: leasesOf(c, d, missing)}); !slices.Equal(res.Canceled, want.Canceled) || !slices.Equal(res.Lost, want.Lost) {
		x.t.Errorf("Heartbeat(w1) = %+v, want %+v", res, want)
	}
	for _, j := range []*store.Job{a, b} {
		g := x.get(j.ID)
		if g.State != store.Running || g.LeaseUntil == nil || !sameTime(*g.LeaseUntil, at(90*time.Second)) || g.Worker != "w1" {
			x.t.Errorf("job %d after Heartbeat(w1): state %s, LeaseUntil %s, worker %q; want running, %s, w1", j.ID, g.State, fmtTimePtr(g.LeaseUntil), g.Worker, fmtTime(at(90*time.Second)))
		}
	}
	x.checkJob("job held by w2 after Heartbeat(w1)", x.get(c.ID), beforeC)
	x.checkJob("completed job after Heartbeat(w1)", x.get(d.ID), beforeD)

	got := x.heartbeat("w2", []*store.Job{a, b, c}, at(120*time.Second))
	x.checkIDs("Heartbeat(w2) cancel list", got, []int64{c.ID})
	for _, j := range []*store.Job{a, b} {
		if g := x.get(j.ID); g.LeaseUntil == nil || !sameTime(*g.LeaseUntil, at(90*time.Second)) {
			x.t.Errorf("job %d held by w1: LeaseUntil %s after Heartbeat(w2), want still %s", j.ID, fmtTimePtr(g.LeaseUntil), fmtTime(at(90*time.Second)))
		}
	}
	if g := x.get(c.ID); g.LeaseUntil == nil || !sameTime(*g.LeaseUntil, at(120*time.Second)) {
		x.t.Errorf("job %d: LeaseUntil %s after Heartbeat(w2), want %s", c.ID, fmtTimePtr(g.LeaseUntil), fmtTime(at(120*time.Second)))
	}
}

// testExpired: running jobs whose lease ended strictly before now, up to
// the limit, across queues; a heartbeat or a finish takes a job out.
func testExpired(x *h) {
	xz := x.leaseNew(at(0), "w1", store.NewJob{Queue: "eq", Kind: "k"}, store.NewJob{Queue: "eq", Kind: "k"}, store.NewJob{Queue: "eq", Kind: "k"})
	j1, j2, j3 := xz[0], xz[1], xz[2] // leased until at(1m)
	u := x.enqueue(at(0), store.NewJob{Queue: "eq2", Kind: "k"})[0]
	u = x.fetchWant(store.FetchParams{Queue: "eq2", Limit: 1, Now: at(0), LeaseUntil: at(2 * time.Minute), Worker: "w2"}, u.ID)[0]
	pending := x.enqueue(at(0), store.NewJob{Queue: "eq3", Kind: "k", RunAt: at(-time.Hour)})[0]
	x.heartbeat("w1", []*store.Job{j2}, at(3*time.Minute))

	ids := func(js []*store.Job) []int64 { return jobIDs(js) }
	x.checkIDSet("Expired at the lease end", ids(x.expired(at(time.Minute), 10)), nil)
	got := x.expired(at(time.Minute+time.Microsecond), 10)
	x.checkIDSet("Expired just after the lease end", ids(got), []int64{j1.ID, j3.ID})
	for _, j := range got {
		if j.State != store.Running || j.Attempt != 1 || j.Worker != "w1" || j.LeaseUntil == nil || !sameTime(*j.LeaseUntil, at(time.Minute)) {
			x.t.Errorf("expired job %d: state %s, attempt %d, worker %q, LeaseUntil %s; want running, 1, w1, %s (the engine fences on them)",
				j.ID, j.State, j.Attempt, j.Worker, fmtTimePtr(j.LeaseUntil), fmtTime(at(time.Minute)))
		}
	}
	if got := x.expired(at(time.Minute+time.Second), 1); len(got) != 1 || (got[0].ID != j1.ID && got[0].ID != j3.ID) {
		x.t.Errorf("Expired with limit 1 returned %v, want one of %d, %d", ids(got), j1.ID, j3.ID)
	}
	x.checkIDSet("Expired after the second lease end", ids(x.expired(at(2*time.Minute+time.Second), 10)), []int64{j1.ID, j3.ID, u.ID})
	x.finish(completeOf(j1, at(2*time.Minute)))
	x.checkIDSet("Expired after job 1 completed", ids(x.expired(at(2*time.Minute+time.Second), 10)), []int64{j3.ID, u.ID})
	x.checkIDSet("Expired after every lease ended", ids(x.expired(at(time.Hour), 10)), []int64{j2.ID, j3.ID, u.ID})
	if g := x.get(pending.ID); g.State != store.Pending {
		x.t.Errorf("pending job %d: state %s after Expired, want pending", pending.ID, g.State)
	}
}

// testFetchAhead: a job leased before it is due (DueBy after Now, the
// worker's lookahead) records its due time as the attempt's start, since
// the worker starts it then; a job already due records Now.
func testFetchAhead(x *h) {
	now := at(0)
	jobs := x.enqueue(now,
		store.NewJob{Queue: "ahead", Kind: "k", RunAt: at(-time.Second)},
		store.NewJob{Queue: "ahead", Kind: "k", RunAt: at(15 * time.Millisecond)},
		store.NewJob{Queue: "ahead", Kind: "k", RunAt: at(time.Second)},
	)
	due, soon, later := jobs[0], jobs[1], jobs[2]
	got := x.fetchWant(store.FetchParams{Queue: "ahead", Limit: 10, Now: now, DueBy: at(20 * time.Millisecond),
		LeaseUntil: at(30 * time.Second), Worker: "w"}, due.ID, soon.ID)
	for _, j := range got {
		want := now
		if j.ID == soon.ID {
			want = soon.RunAt
		}
		if j.AttemptedAt == nil || !j.AttemptedAt.Equal(want) {
			x.t.Errorf("job %d (run_at %v) leased at %v: attempted_at %v, want %v", j.ID, j.RunAt, now, j.AttemptedAt, want)
		}
		if g := x.get(j.ID); g.AttemptedAt == nil || !g.AttemptedAt.Equal(want) {
			x.t.Errorf("Get job %d: attempted_at %v, want %v", j.ID, g.AttemptedAt, want)
		}
	}
	x.checkJob("job due after the lookahead", x.get(later.ID), later)
}

// testCancelRequested: a store.CancelChecker reports the running jobs of a
// worker whose cancellation was requested, without touching them (the
// subtest is skipped for a store that is not one).
func testCancelRequested(x *h) {
	cc, ok := x.s.(store.CancelChecker)
	if !ok {
		x.t.Skip("the store is not a store.CancelChecker")
	}
	ab := x.leaseNew(at(0), "w1", store.NewJob{Queue: "cq", Kind: "k"}, store.NewJob{Queue: "cq", Kind: "k"})
	a, b := ab[0], ab[1]
	c := x.leaseNew(at(0), "w2", store.NewJob{Queue: "cq", Kind: "k"})[0]
	d := x.leaseNew(at(0), "w1", store.NewJob{Queue: "cq", Kind: "k"})[0]
	ask := func(worker string, jobs ...*store.Job) []int64 {
		x.t.Helper()
		leases := leasesOf(jobs...)
		got, err := cc.CancelRequested(x.ctx, worker, leases)
		if err != nil {
			x.t.Fatalf("CancelRequested(%s, %v): %v", worker, leases, err)
		}
		if !slices.IsSortedFunc(got, compareLeases) {
			x.t.Errorf("CancelRequested(%s, %v) = %v, not sorted", worker, leases, got)
		}
		var ids []int64
		for _, l := range got {
			if !slices.Contains(leases, l) {
				x.t.Errorf("CancelRequested(%s, %v) = %v: lease %v not asked for", worker, leases, got, l)
			}
			ids = append(ids, l.JobID)
		}
		return ids
	}
	x.checkIDs("CancelRequested(w1) before any cancel", ask("w1", a, b, d), nil)
	x.checkIDs("CancelRequested(w1) of no jobs", ask("w1"), nil)
	x.cancel(b.ID, at(time.Second))
	x.cancel(c.ID, at(time.Second))
	x.cancel(a.ID, at(time.Second))
	beforeA, beforeB, beforeC := x.get(a.ID), x.get(b.ID), x.get(c.ID)
	x.checkIDs("CancelRequested(w1)", ask("w1", b, a, c, d, &store.Job{ID: missingID, Lease: 1}), []int64{a.ID, b.ID})
	x.checkIDs("CancelRequested(w2)", ask("w2", a, b, c), []int64{c.ID})
	x.checkIDs("CancelRequested(w1) of some of its jobs", ask("w1", b), []int64{b.ID})
	// Another lease of a job is not reported.
	staleA := *a
	staleA.Lease--
	x.checkIDs("CancelRequested(w1) of an earlier lease", ask("w1", &staleA), nil)
	x.checkJob("job after CancelRequested", x.get(a.ID), beforeA)
	x.checkJob("job after CancelRequested", x.get(b.ID), beforeB)
	x.checkJob("job after CancelRequested", x.get(c.ID), beforeC)
	// A job no longer running is not reported.
	x.finish(outcome(beforeB, store.Cancel, at(2*time.Second)))
	x.checkIDs("CancelRequested(w1) after b ended", ask("w1", a, b), []int64{a.ID})
}

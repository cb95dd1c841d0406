package storetest

import (
	"slices"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// afterLease is a job as Get shows it once its lease ended: no lease, no
// worker.
func afterLease(j *store.Job) *store.Job {
	w := clone(j)
	w.LeaseUntil = nil
	w.Worker = ""
	return w
}

// testFinishComplete: completed, FinishedAt = At, lease cleared, event
// appended when given, counters applied.
func testFinishComplete(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"x":1}`)}, store.NewJob{Queue: "q", Kind: "k"})
	before0, before1 := x.get(jobs[0].ID), x.get(jobs[1].ID)
	ev := store.Event{Kind: store.EventCompleted, Attempt: 1, At: at(0), Duration: store.Duration(1500 * time.Millisecond), Worker: "w1", Note: "ok"}
	o0 := completeOf(jobs[0], at(10*time.Second))
	o0.Event = &ev
	o0.Counters = []store.Counter{{Queue: "q", Name: store.StatSucceeded, N: 1}}
	o1 := completeOf(jobs[1], at(11*time.Second)) // no event
	o1.Counters = []store.Counter{{Queue: "q", Name: store.StatSucceeded, N: 1}}
	x.finish(o0, o1)

	want0 := afterLease(before0)
	want0.State = store.Completed
	want0.FinishedAt = tp(at(10 * time.Second))
	want0.History = append(want0.History, ev)
	x.checkJob("completed job", x.get(jobs[0].ID), want0)
	want1 := afterLease(before1)
	want1.State = store.Completed
	want1.FinishedAt = tp(at(11 * time.Second))
	x.checkJob("completed job without event", x.get(jobs[1].ID), want1)

	if n := x.counter("q", store.StatSucceeded); n != 2 {
		x.t.Errorf("counter q/succeeded = %d, want 2", n)
	}
	if got := x.fetch(store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour), Worker: "w2"}); len(got) != 0 {
		x.t.Errorf("Fetch leased completed jobs %v", jobIDs(got))
	}
}

// testFinishRetry: scheduled at RunAt (pending when RunAt <= At), retry
// count and last error recorded, attempt kept.
func testFinishRetry(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	ev := store.Event{Kind: store.EventRetry, Attempt: 1, At: at(0), Duration: store.Duration(5 * time.Second), Class: "transient",
		Error: "upstream 503", Reason: "http_503", Delay: store.Duration(time.Minute), Worker: "w1"}
	cases := []struct {
		runAt time.Time
		state store.State
	}{
		{at(65 * time.Second), store.Scheduled},
		{at(5 * time.Second), store.Pending}, // RunAt == At
		{at(time.Second), store.Pending},     // RunAt < At
	}
	var outs []store.Outcome
	var wants []*store.Job
	for i, c := range cases {
		o := retryOf(jobs[i], at(5*time.Second), c.runAt, failure.Transient, "upstream 503")
		o.Event = &ev
		o.Counters = []store.Counter{{Queue: "q", Name: store.StatFailed, Class: "transient", N: 1}, {Queue: "q", Name: store.StatRetried, N: 1}}
		outs = append(outs, o)
		w := afterLease(x.get(jobs[i].ID))
		w.State = c.state
		w.RunAt = c.runAt
		w.RetryCount = 1
		w.LastError = "upstream 503"
		w.LastErrorClass = failure.Transient
		w.LastFailedAt = tp(at(5 * time.Second))
		w.History = append(w.History, ev)
		wants = append(wants, w)
	}
	x.finish(outs...)
	for i := range cases {
		x.checkJob("retried job", x.get(jobs[i].ID), wants[i])
	}
	st := x.stats().Counters["q"]
	if st["failed.transient"] != 3 || st[store.StatRetried] != 3 {
		x.t.Errorf("counters[q] = %v, want failed.transient 3, retried 3", st)
	}

	// The pending ones are due now; the scheduled one only at its RunAt.
	p := store.FetchParams{Queue: "q", Limit: 10, Now: at(64 * time.Second), LeaseUntil: at(time.Hour), Worker: "w2"}
	got := x.fetchWant(p, jobs[1].ID, jobs[2].ID)
	for _, j := range got {
		if j.Attempt != 2 {
			x.t.Errorf("job %d fetched again with attempt %d, want 2", j.ID, j.Attempt)
		}
	}
	if t, ok, err := x.s.NextDue(x.ctx, "q"); err != nil || !ok || !sameTime(t, at(65*time.Second)) {
		x.t.Errorf("NextDue(q) = %s, %v, %v; want %s", fmtTime(t), ok, err, fmtTime(at(65*time.Second)))
	}
	p.Now = at(65 * time.Second)
	if j := x.fetchWant(p, jobs[0].ID)[0]; j.Attempt != 2 || j.RetryCount != 1 {
		x.t.Errorf("job %d fetched at its retry time with attempt %d, retry count %d; want 2, 1", j.ID, j.Attempt, j.RetryCount)
	}
}

// testFinishBury: dead with every failure field set; never fetched again.
func testFinishBury(x *h) {
	j := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k", Payload: raw(`{"id":7}`)})[0]
	before := x.get(j.ID)
	ev := store.Event{Kind: store.EventDead, Attempt: 1, At: at(0), Duration: store.Duration(250 * time.Millisecond), Class: "permanent",
		Error: "GET /x: 404 Not Found", Reason: "http_404", Worker: "w1"}
	o := buryOf(j, at(3*time.Second), failure.Permanent, "http_404", "permanent:get /x: 404 not found", "GET /x: 404 Not Found")
	o.Event = &ev
	o.Counters = []store.Counter{{Queue: "q", Name: store.StatDead, Class: "permanent", N: 1}, {Queue: "q", Name: store.StatFailed, Class: "permanent", N: 1}}
	x.finish(o)

	want := afterLease(before)
	want.State = store.Dead
	want.DeadAt = tp(at(3 * time.Second))
	want.FinishedAt = tp(at(3 * time.Second))
	want.DeadReason = "http_404"
	want.Fingerprint = "permanent:get /x: 404 not found"
	want.LastError = "GET /x: 404 Not Found"
	want.LastErrorClass = failure.Permanent
	want.LastFailedAt = tp(at(3 * time.Second))
	want.History = append(want.History, ev)
	x.checkJob("buried job", x.get(j.ID), want)
	st := x.stats().Counters["q"]
	if st["dead.permanent"] != 1 || st["failed.permanent"] != 1 {
		x.t.Errorf("counters[q] = %v, want dead.permanent 1, failed.permanent 1", st)
	}
	if got := x.fetch(store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour), Worker: "w2"}); len(got) != 0 {
		x.t.Errorf("Fetch leased dead jobs %v", jobIDs(got))
	}
	if _, ok, err := x.s.NextDue(x.ctx, "q"); err != nil || ok {
		x.t.Errorf("NextDue(q) with only a dead job: ok %v, err %v; want false, nil", ok, err)
	}
}

// testFinishSnooze: back to scheduled (or pending) at RunAt without using
// an attempt.
func testFinishSnooze(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	// Job 2 fails once first, so its snooze happens on attempt 2.
	x.finish(retryOf(jobs[2], at(time.Second), at(time.Second), failure.Transient, "flaky"))
	j2 := x.fetchWant(store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w1"}, jobs[2].ID)[0]
	if j2.Attempt != 2 {
		x.t.Fatalf("job %d fetched after a retry with attempt %d, want 2", j2.ID, j2.Attempt)
	}
	leased := []*store.Job{jobs[0], jobs[1], j2}
	runAts := []time.Time{at(time.Minute), at(2 * time.Second), at(time.Minute)}
	states := []store.State{store.Scheduled, store.Pending, store.Scheduled}
	attempts := []int{0, 0, 1}
	var outs []store.Outcome
	var wants []*store.Job
	for i, j := range leased {
		ev := store.Event{Kind: store.EventSnoozed, Attempt: j.Attempt, At: at(2 * time.Second), Delay: store.Duration(runAts[i].Sub(at(2 * time.Second))), Worker: "w1"}
		o := outcome(j, store.Snooze, at(2*time.Second))
		o.RunAt = runAts[i]
		o.Event = &ev
		o.Counters = []store.Counter{{Queue: "q", Name: store.StatSnoozed, N: 1}}
		outs = append(outs, o)
		w := afterLease(x.get(j.ID))
		w.State = states[i]
		w.RunAt = runAts[i]
		w.Attempt = attempts[i]
		w.History = append(w.History, ev)
		wants = append(wants, w)
	}
	x.finish(outs...)
	for i, j := range leased {
		// AttemptedAt is left to the store: the snoozed attempt did not count.
		x.checkJob("snoozed job", x.get(j.ID), wants[i], "AttemptedAt")
	}
	if n := x.counter("q", store.StatSnoozed); n != 3 {
		x.t.Errorf("counter q/snoozed = %d, want 3", n)
	}
	p := store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Minute - time.Microsecond), LeaseUntil: at(time.Hour), Worker: "w2"}
	if j := x.fetchWant(p, jobs[1].ID)[0]; j.Attempt != 1 {
		x.t.Errorf("snoozed job %d fetched again with attempt %d, want 1", j.ID, j.Attempt)
	}
	p.Now = at(time.Minute)
	got := x.fetchWant(p, jobs[0].ID, j2.ID)
	if got[0].Attempt != 1 || got[1].Attempt != 2 {
		x.t.Errorf("snoozed jobs fetched again with attempts %d, %d; want 1, 2", got[0].Attempt, got[1].Attempt)
	}
}

// testFinishRelease: back to pending, due at once, without using an
// attempt.
func testFinishRelease(x *h) {
	j := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k", RunAt: at(-time.Hour)})[0]
	ev := store.Event{Kind: store.EventReleased, Attempt: 1, At: at(0), Duration: store.Duration(2 * time.Second), Reason: "shutdown", Worker: "w1"}
	o := outcome(j, store.Release, at(2*time.Second))
	o.Event = &ev
	want := afterLease(x.get(j.ID))
	want.State = store.Pending
	want.Attempt = 0
	want.History = append(want.History, ev)
	x.finish(o)
	got := x.get(j.ID)
	x.checkJob("released job", got, want, "RunAt", "AttemptedAt")
	if got.RunAt.After(at(2 * time.Second)) {
		x.t.Errorf("released job RunAt %s, want at or before the release at %s (due at once)", fmtTime(got.RunAt), fmtTime(at(2*time.Second)))
	}
	again := x.fetchWant(store.FetchParams{Queue: "q", Limit: 1, Now: at(2 * time.Second), LeaseUntil: at(time.Minute), Worker: "w2"}, j.ID)[0]
	if again.Attempt != 1 || again.Worker != "w2" {
		x.t.Errorf("released job fetched again: attempt %d, worker %q; want 1, w2", again.Attempt, again.Worker)
	}
}

// testFinishCancel: canceled with FinishedAt = At and the cancel request
// cleared, whether or not a user asked first.
func testFinishCancel(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	plain, requested := jobs[0], jobs[1]
	requestedAfter := x.cancel(requested.ID, at(time.Second))
	if requestedAfter.State != store.Running || !requestedAfter.CancelRequested {
		x.t.Errorf("Cancel of running job %d returned state %s, CancelRequested %v; want running, true", requested.ID, requestedAfter.State, requestedAfter.CancelRequested)
	}
	ev := store.Event{Kind: store.EventCanceled, Attempt: 1, At: at(0), Duration: store.Duration(2 * time.Second), Worker: "w1"}
	var outs []store.Outcome
	var wants []*store.Job
	for _, j := range jobs {
		o := outcome(j, store.Cancel, at(2*time.Second))
		o.Event = &ev
		outs = append(outs, o)
		w := afterLease(x.get(j.ID))
		w.State = store.Canceled
		w.FinishedAt = tp(at(2 * time.Second))
		w.CancelRequested = false
		w.History = append(w.History, ev)
		wants = append(wants, w)
	}
	x.finish(outs...)
	x.checkJob("job canceled by its worker", x.get(plain.ID), wants[0])
	x.checkJob("job canceled by its worker after a cancel request", x.get(requested.ID), wants[1])
	if got := x.fetch(store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Hour), LeaseUntil: at(2 * time.Hour), Worker: "w2"}); len(got) != 0 {
		x.t.Errorf("Fetch leased canceled jobs %v", jobIDs(got))
	}
}

// testFencing: outcomes that do not match the running lease and worker
// are stale: nothing changes, counters included.
func testFencing(x *h) {
	j := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"})[0] // lease until at(1m)
	before := x.get(j.ID)
	succeeded := []store.Counter{{Queue: "q", Name: store.StatSucceeded, N: 1}}
	stale := []store.Outcome{
		{JobID: j.ID, Queue: "q", Attempt: 1, Lease: j.Lease + 1, Worker: "w1", Kind: store.Complete, At: at(time.Second), Counters: succeeded},
		{JobID: j.ID, Queue: "q", Attempt: 1, Lease: j.Lease - 1, Worker: "w1", Kind: store.Complete, At: at(time.Second), Counters: succeeded},
		{JobID: j.ID, Queue: "q", Attempt: 1, Worker: "w1", Kind: store.Complete, At: at(time.Second), Counters: succeeded},
		{JobID: j.ID, Queue: "q", Attempt: 1, Lease: j.Lease, Worker: "w2", Kind: store.Complete, At: at(time.Second), Counters: succeeded},
		{JobID: j.ID, Queue: "q", Attempt: 1, Lease: j.Lease, Worker: "", Kind: store.Bury, At: at(time.Second), Class: failure.Permanent, DeadReason: "x", Fingerprint: "x", Error: "x", Counters: succeeded},
		{JobID: missingID, Queue: "q", Attempt: 1, Lease: j.Lease, Worker: "w1", Kind: store.Complete, At: at(time.Second), Counters: succeeded},
		// A rescue of a lease that has not expired.
		{JobID: j.ID, Queue: "q", Attempt: 1, Lease: j.Lease, Worker: "w1", Kind: store.Retry, At: at(time.Second), ExpiredBy: at(time.Minute),
			RunAt: at(time.Second), Class: failure.Transient, Error: "x", Counters: succeeded},
	}
	for i, o := range stale {
		if applied := x.finishApplied(o); applied[0] {
			x.t.Errorf("stale outcome %d (job %d, lease %d, worker %q) was applied", i, o.JobID, o.Lease, o.Worker)
		}
	}
	x.checkJob("job after stale outcomes", x.get(j.ID), before)
	if n := x.counter("q", store.StatSucceeded); n != 0 {
		x.t.Errorf("counter q/succeeded = %d after stale outcomes only, want 0", n)
	}

	// The lease expires; the rescuer retries the attempt, fenced on what
	// Expired reported; another worker fetches attempt 2.
	exp := x.expired(at(time.Minute+time.Second), 10)
	if len(exp) != 1 || exp[0].ID != j.ID {
		x.t.Fatalf("Expired = %v, want job %d", jobIDs(exp), j.ID)
	}
	x.finish(rescueOf(exp[0], at(time.Minute+time.Second)))
	j2 := x.fetchWant(store.FetchParams{Queue: "q", Limit: 1, Now: at(time.Minute + time.Second), LeaseUntil: at(2 * time.Minute), Worker: "w2"}, j.ID)[0]
	if j2.Attempt != 2 || j2.Worker != "w2" || j2.Lease <= j.Lease {
		x.t.Fatalf("job %d re-fetched with attempt %d, lease %d, worker %q; want 2, a lease after %d, w2", j.ID, j2.Attempt, j2.Lease, j2.Worker, j.Lease)
	}
	before = x.get(j.ID)
	late := completeOf(j, at(70*time.Second)) // w1, attempt 1
	late.Counters = succeeded
	if applied := x.finishApplied(late); applied[0] {
		x.t.Errorf("the first worker's Complete of attempt 1 was applied while w2 runs attempt 2")
	}
	x.checkJob("job after the first worker's late Complete", x.get(j.ID), before)

	// Completion is recorded once: the same outcome again is stale.
	o := completeOf(j2, at(80*time.Second))
	o.Counters = succeeded
	x.finish(o)
	if applied := x.finishApplied(o); applied[0] {
		x.t.Errorf("a second Complete of the same lease was applied")
	}
	if g := x.get(j.ID); g.State != store.Completed || !sameTime(*g.FinishedAt, at(80*time.Second)) {
		x.t.Errorf("job %d: state %s, FinishedAt %s; want completed at %s", j.ID, g.State, fmtTimePtr(g.FinishedAt), fmtTime(at(80*time.Second)))
	}
	st := x.stats().Counters["q"]
	if st[store.StatSucceeded] != 1 || st[store.StatRescued] != 1 {
		x.t.Errorf("counters[q] = %v, want succeeded 1 (only the applied outcome), rescued 1", st)
	}
}

// testFencingBatch: a batch mixing fresh and stale outcomes applies only
// the fresh ones, including a duplicate of an outcome earlier in the batch.
func testFencingBatch(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	a, b, c := jobs[0], jobs[1], jobs[2]
	beforeC := x.get(c.ID)
	cnt := func(name string) []store.Counter { return []store.Counter{{Queue: "q", Name: name, N: 1}} }

	oa := completeOf(a, at(time.Second))
	oa.Counters = cnt(store.StatSucceeded)
	staleB := completeOf(b, at(time.Second))
	staleB.Worker = "w2"
	staleB.Counters = cnt(store.StatDeferred)
	ob := retryOf(b, at(time.Second), at(time.Hour), failure.RateLimited, "429")
	ob.Counters = cnt(store.StatRetried)
	staleC := buryOf(c, at(time.Second), failure.Permanent, "r", "f", "e")
	staleC.Lease++
	staleC.Counters = cnt(store.StatDeferred)
	dupA := completeOf(a, at(2*time.Second))
	dupA.Counters = cnt(store.StatDeferred)
	unknown := completeOf(&store.Job{ID: missingID, Queue: "q", Attempt: 1, Lease: 1, Worker: "w1"}, at(time.Second))
	unknown.Counters = cnt(store.StatDeferred)

	applied := x.finishApplied(oa, staleB, ob, staleC, dupA, unknown)
	if want := []bool{true, false, true, false, false, false}; !slices.Equal(applied, want) {
		x.t.Errorf("Finish applied %v, want %v", applied, want)
	}
	if g := x.get(a.ID); g.State != store.Completed || g.FinishedAt == nil || !sameTime(*g.FinishedAt, at(time.Second)) {
		x.t.Errorf("job a: state %s, FinishedAt %s; want completed at %s (the first outcome, not its duplicate)", g.State, fmtTimePtr(g.FinishedAt), fmtTime(at(time.Second)))
	}
	if g := x.get(b.ID); g.State != store.Scheduled || g.LastErrorClass != failure.RateLimited {
		x.t.Errorf("job b: state %s, class %s; want scheduled, rate_limited", g.State, g.LastErrorClass)
	}
	x.checkJob("job c after a stale outcome", x.get(c.ID), beforeC)
	got := normCounters(x.stats().Counters)["q"]
	if got[store.StatSucceeded] != 1 || got[store.StatRetried] != 1 || got[store.StatDeferred] != 0 {
		x.t.Errorf("counters[q] = %v, want succeeded 1, retried 1 and no deferred (only stale outcomes carried it)", got)
	}
}

// testFencingCompletions: a batch of plain completions (no event, no
// progress: what a busy worker sends), out of id order, with stale ones,
// different counters per outcome and jobs of two queues, applies each
// fresh one with its own finish time and duration and adds the counters
// of the applied ones only; completions of two workers in one batch, and
// two of one job with different leases, are each fenced alone.
func testFencingCompletions(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"},
		store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	a, b, c, d, e, f := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5]
	g := x.leaseNew(at(0), "w1", store.NewJob{Queue: "r", Kind: "k"})[0]
	beforeC, beforeD := x.get(c.ID), x.get(d.ID)
	succeeded := func(queue string) store.Counter { return store.Counter{Queue: queue, Name: store.StatSucceeded, N: 1} }
	done := func(j *store.Job, sec int, counters ...store.Counter) store.Outcome {
		o := completeOf(j, at(time.Duration(sec)*time.Second))
		o.Duration = store.Duration(time.Duration(sec) * 10 * time.Millisecond)
		o.Counters = counters
		return o
	}
	staleC := done(c, 3, succeeded("q"))
	staleC.Lease++
	missing := done(&store.Job{ID: missingID, Queue: "q", Attempt: 1, Lease: 1, Worker: "w1"}, 3, succeeded("q"))
	outs := []store.Outcome{
		done(f, 6, succeeded("q"), store.Counter{Queue: "q", Name: store.StatSucceededAfterRetry, N: 1}),
		done(a, 1, succeeded("q")),
		staleC,
		done(g, 7, succeeded("r")),
		done(b, 2, succeeded("q")),
		missing,
		done(e, 5),
	}
	applied := x.finishApplied(outs...)
	if want := []bool{true, true, false, true, true, false, true}; !slices.Equal(applied, want) {
		x.t.Errorf("Finish applied %v, want %v", applied, want)
	}
	for i, o := range outs {
		if !applied[i] {
			continue
		}
		got := x.get(o.JobID)
		if got.State != store.Completed || got.FinishedAt == nil || !sameTime(*got.FinishedAt, o.At) || got.LastDuration != o.Duration ||
			got.LeaseUntil != nil || got.Worker != "" {
			x.t.Errorf("job %d: state %s, FinishedAt %s, LastDuration %v, lease %s, worker %q; want completed at %s after %v, no lease, no worker",
				o.JobID, got.State, fmtTimePtr(got.FinishedAt), time.Duration(got.LastDuration), fmtTimePtr(got.LeaseUntil), got.Worker,
				fmtTime(o.At), time.Duration(o.Duration))
		}
	}
	x.checkJob("job c after a stale completion", x.get(c.ID), beforeC)
	x.checkJob("job d, not in the batch", x.get(d.ID), beforeD)
	got := normCounters(x.stats().Counters)
	if got["q"][store.StatSucceeded] != 3 || got["q"][store.StatSucceededAfterRetry] != 1 || got["r"][store.StatSucceeded] != 1 {
		x.t.Errorf("counters = %v, want q: succeeded 3, succeeded_after_retry 1; r: succeeded 1 (applied outcomes only)", got)
	}

	// Two workers' completions in one batch: each fenced on its own worker.
	h := x.leaseNew(at(0), "w2", store.NewJob{Queue: "q", Kind: "k"})[0]
	wrongWorker := done(d, 8, succeeded("q"))
	wrongWorker.Worker = "w2"
	applied = x.finishApplied(done(h, 8, succeeded("q")), wrongWorker, done(c, 8, succeeded("q")))
	if want := []bool{true, false, true}; !slices.Equal(applied, want) {
		x.t.Errorf("Finish of two workers' completions applied %v, want %v", applied, want)
	}
	// Two completions of one job, leases n+1 and n: the running one applies.
	staleD := done(d, 9, succeeded("q"))
	staleD.Lease++
	applied = x.finishApplied(staleD, done(d, 9, succeeded("q")))
	if want := []bool{false, true}; !slices.Equal(applied, want) {
		x.t.Errorf("Finish of a job's completions of leases n+1 and n applied %v, want %v", applied, want)
	}
	if got := x.get(d.ID); got.State != store.Completed || !sameTime(*got.FinishedAt, at(9*time.Second)) {
		x.t.Errorf("job d: state %s, FinishedAt %s; want completed at %s", got.State, fmtTimePtr(got.FinishedAt), fmtTime(at(9*time.Second)))
	}
	if n := x.counter("q", store.StatSucceeded); n != 6 {
		x.t.Errorf("counter q/succeeded = %d, want 6", n)
	}
}

// testFinishDuration: Complete, Retry and Bury record how long the
// handler ran as the job's LastDuration; a snooze or release (no attempt
// used) keeps the value of the attempt before.
func testFinishDuration(x *h) {
	jobs := x.leaseNew(at(0), "w1",
		store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	if jobs[0].LastDuration != 0 {
		x.t.Errorf("a new job has LastDuration %v", jobs[0].LastDuration)
	}
	c := completeOf(jobs[0], at(time.Second))
	c.Duration = store.Duration(1234567 * time.Nanosecond)
	r := retryOf(jobs[1], at(time.Second), at(time.Minute), failure.Transient, "503")
	r.Duration = store.Duration(2 * time.Second)
	b := buryOf(jobs[2], at(time.Second), failure.Permanent, "permanent", "fp", "404")
	b.Duration = store.Duration(3 * time.Millisecond)
	x.finish(c, r, b)
	for i, want := range []store.Duration{c.Duration, r.Duration, b.Duration} {
		if got := x.get(jobs[i].ID).LastDuration; got != want {
			x.t.Errorf("job %d: LastDuration %v, want %v", i, time.Duration(got), time.Duration(want))
		}
	}
	// The retried job runs again and is snoozed: no attempt used, the
	// duration of the attempt before stays.
	again := x.fetchWant(store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Minute), LeaseUntil: at(2 * time.Minute), Worker: "w2"}, jobs[1].ID)
	s := outcome(again[0], store.Snooze, at(time.Minute+time.Second))
	s.RunAt = at(time.Hour)
	x.finish(s)
	if got := x.get(jobs[1].ID).LastDuration; got != r.Duration {
		x.t.Errorf("after a snooze: LastDuration %v, want %v", time.Duration(got), time.Duration(r.Duration))
	}
}

// testFinishClassNone: a job that never failed has class None; a Retry or
// Bury outcome without a class (None) is kept as Unknown, never as "none".
func testFinishClassNone(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	for _, j := range jobs {
		if g := x.get(j.ID); g.LastErrorClass != failure.None {
			x.t.Errorf("job %d never failed, class %s; want none", j.ID, g.LastErrorClass)
		}
	}
	retry := store.Outcome{JobID: jobs[0].ID, Queue: "q", Attempt: 1, Lease: jobs[0].Lease, Worker: "w1", Kind: store.Retry, At: at(time.Second),
		RunAt: at(time.Minute), Error: "no class"}
	bury := store.Outcome{JobID: jobs[1].ID, Queue: "q", Attempt: 1, Lease: jobs[1].Lease, Worker: "w1", Kind: store.Bury, At: at(time.Second),
		Error: "no class", DeadReason: "r", Fingerprint: "f"}
	x.finish(retry, bury, completeOf(jobs[2], at(time.Second)))
	for _, id := range []int64{jobs[0].ID, jobs[1].ID} {
		if g := x.get(id); g.LastErrorClass != failure.Unknown {
			x.t.Errorf("job %d failed without a class: class %s, want unknown", id, g.LastErrorClass)
		}
	}
	if g := x.get(jobs[2].ID); g.LastErrorClass != failure.None {
		x.t.Errorf("completed job: class %s, want none", g.LastErrorClass)
	}
	if ids := x.listIDs(store.Filter{Class: "unknown"}, 10); len(ids) != 2 {
		x.t.Errorf("Filter{Class: unknown} lists %v, want the two failed jobs", ids)
	}
}

// testFinishLastDelay: a Retry keeps the delay its policy chose
// (RetryDelay) as the job's LastDelay, whatever RunAt the budget made of
// it; a snooze, a completion and a bury keep the value; a redrive clears
// it.
func testFinishLastDelay(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	if jobs[0].LastDelay != 0 {
		x.t.Errorf("a new job has LastDelay %v", time.Duration(jobs[0].LastDelay))
	}
	r := retryOf(jobs[0], at(time.Second), at(time.Minute), failure.Transient, "503")
	r.RetryDelay = store.Duration(1500 * time.Millisecond) // the budget pushed RunAt further
	r2 := retryOf(jobs[1], at(time.Second), at(2*time.Second), failure.Transient, "503")
	r2.RetryDelay = store.Duration(time.Second)
	x.finish(r, r2)
	if got := x.get(jobs[0].ID).LastDelay; got != r.RetryDelay {
		x.t.Errorf("after a retry: LastDelay %v, want %v", time.Duration(got), time.Duration(r.RetryDelay))
	}
	again := x.fetchWant(store.FetchParams{Queue: "q", Limit: 10, Now: at(time.Minute), LeaseUntil: at(2 * time.Minute), Worker: "w2"},
		jobs[1].ID, jobs[0].ID)
	if again[1].LastDelay != r.RetryDelay || again[0].LastDelay != r2.RetryDelay {
		x.t.Errorf("Fetch returns LastDelay %v and %v, want %v and %v", time.Duration(again[1].LastDelay),
			time.Duration(again[0].LastDelay), time.Duration(r.RetryDelay), time.Duration(r2.RetryDelay))
	}
	s := outcome(again[1], store.Snooze, at(time.Minute+time.Second))
	s.RunAt = at(time.Hour)
	b := buryOf(again[0], at(time.Minute+time.Second), failure.Transient, "retries_exhausted", "fp", "503")
	x.finish(s, b)
	if got := x.get(jobs[0].ID).LastDelay; got != r.RetryDelay {
		x.t.Errorf("after a snooze: LastDelay %v, want %v", time.Duration(got), time.Duration(r.RetryDelay))
	}
	if got := x.get(jobs[1].ID).LastDelay; got != r2.RetryDelay {
		x.t.Errorf("after a bury: LastDelay %v, want %v", time.Duration(got), time.Duration(r2.RetryDelay))
	}
	x.redrive(store.RedriveParams{IDs: []int64{jobs[1].ID}, Now: at(2 * time.Minute)})
	if got := x.get(jobs[1].ID).LastDelay; got != 0 {
		x.t.Errorf("after a redrive: LastDelay %v, want 0", time.Duration(got))
	}
}

// testFailedBeforeSuccess: a completed job that failed before keeps its
// last error, flagged FailedBeforeSuccess by Get and List; a job that
// never failed, or that is failing now, is not flagged.
func testFailedBeforeSuccess(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "fq", Kind: "k"}, store.NewJob{Queue: "fq", Kind: "k"}, store.NewJob{Queue: "fq", Kind: "k"})
	flaky, clean, failing := jobs[0], jobs[1], jobs[2]
	x.finish(retryOf(flaky, at(time.Second), at(time.Second), failure.Transient, "503"), completeOf(clean, at(time.Second)),
		retryOf(failing, at(time.Second), at(time.Hour), failure.Transient, "504"))
	if g := x.get(flaky.ID); g.FailedBeforeSuccess {
		x.t.Errorf("job %d waiting for a retry: FailedBeforeSuccess set", flaky.ID)
	}
	again := x.fetchWant(store.FetchParams{Queue: "fq", Limit: 10, Now: at(2 * time.Second), LeaseUntil: at(time.Minute), Worker: "w2"}, flaky.ID)
	x.finish(completeOf(again[0], at(3*time.Second)))
	if g := x.get(flaky.ID); !g.FailedBeforeSuccess || g.LastError != "503" || g.LastErrorClass != failure.Transient || g.LastFailedAt == nil {
		x.t.Errorf("job %d completed after a failure: FailedBeforeSuccess %v, last error %q (%s) at %s; want true, the failure kept",
			flaky.ID, g.FailedBeforeSuccess, g.LastError, g.LastErrorClass, fmtTimePtr(g.LastFailedAt))
	}
	for _, id := range []int64{clean.ID, failing.ID} {
		if g := x.get(id); g.FailedBeforeSuccess {
			x.t.Errorf("job %d (%s, last error %q): FailedBeforeSuccess set", id, g.State, g.LastError)
		}
	}
	for _, j := range x.listAll(store.Filter{Queue: "fq"}, 10) {
		if j.FailedBeforeSuccess != (j.ID == flaky.ID) {
			x.t.Errorf("List: job %d (%s) FailedBeforeSuccess %v", j.ID, j.State, j.FailedBeforeSuccess)
		}
	}
}

package storetest

import (
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// rescueOf is the rescue of an expired lease as the engine decides it
// from a job Expired returned at now: a retry due at once, fenced on the
// lease Expired reported and on its being still expired at now.
func rescueOf(j *store.Job, now time.Time) store.Outcome {
	o := retryOf(j, now, now, failure.Transient, "lease expired")
	o.ExpiredBy = now
	o.Counters = []store.Counter{{Queue: j.Queue, Name: store.StatRescued, N: 1}}
	return o
}

// testFencingSnoozeABA: a snooze gives no attempt back to an outcome of
// the lease it ended. Lease 1 is read as expired, its worker snoozes it,
// the same worker leases it again (lease 2: same attempt, same worker);
// the rescue decided for lease 1 then lands, and lease 1's snooze is sent
// again: both are stale, lease 2 runs on.
func testFencingSnoozeABA(x *h) {
	j1 := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"})[0] // lease until at(1m)
	exp := x.expired(at(time.Minute+time.Second), 10)
	if len(exp) != 1 || exp[0].ID != j1.ID {
		x.t.Fatalf("Expired = %v, want job %d", jobIDs(exp), j1.ID)
	}
	rescue := rescueOf(exp[0], at(time.Minute+time.Second))
	snooze := outcome(j1, store.Snooze, at(time.Minute+time.Second))
	snooze.RunAt = at(time.Minute + time.Second)
	x.finish(snooze)
	j2 := x.fetchWant(store.FetchParams{Queue: "q", Limit: 1, Now: at(time.Minute + 2*time.Second), LeaseUntil: at(2 * time.Minute), Worker: "w1"}, j1.ID)[0]
	if j2.Attempt != j1.Attempt || j2.Worker != j1.Worker {
		x.t.Fatalf("fixture: lease 2 has attempt %d, worker %q; want those of lease 1 (%d, %q)", j2.Attempt, j2.Worker, j1.Attempt, j1.Worker)
	}
	if j2.Lease <= j1.Lease {
		x.t.Errorf("lease 2 has token %d, lease 1 had %d: want a later one", j2.Lease, j1.Lease)
	}
	before := x.get(j1.ID)
	if applied := x.finishApplied(rescue); applied[0] {
		x.t.Errorf("lease 1's rescue was applied to lease 2")
	}
	if applied := x.finishApplied(snooze); applied[0] {
		x.t.Errorf("lease 1's snooze, sent again, was applied to lease 2")
	}
	x.checkJob("lease 2 after lease 1's late outcomes", x.get(j1.ID), before)
	if n := x.counter("q", store.StatRescued); n != 0 {
		x.t.Errorf("counter q/rescued = %d, want 0", n)
	}
	x.finish(completeOf(j2, at(time.Minute+3*time.Second)))
	if g := x.get(j1.ID); g.State != store.Completed {
		x.t.Errorf("lease 2's own completion: job %s, want completed", g.State)
	}
}

// testFencingReleaseABA: as testFencingSnoozeABA, with a release (a
// shutdown) and a completion of lease 1 sent again after it.
func testFencingReleaseABA(x *h) {
	j1 := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"})[0]
	release := outcome(j1, store.Release, at(time.Second))
	x.finish(release)
	j2 := x.fetchWant(store.FetchParams{Queue: "q", Limit: 1, Now: at(2 * time.Second), LeaseUntil: at(time.Minute), Worker: "w1"}, j1.ID)[0]
	if j2.Attempt != j1.Attempt || j2.Worker != j1.Worker {
		x.t.Fatalf("fixture: lease 2 has attempt %d, worker %q; want those of lease 1 (%d, %q)", j2.Attempt, j2.Worker, j1.Attempt, j1.Worker)
	}
	if j2.Lease <= j1.Lease {
		x.t.Errorf("lease 2 has token %d, lease 1 had %d: want a later one", j2.Lease, j1.Lease)
	}
	// A heartbeat of lease 1 renews nothing (not lease 2 either) and
	// reports it lost.
	if res := x.heartbeatLeases("w1", leasesOf(j1), at(5*time.Minute)); len(res.Lost) != 1 || res.Lost[0] != store.LeaseOf(j1) {
		x.t.Errorf("Heartbeat of lease 1 = %+v, want it lost", res)
	}
	if g := x.get(j1.ID); !sameTime(*g.LeaseUntil, j2.LeaseUntil.UTC()) {
		x.t.Errorf("lease 2 until %s after a heartbeat of lease 1, want still %s", fmtTimePtr(g.LeaseUntil), fmtTimePtr(j2.LeaseUntil))
	}
	res := x.heartbeatLeases("w1", leasesOf(j1, j2), at(time.Minute))
	if len(res.Lost) != 1 || res.Lost[0] != store.LeaseOf(j1) || len(res.Canceled) != 0 {
		x.t.Errorf("Heartbeat of leases 1 and 2 = %+v, want lease 1 lost", res)
	}
	before := x.get(j1.ID)
	if !sameTime(*before.LeaseUntil, at(time.Minute)) {
		x.t.Errorf("lease 2 until %s after the heartbeat, want %s", fmtTimePtr(before.LeaseUntil), fmtTime(at(time.Minute)))
	}
	bury := buryOf(j1, at(3*time.Second), failure.Permanent, "r", "f", "e")
	for _, o := range []store.Outcome{release, completeOf(j1, at(3*time.Second)), bury} {
		if applied := x.finishApplied(o); applied[0] {
			x.t.Errorf("lease 1's outcome of kind %d was applied to lease 2", o.Kind)
		}
	}
	x.checkJob("lease 2 after lease 1's late outcomes", x.get(j1.ID), before)
}

// testRescueRenewed: a rescue decided from an Expired read does not apply
// once a heartbeat renewed the lease: the rescue is fenced on the lease
// being still expired.
func testRescueRenewed(x *h) {
	j := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"})[0] // lease until at(1m)
	now := at(time.Minute + time.Second)
	exp := x.expired(now, 10)
	if len(exp) != 1 || exp[0].ID != j.ID {
		x.t.Fatalf("Expired = %v, want job %d", jobIDs(exp), j.ID)
	}
	rescue := rescueOf(exp[0], now)
	if res := x.heartbeatLeases("w1", leasesOf(j), at(2*time.Minute)); len(res.Lost) != 0 {
		x.t.Errorf("Heartbeat of an expired lease not rescued yet = %+v, want it renewed", res)
	}
	before := x.get(j.ID)
	if applied := x.finishApplied(rescue); applied[0] {
		x.t.Errorf("the rescue of a lease renewed since it was read expired was applied")
	}
	x.checkJob("job after a stale rescue", x.get(j.ID), before)
	x.finish(completeOf(j, at(time.Minute+2*time.Second)))
	if g := x.get(j.ID); g.State != store.Completed {
		x.t.Errorf("the healthy worker's completion: job %s, want completed", g.State)
	}
	// Expired again, still expired when the rescue lands: it applies.
	k := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q2", Kind: "k"})[0]
	exp = x.expired(now, 10)
	if len(exp) != 1 || exp[0].ID != k.ID {
		x.t.Fatalf("Expired = %v, want job %d", jobIDs(exp), k.ID)
	}
	x.finish(rescueOf(exp[0], now))
	if g := x.get(k.ID); g.State != store.Pending || g.RetryCount != 1 {
		x.t.Errorf("rescued job: %s with retry count %d, want pending, 1", g.State, g.RetryCount)
	}
}

// testCancelSurvives: a cancel requested while a job runs is not lost
// when its attempt ends in a retry (a failure, or a rescue of its expired
// lease), a snooze or a release: the job ends canceled instead of
// running again. A completion or a bury ends the job as it says.
func testCancelSurvives(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"},
		store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"},
		store.NewJob{Queue: "q", Kind: "k"})
	rescued, retried, snoozed, released, completed, buried := jobs[0], jobs[1], jobs[2], jobs[3], jobs[4], jobs[5]
	for _, j := range jobs {
		if c := x.cancel(j.ID, at(time.Second)); c.State != store.Running || !c.CancelRequested {
			x.t.Fatalf("Cancel of running job %d: %s, cancel requested %v; want running, true", j.ID, c.State, c.CancelRequested)
		}
	}
	now := at(time.Minute + time.Second)
	exp := x.expired(now, 10)
	var rescue store.Outcome
	for _, j := range exp {
		if j.ID == rescued.ID {
			rescue = rescueOf(j, now)
		}
	}
	if rescue.JobID == 0 {
		x.t.Fatalf("Expired(%s) = %v, want job %d among them", now, jobIDs(exp), rescued.ID)
	}
	retry := retryOf(retried, now, now.Add(time.Second), failure.Transient, "503")
	retry.Counters = []store.Counter{{Queue: "q", Name: store.StatRetried, N: 1}, {Queue: "q", Name: store.StatFailed, Class: "transient", N: 1}}
	snooze := outcome(snoozed, store.Snooze, now)
	snooze.RunAt = now.Add(time.Hour)
	snooze.Counters = []store.Counter{{Queue: "q", Name: store.StatSnoozed, N: 1}}
	release := outcome(released, store.Release, now)
	x.finish(rescue, retry, snooze, release, completeOf(completed, now), buryOf(buried, now, failure.Permanent, "r", "f", "e"))
	for _, j := range []*store.Job{rescued, retried, snoozed, released} {
		g := x.get(j.ID)
		if g.State != store.Canceled || g.CancelRequested || g.FinishedAt == nil || !sameTime(*g.FinishedAt, now) || g.LeaseUntil != nil || g.Worker != "" {
			x.t.Errorf("job %d, canceled while it ran, after its attempt ended: %s (cancel requested %v, finished %s, lease %s, worker %q); "+
				"want canceled at %s, no lease", j.ID, g.State, g.CancelRequested, fmtTimePtr(g.FinishedAt), fmtTimePtr(g.LeaseUntil), g.Worker, fmtTime(now))
		}
		if n := len(g.History); n == 0 || g.History[n-1].Kind != store.EventCanceled {
			x.t.Errorf("job %d ended canceled: history %v, want a canceled event last", j.ID, g.History)
		}
	}
	if g := x.get(rescued.ID); g.LastError != "lease expired" || g.LastErrorClass != failure.Transient {
		x.t.Errorf("rescued job ended canceled: last error %q (%s), want the failure of its attempt kept", g.LastError, g.LastErrorClass)
	}
	if g := x.get(completed.ID); g.State != store.Completed || g.CancelRequested {
		x.t.Errorf("job completed after a cancel request: %s, cancel requested %v; want completed, false", g.State, g.CancelRequested)
	}
	if g := x.get(buried.ID); g.State != store.Dead || g.CancelRequested {
		x.t.Errorf("job buried after a cancel request: %s, cancel requested %v; want dead, false", g.State, g.CancelRequested)
	}
	if got := x.fetch(store.FetchParams{Queue: "q", Limit: 10, Now: at(2 * time.Hour), LeaseUntil: at(3 * time.Hour), Worker: "w2"}); len(got) != 0 {
		x.t.Errorf("Fetch leased jobs whose cancel was requested: %v", jobIDs(got))
	}
	c := normCounters(x.stats().Counters)["q"]
	if c[store.StatCanceled] != 4 || c[store.StatRetried] != 0 || c[store.StatSnoozed] != 0 || c[store.StatRescued] != 1 || c["failed.transient"] != 1 {
		x.t.Errorf("counters[q] = %v; want canceled 4, rescued 1, failed.transient 1, and no retry or snooze (none was scheduled)", c)
	}
	x.checkCounts("after outcomes ending canceled")
}

// testFinishInvalidAtomic: a Finish call with an invalid outcome fails
// whole: none of its outcomes is applied, and the job counts stay those
// of the jobs.
func testFinishInvalidAtomic(x *h) {
	jobs := x.leaseNew(at(0), "w1", store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	before := []*store.Job{x.get(jobs[0].ID), x.get(jobs[1].ID)}
	bad := completeOf(jobs[1], at(time.Second))
	bad.Kind = store.OutcomeKind(99)
	retry := retryOf(jobs[0], at(time.Second), at(time.Hour), failure.Transient, "503")
	retry.Event = &store.Event{Kind: store.EventRetry, Attempt: 1, At: at(0)}
	retry.Counters = []store.Counter{{Queue: "q", Name: store.StatRetried, N: 1}}
	if applied, err := x.s.Finish(x.ctx, []store.Outcome{retry, bad}); err == nil {
		x.t.Errorf("Finish with an outcome of unknown kind = %v, nil; want an error", applied)
	}
	for i, j := range jobs {
		x.checkJob("job after a failed Finish", x.get(j.ID), before[i])
	}
	if n := x.counter("q", store.StatRetried); n != 0 {
		x.t.Errorf("counter q/retried = %d after a failed Finish, want 0", n)
	}
	x.checkCounts("after a failed Finish")
}

// testRedriveRepeated: an id given twice to Redrive is redriven once and
// reported once.
func testRedriveRepeated(x *h) {
	ids := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "e"})
	res := x.redrive(store.RedriveParams{IDs: []int64{ids[0], ids[0], missingID, missingID}, Now: at(time.Minute)})
	x.checkIDs("Redriven", sorted(res.Redriven), ids)
	x.checkIDs("Skipped", sorted(res.Skipped), []int64{missingID})
	x.checkIDs("Refused", res.Refused, nil)
	g := x.get(ids[0])
	n := 0
	for _, e := range g.History {
		if e.Kind == store.EventRedriven {
			n++
		}
	}
	if g.Redriven != 1 || n != 1 {
		x.t.Errorf("job redriven once: redriven %d, %d redriven events; want 1, 1", g.Redriven, n)
	}
}

// checkCounts fails unless the job counts of Stats are those of the jobs
// (counted with Count).
func (x *h) checkCounts(what string) {
	x.t.Helper()
	st := x.stats()
	for q, states := range st.Jobs {
		for _, state := range store.States {
			n := states[state]
			got, err := x.s.Count(x.ctx, store.Filter{Queue: q, States: []store.State{state}})
			if err != nil {
				x.t.Fatalf("Count: %v", err)
			}
			if got != n {
				x.t.Errorf("%s: Stats counts %d %s jobs in queue %s, Count %d", what, n, state, q, got)
			}
		}
	}
}

// testRescueKilledWorker: a killed worker's jobs are all found by the
// rescue by the end of its leases plus 1 s of the store's clock, however
// many fetches leased them, and none of a worker that renews its leases.
// Worker "killed" leases 230 jobs, one fetch each (more fetches than a
// store may visit at a time) and then 3 in one fetch, of which it
// completes one and heartbeats another once; worker "alive" leases 130,
// one fetch each, and renews them all before they end. Expired, called
// with a limit of 100 as the rescuer calls it, returns 100 leases while
// 100 or more are expired, and each lease once across the rescue's
// outcomes.
func testRescueKilledWorker(x *h) {
	const killed, alive = 230, 130
	leaseOne := func(worker string, now time.Time) *store.Job {
		j := x.enqueue(now, store.NewJob{Queue: "kq-" + worker, Kind: "k"})[0]
		return x.fetchWant(store.FetchParams{Queue: "kq-" + worker, Limit: 1, Now: now, LeaseUntil: now.Add(time.Minute), Worker: worker}, j.ID)[0]
	}
	want := map[int64]bool{}
	var last time.Time // the end of the killed worker's last lease
	for i := range killed {
		now := at(time.Duration(i) * 10 * time.Millisecond)
		want[leaseOne("killed", now).ID], last = true, now.Add(time.Minute)
	}
	var renewed []*store.Job
	for i := range alive {
		renewed = append(renewed, leaseOne("alive", at(time.Duration(i)*10*time.Millisecond)))
	}
	three := x.leaseNew(at(time.Second), "killed", store.NewJob{Queue: "kq3", Kind: "k"}, store.NewJob{Queue: "kq3", Kind: "k"}, store.NewJob{Queue: "kq3", Kind: "k"})
	x.finish(completeOf(three[0], at(2*time.Second)))
	x.heartbeat("killed", three[1:2], at(30*time.Second).Add(time.Minute)) // its last heartbeat
	want[three[1].ID], want[three[2].ID] = true, true
	if end := at(30 * time.Second).Add(time.Minute); end.After(last) {
		last = end
	}
	x.heartbeat("alive", renewed, at(50*time.Second).Add(time.Minute))

	// Before any lease ends, nothing; once the first ones ended, some
	// of the killed worker's only (reading them changes nothing).
	x.checkIDSet("Expired before any lease ended", jobIDs(x.expired(at(time.Minute), 100)), nil)
	for _, j := range x.expired(at(time.Minute+time.Second), 100) {
		if !want[j.ID] {
			x.t.Errorf("Expired at 1m1s returned job %d of worker %q, not one of the killed worker's", j.ID, j.Worker)
		}
	}

	// The rescue at the end of the last lease plus 1 s finds them all,
	// 100 at a time.
	now := last.Add(time.Second)
	got := map[int64]bool{}
	for round := 0; ; round++ {
		exp := x.expired(now, 100)
		if left := len(want) - len(got); len(exp) != min(left, 100) {
			x.t.Fatalf("rescue round %d: Expired returned %d leases with %d expired not yet rescued, want %d", round, len(exp), left, min(left, 100))
		}
		if len(exp) == 0 {
			break
		}
		outs := make([]store.Outcome, len(exp))
		for i, j := range exp {
			if !want[j.ID] || got[j.ID] {
				x.t.Fatalf("rescue round %d: Expired returned job %d of worker %q (rescued before: %v)", round, j.ID, j.Worker, got[j.ID])
			}
			got[j.ID] = true
			outs[i] = rescueOf(j, now)
		}
		x.finish(outs...)
	}
	if n := x.counter("kq-killed", store.StatRescued) + x.counter("kq3", store.StatRescued); n != int64(len(want)) {
		x.t.Errorf("rescued counters = %d, want %d", n, len(want))
	}
	for _, j := range renewed {
		if g := x.get(j.ID); g.State != store.Running || g.Worker != "alive" {
			x.t.Errorf("renewed job %d: %s by %q after the rescue, want running by alive", j.ID, g.State, g.Worker)
		}
	}

	// The other worker is killed in turn: its leases end at 1m50s.
	x.checkIDSet("Expired at the renewed leases' end", jobIDs(x.expired(at(50*time.Second).Add(time.Minute), 500)), nil)
	x.checkIDSet("Expired 1 s after the renewed leases' end", jobIDs(x.expired(at(51*time.Second).Add(time.Minute), 500)), jobIDs(renewed))
}

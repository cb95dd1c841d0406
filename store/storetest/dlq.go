package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testGroups: dead jobs grouped by fingerprint, with counts, first and
// last dead_at and the most recent error; filtered and limited.
func testGroups(x *h) {
	var recs []deadRec
	add := func(now time.Time, queue, kind, fp string, class failure.Class, reason string, n int, deadAt func(i int) time.Time, msg func(i int) string) {
		var specs []deadSpec
		for i := 1; i <= n; i++ {
			specs = append(specs, deadSpec{job: store.NewJob{Queue: queue, Kind: kind}, deadAt: deadAt(i), class: class, reason: reason, fp: fp, err: msg(i)})
		}
		for i, id := range x.makeDead(now, specs...) {
			recs = append(recs, deadRec{id: id, queue: queue, kind: kind, class: class, reason: reason, fp: fp, err: specs[i].err, deadAt: specs[i].deadAt})
		}
	}
	add(at(0), "gq", "fetch", "fpA", failure.Permanent, "http_404", 5,
		func(i int) time.Time { return at(time.Duration(i) * time.Minute) },
		func(i int) string { return fmt.Sprintf("GET /item/%d: 404 not found", i) })
	add(at(0), "gq", "fetch", "fpB", failure.Transient, "retries_exhausted", 3,
		func(i int) time.Time { return at(time.Duration(10+i) * time.Minute) },
		func(i int) string { return fmt.Sprintf("dial tcp: connection refused #%d", i) })
	add(at(0), "gq", "fetch", "fpC", failure.NeedsAuth, "needs_auth", 1,
		func(i int) time.Time { return at(20 * time.Minute) },
		func(i int) string { return "401 unauthorized" })
	add(at(0), "gq2", "sync", "fpD", failure.RateLimited, "retries_exhausted", 6,
		func(i int) time.Time { return at(time.Duration(30+i) * time.Minute) },
		func(i int) string { return fmt.Sprintf("429 too many requests #%d", i) })
	// Jobs that are not dead are never grouped.
	done := x.leaseNew(at(time.Hour), "w", store.NewJob{Queue: "gq", Kind: "fetch"})[0]
	x.finish(completeOf(done, at(time.Hour)))
	x.enqueue(at(time.Hour), store.NewJob{Queue: "gq", Kind: "fetch"})

	all := func(deadRec) bool { return true }
	cases := []struct {
		name  string
		f     store.Filter
		limit int
		keep  func(deadRec) bool
	}{
		{"all", store.Filter{}, 10, all},
		{"dead state", store.Filter{States: []store.State{store.Dead}}, 10, all},
		{"limit 2", store.Filter{}, 2, all},
		{"queue", store.Filter{Queue: "gq"}, 10, func(r deadRec) bool { return r.queue == "gq" }},
		{"kind", store.Filter{Kind: "sync"}, 10, func(r deadRec) bool { return r.kind == "sync" }},
		{"since/until", store.Filter{Since: at(3 * time.Minute), Until: at(12 * time.Minute)}, 10, func(r deadRec) bool {
			return !r.deadAt.Before(at(3*time.Minute)) && r.deadAt.Before(at(12*time.Minute))
		}},
		{"class", store.Filter{Class: "transient"}, 10, func(r deadRec) bool { return r.class == failure.Transient }},
		{"reason", store.Filter{Reason: "retries_exhausted"}, 10, func(r deadRec) bool { return r.reason == "retries_exhausted" }},
		{"fingerprint", store.Filter{Fingerprint: "fpC"}, 10, func(r deadRec) bool { return r.fp == "fpC" }},
		{"error", store.Filter{ErrorContains: "REFUSED"}, 10, func(r deadRec) bool { return strings.Contains(r.err, "refused") }},
		{"error on some jobs of a group", store.Filter{ErrorContains: "/item/2"}, 10, func(r deadRec) bool { return strings.Contains(r.err, "/item/2") }},
	}
	for _, c := range cases {
		x.checkGroups(fmt.Sprintf("Groups %s (%+v, limit %d)", c.name, c.f, c.limit), x.groups(c.f, c.limit), wantGroups(recs, c.keep, c.limit))
	}
	// Only dead jobs are grouped: a filter on other states matches none.
	if g, err := x.s.Groups(x.ctx, store.Filter{States: []store.State{store.Completed, store.Pending}}, 10); len(g) != 0 || (err != nil && !errors.Is(err, store.ErrInvalid)) {
		x.t.Errorf("Groups of completed and pending jobs = %d groups, %v; want none (or an error wrapping store.ErrInvalid)", len(g), err)
	}

	// A canceled or redriven job leaves its group: fpA loses its most
	// recent job (Last and Sample change), fpB its first (First changes).
	var a5, b1 int64
	for _, r := range recs {
		if r.fp == "fpA" && r.err == "GET /item/5: 404 not found" {
			a5 = r.id
		}
		if r.fp == "fpB" && r.err == "dial tcp: connection refused #1" {
			b1 = r.id
		}
	}
	x.cancel(a5, at(2*time.Hour))
	if res := x.redrive(store.RedriveParams{IDs: []int64{b1}, Now: at(2 * time.Hour)}); !slices.Equal(res.Redriven, []int64{b1}) {
		x.t.Fatalf("Redrive(%d) = %+v, want it redriven", b1, res)
	}
	left := func(r deadRec) bool { return r.id != a5 && r.id != b1 }
	x.checkGroups("Groups after a cancel and a redrive", x.groups(store.Filter{}, 10), wantGroups(recs, left, 10))
}

// testCancel: pending, scheduled and dead jobs are canceled at once; a
// running one is asked to stop; finished ones conflict.
func testCancel(x *h) {
	d := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "cq", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "e"})[0]
	c := x.leaseNew(at(0), "w", store.NewJob{Queue: "cq", Kind: "k"})[0]
	x.finish(completeOf(c, at(time.Second)))
	ps := x.enqueue(at(0), store.NewJob{Queue: "cq", Kind: "k"}, store.NewJob{Queue: "cq", Kind: "k", RunAt: at(time.Hour)})
	p, s := ps[0].ID, ps[1].ID
	r := x.leaseNew(at(0), "w", store.NewJob{Queue: "cq-run", Kind: "k"})[0]

	for _, id := range []int64{p, s, d} {
		before := x.get(id)
		got := x.cancel(id, at(time.Minute))
		want := clone(before)
		want.State = store.Canceled
		want.FinishedAt = tp(at(time.Minute))
		// Whether a dead job keeps its dead_at, reason and fingerprint once
		// canceled is left to the store.
		ignore := []string{"History", "DeadAt", "DeadReason", "Fingerprint"}
		for _, j := range []*store.Job{got, x.get(id)} {
			x.checkJob(fmt.Sprintf("canceled %s job", before.State), j, want, ignore...)
			if len(j.History) != len(before.History)+1 {
				x.t.Errorf("canceled job %d has %d events, want %d (a canceled event added)", id, len(j.History), len(before.History)+1)
				continue
			}
			if ev := j.History[len(j.History)-1]; ev.Kind != store.EventCanceled || !sameTime(ev.At, at(time.Minute)) || ev.Attempt != 0 {
				x.t.Errorf("canceled job %d: last event %s, want kind canceled, attempt 0 (an operator action), at %s", id, fmtEvent(ev), fmtTime(at(time.Minute)))
			}
		}
	}

	// A running job stays running with its cancel request set.
	before := x.get(r.ID)
	got := x.cancel(r.ID, at(2*time.Minute))
	want := clone(before)
	want.CancelRequested = true
	x.checkJob("Cancel of a running job", got, want, "History")
	x.checkJob("Get after Cancel of a running job", x.get(r.ID), want, "History")
	x.checkIDs("Heartbeat after Cancel", x.heartbeat("w", []*store.Job{r}, at(3*time.Minute)), []int64{r.ID})
	o := outcome(r, store.Cancel, at(4*time.Minute))
	o.Event = &store.Event{Kind: store.EventCanceled, Attempt: 1, At: at(0), Duration: store.Duration(4 * time.Minute), Worker: "w"}
	x.finish(o)
	if g := x.get(r.ID); g.State != store.Canceled || g.CancelRequested || g.FinishedAt == nil || !sameTime(*g.FinishedAt, at(4*time.Minute)) || g.LeaseUntil != nil || g.Worker != "" {
		x.t.Errorf("running job after Cancel and Finish(Cancel): state %s, CancelRequested %v, FinishedAt %s, LeaseUntil %s, worker %q; want canceled, false, %s, nil, \"\"",
			g.State, g.CancelRequested, fmtTimePtr(g.FinishedAt), fmtTimePtr(g.LeaseUntil), g.Worker, fmtTime(at(4*time.Minute)))
	}

	// Finished jobs conflict and stay as they are; missing ids are not found.
	for _, id := range []int64{c.ID, p, r.ID} {
		before := x.get(id)
		j, err := x.s.Cancel(x.ctx, id, at(5*time.Minute))
		x.checkErr(fmt.Sprintf("Cancel of %s job %d (returned %v)", before.State, id, j), err, store.ErrConflict)
		x.checkJob("job after a conflicting Cancel", x.get(id), before)
	}
	_, err := x.s.Cancel(x.ctx, missingID, at(5*time.Minute))
	x.checkErr("Cancel of a missing job", err, store.ErrNotFound)

	if got := x.fetch(store.FetchParams{Queue: "cq", Limit: 10, Now: at(24 * time.Hour), LeaseUntil: at(25 * time.Hour), Worker: "w"}); len(got) != 0 {
		x.t.Errorf("Fetch leased %v from a queue whose waiting jobs were canceled", jobIDs(got))
	}
	if _, ok, err := x.s.NextDue(x.ctx, "cq"); err != nil || ok {
		x.t.Errorf("NextDue(cq) with only canceled jobs waiting: ok %v, err %v; want false, nil", ok, err)
	}
	if n := x.counter("cq", store.StatCanceled); n != 3 {
		x.t.Errorf("counter cq/canceled = %d, want 3", n)
	}
}

// testRedrive: dead reprocessable jobs go back to pending with attempts
// reset and history kept; others are refused or skipped.
func testRedrive(x *h) {
	// r1 fails once, then dies on attempt 2; r2 and n1 die at once.
	leased := x.leaseNew(at(0), "w1",
		store.NewJob{Queue: "rq", Kind: "k", Payload: raw(`{"v":1}`)},
		store.NewJob{Queue: "rq", Kind: "k", Payload: raw(`{"v":2}`)},
		store.NewJob{Queue: "rq", Kind: "k", Payload: raw(`{"v":3}`), NotReprocessable: true},
	)
	r1, r2, n1 := leased[0], leased[1], leased[2]
	retry := retryOf(r1, at(time.Second), at(time.Second), failure.Transient, "503")
	retry.Event = &store.Event{Kind: store.EventRetry, Attempt: 1, At: at(0), Class: "transient", Error: "503", Delay: store.Duration(time.Second), Worker: "w1"}
	x.finish(retry)
	r1 = x.fetchWant(store.FetchParams{Queue: "rq", Limit: 10, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w2"}, r1.ID)[0]
	var outs []store.Outcome
	for _, j := range []*store.Job{r1, r2, n1} {
		o := buryOf(j, at(2*time.Second), failure.Permanent, "http_400", "fp400", "400 bad request")
		o.Event = &store.Event{Kind: store.EventDead, Attempt: j.Attempt, At: at(time.Second), Class: "permanent", Error: "400 bad request", Reason: "http_400", Worker: j.Worker}
		outs = append(outs, o)
	}
	x.finish(outs...)
	c1 := x.leaseNew(at(3*time.Second), "w", store.NewJob{Queue: "rq-other", Kind: "k"})[0]
	x.finish(completeOf(c1, at(3*time.Second)))
	p1 := x.enqueue(at(3*time.Second), store.NewJob{Queue: "rq-other", Kind: "k"})[0]

	beforeR1, beforeN1, beforeC1, beforeP1 := x.get(r1.ID), x.get(n1.ID), x.get(c1.ID), x.get(p1.ID)
	if beforeR1.Attempt != 2 || beforeR1.RetryCount != 1 || len(beforeR1.History) != 2 {
		x.t.Fatalf("fixture: job %d dead with attempt %d, retry count %d, %d events; want 2, 1, 2", r1.ID, beforeR1.Attempt, beforeR1.RetryCount, len(beforeR1.History))
	}
	res := x.redrive(store.RedriveParams{IDs: []int64{r1.ID, n1.ID, c1.ID, p1.ID, missingID}, Now: at(time.Hour), Note: "fixed upstream (alice)"})
	x.checkIDSet("Redriven", res.Redriven, []int64{r1.ID})
	x.checkIDSet("Refused", res.Refused, []int64{n1.ID})
	x.checkIDSet("Skipped", res.Skipped, []int64{c1.ID, p1.ID, missingID})

	checkRedriven := func(before *store.Job, now time.Time, note string, payload []byte, redriven int) {
		x.t.Helper()
		got := x.get(before.ID)
		want := clone(before)
		want.State = store.Pending
		want.RunAt = now
		want.Attempt = 0
		want.RetryCount = 0
		want.Redriven = redriven
		want.DeadAt = nil
		want.DeadReason = ""
		want.FinishedAt = nil
		want.Payload = payload
		// What a redrive does to the last failure's fields and to
		// AttemptedAt is left to the store; the history is checked below.
		x.checkJob("redriven job", got, want, "History", "LastError", "LastErrorClass", "LastFailedAt", "Fingerprint", "AttemptedAt")
		if len(got.History) != len(before.History)+1 {
			x.t.Errorf("redriven job %d has %d events, want %d (history kept, a redriven event added)", before.ID, len(got.History), len(before.History)+1)
			return
		}
		if fmtHistory(got.History[:len(before.History)]) != fmtHistory(before.History) {
			x.t.Errorf("redriven job %d: history %s, want it to start with %s", before.ID, fmtHistory(got.History), fmtHistory(before.History))
		}
		if ev := got.History[len(got.History)-1]; ev.Kind != store.EventRedriven || ev.Note != note || !sameTime(ev.At, now) || ev.Attempt != 0 {
			x.t.Errorf("redriven job %d: last event %s, want kind redriven, attempt 0, at %s, note %q", before.ID, fmtEvent(ev), fmtTime(now), note)
		}
	}
	checkRedriven(beforeR1, at(time.Hour), "fixed upstream (alice)", raw(`{"v":1}`), 1)
	x.checkJob("refused job", x.get(n1.ID), beforeN1)
	x.checkJob("skipped completed job", x.get(c1.ID), beforeC1)
	x.checkJob("skipped pending job", x.get(p1.ID), beforeP1)

	// A replaced payload; a job already redriven is skipped.
	beforeR2 := x.get(r2.ID)
	res = x.redrive(store.RedriveParams{IDs: []int64{r2.ID, r1.ID}, Now: at(2 * time.Hour), Payload: raw(`{"v": "patched"}`), Note: "patched"})
	x.checkIDSet("Redriven with a payload", res.Redriven, []int64{r2.ID})
	x.checkIDSet("Skipped (already redriven)", res.Skipped, []int64{r1.ID})
	x.checkIDSet("Refused", res.Refused, nil)
	checkRedriven(beforeR2, at(2*time.Hour), "patched", raw(`{"v":"patched"}`), 1)
	if g := x.get(r1.ID); !jsonEqual(g.Payload, raw(`{"v":1}`)) {
		x.t.Errorf("job %d payload %s after a redrive of other jobs with a payload, want {\"v\":1}", r1.ID, g.Payload)
	}
	if n := x.counter("rq", store.StatRedriven); n != 2 {
		x.t.Errorf("counter rq/redriven = %d, want 2", n)
	}

	// Redriven jobs run again from attempt 1.
	if t, ok, err := x.s.NextDue(x.ctx, "rq"); err != nil || !ok || !sameTime(t, at(time.Hour)) {
		x.t.Errorf("NextDue(rq) = %s, %v, %v; want %s", fmtTime(t), ok, err, fmtTime(at(time.Hour)))
	}
	again := x.fetchWant(store.FetchParams{Queue: "rq", Limit: 10, Now: at(2 * time.Hour), LeaseUntil: at(3 * time.Hour), Worker: "w3"}, r1.ID, r2.ID)
	for _, j := range again {
		if j.Attempt != 1 || j.Redriven != 1 {
			x.t.Errorf("redriven job %d fetched with attempt %d, redriven %d; want 1, 1", j.ID, j.Attempt, j.Redriven)
		}
	}
	x.finish(completeOf(again[0], at(2*time.Hour+time.Second)))
	if g := x.get(r1.ID); g.State != store.Completed || g.Redriven != 1 || g.RetryCount != 0 || g.DeadAt != nil {
		x.t.Errorf("redriven job completed: state %s, redriven %d, retry count %d, DeadAt %s; want completed, 1, 0, nil", g.State, g.Redriven, g.RetryCount, fmtTimePtr(g.DeadAt))
	}
	res = x.redrive(store.RedriveParams{IDs: []int64{r1.ID}, Now: at(3 * time.Hour)})
	x.checkIDSet("Skipped (completed after a redrive)", res.Skipped, []int64{r1.ID})
	x.checkIDSet("Redriven (completed after a redrive)", res.Redriven, nil)
}

// testPurge: deletes only dead jobs matching the filter, up to the limit.
func testPurge(x *h) {
	spec := func(kind string) deadSpec {
		return deadSpec{job: store.NewJob{Queue: "pq", Kind: kind}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "e"}
	}
	dead := x.makeDead(at(0), spec("a"), spec("a"), spec("a"), spec("b"))
	c1 := x.leaseNew(at(time.Second), "w", store.NewJob{Queue: "pq", Kind: "a"})[0]
	x.finish(completeOf(c1, at(2*time.Second)))
	x1 := x.enqueue(at(time.Second), store.NewJob{Queue: "pq", Kind: "a", RunAt: at(time.Hour)})[0]
	x.cancel(x1.ID, at(2*time.Second))
	p1 := x.enqueue(at(time.Second), store.NewJob{Queue: "pq", Kind: "a"})[0]
	e1 := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "pq2", Kind: "a"}, deadAt: at(time.Second), class: failure.Transient, reason: "r", fp: "fe", err: "Boom"})[0]
	others := []int64{c1.ID, x1.ID, p1.ID, e1}

	purge := func(f store.Filter, limit int, want int64) {
		x.t.Helper()
		n, err := x.s.Purge(x.ctx, f, limit)
		if err != nil || n != want {
			x.t.Errorf("Purge(%+v, %d) = %d, %v; want %d, nil", f, limit, n, err, want)
		}
	}
	purge(store.Filter{Queue: "pq", Kind: "a"}, 2, 2)
	purge(store.Filter{Queue: "pq", Kind: "a"}, 10, 1)
	for _, id := range dead[:3] {
		x.notFound(id)
	}
	purge(store.Filter{Fingerprint: "nope"}, 10, 0)
	purge(store.Filter{Queue: "pq"}, 10, 1)
	x.notFound(dead[3])
	for _, id := range others {
		x.get(id)
	}
	st := normCounters(x.stats().Counters)
	if st["pq"][store.StatPurged] != 4 || st["pq2"][store.StatPurged] != 0 {
		x.t.Errorf("purged counters: pq %d, pq2 %d; want 4, 0", st["pq"][store.StatPurged], st["pq2"][store.StatPurged])
	}
	purge(store.Filter{ErrorContains: "BOOM"}, 10, 1)
	x.notFound(e1)
	for _, id := range others[:3] {
		x.get(id)
	}
	if n := x.counter("pq2", store.StatPurged); n != 1 {
		x.t.Errorf("counter pq2/purged = %d, want 1", n)
	}

	// A filter on other states matches no dead job, so it purges nothing:
	// Purge deletes the dead jobs among those the filter selects.
	z := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "pq3", Kind: "a"}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "f", err: "e"})[0]
	if n, err := x.s.Purge(x.ctx, store.Filter{Queue: "pq3", States: []store.State{store.Completed, store.Canceled, store.Pending}}, 10); n != 0 || (err != nil && !errors.Is(err, store.ErrInvalid)) {
		x.t.Errorf("Purge of completed, canceled and pending jobs = %d, %v; want 0 (or an error wrapping store.ErrInvalid)", n, err)
	}
	x.get(z)
	purge(store.Filter{Queue: "pq3", States: []store.State{store.Dead, store.Completed}}, 10, 1)
}

// testDeleteFinished: retention deletes finished jobs of one state whose
// finished_at is before the cutoff, up to the limit, and nothing else.
func testDeleteFinished(x *h) {
	var completed []int64
	for i, q := range []string{"dq", "dq", "dq2"} {
		j := x.leaseNew(at(0), "w", store.NewJob{Queue: q, Kind: "k"})[0]
		x.finish(completeOf(j, at(time.Duration(i+1)*time.Minute)))
		completed = append(completed, j.ID)
	}
	canceled := x.enqueue(at(0), store.NewJob{Queue: "dq", Kind: "k", RunAt: at(time.Hour)})[0].ID
	x.cancel(canceled, at(time.Minute))
	dead := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "dq3", Kind: "k"}, deadAt: at(time.Minute), class: failure.Permanent, reason: "r", fp: "f", err: "e"})[0]
	running := x.leaseNew(at(0), "w", store.NewJob{Queue: "dq4", Kind: "k"})[0].ID
	waiting := x.enqueue(at(0), store.NewJob{Queue: "dq5", Kind: "k"}, store.NewJob{Queue: "dq5", Kind: "k", RunAt: at(time.Hour)})
	keep := []int64{running, waiting[0].ID, waiting[1].ID}

	del := func(state store.State, before time.Time, limit int, want int64) {
		x.t.Helper()
		n, err := x.s.DeleteFinished(x.ctx, state, before, limit)
		if err != nil || n != want {
			x.t.Errorf("DeleteFinished(%s, %s, %d) = %d, %v; want %d, nil", state, fmtTime(before), limit, n, err, want)
		}
	}
	del(store.Completed, at(2*time.Minute), 10, 1) // the cutoff is exclusive
	x.notFound(completed[0])
	x.get(completed[1])
	del(store.Completed, at(10*time.Minute), 1, 1)
	del(store.Completed, at(10*time.Minute), 10, 1)
	del(store.Completed, at(10*time.Minute), 10, 0)
	x.notFound(completed[1])
	x.notFound(completed[2])
	x.get(canceled)
	x.get(dead)
	del(store.Canceled, at(time.Minute), 10, 0)
	del(store.Canceled, at(10*time.Minute), 10, 1)
	x.notFound(canceled)
	del(store.Dead, at(10*time.Minute), 10, 1)
	x.notFound(dead)
	for _, st := range []store.State{store.Running, store.Pending, store.Scheduled} {
		n, err := x.s.DeleteFinished(x.ctx, st, at(24*time.Hour), 10)
		if n != 0 || (err != nil && !errors.Is(err, store.ErrInvalid)) {
			x.t.Errorf("DeleteFinished(%s) = %d, %v; want 0 (or an error wrapping store.ErrInvalid)", st, n, err)
		}
	}
	for _, id := range keep {
		x.get(id)
	}
	// Dead jobs deleted by retention count as purged ("dead jobs purged or
	// expired"); completed and canceled ones are not dead jobs.
	st := normCounters(x.stats().Counters)
	if st["dq3"][store.StatPurged] != 1 || st["dq"][store.StatPurged] != 0 || st["dq2"][store.StatPurged] != 0 {
		x.t.Errorf("purged counters: dq3 %d, dq %d, dq2 %d; want 1 (the dead job), 0, 0", st["dq3"][store.StatPurged], st["dq"][store.StatPurged], st["dq2"][store.StatPurged])
	}
}

// testRedrivePreviousPayload: an edit and redrive keeps the payload it
// replaces in the redriven event, cut to store.MaxPreviousPayload
// characters; a redrive without a payload keeps none.
func testRedrivePreviousPayload(x *h) {
	long := `{"text":"` + strings.Repeat("é", store.MaxPreviousPayload) + `"}`
	ids := x.makeDead(at(0),
		deadSpec{job: store.NewJob{Queue: "pq", Kind: "k", Payload: raw(`{"v":1}`)}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "fp", err: "e"},
		deadSpec{job: store.NewJob{Queue: "pq", Kind: "k", Payload: raw(long)}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "fp", err: "e"},
		deadSpec{job: store.NewJob{Queue: "pq", Kind: "k", Payload: raw(`{"v":3}`)}, deadAt: at(time.Second), class: failure.Permanent, reason: "r", fp: "fp", err: "e"},
	)
	small, big, plain := ids[0], ids[1], ids[2]
	before := map[int64]*store.Job{small: x.get(small), big: x.get(big)}
	res := x.redrive(store.RedriveParams{IDs: []int64{small, big}, Now: at(time.Hour), Payload: raw(`{"v":"edited"}`), Note: "edited"})
	x.checkIDSet("Redriven with a payload", res.Redriven, []int64{small, big})
	res = x.redrive(store.RedriveParams{IDs: []int64{plain}, Now: at(time.Hour), Note: "as is"})
	x.checkIDSet("Redriven as is", res.Redriven, []int64{plain})

	last := func(id int64) (*store.Job, store.Event) {
		x.t.Helper()
		g := x.get(id)
		if len(g.History) == 0 {
			x.t.Fatalf("redriven job %d has no history", id)
		}
		return g, g.History[len(g.History)-1]
	}
	g, ev := last(small)
	if ev.Kind != store.EventRedriven || !jsonEqual([]byte(ev.PreviousPayload), before[small].Payload) || !jsonEqual(g.Payload, raw(`{"v":"edited"}`)) {
		x.t.Errorf("job %d edited and redriven: payload %s, last event %s with previous payload %q; want payload {\"v\":\"edited\"}, a redriven event keeping %s",
			small, g.Payload, fmtEvent(ev), ev.PreviousPayload, before[small].Payload)
	}
	_, ev = last(big)
	if n := utf8.RuneCountInString(ev.PreviousPayload); ev.Kind != store.EventRedriven || n != store.MaxPreviousPayload ||
		!strings.HasPrefix(string(before[big].Payload), ev.PreviousPayload) {
		x.t.Errorf("job %d (payload of %d characters) edited and redriven: last event %s keeps %d characters of the previous payload, want its first %d",
			big, utf8.RuneCountInString(string(before[big].Payload)), fmtEvent(ev), n, store.MaxPreviousPayload)
	}
	g, ev = last(plain)
	if ev.Kind != store.EventRedriven || ev.PreviousPayload != "" || !jsonEqual(g.Payload, raw(`{"v":3}`)) {
		x.t.Errorf("job %d redriven as is: payload %s, last event %s with previous payload %q; want payload kept, no previous payload",
			plain, g.Payload, fmtEvent(ev), ev.PreviousPayload)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// testStats: job counts per queue and state, and the counters stores keep
// plus those outcomes carried, after a mixed workload.
func testStats(x *h) {
	sa := x.enqueue(at(0),
		store.NewJob{Queue: "sa", Kind: "k"}, store.NewJob{Queue: "sa", Kind: "k"}, store.NewJob{Queue: "sa", Kind: "k"},
		store.NewJob{Queue: "sa", Kind: "k"}, store.NewJob{Queue: "sa", Kind: "k", IdempotencyKey: "k1"})
	x.enqueue(at(time.Second), store.NewJob{Queue: "sa", Kind: "k", IdempotencyKey: "k1"})
	l := x.fetchWant(store.FetchParams{Queue: "sa", Limit: 4, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w"}, sa[0].ID, sa[1].ID, sa[2].ID, sa[3].ID)
	c := func(queue, name, class string, n int64) store.Counter {
		return store.Counter{Queue: queue, Name: name, Class: class, N: n}
	}
	o1 := completeOf(l[0], at(2*time.Second))
	o1.Counters = []store.Counter{c("sa", store.StatSucceeded, "", 1)}
	o2 := retryOf(l[1], at(2*time.Second), at(time.Hour), failure.Transient, "t")
	o2.Counters = []store.Counter{c("sa", store.StatFailed, "transient", 1), c("sa", store.StatRetried, "", 1)}
	o3 := buryOf(l[2], at(2*time.Second), failure.Permanent, "r", "f", "p")
	o3.Counters = []store.Counter{c("sa", store.StatFailed, "permanent", 1), c("sa", store.StatDead, "permanent", 1)}
	stale := completeOf(l[3], at(2*time.Second))
	stale.Worker = "someone-else"
	stale.Counters = []store.Counter{c("sa", store.StatSucceeded, "", 100)}
	if applied := x.finishApplied(o1, o2, o3, stale); !slices.Equal(applied, []bool{true, true, true, false}) {
		x.t.Fatalf("Finish applied %v, want [true true true false]", applied)
	}
	x.cancel(sa[4].ID, at(3*time.Second))

	sb := x.leaseNew(at(0), "w", store.NewJob{Queue: "sb", Kind: "k"}, store.NewJob{Queue: "sb", Kind: "k"})
	b1 := buryOf(sb[0], at(time.Second), failure.Transient, "retries_exhausted", "f", "t")
	b1.Counters = []store.Counter{c("sb", store.StatDead, "transient", 1), c("sb", store.StatFailed, "transient", 3)}
	b2 := buryOf(sb[1], at(time.Second), failure.Transient, "retries_exhausted", "f", "t")
	b2.Counters = []store.Counter{c("sb", store.StatDead, "transient", 1)}
	x.finish(b1, b2)
	x.redrive(store.RedriveParams{IDs: []int64{sb[0].ID}, Now: at(time.Minute)})
	if n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{sb[1].ID}}, 10); err != nil || n != 1 {
		x.t.Fatalf("Purge = %d, %v; want 1, nil", n, err)
	}

	st := x.stats()
	wantJobs := map[string]map[store.State]int64{
		"sa": {store.Completed: 1, store.Scheduled: 1, store.Dead: 1, store.Running: 1, store.Canceled: 1},
		"sb": {store.Pending: 1},
	}
	if got := normJobs(st.Jobs); !reflect.DeepEqual(got, wantJobs) {
		x.t.Errorf("Stats.Jobs = %v, want %v", got, wantJobs)
	}
	wantCounters := map[string]map[string]int64{
		"sa": {"enqueued": 5, "deduplicated": 1, "attempts": 4, "succeeded": 1, "failed.transient": 1, "retried": 1,
			"failed.permanent": 1, "dead.permanent": 1, "canceled": 1},
		"sb": {"enqueued": 2, "attempts": 2, "dead.transient": 2, "failed.transient": 3, "redriven": 1, "purged": 1},
	}
	if got := normCounters(st.Counters); !reflect.DeepEqual(got, wantCounters) {
		x.t.Errorf("Stats.Counters =\n %v\nwant\n %v", got, wantCounters)
	}
}

// testClose: every call after Close wraps ErrClosed.
func testClose(x *h) {
	j := x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"})[0]
	if err := x.s.Close(); err != nil {
		x.t.Fatalf("Close: %v", err)
	}
	ctx := x.ctx
	calls := map[string]func() error{
		"Enqueue": func() error {
			_, err := x.s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, at(time.Second))
			return err
		},
		"AddDead": func() error {
			_, err := x.s.AddDead(ctx, []store.DeadJob{{Queue: "q", Kind: "k", DeadAt: at(time.Second)}}, at(time.Second))
			return err
		},
		"Fetch": func() error {
			_, err := x.s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 1, Now: at(time.Second), LeaseUntil: at(time.Minute), Worker: "w"})
			return err
		},
		"NextDue": func() error { _, _, err := x.s.NextDue(ctx, "q"); return err },
		"Finish": func() error {
			_, err := x.s.Finish(ctx, []store.Outcome{{JobID: j.ID, Queue: j.Queue, Attempt: 1, Lease: 1, Worker: "w", Kind: store.Complete, At: at(time.Second)}})
			return err
		},
		"Heartbeat": func() error {
			_, err := x.s.Heartbeat(ctx, "w", []store.Lease{{JobID: j.ID, Token: 1}}, at(time.Minute))
			return err
		},
		"Expired": func() error { _, err := x.s.Expired(ctx, at(time.Hour), 10); return err },
		"Get":     func() error { _, err := x.s.Get(ctx, j.ID); return err },
		"List":    func() error { _, err := x.s.List(ctx, store.Filter{}, store.Page{}); return err },
		"Groups":  func() error { _, err := x.s.Groups(ctx, store.Filter{}, 10); return err },
		"Cancel":  func() error { _, err := x.s.Cancel(ctx, j.ID, at(time.Second)); return err },
		"Redrive": func() error {
			_, err := x.s.Redrive(ctx, store.RedriveParams{IDs: []int64{j.ID}, Now: at(time.Second)})
			return err
		},
		"Purge":          func() error { _, err := x.s.Purge(ctx, store.Filter{}, 10); return err },
		"DeleteFinished": func() error { _, err := x.s.DeleteFinished(ctx, store.Completed, at(time.Hour), 10); return err },
		"Stats":          func() error { _, err := x.s.Stats(ctx); return err },
	}
	for name, call := range snapshotCallsAfterClose(x) {
		calls[name] = call
	}
	names := make([]string, 0, len(calls))
	for name := range calls {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := calls[name](); !errors.Is(err, store.ErrClosed) {
			x.t.Errorf("%s after Close: error %v, want an error wrapping store.ErrClosed", name, err)
		}
	}
}

// testLifecycle walks one job through pending, running, scheduled (retry),
// running, dead, redriven, running and completed, checking every field at
// every step.
func testLifecycle(x *h) {
	check := func(step string, want *store.Job, returned *store.Job, ignore ...string) *store.Job {
		x.t.Helper()
		if returned != nil {
			x.checkJob(step+": returned job", returned, want, append([]string{"History"}, ignore...)...)
		}
		got := x.get(want.ID)
		x.checkJob(step+": Get", got, want, ignore...)
		return got
	}

	// pending
	t0 := at(0)
	created := x.enqueue(t0, store.NewJob{Queue: "life", Kind: "webhook", Payload: raw(`{"url":"https://example.com/hook"}`),
		MaxRetries: 3, IdempotencyKey: "life-1", Dependency: "example.com"})[0]
	want := &store.Job{ID: created.ID, Queue: "life", Kind: "webhook", Payload: raw(`{"url":"https://example.com/hook"}`), State: store.Pending,
		MaxRetries: 3, IdempotencyKey: "life-1", Dependency: "example.com", Reprocessable: true, CreatedAt: t0, RunAt: t0}
	check("enqueued", want, created)

	// running, attempt 1
	t1 := at(time.Second)
	leased := x.fetchWant(store.FetchParams{Queue: "life", Limit: 5, Now: t1, LeaseUntil: t1.Add(30 * time.Second), Worker: "w1"}, created.ID)[0]
	want = clone(want)
	want.State, want.Attempt, want.AttemptedAt, want.LeaseUntil, want.Worker = store.Running, 1, tp(t1), tp(t1.Add(30*time.Second)), "w1"
	check("leased", want, leased)

	// scheduled for a retry
	t2 := at(2 * time.Second)
	ev1 := store.Event{Kind: store.EventRetry, Attempt: 1, At: t1, Duration: store.Duration(time.Second), Class: "transient", Error: "HTTP 503",
		Reason: "http_503", Delay: store.Duration(2 * time.Second), Worker: "w1"}
	o := retryOf(leased, t2, at(4*time.Second), failure.Transient, "HTTP 503")
	o.Event = &ev1
	x.finish(o)
	want = clone(want)
	want.State, want.RunAt, want.RetryCount, want.LastError, want.LastErrorClass, want.LastFailedAt = store.Scheduled, at(4*time.Second), 1, "HTTP 503", failure.Transient, tp(t2)
	want.LeaseUntil, want.Worker = nil, ""
	want.History = append(want.History, ev1)
	check("retry scheduled", want, nil)
	x.fetchWant(store.FetchParams{Queue: "life", Limit: 5, Now: at(4*time.Second - time.Microsecond), LeaseUntil: at(time.Minute), Worker: "w2"})

	// running, attempt 2
	t3 := at(4 * time.Second)
	leased = x.fetchWant(store.FetchParams{Queue: "life", Limit: 5, Now: t3, LeaseUntil: t3.Add(30 * time.Second), Worker: "w2"}, created.ID)[0]
	want = clone(want)
	want.State, want.Attempt, want.AttemptedAt, want.LeaseUntil, want.Worker = store.Running, 2, tp(t3), tp(t3.Add(30*time.Second)), "w2"
	check("leased again", want, leased)

	// dead
	t4 := at(5 * time.Second)
	ev2 := store.Event{Kind: store.EventDead, Attempt: 2, At: t3, Duration: store.Duration(time.Second), Class: "permanent", Error: "HTTP 404",
		Reason: "http_404", Worker: "w2"}
	o = buryOf(leased, t4, failure.Permanent, "http_404", "permanent:http 404", "HTTP 404")
	o.Event = &ev2
	x.finish(o)
	want = clone(want)
	want.State, want.DeadAt, want.FinishedAt, want.DeadReason, want.Fingerprint = store.Dead, tp(t4), tp(t4), "http_404", "permanent:http 404"
	want.LastError, want.LastErrorClass, want.LastFailedAt = "HTTP 404", failure.Permanent, tp(t4)
	want.LeaseUntil, want.Worker = nil, ""
	want.History = append(want.History, ev2)
	check("buried", want, nil)

	// redriven with a new payload
	t5 := at(time.Hour)
	res := x.redrive(store.RedriveParams{IDs: []int64{created.ID}, Now: t5, Payload: raw(`{"url":"https://example.com/hook2"}`), Note: "fixed the URL"})
	x.checkIDs("Redriven", res.Redriven, []int64{created.ID})
	want = clone(want)
	want.State, want.RunAt, want.Attempt, want.RetryCount, want.Redriven = store.Pending, t5, 0, 0, 1
	want.DeadAt, want.DeadReason, want.FinishedAt = nil, "", nil
	want.Payload = raw(`{"url":"https://example.com/hook2"}`)
	prior := slices.Clone(want.History)
	got := check("redriven", want, nil, "History", "LastError", "LastErrorClass", "LastFailedAt", "Fingerprint", "AttemptedAt")
	if len(got.History) != 3 || fmtHistory(got.History[:2]) != fmtHistory(prior) {
		x.t.Errorf("redriven: history %s, want %s then a redriven event", fmtHistory(got.History), fmtHistory(prior))
	} else if ev := got.History[2]; ev.Kind != store.EventRedriven || ev.Attempt != 0 || !sameTime(ev.At, t5) || ev.Note != "fixed the URL" {
		x.t.Errorf("redriven: event %s, want kind redriven, attempt 0, at %s, note %q", fmtEvent(ev), fmtTime(t5), "fixed the URL")
	}
	// From here on, the fields a redrive leaves to the store must simply
	// stay as they are.
	want = clone(got)

	// running, attempt 1 again
	t6 := at(time.Hour + time.Second)
	leased = x.fetchWant(store.FetchParams{Queue: "life", Limit: 5, Now: t6, LeaseUntil: t6.Add(30 * time.Second), Worker: "w3"}, created.ID)[0]
	want = clone(want)
	want.State, want.Attempt, want.AttemptedAt, want.LeaseUntil, want.Worker = store.Running, 1, tp(t6), tp(t6.Add(30*time.Second)), "w3"
	check("leased after the redrive", want, leased)

	// completed
	t7 := at(time.Hour + 2*time.Second)
	ev3 := store.Event{Kind: store.EventCompleted, Attempt: 1, At: t6, Duration: store.Duration(time.Second), Worker: "w3"}
	o = completeOf(leased, t7)
	o.Event = &ev3
	x.finish(o)
	want = clone(want)
	want.State, want.FinishedAt, want.LeaseUntil, want.Worker = store.Completed, tp(t7), nil, ""
	want.History = append(want.History, ev3)
	check("completed", want, nil, "LastError", "LastErrorClass", "LastFailedAt")

	// A completed job can be neither canceled nor redriven.
	_, err := x.s.Cancel(x.ctx, created.ID, at(2*time.Hour))
	x.checkErr("Cancel of the completed job", err, store.ErrConflict)
	res = x.redrive(store.RedriveParams{IDs: []int64{created.ID}, Now: at(2 * time.Hour)})
	x.checkIDs("Skipped", res.Skipped, []int64{created.ID})
	st := x.stats()
	if got := normCounters(st.Counters)["life"]; !reflect.DeepEqual(got, map[string]int64{"enqueued": 1, "attempts": 3, "redriven": 1}) {
		x.t.Errorf("counters[life] = %v, want enqueued 1, attempts 3, redriven 1", got)
	}
	if got := normJobs(st.Jobs)["life"]; !reflect.DeepEqual(got, map[store.State]int64{store.Completed: 1}) {
		x.t.Errorf("Stats.Jobs[life] = %v, want completed 1", got)
	}
}

// testLargeDLQ: listing, paging and grouping stay exact over 3,000 dead
// jobs, including page-size defaults and clamping.
func testLargeDLQ(x *h) {
	const n = 3000
	fps := []string{"f1", "f1", "f1", "f2", "f2", "f3"}
	classes := map[string]failure.Class{"f1": failure.Permanent, "f2": failure.Transient, "f3": failure.NeedsAuth}
	var specs []deadSpec
	for i := range n {
		fp := fps[i%len(fps)]
		specs = append(specs, deadSpec{
			job:    store.NewJob{Queue: "big", Kind: "k", Payload: raw(fmt.Sprintf(`{"i":%d}`, i))},
			deadAt: at(time.Duration(i*7919%1000) * time.Second), // each second three times, out of id order
			class:  classes[fp], reason: "reason-" + fp, fp: fp,
			err: fmt.Sprintf("%s: Failure on item %d", fp, i),
		})
	}
	ids := x.makeDead(at(0), specs...)
	recs := make([]deadRec, n)
	for i, id := range ids {
		sp := specs[i]
		recs[i] = deadRec{id: id, queue: "big", kind: "k", class: sp.class, reason: sp.reason, fp: sp.fp, err: sp.err, deadAt: sp.deadAt}
	}
	filter := func(keep func(deadRec) bool) []deadRec {
		var out []deadRec
		for _, r := range recs {
			if keep(r) {
				out = append(out, r)
			}
		}
		return out
	}
	deadOnly := store.Filter{States: []store.State{store.Dead}}
	want := deadOrder(recs)

	x.checkIDs("dead listing, pages of 1000", x.listIDs(deadOnly, 1000), want)
	if res := x.list(deadOnly, store.Page{}); res.Next == "" {
		x.t.Errorf("List with Limit 0 over %d jobs: no Next cursor", n)
	} else {
		x.checkIDs("List with Limit 0 (the default page size)", jobIDs(res.Jobs), want[:store.DefaultPageSize])
	}
	var got []int64
	cursor := ""
	for page := 0; page < 3; page++ {
		res := x.list(deadOnly, store.Page{Cursor: cursor, Limit: 5 * store.MaxPageSize})
		if len(res.Jobs) != store.MaxPageSize {
			x.t.Fatalf("List with Limit %d, page %d: %d jobs, want %d (clamped to MaxPageSize)", 5*store.MaxPageSize, page, len(res.Jobs), store.MaxPageSize)
		}
		if (res.Next == "") != (page == 2) {
			x.t.Errorf("List with Limit %d, page %d: Next %q", 5*store.MaxPageSize, page, res.Next)
		}
		got = append(got, jobIDs(res.Jobs)...)
		cursor = res.Next
	}
	x.checkIDs("dead listing with an oversized Limit", got, want)

	f2 := store.Filter{States: []store.State{store.Dead}, Fingerprint: "f2"}
	x.checkIDs("dead listing of f2, pages of 300", x.listIDs(f2, 300), deadOrder(filter(func(r deadRec) bool { return r.fp == "f2" })))
	window := store.Filter{States: []store.State{store.Dead}, Since: at(100 * time.Second), Until: at(200 * time.Second)}
	x.checkIDs("dead listing of a time window", x.listIDs(window, 1000), deadOrder(filter(func(r deadRec) bool {
		return !r.deadAt.Before(at(100*time.Second)) && r.deadAt.Before(at(200*time.Second))
	})))
	text := store.Filter{States: []store.State{store.Dead}, ErrorContains: "FAILURE ON ITEM 12"}
	x.checkIDs("dead listing by error text", x.listIDs(text, 1000), deadOrder(filter(func(r deadRec) bool {
		return strings.Contains(strings.ToLower(r.err), "failure on item 12")
	})))
	byID := slices.Clone(ids)
	slices.Reverse(byID)
	x.checkIDs("listing of everything by id, pages of 1000", x.listIDs(store.Filter{Queue: "big"}, 1000), byID)

	x.checkGroups("Groups over every dead job", x.groups(store.Filter{}, 10), wantGroups(recs, nil, 10))
	x.checkGroups("Groups, limit 1", x.groups(store.Filter{}, 1), wantGroups(recs, nil, 1))
	x.checkGroups("Groups since 500s", x.groups(store.Filter{Since: at(500 * time.Second)}, 10),
		wantGroups(recs, func(r deadRec) bool { return !r.deadAt.Before(at(500 * time.Second)) }, 10))

	// Bulk operations by id: a listing of 1,500 ids and a redrive of a
	// whole group.
	var f1IDs, f3IDs []int64
	for _, r := range recs {
		switch r.fp {
		case "f1":
			f1IDs = append(f1IDs, r.id)
		case "f3":
			f3IDs = append(f3IDs, r.id)
		}
	}
	x.checkIDs("listing by 1500 ids", x.listIDs(store.Filter{States: []store.State{store.Dead}, IDs: f1IDs}, 1000),
		deadOrder(filter(func(r deadRec) bool { return r.fp == "f1" })))
	res := x.redrive(store.RedriveParams{IDs: f3IDs, Now: at(time.Hour)})
	x.checkIDSet("bulk redrive of group f3", res.Redriven, f3IDs)
	if len(res.Refused)+len(res.Skipped) != 0 {
		x.t.Errorf("bulk redrive: refused %d, skipped %d; want none", len(res.Refused), len(res.Skipped))
	}
	x.checkGroups("Groups after redriving f3", x.groups(store.Filter{}, 10), wantGroups(recs, func(r deadRec) bool { return r.fp != "f3" }, 10))
	if n := normJobs(x.stats().Jobs)["big"][store.Pending]; n != int64(len(f3IDs)) {
		x.t.Errorf("Stats.Jobs[big][pending] = %d after the bulk redrive, want %d", n, len(f3IDs))
	}
}

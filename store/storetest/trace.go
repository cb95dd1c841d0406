package storetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// traceOf returns a distinct W3C trace context for n: a traceparent, and
// a tracestate when n is odd.
func traceOf(n int) string {
	tp := fmt.Sprintf("00-%032x-%016x-01", 0xabc000+n, 0x100+n)
	if n%2 == 1 {
		tp += " vendor=v" + fmt.Sprint(n) + ",other=o"
	}
	return tp
}

// testTrace: a job's trace context (NewJob.Trace) comes back as given,
// whatever its form, from every enqueue path (one job, a batch, an idempotency key, a
// limit, a fair queue) and every read (Get, List, Fetch), and survives a
// retry, the move to the DLQ and a redrive unchanged; a job without one
// has none; a taken key answers with the holder's; one that is not a
// trace context is refused with ErrInvalid and inserts nothing.
func testTrace(x *h) {
	now := at(0)
	jobs := []store.NewJob{
		{Queue: "tq", Kind: "k", Trace: traceOf(1)},
		{Queue: "tq", Kind: "k", Trace: traceOf(2)},
		{Queue: "tq", Kind: "k"},
		{Queue: "tq", Kind: "k", Trace: traceOf(3), IdempotencyKey: "tk"},
		{Queue: "tq", Kind: "k", Trace: traceOf(4), Limit: "tl", LimitMax: 10},
		{Queue: "tq", Kind: "k", Trace: traceOf(5), Fair: true, FairKey: "tenant"},
		{Queue: "tq", Kind: "k", Trace: traceOf(6) + " " + strings.Repeat("s", 400)},
		// Contexts a store may keep in a compact form, and contexts that
		// have none (not the lowercase version 00 form): all come back
		// exactly as given.
		{Queue: "tq", Kind: "k", Trace: "00-00000000000000000000000000000000-0000000000000000-ff"},
		{Queue: "tq", Kind: "k", Trace: strings.ToUpper(traceOf(10))},
		{Queue: "tq", Kind: "k", Trace: "cc-" + traceOf(10)[3:] + "-future"},
		{Queue: "tq", Kind: "k", Trace: traceOf(10) + " "},
		{Queue: "tq", Kind: "k", Trace: traceOf(10) + "  a b "},
		{Queue: "tq", Kind: "k", Trace: "x"},
	}
	want := map[int64]string{}
	created := x.enqueue(now, jobs...)
	for i, j := range created {
		if j.Trace != jobs[i].Trace {
			x.t.Errorf("Enqueue: job %d (input %d) Trace = %q, want %q", j.ID, i, j.Trace, jobs[i].Trace)
		}
		want[j.ID] = jobs[i].Trace
	}
	// One at a time too (a store may insert a single job another way).
	one := x.enqueue(now, store.NewJob{Queue: "tq", Kind: "k", Trace: traceOf(7)})[0]
	want[one.ID] = traceOf(7)
	// A taken key answers with the job holding it, and its trace.
	dup := x.enqueue(now, store.NewJob{Queue: "tq", Kind: "k", Trace: traceOf(8), IdempotencyKey: "tk"})[0]
	if !dup.Existing || dup.Trace != traceOf(3) {
		x.t.Errorf("Enqueue of a taken key: Existing %v, Trace %q; want the holder's %q", dup.Existing, dup.Trace, traceOf(3))
	}
	check := func(what string, j *store.Job) {
		x.t.Helper()
		if j.Trace != want[j.ID] {
			x.t.Errorf("%s: job %d Trace = %q, want %q", what, j.ID, j.Trace, want[j.ID])
		}
	}
	for id := range want {
		check("Get", x.get(id))
	}
	for _, j := range x.listAll(store.Filter{Queue: "tq"}, 3) {
		check("List", j)
	}

	// Every job runs, fails and is retried, runs again and dies, is
	// redriven and runs again: its trace never changes.
	p := store.FetchParams{Queue: "tq", Limit: 100, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w"}
	leased := x.fetch(p)
	if len(leased) != len(want) {
		x.t.Fatalf("Fetch leased %d jobs, want %d", len(leased), len(want))
	}
	var outs []store.Outcome
	for _, j := range leased {
		check("Fetch", j)
		outs = append(outs, retryOf(j, at(2*time.Second), at(time.Hour), failure.Transient, "boom"))
	}
	x.finish(outs...)
	for id := range want {
		check("Get after a retry", x.get(id))
	}
	p.Now, p.LeaseUntil = at(time.Hour+time.Second), at(2*time.Hour)
	leased = x.fetch(p)
	if len(leased) != len(want) {
		x.t.Fatalf("Fetch after the retries leased %d jobs, want %d", len(leased), len(want))
	}
	outs = outs[:0]
	var ids []int64
	for _, j := range leased {
		check("Fetch of a retry", j)
		outs = append(outs, buryOf(j, at(time.Hour+2*time.Second), failure.Permanent, "http_404", "fp", "gone"))
		ids = append(ids, j.ID)
	}
	x.finish(outs...)
	for id := range want {
		j := x.get(id)
		if j.State != store.Dead {
			x.t.Fatalf("job %d is %s after its bury, want dead", id, j.State)
		}
		check("Get of a dead job", j)
	}
	res := x.redrive(store.RedriveParams{IDs: ids, Now: at(3 * time.Hour), Note: "trace"})
	if len(res.Redriven) != len(ids) {
		x.t.Fatalf("Redrive redrove %v, want %v", res.Redriven, ids)
	}
	p.Now, p.LeaseUntil = at(3*time.Hour+time.Second), at(4*time.Hour)
	leased = x.fetch(p)
	if len(leased) != len(want) {
		x.t.Fatalf("Fetch after the redrive leased %d jobs, want %d", len(leased), len(want))
	}
	for _, j := range leased {
		check("Fetch of a redriven job", j)
	}

	// What is not a trace context is refused, and nothing is inserted.
	before := len(x.listIDs(store.Filter{}, 100))
	for _, bad := range []string{"00-a\nb", "00-\x00", strings.Repeat("x", store.MaxTrace+1), "00-é"} {
		_, err := x.s.Enqueue(x.ctx, []store.NewJob{{Queue: "tq", Kind: "k"}, {Queue: "tq", Kind: "k", Trace: bad}}, now)
		x.checkErr(fmt.Sprintf("Enqueue with Trace %.20q", bad), err, store.ErrInvalid)
	}
	if after := len(x.listIDs(store.Filter{}, 100)); after != before {
		x.t.Errorf("refused enqueues left %d jobs behind", after-before)
	}
}

// testTraceReplay: a replay's copy keeps its source's trace context, so
// that its attempts join the source's trace (its first life's story); a
// source without one gives a copy without one.
func testTraceReplay(x *h) {
	traced := x.leaseNew(at(0), "w", store.NewJob{Queue: "trq", Kind: "k", Trace: traceOf(7)})[0]
	x.finish(completeOf(traced, at(time.Second)))
	plain := x.leaseNew(at(0), "w", store.NewJob{Queue: "trq", Kind: "k"})[0]
	x.finish(completeOf(plain, at(time.Second)))
	op := x.createOp(store.NewOperation{ID: opID(70), Kind: store.OpReplay,
		Params: store.OperationParams{Filter: store.Filter{Queue: "trq", States: []store.State{store.Completed}}, Batch: 10}}, at(time.Minute))
	op = x.claimOp(op.ID, "w1", at(time.Minute))
	op = x.runOp(op, "w1", 10, at(2*time.Minute))
	if op.Progress.Replayed != 2 {
		x.t.Fatalf("replay: %+v, want 2 replayed", op.Progress)
	}
	for _, c := range x.listAll(store.Filter{Queue: "trq", States: []store.State{store.Pending}}, 10) {
		want := ""
		if c.ReplayOf == traced.ID {
			want = traceOf(7)
		}
		if got := x.get(c.ID).Trace; got != want {
			x.t.Errorf("copy %d of %d: trace %q, want %q", c.ID, c.ReplayOf, got, want)
		}
	}
}

package storetest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// opID returns the n-th fixed operation id of a subtest.
func opID(n int) string { return fmt.Sprintf("op_%024x", n) }

// createOp creates an operation and fails on an error.
func (x *h) createOp(n store.NewOperation, now time.Time) *store.Operation {
	x.t.Helper()
	op, err := x.s.CreateOperation(x.ctx, n, now)
	if err != nil {
		x.t.Fatalf("CreateOperation(%s %s): %v", n.Kind, n.ID, err)
	}
	return op
}

// claimOp claims and fails on an error.
func (x *h) claimOp(id, worker string, now time.Time) *store.Operation {
	x.t.Helper()
	op, err := x.s.ClaimOperation(x.ctx, id, worker, now, now.Add(time.Minute))
	if err != nil {
		x.t.Fatalf("ClaimOperation(%q, %s): %v", id, worker, err)
	}
	return op
}

// getOp reads an operation and fails on an error.
func (x *h) getOp(id string) *store.Operation {
	x.t.Helper()
	op, err := x.s.GetOperation(x.ctx, id)
	if err != nil {
		x.t.Fatalf("GetOperation(%s): %v", id, err)
	}
	return op
}

// step runs one step and fails on an error.
func (x *h) step(op *store.Operation, worker string, limit int, now time.Time) store.StepResult {
	x.t.Helper()
	res, err := x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: worker, Cursor: op.Cursor, Limit: limit,
		Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		x.t.Fatalf("StepOperation(%s at %d): %v", op.ID, op.Cursor, err)
	}
	if res.Operation == nil {
		x.t.Fatalf("StepOperation(%s) returned no operation", op.ID)
	}
	return res
}

// runOp steps op to its end with batches of limit and returns it.
func (x *h) runOp(op *store.Operation, worker string, limit int, now time.Time) *store.Operation {
	x.t.Helper()
	for i := 0; ; i++ {
		if i > 10000 {
			x.t.Fatalf("operation %s never ended", op.ID)
		}
		res := x.step(op, worker, limit, now)
		op = res.Operation
		if res.End {
			return op
		}
	}
}

// testOperationsCreate: a new operation is pending, keeps its params,
// records the largest job id, and has no progress yet; ids are unique;
// malformed operations are refused.
func testOperationsCreate(x *h) {
	jobs := x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	params := store.OperationParams{Filter: store.Filter{Queue: "q", States: []store.State{store.Completed, store.Dead},
		Since: at(-time.Hour), PayloadField: "customer.id", PayloadValue: raw(`42`)}, Batch: 7, Rate: 2.5, Note: "why"}
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpReplay, Params: params}, at(time.Second))
	if op.ID != opID(1) || op.Kind != store.OpReplay || op.State != store.OpPending || op.Cursor != 0 || op.MaxID != jobs[1].ID ||
		op.Worker != "" || op.LeaseUntil != nil || op.StartedAt != nil || op.FinishedAt != nil || !sameTime(op.CreatedAt, at(time.Second)) {
		x.t.Fatalf("created %+v", op)
	}
	if op.Progress.Matched != -1 || op.Progress.Processed != 0 || op.Progress.RefusedIDs == nil {
		x.t.Errorf("new progress %+v, want matched -1, nothing processed, refused ids []", op.Progress)
	}
	got := x.getOp(opID(1))
	p := got.Params
	if p.Batch != 7 || p.Rate != 2.5 || p.Note != "why" || p.Filter.Queue != "q" || !slices.Equal(p.Filter.States, params.Filter.States) ||
		!sameTime(p.Filter.Since, params.Filter.Since) || !p.Filter.Until.IsZero() || p.Filter.PayloadField != "customer.id" ||
		!jsonEqual(p.Filter.PayloadValue, raw(`42`)) {
		x.t.Errorf("params read back %+v, want %+v", p, params)
	}
	_, err := x.s.CreateOperation(x.ctx, store.NewOperation{ID: opID(1), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}}, at(0))
	x.checkErr("CreateOperation with a taken id", err, store.ErrConflict)
	for name, n := range map[string]store.NewOperation{
		"bad id":        {ID: "op_1", Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}},
		"unknown kind":  {ID: opID(2), Kind: "shred", Params: store.OperationParams{Batch: 1}},
		"zero batch":    {ID: opID(2), Kind: store.OpPurge},
		"huge batch":    {ID: opID(2), Kind: store.OpPurge, Params: store.OperationParams{Batch: store.MaxPageSize + 1}},
		"negative rate": {ID: opID(2), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1, Rate: -1}},
		"export no dir": {ID: opID(2), Kind: store.OpExport, Params: store.OperationParams{Batch: 1}},
		"bad payload":   {ID: opID(2), Kind: store.OpRedrive, Params: store.OperationParams{Batch: 1, Payload: raw(`{`)}},
		"bad state":     {ID: opID(2), Kind: store.OpReplay, Params: store.OperationParams{Batch: 1, Filter: store.Filter{States: []store.State{"gone"}}}},
		"bad field":     {ID: opID(2), Kind: store.OpReplay, Params: store.OperationParams{Batch: 1, Filter: store.Filter{PayloadField: "a..b", PayloadValue: raw(`1`)}}},
		"object value":  {ID: opID(2), Kind: store.OpReplay, Params: store.OperationParams{Batch: 1, Filter: store.Filter{PayloadField: "a", PayloadValue: raw(`{}`)}}},
		"bad class":     {ID: opID(2), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1, Filter: store.Filter{Class: "bogus"}}},
	} {
		_, err := x.s.CreateOperation(x.ctx, n, at(0))
		x.checkErr("CreateOperation "+name, err, store.ErrInvalid)
	}
	if _, err := x.s.GetOperation(x.ctx, opID(2)); err == nil {
		x.t.Errorf("a refused operation was stored")
	}
	_, err = x.s.GetOperation(x.ctx, opID(99))
	x.checkErr("GetOperation of an unknown id", err, store.ErrNotFound)
	_, err = x.s.SetOperationState(x.ctx, opID(99), store.OpPaused, at(0))
	x.checkErr("SetOperationState of an unknown id", err, store.ErrNotFound)
}

// testOperationsClaim: a claim leases the oldest runnable operation to
// one worker; a second claim finds nothing while the lease lasts; once it
// ended another worker takes the operation over, and the first one's
// steps, renewals and finish are refused without effect.
func testOperationsClaim(x *h) {
	x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent})
	if op := x.claimOp("", "w1", at(time.Minute)); op != nil {
		x.t.Fatalf("claim with no operation returned %+v", op)
	}
	x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpPurge, Params: store.OperationParams{Batch: 10}}, at(2*time.Minute))
	x.createOp(store.NewOperation{ID: opID(2), Kind: store.OpPurge, Params: store.OperationParams{Batch: 10}}, at(3*time.Minute))
	if op := x.claimOp(opID(9), "w1", at(4*time.Minute)); op != nil {
		x.t.Fatalf("claim of an unknown id returned %+v", op)
	}
	first := x.claimOp("", "w1", at(4*time.Minute))
	if first == nil || first.ID != opID(1) || first.State != store.OpRunning || first.Worker != "w1" ||
		first.LeaseUntil == nil || !sameTime(*first.LeaseUntil, at(5*time.Minute)) || first.StartedAt == nil || !sameTime(*first.StartedAt, at(4*time.Minute)) {
		x.t.Fatalf("first claim %+v, want op 1 running for w1 until +5m", first)
	}
	second := x.claimOp("", "w2", at(4*time.Minute))
	if second == nil || second.ID != opID(2) {
		x.t.Fatalf("second claim %+v, want op 2", second)
	}
	if op := x.claimOp("", "w3", at(4*time.Minute+30*time.Second)); op != nil {
		x.t.Fatalf("claim while both are leased returned %s", op.ID)
	}
	// Renewal extends the lease and records matched.
	r, err := x.s.RenewOperation(x.ctx, store.OperationRenewal{ID: opID(1), Worker: "w1", LeaseUntil: at(6 * time.Minute), Now: at(5 * time.Minute), Matched: 1})
	if err != nil || r.Progress.Matched != 1 || !sameTime(*r.LeaseUntil, at(6*time.Minute)) {
		x.t.Fatalf("RenewOperation: %+v, %v", r, err)
	}
	_, err = x.s.RenewOperation(x.ctx, store.OperationRenewal{ID: opID(1), Worker: "w2", LeaseUntil: at(9 * time.Minute), Now: at(5 * time.Minute), Matched: -1})
	x.checkErr("RenewOperation by another worker", err, store.ErrConflict)
	// The lease ends: w3 takes op 1 over, at its cursor, keeping StartedAt.
	taken := x.claimOp("", "w3", at(7*time.Minute))
	if taken == nil || taken.ID != opID(1) || taken.Worker != "w3" || !sameTime(*taken.StartedAt, at(4*time.Minute)) || taken.Progress.Matched != 1 {
		x.t.Fatalf("take-over %+v", taken)
	}
	_, err = x.s.StepOperation(x.ctx, store.OperationStep{ID: opID(1), Worker: "w1", Limit: 10, Now: at(7 * time.Minute), LeaseUntil: at(8 * time.Minute)})
	x.checkErr("StepOperation by the worker that lost the lease", err, store.ErrConflict)
	_, err = x.s.FinishOperation(x.ctx, opID(1), "w1", store.OpDone, "", at(7*time.Minute))
	x.checkErr("FinishOperation by the worker that lost the lease", err, store.ErrConflict)
	if n := x.stats().Jobs["q"][store.Dead]; n != 1 {
		x.t.Fatalf("a refused step purged jobs: %d dead left, want 1", n)
	}
	done := x.runOp(taken, "w3", 10, at(7*time.Minute))
	if done.Progress.Purged != 1 || done.Cursor == 0 {
		x.t.Fatalf("after the steps of w3: %+v", done)
	}
	fin, err := x.s.FinishOperation(x.ctx, opID(1), "w3", store.OpDone, "", at(8*time.Minute))
	if err != nil || fin.State != store.OpDone || fin.Worker != "" || fin.LeaseUntil != nil || fin.FinishedAt == nil {
		x.t.Fatalf("FinishOperation: %+v, %v", fin, err)
	}
	_, err = x.s.FinishOperation(x.ctx, opID(1), "w3", store.OpDone, "", at(8*time.Minute))
	x.checkErr("FinishOperation twice", err, store.ErrConflict)
	if op := x.claimOp(opID(1), "w4", at(time.Hour)); op != nil {
		x.t.Fatalf("a done operation was claimed: %+v", op)
	}
	// A failed one keeps its message.
	f, err := x.s.FinishOperation(x.ctx, opID(2), "w2", store.OpFailed, "disk on fire", at(8*time.Minute))
	if err != nil || f.State != store.OpFailed || f.Error != "disk on fire" {
		x.t.Fatalf("FinishOperation failed: %+v, %v", f, err)
	}
}

// testOperationsReplay: a replay copies the jobs matching its filter,
// completed ones included, in id order and batch by batch, as new
// pending jobs naming their source; jobs created after the operation
// (its own copies among them) are never replayed; a stale step changes
// nothing.
func testOperationsReplay(x *h) {
	// Sources: completed, dead and pending jobs of kind "index", with
	// payloads that the payload filter tells apart.
	var want []int64
	for i := range 5 {
		j := x.leaseNew(at(0), "w", store.NewJob{Queue: "rq", Kind: "index", Payload: raw(fmt.Sprintf(`{"customer":{"id":%d},"n":%d}`, 42, i)),
			MaxRetries: 3, Dependency: "search", Priority: i - 2})[0]
		x.finish(completeOf(j, at(time.Second)))
		want = append(want, j.ID)
	}
	other := x.leaseNew(at(0), "w", store.NewJob{Queue: "rq", Kind: "index", Payload: raw(`{"customer":{"id":"42"}}`)})[0]
	x.finish(completeOf(other, at(time.Second)))
	dead := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "rq2", Kind: "index", Payload: raw(`{"customer":{"id":42.0}}`)},
		deadAt: at(time.Second), class: failure.Permanent})
	want = append(want, dead...)
	x.enqueue(at(0), store.NewJob{Queue: "rq", Kind: "other", Payload: raw(`{"customer":{"id":42}}`)})
	pending := x.enqueue(at(0), store.NewJob{Queue: "rq", Kind: "index", Payload: raw(`{"customer":{"id":42}}`)})
	before := x.stats()

	f := store.Filter{Kind: "index", States: []store.State{store.Completed, store.Dead}, PayloadField: "customer.id", PayloadValue: raw(`42`)}
	if n, err := x.s.Count(x.ctx, f); err != nil || n != int64(len(want)) {
		x.t.Fatalf("Count with a payload field: %d, %v; want %d", n, err, len(want))
	}
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpReplay, Params: store.OperationParams{Filter: f, Batch: 2, Note: "reindex"}}, at(time.Minute))
	op = x.claimOp(op.ID, "w1", at(time.Minute))
	res := x.step(op, "w1", 2, at(2*time.Minute))
	if res.End || res.Handled.Replayed != 2 || res.Operation.Cursor != want[1] || res.Operation.Progress.Replayed != 2 ||
		res.Operation.Progress.Processed != 2 || !slices.Equal(res.Queues, []string{"rq"}) {
		x.t.Fatalf("first step: %+v, op %+v", res, res.Operation)
	}
	// A stale step (the cursor before the first step) changes nothing.
	_, err := x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: "w1", Cursor: 0, Limit: 2, Now: at(3 * time.Minute), LeaseUntil: at(4 * time.Minute)})
	x.checkErr("StepOperation with a stale cursor", err, store.ErrConflict)
	if got := x.getOp(op.ID); got.Cursor != want[1] || got.Progress.Replayed != 2 {
		x.t.Fatalf("after a stale step: %+v", got)
	}
	op = x.runOp(res.Operation, "w1", 2, at(3*time.Minute))
	if op.Progress.Replayed != int64(len(want)) || op.Cursor != want[len(want)-1] {
		x.t.Fatalf("replay ended %+v, want %d replayed", op.Progress, len(want))
	}
	// Every source has exactly one copy.
	copies := x.listAll(store.Filter{Kind: "index", States: []store.State{store.Pending}}, 100)
	bySource := map[int64]*store.Job{}
	for _, j := range copies {
		if j.ID == pending[0].ID {
			continue
		}
		if j.ReplayOf == 0 || bySource[j.ReplayOf] != nil {
			x.t.Fatalf("copy %d replays %d (twice or not at all)", j.ID, j.ReplayOf)
		}
		bySource[j.ReplayOf] = j
	}
	for _, id := range want {
		c := bySource[id]
		if c == nil {
			x.t.Fatalf("job %d was not replayed", id)
		}
		src := x.get(id)
		c = x.get(c.ID)
		if c.Queue != src.Queue || c.Kind != src.Kind || !jsonEqual(c.Payload, src.Payload) || c.MaxRetries != src.MaxRetries ||
			c.Dependency != src.Dependency || c.Priority != src.Priority || c.State != store.Pending || c.Attempt != 0 || c.IdempotencyKey != "" ||
			len(c.History) != 1 || c.History[0].Kind != store.EventReplayed || c.History[0].ReplayOf != id || c.History[0].Note != "reindex" ||
			!sameTime(c.CreatedAt, c.History[0].At) {
			x.t.Errorf("copy of %d: %+v, history %s", id, c, fmtHistory(c.History))
		}
	}
	if len(bySource) != len(want) {
		x.t.Errorf("%d copies, want %d", len(bySource), len(want))
	}
	after := x.stats()
	if d := after.Counters["rq"][store.StatEnqueued] - before.Counters["rq"][store.StatEnqueued]; d != int64(len(want)-1) {
		x.t.Errorf("enqueued counter of rq grew by %d, want %d", d, len(want)-1)
	}
	if d := after.Jobs["rq2"][store.Pending] - before.Jobs["rq2"][store.Pending]; d != 1 {
		x.t.Errorf("pending jobs of rq2 grew by %d, want 1", d)
	}
	// The copies match the filter's kind and payload but are newer than
	// the operation: another step finds nothing.
	res = x.step(op, "w1", 2, at(4*time.Minute))
	if !res.End || res.Handled.Replayed != 0 {
		x.t.Fatalf("a step past the end replayed %d", res.Handled.Replayed)
	}
}

// testOperationsRedrive: a redrive moves the dead jobs matching its
// filter back to pending batch by batch, refusing those marked not
// reprocessable; by ids, it reports the ids that are not dead as skipped.
func testOperationsRedrive(x *h) {
	ids := x.makeDead(at(0),
		deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent},
		deadSpec{job: store.NewJob{Queue: "q", Kind: "k", NotReprocessable: true}, deadAt: at(time.Second), class: failure.Permanent},
		deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Transient},
		deadSpec{job: store.NewJob{Queue: "q", Kind: "other"}, deadAt: at(time.Second), class: failure.Permanent},
	)
	live := x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"})
	created := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpRedrive, Params: store.OperationParams{
		Filter: store.Filter{Kind: "k", States: []store.State{store.Pending}}, Batch: 2, Note: "fixed", Payload: raw(`{"v":2}`)}}, at(time.Minute))
	op := x.claimOp("", "w", at(time.Minute))
	if op == nil || op.ID != created.ID {
		x.t.Fatalf("claim: %+v", op)
	}
	op = x.runOp(op, "w", 2, at(2*time.Minute))
	p := op.Progress
	if p.Redriven != 2 || p.Refused != 1 || p.Skipped != 0 || p.Processed != 3 || !slices.Equal(p.RefusedIDs, []int64{ids[1]}) {
		x.t.Fatalf("redrive progress %+v", p)
	}
	for _, id := range []int64{ids[0], ids[2]} {
		j := x.get(id)
		last := j.History[len(j.History)-1]
		if j.State != store.Pending || j.Redriven != 1 || !jsonEqual(j.Payload, raw(`{"v":2}`)) || last.Kind != store.EventRedriven || last.Note != "fixed" {
			x.t.Errorf("redriven job %d: state %s redriven %d payload %s history %s", id, j.State, j.Redriven, j.Payload, fmtHistory(j.History))
		}
	}
	if j := x.get(ids[3]); j.State != store.Dead {
		x.t.Errorf("job %d of another kind is %s", ids[3], j.State)
	}
	if n := x.counter("q", store.StatRedriven); n != 2 {
		x.t.Errorf("redriven counter %d, want 2", n)
	}
	// By ids: a live job and a missing id are skipped.
	op = x.createOp(store.NewOperation{ID: opID(2), Kind: store.OpRedrive, Params: store.OperationParams{
		Filter: store.Filter{IDs: []int64{ids[3], live[0].ID, ids[3], live[0].ID + 1000}}, Batch: 10}}, at(3*time.Minute))
	op = x.claimOp(op.ID, "w", at(3*time.Minute))
	op = x.runOp(op, "w", 10, at(3*time.Minute))
	if p := op.Progress; p.Redriven != 1 || p.Skipped != 2 || p.Processed != 3 {
		x.t.Fatalf("redrive by ids: %+v, want 1 redriven and 2 skipped (one live, one missing)", p)
	}
}

// testOperationsPurge: a purge deletes the dead jobs matching its filter
// in batches and counts them as purged.
func testOperationsPurge(x *h) {
	var pa, pb []deadSpec
	for range 4 {
		pa = append(pa, deadSpec{job: store.NewJob{Queue: "pa", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent})
	}
	for range 3 {
		pb = append(pb, deadSpec{job: store.NewJob{Queue: "pb", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent})
	}
	x.makeDead(at(0), pa[:2]...)
	x.makeDead(at(0), pb...)
	x.makeDead(at(0), pa[2:]...)
	x.enqueue(at(0), store.NewJob{Queue: "pa", Kind: "k"})
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpPurge, Params: store.OperationParams{Filter: store.Filter{Queue: "pa"}, Batch: 2}}, at(time.Minute))
	op = x.claimOp(op.ID, "w", at(time.Minute))
	op = x.runOp(op, "w", 2, at(time.Minute))
	if op.Progress.Purged != 4 || op.Progress.Processed != 4 {
		x.t.Fatalf("purge progress %+v, want 4 purged", op.Progress)
	}
	st := x.stats()
	if st.Jobs["pa"][store.Dead] != 0 || st.Jobs["pb"][store.Dead] != 3 || st.Jobs["pa"][store.Pending] != 1 {
		x.t.Errorf("after the purge: %v", st.Jobs)
	}
	if n := x.counter("pa", store.StatPurged); n != 4 {
		x.t.Errorf("purged counter %d, want 4", n)
	}
}

// testOperationsCancel: a cancel cancels, batch by batch, the pending
// and scheduled jobs matching its filter (payload match included), with
// a canceled event, the job counts and the canceled counter; running,
// dead and completed jobs are never selected; by ids, the ids that are
// not pending or scheduled are skipped; a step fenced by a stale cursor
// changes nothing, and a second runner resumes where the first stopped.
func testOperationsCancel(x *h) {
	running := x.leaseNew(at(0), "w1", store.NewJob{Queue: "cq", Kind: "k", Payload: raw(`{"t":"a"}`)})[0]
	dead := x.makeDead(at(0), deadSpec{job: store.NewJob{Queue: "cq", Kind: "k", Payload: raw(`{"t":"a"}`)}, deadAt: at(time.Second), class: failure.Permanent})
	var want []int64
	for i := range 5 {
		nj := store.NewJob{Queue: "cq", Kind: "k", Payload: raw(`{"t":"a"}`)}
		if i%2 == 1 {
			nj.RunAt = at(time.Hour) // scheduled
		}
		want = append(want, x.enqueue(at(0), nj)[0].ID)
	}
	other := x.enqueue(at(0),
		store.NewJob{Queue: "cq", Kind: "k", Payload: raw(`{"t":"b"}`)},
		store.NewJob{Queue: "other", Kind: "k", Payload: raw(`{"t":"a"}`)})
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpCancel, Params: store.OperationParams{
		Filter: store.Filter{Queue: "cq", PayloadField: "t", PayloadValue: raw(`"a"`)}, Batch: 2, Note: "cleanup"}}, at(time.Minute))
	later := x.enqueue(at(time.Minute), store.NewJob{Queue: "cq", Kind: "k", Payload: raw(`{"t":"a"}`)})[0]
	op = x.claimOp(op.ID, "w", at(time.Minute))
	// One batch, then the runner dies: a second runner takes over once
	// the lease ended, and a stale step of the first changes nothing.
	res := x.step(op, "w", 2, at(time.Minute))
	if res.End || res.Handled.Canceled != 2 {
		x.t.Fatalf("first step: %+v end %v, want 2 canceled", res.Handled, res.End)
	}
	stale := op
	op = x.claimOp(op.ID, "w2", at(10*time.Minute))
	if op == nil || op.Cursor != res.Operation.Cursor || op.Progress.Canceled != 2 {
		x.t.Fatalf("takeover: %+v", op)
	}
	_, err := x.s.StepOperation(x.ctx, store.OperationStep{ID: stale.ID, Worker: "w", Cursor: stale.Cursor, Limit: 2, Now: at(10 * time.Minute), LeaseUntil: at(11 * time.Minute)})
	x.checkErr("stale step of a cancel", err, store.ErrConflict)
	op = x.runOp(op, "w2", 2, at(10*time.Minute))
	if p := op.Progress; p.Canceled != 5 || p.Processed != 5 || p.Skipped != 0 {
		x.t.Fatalf("cancel progress %+v, want 5 canceled", p)
	}
	for _, id := range want {
		j := x.get(id)
		last := j.History[len(j.History)-1]
		if j.State != store.Canceled || j.FinishedAt == nil || last.Kind != store.EventCanceled || last.Note != "cleanup" {
			x.t.Errorf("job %d: state %s history %s, want canceled with the note", id, j.State, fmtHistory(j.History))
		}
	}
	if j := x.get(running.ID); j.State != store.Running || j.CancelRequested {
		x.t.Errorf("running job: state %s cancel requested %v, want untouched", j.State, j.CancelRequested)
	}
	if j := x.get(dead[0]); j.State != store.Dead {
		x.t.Errorf("dead job is %s", j.State)
	}
	for _, j := range append(other, later) {
		if g := x.get(j.ID); g.State != store.Pending {
			x.t.Errorf("job %d outside the selection is %s", j.ID, g.State)
		}
	}
	st := x.stats()
	if st.Jobs["cq"][store.Canceled] != 5 || st.Jobs["cq"][store.Pending] != 2 || st.Jobs["cq"][store.Scheduled] != 0 || st.Jobs["cq"][store.Running] != 1 {
		x.t.Errorf("counts after the cancel: %v", st.Jobs["cq"])
	}
	if n := x.counter("cq", store.StatCanceled); n != 5 {
		x.t.Errorf("canceled counter %d, want 5", n)
	}
	// Scheduled only.
	sched := x.enqueue(at(0), store.NewJob{Queue: "cs", Kind: "k", RunAt: at(time.Hour)}, store.NewJob{Queue: "cs", Kind: "k"})
	op = x.createOp(store.NewOperation{ID: opID(2), Kind: store.OpCancel, Params: store.OperationParams{
		Filter: store.Filter{Queue: "cs", States: []store.State{store.Scheduled}}, Batch: 10}}, at(time.Minute))
	op = x.runOp(x.claimOp(op.ID, "w", at(time.Minute)), "w", 10, at(time.Minute))
	if op.Progress.Canceled != 1 || x.get(sched[0].ID).State != store.Canceled || x.get(sched[1].ID).State != store.Pending {
		x.t.Errorf("scheduled-only cancel: %+v", op.Progress)
	}
	// By ids: the running, dead and missing ids are skipped.
	op = x.createOp(store.NewOperation{ID: opID(3), Kind: store.OpCancel, Params: store.OperationParams{
		Filter: store.Filter{IDs: []int64{other[0].ID, running.ID, dead[0], other[0].ID, later.ID + 1000}}, Batch: 10}}, at(2*time.Minute))
	op = x.runOp(x.claimOp(op.ID, "w", at(2*time.Minute)), "w", 10, at(2*time.Minute))
	if p := op.Progress; p.Canceled != 1 || p.Skipped != 3 || p.Processed != 4 {
		x.t.Errorf("cancel by ids: %+v, want 1 canceled and 3 skipped", p)
	}
	if j := x.get(running.ID); j.State != store.Running || j.CancelRequested {
		x.t.Errorf("running job after a cancel by ids: %s %v", j.State, j.CancelRequested)
	}
	// A cancel of running, dead or completed jobs is refused.
	for _, s := range []store.State{store.Running, store.Dead, store.Completed} {
		_, err := x.s.CreateOperation(x.ctx, store.NewOperation{ID: opID(4), Kind: store.OpCancel, Params: store.OperationParams{
			Filter: store.Filter{States: []store.State{s}}, Batch: 1}}, at(time.Minute))
		x.checkErr("cancel of "+string(s)+" jobs", err, store.ErrInvalid)
	}
}

// testOperationsExport: an export reads its jobs in id order with their
// history, and its steps record what the runner wrote.
func testOperationsExport(x *h) {
	var specs []deadSpec
	for range 5 {
		specs = append(specs, deadSpec{job: store.NewJob{Queue: "q", Kind: "k"}, deadAt: at(time.Second), class: failure.Permanent, err: "boom"})
	}
	ids := x.makeDead(at(0), specs...)
	x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"})
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpExport, Params: store.OperationParams{Batch: 2, Dir: "/tmp/x", Root: "/tmp", Decrypt: true}}, at(time.Minute))
	op = x.claimOp(op.ID, "w", at(time.Minute))
	if op.Params.Dir != "/tmp/x" || op.Params.Root != "/tmp" || !op.Params.Decrypt {
		x.t.Fatalf("export's folder: dir %q under %q, decrypt %v; want /tmp/x under /tmp, decrypt", op.Params.Dir, op.Params.Root, op.Params.Decrypt)
	}
	var seen []int64
	for {
		jobs, err := x.s.OperationJobs(x.ctx, op.ID, op.Cursor, 2)
		if err != nil {
			x.t.Fatalf("OperationJobs: %v", err)
		}
		var last int64
		for _, j := range jobs {
			if j.State != store.Dead || j.LastError != "boom" {
				x.t.Fatalf("export read job %d: %s, error %q", j.ID, j.State, j.LastError)
			}
			seen = append(seen, j.ID)
			last = j.ID
		}
		res, err := x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: "w", Cursor: op.Cursor, Limit: 2, Now: at(time.Minute),
			LeaseUntil: at(2 * time.Minute), Exported: &store.ExportedBatch{Count: int64(len(jobs)), Last: last}})
		if err != nil {
			x.t.Fatalf("StepOperation: %v", err)
		}
		op = res.Operation
		if res.End {
			break
		}
	}
	x.checkIDs("exported ids", seen, ids)
	if op.Progress.Exported != 5 || op.Cursor != ids[4] {
		x.t.Errorf("export progress %+v cursor %d", op.Progress, op.Cursor)
	}
	_, err := x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: "w", Cursor: op.Cursor, Limit: 2, Now: at(time.Minute),
		LeaseUntil: at(2 * time.Minute), Exported: &store.ExportedBatch{Count: 1, Last: ids[0]}})
	x.checkErr("an export step going backwards", err, store.ErrInvalid)
	_, err = x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: "w", Cursor: op.Cursor, Limit: 2, Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)})
	x.checkErr("an export step without what it wrote", err, store.ErrInvalid)
}

// testOperationsStates: pause, resume and cancel, from every state; a
// paused or canceled operation takes no step; a resumed one continues at
// its cursor.
func testOperationsStates(x *h) {
	x.enqueue(at(0), store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"}, store.NewJob{Queue: "q", Kind: "k"})
	set := func(id string, to store.OperationState) (*store.Operation, error) {
		return x.s.SetOperationState(x.ctx, id, to, at(time.Hour))
	}
	op := x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpReplay, Params: store.OperationParams{Batch: 1}}, at(time.Minute))
	op = x.claimOp(op.ID, "w", at(time.Minute))
	op = x.step(op, "w", 1, at(time.Minute)).Operation
	p, err := set(op.ID, store.OpPaused)
	if err != nil || p.State != store.OpPaused || p.Worker != "" || p.Cursor != op.Cursor {
		x.t.Fatalf("pause of a running operation: %+v, %v", p, err)
	}
	_, err = x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: "w", Cursor: op.Cursor, Limit: 1, Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)})
	x.checkErr("StepOperation of a paused operation", err, store.ErrConflict)
	_, err = x.s.RenewOperation(x.ctx, store.OperationRenewal{ID: op.ID, Worker: "w", LeaseUntil: at(2 * time.Minute), Now: at(time.Minute), Matched: -1})
	x.checkErr("RenewOperation of a paused operation", err, store.ErrConflict)
	if c := x.claimOp("", "w2", at(2*time.Hour)); c != nil {
		x.t.Fatalf("a paused operation was claimed")
	}
	if p, err = set(op.ID, store.OpPaused); err != nil || p.State != store.OpPaused {
		x.t.Fatalf("pausing twice: %+v, %v", p, err)
	}
	if p, err = set(op.ID, store.OpPending); err != nil || p.State != store.OpPending {
		x.t.Fatalf("resume: %+v, %v", p, err)
	}
	c := x.claimOp("", "w2", at(2*time.Hour))
	if c == nil || c.ID != op.ID || c.Cursor != op.Cursor || c.Progress.Replayed != 1 {
		x.t.Fatalf("claim after resume: %+v", c)
	}
	c = x.runOp(c, "w2", 1, at(2*time.Hour))
	if c.Progress.Replayed != 3 {
		x.t.Fatalf("resumed replay replayed %d in all, want 3", c.Progress.Replayed)
	}
	if _, err := x.s.FinishOperation(x.ctx, op.ID, "w2", store.OpDone, "", at(2*time.Hour)); err != nil {
		x.t.Fatal(err)
	}
	for _, to := range []store.OperationState{store.OpPaused, store.OpPending, store.OpCanceled} {
		_, err := set(op.ID, to)
		x.checkErr("SetOperationState("+string(to)+") of a done operation", err, store.ErrConflict)
	}
	_, err = set(op.ID, store.OpDone)
	x.checkErr("SetOperationState(done)", err, store.ErrInvalid)

	// Cancel a pending one, a paused one; resume a pending one is no change.
	a := x.createOp(store.NewOperation{ID: opID(2), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}}, at(time.Minute))
	if p, err = set(a.ID, store.OpPending); err != nil || p.State != store.OpPending {
		x.t.Fatalf("resume of a pending operation: %+v, %v", p, err)
	}
	if p, err = set(a.ID, store.OpCanceled); err != nil || p.State != store.OpCanceled || p.FinishedAt == nil {
		x.t.Fatalf("cancel of a pending operation: %+v, %v", p, err)
	}
	if p, err = set(a.ID, store.OpCanceled); err != nil || p.State != store.OpCanceled {
		x.t.Fatalf("cancel twice: %+v, %v", p, err)
	}
	_, err = set(a.ID, store.OpPending)
	x.checkErr("resume of a canceled operation", err, store.ErrConflict)
	b := x.createOp(store.NewOperation{ID: opID(3), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}}, at(time.Minute))
	if _, err = set(b.ID, store.OpPaused); err != nil {
		x.t.Fatal(err)
	}
	if p, err = set(b.ID, store.OpCanceled); err != nil || p.State != store.OpCanceled {
		x.t.Fatalf("cancel of a paused operation: %+v, %v", p, err)
	}
	// Cancel a running one: its runner's next step is refused.
	r := x.createOp(store.NewOperation{ID: opID(4), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}}, at(time.Minute))
	r = x.claimOp(r.ID, "w", at(time.Minute))
	if _, err = set(r.ID, store.OpCanceled); err != nil {
		x.t.Fatal(err)
	}
	_, err = x.s.StepOperation(x.ctx, store.OperationStep{ID: r.ID, Worker: "w", Cursor: 0, Limit: 1, Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)})
	x.checkErr("StepOperation of a canceled operation", err, store.ErrConflict)
	_, err = x.s.FinishOperation(x.ctx, r.ID, "w", store.OpDone, "", at(time.Minute))
	x.checkErr("FinishOperation of a canceled operation", err, store.ErrConflict)
}

// testOperationsRetention: DeleteOperations deletes the finished
// operations that finished before the cutoff, and no unfinished one.
func testOperationsRetention(x *h) {
	for i := 1; i <= 4; i++ {
		x.createOp(store.NewOperation{ID: opID(i), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}}, at(0))
	}
	if _, err := x.s.SetOperationState(x.ctx, opID(1), store.OpCanceled, at(time.Hour)); err != nil {
		x.t.Fatal(err)
	}
	if _, err := x.s.SetOperationState(x.ctx, opID(2), store.OpCanceled, at(3*time.Hour)); err != nil {
		x.t.Fatal(err)
	}
	op := x.claimOp(opID(3), "w", at(time.Hour))
	if _, err := x.s.FinishOperation(x.ctx, op.ID, "w", store.OpDone, "", at(time.Hour)); err != nil {
		x.t.Fatal(err)
	}
	if _, err := x.s.SetOperationState(x.ctx, opID(4), store.OpPaused, at(time.Hour)); err != nil {
		x.t.Fatal(err)
	}
	n, err := x.s.DeleteOperations(x.ctx, at(2*time.Hour))
	if err != nil || n != 2 {
		x.t.Fatalf("DeleteOperations: %d, %v; want 2", n, err)
	}
	ops, _, err := x.s.ListOperations(x.ctx, "", 10)
	if err != nil {
		x.t.Fatal(err)
	}
	var left []string
	for _, o := range ops {
		left = append(left, o.ID)
	}
	slices.Sort(left)
	if !slices.Equal(left, []string{opID(2), opID(4)}) {
		x.t.Errorf("left %v, want ops 2 (finished after the cutoff) and 4 (paused)", left)
	}
}

// testOperationsList: newest first, by pages.
func testOperationsList(x *h) {
	for i := 1; i <= 5; i++ {
		// Two share a creation time: the id breaks the tie.
		x.createOp(store.NewOperation{ID: opID(i), Kind: store.OpPurge, Params: store.OperationParams{Batch: 1}}, at(time.Duration(min(i, 4))*time.Minute))
	}
	var got []string
	before := ""
	for range 10 {
		ops, next, err := x.s.ListOperations(x.ctx, before, 2)
		if err != nil {
			x.t.Fatalf("ListOperations(%q): %v", before, err)
		}
		if len(ops) > 2 {
			x.t.Fatalf("a page of 2 held %d", len(ops))
		}
		for _, op := range ops {
			got = append(got, op.ID)
		}
		if next == "" {
			break
		}
		before = next
	}
	want := []string{opID(5), opID(4), opID(3), opID(2), opID(1)}
	if !slices.Equal(got, want) {
		x.t.Errorf("listed %v, want %v", got, want)
	}
	_, _, err := x.s.ListOperations(x.ctx, opID(77), 2)
	x.checkErr("ListOperations before an unknown id", err, store.ErrInvalid)
}

// testOperationsConcurrent: runners racing for one operation: one claim
// wins; of concurrent steps at one cursor exactly one applies, so no job
// is handled twice.
func testOperationsConcurrent(x *h) {
	var jobs []store.NewJob
	for range 40 {
		jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k"})
	}
	x.enqueueMany(at(0), jobs)
	x.createOp(store.NewOperation{ID: opID(1), Kind: store.OpReplay, Params: store.OperationParams{Filter: store.Filter{Kind: "k"}, Batch: 5}}, at(time.Minute))
	var wg sync.WaitGroup
	claims := make([]*store.Operation, 8)
	errs := make([]error, 8)
	for i := range claims {
		wg.Go(func() {
			claims[i], errs[i] = x.s.ClaimOperation(x.ctx, "", fmt.Sprintf("w%d", i), at(time.Minute), at(2*time.Minute))
		})
	}
	wg.Wait()
	var won *store.Operation
	for i, c := range claims {
		if errs[i] != nil {
			x.t.Fatalf("ClaimOperation: %v", errs[i])
		}
		if c != nil {
			if won != nil {
				x.t.Fatalf("two claims won: %s and %s", won.Worker, c.Worker)
			}
			won = c
		}
	}
	if won == nil {
		x.t.Fatal("no claim won")
	}
	// Steps race at each cursor: one applies, the others are stale.
	op := won
	for round := 0; ; round++ {
		if round > 20 {
			x.t.Fatal("the operation never ended")
		}
		results := make([]store.StepResult, 4)
		stepErrs := make([]error, 4)
		for i := range results {
			wg.Go(func() {
				results[i], stepErrs[i] = x.s.StepOperation(x.ctx, store.OperationStep{ID: op.ID, Worker: won.Worker, Cursor: op.Cursor, Limit: 5,
					Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)})
			})
		}
		wg.Wait()
		// A step past the end changes nothing, so several may succeed
		// there; a step that handles jobs moves the cursor, so only one.
		applied, empty := 0, 0
		var next store.StepResult
		for i := range results {
			switch {
			case stepErrs[i] == nil && results[i].Handled.Processed == 0 && results[i].End:
				empty++
				next = results[i]
			case stepErrs[i] == nil:
				applied++
				next = results[i]
			default:
				x.checkErr("a concurrent step", stepErrs[i], store.ErrConflict)
			}
		}
		if applied != 1 && (applied != 0 || empty == 0) {
			x.t.Fatalf("%d concurrent steps at cursor %d handled jobs, want 1", applied, op.Cursor)
		}
		op = next.Operation
		if next.End {
			break
		}
	}
	if op.Progress.Replayed != 40 {
		x.t.Fatalf("replayed %d, want 40", op.Progress.Replayed)
	}
	copies := x.listAll(store.Filter{Kind: "k"}, 1000)
	seen := map[int64]int{}
	for _, j := range copies {
		if j.ReplayOf != 0 {
			seen[j.ReplayOf]++
		}
	}
	if len(seen) != 40 {
		x.t.Fatalf("%d sources replayed, want 40", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			x.t.Fatalf("job %d replayed %d times", id, n)
		}
	}
}

// testListPayloadField: the payload match of a filter compares a
// scalar at a path, numbers by value, and never matches objects or
// missing fields.
func testListPayloadField(x *h) {
	payloads := []string{`{"a":42}`, `{"a":42.0}`, `{"a":"42"}`, `{"a":true}`, `{"a":null}`, `{"b":42}`, `{"a":{"b":42}}`, `[42]`, `"a"`, `{"a":43}`}
	var jobs []store.NewJob
	for _, p := range payloads {
		jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k", Payload: raw(p)})
	}
	ids := jobIDs(x.enqueue(at(0), jobs...))
	for _, c := range []struct {
		field, value string
		want         []int
	}{
		{"a", `42`, []int{0, 1}},
		{"a", `42.0`, []int{0, 1}},
		{"a", `"42"`, []int{2}},
		{"a", `true`, []int{3}},
		{"a", `null`, []int{4}},
		{"b", `42`, []int{5}},
		{"a.b", `42`, []int{6}},
		{"a", `false`, nil},
	} {
		f := store.Filter{PayloadField: c.field, PayloadValue: raw(c.value)}
		var want []int64
		for _, i := range c.want {
			want = append(want, ids[i])
		}
		x.checkIDSet(fmt.Sprintf("List payload.%s=%s", c.field, c.value), x.listIDs(f, 100), want)
		if n, err := x.s.Count(x.ctx, f); err != nil || n != int64(len(want)) {
			x.t.Errorf("Count payload.%s=%s: %d, %v; want %d", c.field, c.value, n, err, len(want))
		}
	}
	for _, f := range []store.Filter{
		{PayloadField: "a"},
		{PayloadValue: raw(`1`)},
		{PayloadField: "a b", PayloadValue: raw(`1`)},
		{PayloadField: "a", PayloadValue: raw(`[1]`)},
		{PayloadField: "a", PayloadValue: raw(`nope`)},
	} {
		_, err := x.s.List(x.ctx, f, store.Page{})
		x.checkErr(fmt.Sprintf("List with payload match %q=%s", f.PayloadField, f.PayloadValue), err, store.ErrInvalid)
	}
}

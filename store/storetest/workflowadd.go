package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowAdd: jobs added to an open workflow depend on members
// (done at once when the member completed) and on each other, the
// callbacks wait for them, and every refusal leaves the workflow as it
// was: a name taken, a dependency naming no job, a cycle, a dependency
// on a canceled member, an unknown workflow, and a workflow closed
// (every job finished once, even if a redrive made it active again) or
// canceled.
func testWorkflowAdd(x *h) {
	const q = "wf-add"
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1} }
	cb := func(kind string) *store.NewJob { j := nj(kind); return &j }
	f := x.enqueueFlow(store.NewWorkflow{Name: "batch", Jobs: []store.WorkflowNode{
		{Name: "A", Job: nj("A")}, {Name: "B", Job: nj("B")}, {Name: "K", Job: nj("K")},
	}, OnSuccess: cb("on_success"), OnComplete: cb("on_complete")}, at(0))
	j := x.leaseKinds(q, at(time.Second), "A", "B", "K")
	x.finish(completeOf(j["A"], at(2*time.Second)))
	x.cancel(f.ids["K"], at(2*time.Second)) // running: its cancel is requested
	x.finish(outcomeCanceled(j["K"], at(2*time.Second)))

	refused := func(what string, nodes []store.WorkflowNode, target error) error {
		x.t.Helper()
		before := x.getFlow(f.w.ID)
		_, err := x.s.AddToWorkflow(x.ctx, f.w.ID, nodes, at(3*time.Second))
		x.checkErr(what, err, target)
		if after := x.getFlow(f.w.ID); after.Total != before.Total || len(after.Jobs) != len(before.Jobs) {
			x.t.Errorf("%s: the refused add changed the workflow: total %d, %d jobs; was %d, %d", what, after.Total, len(after.Jobs), before.Total, len(before.Jobs))
		}
		return err
	}
	refused("a name taken", []store.WorkflowNode{{Name: "C", Job: nj("C")}, {Name: "A", Job: nj("A")}}, store.ErrInvalid)
	err := refused("unknown dependencies", []store.WorkflowNode{{Name: "C", Job: nj("C"), After: []string{"A", "X"}}}, store.ErrInvalid)
	if we, ok := store.IsWorkflowError(err); !ok || len(we.Unknown) != 1 || we.Unknown[0] != "C -> X" {
		x.t.Errorf("unknown dependency: %v, want a WorkflowError naming C -> X", err)
	}
	err = refused("a cycle", []store.WorkflowNode{{Name: "C", Job: nj("C"), After: []string{"D", "A"}}, {Name: "D", Job: nj("D"), After: []string{"C"}}}, store.ErrInvalid)
	if we, ok := store.IsWorkflowError(err); !ok || len(we.Cycle) != 3 {
		x.t.Errorf("cycle: %v, want a WorkflowError naming C -> D -> C", err)
	}
	err = refused("a canceled dependency", []store.WorkflowNode{{Name: "C", Job: nj("C"), After: []string{"K"}}}, store.ErrConflict)
	if ce, ok := errors.AsType[*store.WorkflowConflictError](err); !ok || ce.Job != "C" || ce.Field != "after" || ce.Member != "K" ||
		ce.MemberState != store.Canceled || ce.Closed != "" {
		x.t.Errorf("canceled dependency: %#v, want C's after naming K, canceled", err)
	}
	if _, err := x.s.AddToWorkflow(x.ctx, f.w.ID+1000, []store.WorkflowNode{{Name: "C", Job: nj("C")}}, at(3*time.Second)); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("add to an unknown workflow: %v, want ErrNotFound", err)
	}

	// C after A (completed: due at once) and B (running), D after C.
	w, err := x.s.AddToWorkflow(x.ctx, f.w.ID, []store.WorkflowNode{
		{Name: "D", Job: nj("D"), After: []string{"C"}}, {Name: "C", Job: nj("C"), After: []string{"A", "B"}}, {Name: "E", Job: nj("E"), After: []string{"A"}},
	}, at(3*time.Second))
	if err != nil {
		x.t.Fatalf("AddToWorkflow: %v", err)
	}
	if w.Total != 6 || w.State != store.WorkflowActive || w.ClosedAt != nil {
		x.t.Errorf("after the add: total %d, state %s, closed %v; want 6, active, open", w.Total, w.State, w.ClosedAt)
	}
	f = flow{w: w, ids: map[string]int64{}}
	for _, wj := range w.Jobs {
		f.ids[wj.Name] = wj.JobID
	}
	if len(f.ids) != 6 {
		x.t.Fatalf("after the add: %d jobs, want 6", len(f.ids))
	}
	x.flowStates("added", f, map[string]store.State{"C": store.Blocked, "D": store.Blocked, "E": store.Pending})
	x.checkAllCounts("added")
	e := x.leaseKinds(q, at(4*time.Second), "E")
	x.finish(completeOf(j["B"], at(5*time.Second)), completeOf(e["E"], at(5*time.Second)))
	c := x.leaseKinds(q, at(6*time.Second), "C")
	x.finish(completeOf(c["C"], at(7*time.Second)))
	x.flowStates("C completed", f, map[string]store.State{"D": store.Pending, "on_complete": store.Blocked, "on_success": store.Canceled})
	d := x.leaseKinds(q, at(8*time.Second), "D")
	// The completion of D, the last job, closes the workflow.
	x.finish(buryNow(d["D"], at(9*time.Second)))
	x.flowStates("D dead", f, map[string]store.State{"on_complete": store.Pending})
	w = x.getFlow(f.w.ID)
	if w.ClosedAt == nil || !w.ClosedAt.Equal(at(9*time.Second)) || w.State != store.WorkflowFinished {
		x.t.Errorf("after the last job: closed at %v, state %s; want closed at %v, finished", w.ClosedAt, w.State, at(9*time.Second))
	}
	refused("a closed workflow", []store.WorkflowNode{{Name: "F", Job: nj("F")}}, store.ErrConflict)
	// A redrive makes it active again; it stays closed.
	x.redrive(store.RedriveParams{IDs: []int64{f.ids["D"]}, Now: at(10 * time.Second)})
	err = refused("a closed workflow, active again", []store.WorkflowNode{{Name: "F", Job: nj("F")}}, store.ErrConflict)
	if ce, ok := errors.AsType[*store.WorkflowConflictError](err); !ok || ce.Closed != "closed" || ce.State != store.WorkflowActive {
		x.t.Errorf("closed workflow, active again: %#v, want closed, active", err)
	}
	// A canceled workflow takes nothing either.
	g := x.enqueueFlow(store.NewWorkflow{Jobs: []store.WorkflowNode{{Name: "A", Job: nj("GA")}}}, at(0))
	if _, err := x.s.CancelWorkflow(x.ctx, g.w.ID, at(11*time.Second)); err != nil {
		x.t.Fatal(err)
	}
	_, err = x.s.AddToWorkflow(x.ctx, g.w.ID, []store.WorkflowNode{{Name: "B", Job: nj("GB")}}, at(12*time.Second))
	if ce, ok := errors.AsType[*store.WorkflowConflictError](err); !ok || ce.Closed != "canceled" || ce.State != store.WorkflowCanceled {
		x.t.Errorf("add to a canceled workflow: %v, want canceled", err)
	}
	x.checkAllCounts("end")
}

// outcomeCanceled is the outcome of a running job whose cancel was
// requested: canceled.
func outcomeCanceled(j *store.Job, now time.Time) store.Outcome {
	o := outcome(j, store.Retry, now)
	o.RunAt, o.Error = now, "stopped"
	return o
}

// testWorkflowAddRace: in each of many workflows, the completion of the
// last job and an add of a job after it run at once, as two processes
// of a fleet would: the add lands before the completion, and the
// callbacks wait for the job added, which the completion releases; or
// it is refused, the workflow closed, and the callbacks fired. Never a
// callback fired with a job added still waiting, and the job added is
// released exactly once.
func testWorkflowAddRace(x *h) {
	const q, flows = "wf-addrace", 24
	nj := func(queue, kind string) store.NewJob { return store.NewJob{Queue: queue, Kind: kind, MaxRetries: -1} }
	var fs []flow
	for range flows {
		s, c := nj(q+"-cb", "on_success"), nj(q+"-cb", "on_complete")
		fs = append(fs, x.enqueueFlow(store.NewWorkflow{Jobs: []store.WorkflowNode{{Name: "L", Job: nj(q, "L")}}, OnSuccess: &s, OnComplete: &c}, at(0)))
	}
	leased := x.fetch(store.FetchParams{Queue: q, Limit: flows, Now: at(time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
	if len(leased) != flows {
		x.t.Fatalf("leased %d jobs, want %d", len(leased), flows)
	}
	byID := map[int64]*store.Job{}
	for _, j := range leased {
		byID[j.ID] = j
	}
	start := make(chan struct{})
	addErr := make([]error, flows)
	var wg sync.WaitGroup
	errs := make(chan error, 2*flows)
	for i, f := range fs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			applied, err := x.s.Finish(x.ctx, []store.Outcome{completeOf(byID[f.ids["L"]], at(2*time.Second))})
			if err == nil && !applied[0] {
				err = fmt.Errorf("completion of L of workflow %d not applied", f.w.ID)
			}
			if err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			after := []string{"L"}
			if i%2 == 0 {
				after = nil // half of the jobs added wait for L, half for none
			}
			_, addErr[i] = x.s.AddToWorkflow(x.ctx, f.w.ID, []store.WorkflowNode{{Name: "late", Job: nj(q+"-late", "late"), After: after}}, at(2*time.Second))
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		x.t.Fatal(err)
	}
	var landed, refused int
	for i, f := range fs {
		w := x.getFlow(f.w.ID)
		cbs := map[string]store.State{"on_success": x.get(w.OnSuccess).State, "on_complete": x.get(w.OnComplete).State}
		switch err := addErr[i]; {
		case err == nil:
			landed++
			if w.Total != 2 || cbs["on_success"] != store.Blocked || cbs["on_complete"] != store.Blocked || w.ClosedAt != nil {
				x.t.Errorf("workflow %d: the add landed, yet total %d, callbacks %v, closed %v; want 2, blocked, open", w.ID, w.Total, cbs, w.ClosedAt)
			}
			var late store.WorkflowJob
			for _, wj := range w.Jobs {
				if wj.Name == "late" {
					late = wj
				}
			}
			if late.State != store.Pending {
				x.t.Errorf("workflow %d: the job added is %s, want pending (released)", w.ID, late.State)
			}
		default:
			refused++
			ce, ok := errors.AsType[*store.WorkflowConflictError](err)
			if !ok || ce.Closed != "closed" || ce.State != store.WorkflowSucceeded {
				x.t.Errorf("workflow %d: add refused with %v, want closed, succeeded", w.ID, err)
			}
			if w.Total != 1 || cbs["on_success"] != store.Pending || cbs["on_complete"] != store.Pending || w.ClosedAt == nil {
				x.t.Errorf("workflow %d: the add was refused, yet total %d, callbacks %v, closed %v; want 1, fired, closed", w.ID, w.Total, cbs, w.ClosedAt)
			}
		}
	}
	x.t.Logf("%d adds landed before the completion, %d refused after it", landed, refused)
	// The jobs added complete: their workflows' callbacks fire then, once.
	late := x.fetch(store.FetchParams{Queue: q + "-late", Limit: 1000, Now: at(3 * time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
	if len(late) != landed {
		x.t.Fatalf("%d jobs added leased, want %d", len(late), landed)
	}
	for _, j := range late {
		x.finish(completeOf(j, at(4*time.Second)))
	}
	cbs := x.fetch(store.FetchParams{Queue: q + "-cb", Limit: 1000, Now: at(5 * time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
	if len(cbs) != 2*flows {
		x.t.Errorf("%d callbacks fired, want %d (each once)", len(cbs), 2*flows)
	}
	x.checkAllCounts("end")
}

// testWorkflowMemberKeys: the members of a workflow (and the jobs added
// to it) may carry idempotency keys. A key another job holds, or held
// (deleted, its key kept), refuses the whole enqueue, naming the member
// and the holder, and stores nothing; a key given twice in one workflow
// is invalid; the workflow's own key is looked up first.
func testWorkflowMemberKeys(x *h) {
	const q = "wf-keys"
	nj := func(kind, key string) store.NewJob {
		return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1, IdempotencyKey: key}
	}
	plain := x.enqueue(at(0), nj("plain", "k-plain"))[0]
	held := func(what string, err error, job, key string, holder int64, gone bool) {
		x.t.Helper()
		ce, ok := errors.AsType[*store.WorkflowConflictError](err)
		if !errors.Is(err, store.ErrConflict) || !ok || ce.Job != job || ce.Field != "idempotency_key" || ce.Key != key || ce.Holder != holder || ce.Gone != gone {
			x.t.Errorf("%s: %v (%#v), want job %s's key %s held by job %d (gone %v)", what, err, ce, job, key, holder, gone)
		}
	}
	count := func() int64 {
		n, err := x.s.Count(x.ctx, store.Filter{Queue: q})
		if err != nil {
			x.t.Fatal(err)
		}
		return n
	}
	before := count()
	_, err := x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "a", Job: nj("a", "k-a")}, {Name: "b", Job: nj("b", "k-plain"), After: []string{"a"}},
	}}, at(time.Second))
	held("a member's key held", err, "b", "k-plain", plain.ID, false)
	if n := count(); n != before {
		x.t.Errorf("the refused workflow stored %d jobs", n-before)
	}
	if ws, _, err := x.s.ListWorkflows(x.ctx, 0, 10); err != nil || len(ws) != 0 {
		x.t.Errorf("the refused workflow was stored: %d workflows, %v", len(ws), err)
	}
	_, err = x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "a", Job: nj("a", "k-same")}, {Name: "b", Job: nj("b", "k-same")},
	}}, at(time.Second))
	x.checkErr("a key given twice", err, store.ErrInvalid)

	// Keys not held: the members hold them, as any job does.
	f := x.enqueueFlow(store.NewWorkflow{IdempotencyKey: "wf", Jobs: []store.WorkflowNode{
		{Name: "a", Job: nj("a", "k-a")}, {Name: "b", Job: nj("b", ""), After: []string{"a"}},
	}}, at(time.Second))
	if j := x.get(f.ids["a"]); j.IdempotencyKey != "k-a" {
		x.t.Errorf("member a has the key %q, want k-a", j.IdempotencyKey)
	}
	if got := x.enqueue(at(2*time.Second), nj("a", "k-a"))[0]; !got.Existing || got.ID != f.ids["a"] {
		x.t.Errorf("an enqueue of member a's key: job %d existing %v, want member a (%d)", got.ID, got.Existing, f.ids["a"])
	}
	// The workflow's key first: the workflow holding it, whatever its
	// members' keys.
	again, err := x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{IdempotencyKey: "wf", Jobs: []store.WorkflowNode{{Name: "a", Job: nj("a", "k-plain")}}}, at(3*time.Second))
	if err != nil || !again.Existing || again.ID != f.w.ID {
		x.t.Errorf("the workflow's key again: %+v, %v; want workflow %d, existing", again, err, f.w.ID)
	}
	// An add too; a key held refuses it, nothing added.
	_, err = x.s.AddToWorkflow(x.ctx, f.w.ID, []store.WorkflowNode{{Name: "c", Job: nj("c", "k-c")}, {Name: "d", Job: nj("d", "k-a")}}, at(3*time.Second))
	held("an added job's key held by a member", err, "d", "k-a", f.ids["a"], false)
	if w := x.getFlow(f.w.ID); w.Total != 2 {
		x.t.Errorf("the refused add changed the workflow: total %d", w.Total)
	}
	w, err := x.s.AddToWorkflow(x.ctx, f.w.ID, []store.WorkflowNode{{Name: "c", Job: nj("c", "k-c"), After: []string{"b"}}}, at(3*time.Second))
	if err != nil || w.Total != 3 {
		x.t.Fatalf("add of c with its key: %v", err)
	}

	// A key kept after its job was deleted refuses it too.
	j := x.leaseKinds(q, at(4*time.Second), "plain", "a")
	x.finish(completeOf(j["plain"], at(5*time.Second)))
	if n, err := x.s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 100); err != nil || n != 1 {
		x.t.Fatalf("DeleteFinished = %d, %v; want 1", n, err)
	}
	_, err = x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{{Name: "z", Job: nj("z", "k-plain")}}}, at(6*time.Second))
	held("a key kept", err, "z", "k-plain", plain.ID, true)
	x.checkAllCounts("end")
}

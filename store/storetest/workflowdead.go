package storetest

import (
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowDeadDependents: a dead job of a workflow under the wait
// policy shows its blocked dependents (the direct ones) on Get and on
// the DLQ's List, a plain dead job none; a redrive says how many blocked
// jobs wait for the jobs it redrove (each once); and a purge of the dead
// job cancels its blocked dependents, transitively, as its cancel would,
// which finishes the workflow (the complete callback fires, the success
// callback is canceled).
func testWorkflowDeadDependents(x *h) {
	const q = "wf-deaddeps"
	w := diamond(q, "")
	w.Jobs = append(w.Jobs,
		store.WorkflowNode{Name: "E", Job: store.NewJob{Queue: q, Kind: "E", MaxRetries: -1}, After: []string{"D"}},
		store.WorkflowNode{Name: "F", Job: store.NewJob{Queue: q, Kind: "F", MaxRetries: -1}, After: []string{"C"}})
	f := x.enqueueFlow(w, at(0))
	plain := x.leaseNew(at(0), "w", store.NewJob{Queue: q + "-plain", Kind: "plain", MaxRetries: -1})[0]
	x.finish(buryNow(plain, at(time.Second)))
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.finish(completeOf(a, at(2*time.Second)))
	bc := x.leaseKinds(q, at(3*time.Second), "B", "C")
	x.finish(completeOf(bc["B"], at(4*time.Second)), buryNow(bc["C"], at(4*time.Second)))
	c := f.ids["C"]
	// D and F wait for C directly; E, behind D, is not counted.
	if n := x.get(c).BlockedDependents; n != 2 {
		x.t.Errorf("dead C: %d blocked dependents, want 2 (D and F)", n)
	}
	if n := x.get(plain.ID).BlockedDependents; n != 0 {
		x.t.Errorf("dead plain job: %d blocked dependents, want 0", n)
	}
	if n := x.get(f.ids["D"]).BlockedDependents; n != 0 {
		x.t.Errorf("blocked D: %d blocked dependents, want 0 (dead jobs only)", n)
	}
	page, err := x.s.List(x.ctx, store.Filter{States: []store.State{store.Dead}}, store.Page{Limit: 10})
	if err != nil {
		x.t.Fatalf("List: %v", err)
	}
	got := map[int64]int64{}
	for _, j := range page.Jobs {
		got[j.ID] = j.BlockedDependents
	}
	if len(got) != 2 || got[c] != 2 || got[plain.ID] != 0 {
		x.t.Errorf("DLQ list: blocked dependents by job %v; want C %d: 2, plain %d: 0", got, c, plain.ID)
	}
	// The redrive of C and the plain job unblocks D and F.
	res := x.redrive(store.RedriveParams{IDs: []int64{c, plain.ID}, Now: at(5 * time.Second)})
	if len(res.Redriven) != 2 || res.Unblocks != 2 {
		x.t.Errorf("redrive of C and a plain job: %+v; want 2 redriven, unblocks 2", res)
	}
	again := x.leaseKinds(q, at(6*time.Second), "C", "on_death")
	x.finish(buryNow(again["C"], at(7*time.Second)))
	// The purge of C cancels D and F, and E behind D.
	n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{c}}, 10)
	if err != nil || n != 1 {
		x.t.Fatalf("Purge(C) = %d, %v; want 1", n, err)
	}
	x.notFound(c)
	x.flowStates("C purged", f, map[string]store.State{"D": store.Canceled, "E": store.Canceled, "F": store.Canceled,
		"on_success": store.Canceled, "on_complete": store.Pending})
	for name, reason := range map[string]string{"D": "dependency_deleted", "F": "dependency_deleted", "E": "dependency_canceled"} {
		h := x.get(f.ids[name]).History
		if len(h) == 0 || h[len(h)-1].Kind != store.EventCanceled || h[len(h)-1].Reason != reason {
			x.t.Errorf("canceled %s's history %+v: want a canceled event for %s", name, h, reason)
		}
	}
	if fw := x.getFlow(f.w.ID); fw.State != store.WorkflowFinished || fw.Dead != 1 || fw.Canceled != 3 || fw.Completed != 2 {
		x.t.Errorf("after the purge: workflow %s, completed %d, dead %d, canceled %d; want finished, 2, 1, 3",
			fw.State, fw.Completed, fw.Dead, fw.Canceled)
	}
	if st := x.stats(); st.Counters[q][store.StatCanceled] != 4 {
		x.t.Errorf("canceled counter of %s: %d, want 4 (D, E, F, on_success)", q, st.Counters[q][store.StatCanceled])
	}
	// A delete carries no time: the cascade is stamped with the
	// database's clock, and the callback it fires is due then.
	x.leaseKinds(q, time.Now().Add(time.Hour), "on_complete")
	x.checkAllCounts("after the purge")
}

// testWorkflowDeadRetention: X and Y both lead to Z; both die. Each shows
// Z as its blocked dependent, a redrive of both unblocks Z once, and
// the retention of the dead jobs (both dead again) cancels Z, which
// finishes the workflow: the complete callback fires then.
func testWorkflowDeadRetention(x *h) {
	const q = "wf-deadret"
	start := time.Now()
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1} }
	cb := nj("on_complete")
	f := x.enqueueFlow(store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "X", Job: nj("X")}, {Name: "Y", Job: nj("Y")}, {Name: "Z", Job: nj("Z"), After: []string{"X", "Y"}},
	}, OnComplete: &cb}, at(0))
	bury := func(now time.Time) {
		xy := x.leaseKinds(q, now, "X", "Y")
		x.finish(buryNow(xy["X"], now.Add(time.Second)), buryNow(xy["Y"], now.Add(time.Second)))
	}
	bury(at(time.Second))
	for _, name := range []string{"X", "Y"} {
		if n := x.get(f.ids[name]).BlockedDependents; n != 1 {
			x.t.Errorf("dead %s: %d blocked dependents, want 1", name, n)
		}
	}
	x.leaseKinds(q, at(3*time.Second)) // Z waits: no callback
	res := x.redrive(store.RedriveParams{IDs: []int64{f.ids["X"], f.ids["Y"]}, Now: at(4 * time.Second)})
	if len(res.Redriven) != 2 || res.Unblocks != 1 {
		x.t.Errorf("redrive of X and Y: %+v; want 2 redriven, unblocks 1 (Z, once)", res)
	}
	bury(at(5 * time.Second))
	n, err := x.s.DeleteFinished(x.ctx, store.Dead, at(time.Hour), 1000)
	if err != nil || n != 2 {
		x.t.Fatalf("DeleteFinished(dead) = %d, %v; want 2", n, err)
	}
	x.flowStates("X and Y expired", f, map[string]store.State{"Z": store.Canceled, "on_complete": store.Pending})
	if fw := x.getFlow(f.w.ID); fw.State != store.WorkflowFinished || fw.Dead != 2 || fw.Canceled != 1 {
		x.t.Errorf("after retention: workflow %s, dead %d, canceled %d; want finished, 2, 1", fw.State, fw.Dead, fw.Canceled)
	}
	// Stamped with the database's clock (a delete carries no time).
	if z := x.get(f.ids["Z"]); z.FinishedAt == nil || z.FinishedAt.Before(start.Add(-time.Hour)) {
		x.t.Errorf("canceled Z finished at %v, want about the database's now (%v)", z.FinishedAt, start)
	}
	x.checkAllCounts("after retention")
}

// testWorkflowDeadLeafDeleted: a dead job no other job waits for, under
// wait and under run, then deleted (a purge, the retention): the
// workflow can never succeed (the job cannot be redriven any more), so
// its success callback is canceled, as a cancel of the job would, and
// is not left blocked for ever.
func testWorkflowDeadLeafDeleted(x *h) {
	for k, policy := range []store.OnDead{store.WaitOnDead, store.RunOnDead} {
		for _, retention := range []bool{false, true} {
			q := fmt.Sprintf("wf-deadleaf-%d-%v", k, retention)
			nj := func(kind string) store.NewJob { return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1} }
			cb := func(kind string) *store.NewJob { j := nj(kind); return &j }
			f := x.enqueueFlow(store.NewWorkflow{OnDead: policy, Jobs: []store.WorkflowNode{
				{Name: "A", Job: nj("A")}, {Name: "B", Job: nj("B")},
			}, OnSuccess: cb("on_success"), OnComplete: cb("on_complete")}, at(0))
			ab := x.leaseKinds(q, at(time.Second), "A", "B")
			x.finish(buryNow(ab["A"], at(2*time.Second)), completeOf(ab["B"], at(2*time.Second)))
			x.flowStates(fmt.Sprintf("%s: A dead, B completed", policy), f,
				map[string]store.State{"on_success": store.Blocked, "on_complete": store.Pending})
			if retention {
				if n, err := x.s.DeleteFinished(x.ctx, store.Dead, at(time.Hour), 1000); err != nil || n < 1 {
					x.t.Fatalf("DeleteFinished(dead) = %d, %v; want A deleted", n, err)
				}
			} else if n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{f.ids["A"]}}, 10); err != nil || n != 1 {
				x.t.Fatalf("Purge(A) = %d, %v; want 1", n, err)
			}
			x.notFound(f.ids["A"])
			x.flowStates(fmt.Sprintf("%s: dead A deleted (retention %v)", policy, retention), f,
				map[string]store.State{"on_success": store.Canceled, "on_complete": store.Pending})
			if fw := x.getFlow(f.w.ID); fw.State != store.WorkflowFinished || fw.Dead != 1 || fw.Completed != 1 {
				x.t.Errorf("%s: after A's deletion: workflow %s, completed %d, dead %d; want finished, 1, 1", policy, fw.State, fw.Completed, fw.Dead)
			}
			x.checkAllCounts(fmt.Sprintf("%s: after A's deletion", policy))
		}
	}
}

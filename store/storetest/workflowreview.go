package storetest

import (
	"errors"
	"strings"
	"time"

	"github.com/redrivehq/redrive/store"
)

// testWorkflowKeyChecked: a workflow's own idempotency key is checked
// as the API checks it, by every store alike, before anything is
// stored: at most store.MaxWorkflowKey bytes of UTF-8 without control
// characters. Unchecked, the Go API handed PostgreSQL a NUL or invalid
// UTF-8 (an internal error rather than ErrInvalid) or a key past the
// index's row size, which SQLite took as it was.
func testWorkflowKeyChecked(x *h) {
	const q = "wf-key"
	nw := func(key string) store.NewWorkflow {
		return store.NewWorkflow{IdempotencyKey: key, Jobs: []store.WorkflowNode{{Name: "a", Job: store.NewJob{Queue: q, Kind: "a"}}}}
	}
	long := strings.Repeat("0123456789abcdef", 200) // 3,200 bytes
	for name, key := range map[string]string{
		"NUL":               "order\x00-1",
		"invalid UTF-8":     "order-\xff",
		"control character": "order\n1",
		"one byte too long": strings.Repeat("k", store.MaxWorkflowKey+1),
		"past an index row": long,
	} {
		if _, err := x.s.EnqueueWorkflow(x.ctx, nw(key), at(0)); !errors.Is(err, store.ErrInvalid) {
			x.t.Errorf("key with %s: error %v; want ErrInvalid", name, err)
		}
	}
	if ws, _, err := x.s.ListWorkflows(x.ctx, 0, 10); err != nil || len(ws) != 0 {
		x.t.Fatalf("after the refused keys: %d workflows, %v; want none", len(ws), err)
	}
	// A key at the bound is taken, and answers the second enqueue.
	key := strings.Repeat("é", store.MaxWorkflowKey/2)
	first, err := x.s.EnqueueWorkflow(x.ctx, nw(key), at(0))
	if err != nil {
		x.t.Fatalf("key of %d bytes: %v", len(key), err)
	}
	again, err := x.s.EnqueueWorkflow(x.ctx, nw(key), at(time.Second))
	if err != nil || !again.Existing || again.ID != first.ID || again.IdempotencyKey != key {
		x.t.Fatalf("second enqueue of the key: %+v, %v; want workflow %d, existing", again, err, first.ID)
	}
}

// testWorkflowDeletedDependency: a dependency deleted (retention of
// completed jobs, a purge of a dead one) while a dependent still waits
// to run does not vanish from DependencyResults: the dependent sees it,
// its name, id and the state it had, marked deleted, its result gone.
// Retention of completed jobs shorter than a workflow's life is the
// common case: here B completes with a result, C dies, the completed
// jobs are deleted, C is redriven and completes, and D reads both.
func testWorkflowDeletedDependency(x *h) {
	const q = "wf-depgone"
	f := x.enqueueFlow(diamond(q, ""), at(0))
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.finish(completeOf(a, at(2*time.Second)))
	bc := x.leaseKinds(q, at(3*time.Second), "B", "C")
	ob := completeOf(bc["B"], at(4*time.Second))
	ob.Result = raw(`{"rows":42}`)
	x.finish(ob, buryNow(bc["C"], at(4*time.Second)))
	if n, err := x.s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 100); err != nil || n != 2 {
		x.t.Fatalf("retention of the completed jobs: %d, %v; want 2 (A and B)", n, err)
	}
	x.notFound(f.ids["B"])
	x.redrive(store.RedriveParams{IDs: []int64{f.ids["C"]}, Now: at(5 * time.Second)})
	c := x.leaseKinds(q, at(6*time.Second), "C", "on_death")["C"]
	x.finish(completeOf(c, at(7*time.Second)))
	x.flowStates("C completed", f, map[string]store.State{"D": store.Pending})
	deps, err := x.s.DependencyResults(x.ctx, f.ids["D"])
	if err != nil {
		x.t.Fatalf("DependencyResults(D): %v", err)
	}
	byName := map[string]store.DependencyResult{}
	for _, d := range deps {
		byName[d.Name] = d
	}
	b, ok := byName["B"]
	if len(deps) != 2 || !ok || byName["C"].State != store.Completed || byName["C"].Deleted || deps[0].JobID > deps[1].JobID ||
		b.JobID != f.ids["B"] || b.State != store.Completed || b.Result != nil || !b.Deleted || b.ResultError != store.DependencyDeleted {
		x.t.Fatalf("DependencyResults(D) = %+v; want B (deleted, completed, its result gone) and C (completed), by id", deps)
	}
	// The trace goes with its dependent; a dependent that will not run
	// again (completed, canceled) gets none.
	d := x.leaseKinds(q, at(8*time.Second), "D")["D"]
	x.finish(completeOf(d, at(9*time.Second)))
	if n, err := x.s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 100); err != nil || n != 2 {
		x.t.Fatalf("retention of C and D: %d, %v; want 2", n, err)
	}
	g := x.enqueueFlow(diamond(q+"-2", ""), at(10*time.Second))
	a2 := x.leaseKinds(q+"-2", at(11*time.Second), "A")["A"]
	x.finish(buryNow(a2, at(12*time.Second)))
	if n, err := x.s.Purge(x.ctx, store.Filter{IDs: []int64{g.ids["A"]}}, 10); err != nil || n != 1 {
		x.t.Fatalf("Purge(A) = %d, %v", n, err)
	}
	x.flowStates("A purged", g, map[string]store.State{"B": store.Canceled, "C": store.Canceled, "D": store.Canceled})
	for _, name := range []string{"B", "C", "D"} {
		deps, err := x.s.DependencyResults(x.ctx, g.ids[name])
		if err != nil || (name != "D" && len(deps) != 0) {
			x.t.Errorf("DependencyResults(%s) after its dependency's purge canceled it: %+v, %v; want none", name, deps, err)
		}
	}
}

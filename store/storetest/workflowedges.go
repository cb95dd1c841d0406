package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
)

// EdgesDB is what RunWorkflowEdges needs of a store: Open opens a new,
// empty store; Edges reads every row of its table of dependency edges,
// as (dependency id, dependent id); Waits, nil for a store without
// one, reads the job ids of every row of its table of counts of edges
// not done (PostgreSQL's job_waits).
type EdgesDB struct {
	Open  func(t *testing.T) store.Store
	Edges func(t *testing.T) [][2]int64
	Waits func(t *testing.T) []int64
}

// RunWorkflowEdges checks that a workflow job's edges (and its count of
// edges not done) go with it, whichever way it is deleted: the
// retention of completed, dead and canceled jobs, and a purge of a dead
// job whose dependents it cancels. After each deletion every edge joins
// two jobs that exist, the edges between the jobs left are all there,
// and every count belongs to a job left enqueued with dependencies.
func RunWorkflowEdges(t *testing.T, db EdgesDB) {
	t.Helper()
	s := db.Open(t)
	t.Cleanup(func() { s.Close() })
	x := &h{t: t, s: s, ctx: t.Context()}
	const q = "wf-edges"
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1} }
	// Every edge enqueued, and the jobs enqueued with dependencies.
	var edges [][2]int64
	var waiting []int64
	enqueue := func(w store.NewWorkflow) flow {
		f := x.enqueueFlow(w, at(0))
		for _, j := range f.w.Jobs {
			for _, d := range j.After {
				edges = append(edges, [2]int64{d, j.JobID})
			}
			if len(j.After) > 0 {
				waiting = append(waiting, j.JobID)
			}
		}
		return f
	}
	// A chain that completes, a job dead with a dependent under wait, a
	// job dead with a dependent released under run, and a job left
	// pending with a dependent blocked.
	chain := enqueue(store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "A", Job: nj("A")}, {Name: "B", Job: nj("B"), After: []string{"A"}},
		{Name: "C", Job: nj("C"), After: []string{"A", "B"}},
	}})
	wait := enqueue(store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "X", Job: nj("X")}, {Name: "Y", Job: nj("Y"), After: []string{"X"}}, {Name: "Z", Job: nj("Z"), After: []string{"Y"}},
	}})
	run := enqueue(store.NewWorkflow{OnDead: store.RunOnDead, Jobs: []store.WorkflowNode{
		{Name: "P", Job: nj("P")}, {Name: "R", Job: nj("R"), After: []string{"P"}},
	}})
	idle := enqueue(store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "I", Job: store.NewJob{Queue: q + "-idle", Kind: "I"}}, {Name: "J", Job: nj("J"), After: []string{"I"}},
	}})

	check := func(what string) {
		t.Helper()
		alive := func(id int64) bool {
			_, err := s.Get(x.ctx, id)
			return err == nil
		}
		got := db.Edges(t)
		for _, e := range got {
			if !alive(e[0]) || !alive(e[1]) {
				t.Errorf("%s: edge %d -> %d kept, though a job of it was deleted", what, e[0], e[1])
			}
		}
		for _, e := range edges {
			if alive(e[0]) && alive(e[1]) && !slices.Contains(got, e) {
				t.Errorf("%s: edge %d -> %d between two jobs left is gone", what, e[0], e[1])
			}
		}
		if db.Waits == nil {
			return
		}
		var want []int64
		for _, id := range waiting {
			if alive(id) {
				want = append(want, id)
			}
		}
		x.checkIDSet(what+": counts of edges not done", db.Waits(t), want)
	}
	check("enqueued")

	// A, B, C complete; X and P die; R is released and completes.
	step := func(now time.Time, kinds ...string) map[string]*store.Job {
		return x.leaseKinds(q, now, kinds...)
	}
	j := step(at(time.Second), "A", "X", "P")
	x.finish(completeOf(j["A"], at(2*time.Second)), buryNow(j["X"], at(2*time.Second)), buryNow(j["P"], at(2*time.Second)))
	j = step(at(3*time.Second), "B", "R")
	x.finish(completeOf(j["B"], at(4*time.Second)), completeOf(j["R"], at(4*time.Second)))
	j = step(at(5*time.Second), "C")
	x.finish(completeOf(j["C"], at(6*time.Second)))
	check("run")

	// The retention of completed jobs: the chain and R.
	if n, err := s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 1000); err != nil || n != 4 {
		t.Fatalf("DeleteFinished(completed) = %d, %v; want 4", n, err)
	}
	check("completed jobs deleted")
	// A purge of X cancels Y and Z; its edge to Y goes.
	if n, err := s.Purge(x.ctx, store.Filter{IDs: []int64{wait.ids["X"]}}, 10); err != nil || n != 1 {
		t.Fatalf("Purge(X) = %d, %v; want 1", n, err)
	}
	x.flowStates("X purged", wait, map[string]store.State{"Y": store.Canceled, "Z": store.Canceled})
	check("X purged")
	// The retention of canceled jobs, then of dead ones (P).
	if n, err := s.DeleteFinished(x.ctx, store.Canceled, time.Now().Add(time.Hour), 1000); err != nil || n != 2 {
		t.Fatalf("DeleteFinished(canceled) = %d, %v; want 2", n, err)
	}
	check("canceled jobs deleted")
	if n, err := s.DeleteFinished(x.ctx, store.Dead, at(time.Hour), 1000); err != nil || n != 1 {
		t.Fatalf("DeleteFinished(dead) = %d, %v; want 1", n, err)
	}
	check("dead jobs deleted")
	// I and J, never run, keep their edge; the others have none left.
	if got := db.Edges(t); !slices.Equal(got, [][2]int64{{idle.ids["I"], idle.ids["J"]}}) {
		t.Errorf("edges left %v, want only I -> J %v", got, [2]int64{idle.ids["I"], idle.ids["J"]})
	}
	for _, f := range []flow{chain, wait, run} {
		for name, id := range f.ids {
			if _, err := s.Get(x.ctx, id); err == nil {
				t.Errorf("job %s (%d) was not deleted", name, id)
			}
		}
	}
}

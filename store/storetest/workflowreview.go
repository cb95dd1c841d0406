package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/internal/testwait"
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

// testWorkflowCallbacksOnce: two workers finish the jobs of a dozen
// workflows concurrently, in batches of mixed outcomes (completions,
// deaths on a first run, stale copies), while a third caller redrives
// every dead job, until every workflow succeeded. Each callback must
// then have fired exactly once: success and complete for every
// workflow, death for those that had one, none for the others. A store
// that applies a batch's completions apart from its deaths (SQLite at
// the end of the Finish, PostgreSQL at the commit, with the workflow's
// lock taken then) must miss none in any interleaving.
func testWorkflowCallbacksOnce(x *h) {
	const q, cbq, flows = "cbo", "cbo-cb", 12
	now := at(time.Hour)
	type cbKey struct {
		flow int
		kind string
	}
	cbOf := map[int64]cbKey{}
	flowOf := map[int64]int{}
	var ids []int64
	for f := range flows {
		nj := func(kind string) store.NewJob { return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1} }
		cb := func(kind string) *store.NewJob { return &store.NewJob{Queue: cbq, Kind: kind, MaxRetries: -1} }
		w := store.NewWorkflow{OnDead: []store.OnDead{store.WaitOnDead, store.RunOnDead}[f%2],
			OnSuccess: cb("success"), OnComplete: cb("complete"), OnDeath: cb("death")}
		var r []string
		for k := range 8 {
			r = append(r, fmt.Sprint("r", k))
			w.Jobs = append(w.Jobs, store.WorkflowNode{Name: r[k], Job: nj("r")})
		}
		w.Jobs = append(w.Jobs,
			store.WorkflowNode{Name: "m0", Job: nj("m"), After: r[:4]},
			store.WorkflowNode{Name: "m1", Job: nj("m"), After: r[4:]},
			store.WorkflowNode{Name: "f", Job: nj("f"), After: []string{"m0", "m1"}})
		got := x.enqueueFlow(w, at(0))
		for _, id := range got.ids {
			flowOf[id] = f
		}
		cbOf[got.w.OnSuccess] = cbKey{f, "success"}
		cbOf[got.w.OnComplete] = cbKey{f, "complete"}
		cbOf[got.w.OnDeath] = cbKey{f, "death"}
		ids = append(ids, got.w.ID)
	}
	var mu sync.Mutex
	died := map[int]bool{}
	stop := make(chan struct{})
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for k := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(k), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				jobs, err := x.s.Fetch(x.ctx, store.FetchParams{Queue: q, Limit: 2 + rng.IntN(8), Now: now, LeaseUntil: now.Add(time.Hour), Worker: fmt.Sprint("w", k)})
				if err != nil {
					errs <- err
					return
				}
				var outs []store.Outcome
				for _, j := range jobs {
					o := completeOf(j, now)
					if j.Redriven == 0 && rng.IntN(6) == 0 {
						o = buryNow(j, now)
						mu.Lock()
						died[flowOf[j.ID]] = true
						mu.Unlock()
					}
					if rng.IntN(8) == 0 {
						stale := o
						stale.Lease++
						outs = append(outs, stale)
					}
					outs = append(outs, o)
				}
				if len(outs) == 0 {
					runtime.Gosched()
					continue
				}
				rng.Shuffle(len(outs), func(a, b int) { outs[a], outs[b] = outs[b], outs[a] })
				if _, err := x.s.Finish(x.ctx, outs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			page, err := x.s.List(x.ctx, store.Filter{Queue: q, States: []store.State{store.Dead}}, store.Page{Limit: 100})
			if err != nil {
				errs <- err
				return
			}
			var dead []int64
			for _, j := range page.Jobs {
				dead = append(dead, j.ID)
			}
			if len(dead) == 0 {
				runtime.Gosched()
				continue
			}
			if _, err := x.s.Redrive(x.ctx, store.RedriveParams{IDs: dead, Now: now}); err != nil {
				errs <- err
				return
			}
		}
	}()
	testwait.Until(x.t, "every workflow succeeded", time.Minute, func() bool {
		for _, id := range ids {
			w, err := x.s.GetWorkflow(x.ctx, id)
			if err != nil || w.State != store.WorkflowSucceeded {
				return false
			}
		}
		return true
	})
	close(stop)
	wg.Wait()
	for range 3 {
		if err := <-errs; err != nil {
			x.t.Fatalf("a worker or the redriver: %v", err)
		}
	}
	fired := map[cbKey]int{}
	for _, j := range x.fetch(store.FetchParams{Queue: cbq, Limit: 1000, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "cb"}) {
		fired[cbOf[j.ID]]++
	}
	for f := range flows {
		for _, kind := range []string{"success", "complete", "death"} {
			want := 1
			if kind == "death" && !died[f] {
				want = 0
			}
			if n := fired[cbKey{f, kind}]; n != want {
				x.t.Errorf("workflow %d (%s, died %v): %s callback fired %d times, want %d", ids[f], []store.OnDead{store.WaitOnDead, store.RunOnDead}[f%2], died[f], kind, n, want)
			}
		}
	}
	x.checkAllCounts("end")
}

package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redrivehq/redrive/store"
)

// enqueueFlows enqueues ws by one EnqueueWorkflows at now, fails on an
// error, and checks that each workflow returned is the one GetWorkflow
// reads.
func (x *h) enqueueFlows(ws []store.NewWorkflow, now time.Time) []flow {
	x.t.Helper()
	got, err := x.s.EnqueueWorkflows(x.ctx, ws, now)
	if err != nil {
		x.t.Fatalf("EnqueueWorkflows: %v", err)
	}
	if len(got) != len(ws) {
		x.t.Fatalf("EnqueueWorkflows: %d workflows back, want %d", len(got), len(ws))
	}
	out := make([]flow, len(got))
	for i, w := range got {
		if !w.Existing {
			if read := x.getFlow(w.ID); !sameWorkflow(w, read) {
				x.t.Fatalf("EnqueueWorkflows returned, as its workflow %d,\n%+v\nGetWorkflow reads\n%+v", i, *w, *read)
			}
		}
		out[i] = flow{w: w, ids: map[string]int64{}}
		for _, j := range w.Jobs {
			out[i].ids[j.Name] = j.JobID
		}
	}
	return out
}

// testWorkflowsEnqueueMany: one EnqueueWorkflows of diamonds (each
// policy, with and without callbacks), a workflow of jobs due later, a
// workflow whose key an earlier enqueue holds and one whose key an
// earlier workflow of the call takes: each is returned in the call's
// order as GetWorkflow reads it, the keyed ones answered by the holder
// (Existing), and every workflow then runs as one enqueued alone: its
// jobs released in their order, its callbacks fired once.
func testWorkflowsEnqueueMany(x *h) {
	const q = "wf-many"
	held := diamond(q, "")
	held.IdempotencyKey = "held"
	before := x.enqueueFlow(held, at(0))
	later := store.NewWorkflow{Name: "later", Jobs: []store.WorkflowNode{
		{Name: "x", Job: store.NewJob{Queue: q, Kind: "x", MaxRetries: -1, RunAt: at(time.Hour)}},
		{Name: "y", Job: store.NewJob{Queue: q, Kind: "y", MaxRetries: -1}, After: []string{"x"}},
	}}
	keyed := diamond(q, store.RunOnDead)
	keyed.IdempotencyKey = "k1"
	bare := diamond(q, store.CancelOnDead)
	bare.OnSuccess, bare.OnDeath = nil, nil
	again := diamond(q, "")
	again.IdempotencyKey = "k1" // answered by keyed, earlier in the call
	ws := []store.NewWorkflow{diamond(q, ""), keyed, held, later, bare, again}
	fs := x.enqueueFlows(ws, at(time.Second))
	for i, want := range []bool{false, false, true, false, false, true} {
		if fs[i].w.Existing != want {
			x.t.Errorf("workflow %d: existing %v, want %v", i, fs[i].w.Existing, want)
		}
	}
	if fs[2].w.ID != before.w.ID {
		x.t.Errorf("the workflow whose key is held: workflow %d, want %d", fs[2].w.ID, before.w.ID)
	}
	if fs[5].w.ID != fs[1].w.ID || fs[5].w.Total != 4 {
		x.t.Errorf("the second workflow of key k1: workflow %d, want %d", fs[5].w.ID, fs[1].w.ID)
	}
	for i, f := range fs {
		if i > 0 && !f.w.Existing && f.w.ID <= fs[i-1].w.ID {
			x.t.Errorf("workflow %d has id %d, not above the one before it (%d)", i, f.w.ID, fs[i-1].w.ID)
		}
	}
	if w := fs[1].w; w.OnDead != store.RunOnDead || w.IdempotencyKey != "k1" || w.OnSuccess == 0 || w.OnDeath == 0 {
		x.t.Errorf("keyed workflow: %+v", w)
	}
	if w := fs[4].w; w.OnSuccess != 0 || w.OnDeath != 0 || w.OnComplete == 0 {
		x.t.Errorf("workflow with one callback: success %d, complete %d, death %d", w.OnSuccess, w.OnComplete, w.OnDeath)
	}
	x.flowStates("later", fs[3], map[string]store.State{"x": store.Scheduled, "y": store.Blocked})
	if n, err := x.s.Count(x.ctx, store.Filter{Queue: q}); err != nil || n != 7+7+7+2+5 {
		x.t.Errorf("%d jobs after the call (%v), want %d", n, err, 7+7+7+2+5)
	}
	x.checkAllCounts("enqueued")

	// Run them all: each round leases every job due and completes it.
	diamonds := []flow{before, fs[0], fs[1], fs[4]}
	for r := 0; r < 4; r++ {
		jobs := x.fetch(store.FetchParams{Queue: q, Limit: 100, Now: at(time.Duration(2+2*r) * time.Second), LeaseUntil: at(time.Hour), Worker: "w"})
		want := map[int]int{0: 4, 1: 8, 2: 4, 3: 7}[r] // A of each, then B and C, then D, then the callbacks
		if len(jobs) != want {
			x.t.Fatalf("round %d: %d jobs due, want %d", r, len(jobs), want)
		}
		for _, j := range jobs {
			x.finish(completeOf(j, at(time.Duration(3+2*r)*time.Second)))
		}
	}
	for _, f := range diamonds {
		w := x.getFlow(f.w.ID)
		if w.State != store.WorkflowSucceeded || w.ClosedAt == nil {
			x.t.Errorf("workflow %d: %s, closed %v; want succeeded and closed", w.ID, w.State, w.ClosedAt)
		}
		want := map[string]store.State{"on_complete": store.Completed}
		if f.w.OnSuccess != 0 {
			want["on_success"] = store.Completed
		}
		if f.w.OnDeath != 0 {
			want["on_death"] = store.Blocked
		}
		x.flowStates(fmt.Sprint("workflow ", w.ID), f, want)
	}
	x.flowStates("later, at the end", fs[3], map[string]store.State{"x": store.Scheduled, "y": store.Blocked})
	x.checkAllCounts("end")
}

// testWorkflowsEnqueueRefused: an EnqueueWorkflows refused because of
// one of its workflows (a cycle, a bad job, a callback with a key, a
// key one of its jobs finds held, a job key another workflow of the call
// takes) is a *WorkflowBatchError naming it, wrapping what refused it,
// and stores nothing of any workflow; an empty call is ErrInvalid.
func testWorkflowsEnqueueRefused(x *h) {
	const q = "wf-many-bad"
	nj := func(kind, key string) store.NewJob {
		return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1, IdempotencyKey: key}
	}
	plain := x.enqueue(at(0), nj("plain", "k-plain"))[0]
	count := func() int64 {
		n, err := x.s.Count(x.ctx, store.Filter{Queue: q})
		if err != nil {
			x.t.Fatal(err)
		}
		return n
	}
	start := count()
	good := func(name string) store.NewWorkflow {
		return store.NewWorkflow{Name: name, Jobs: []store.WorkflowNode{{Name: "a", Job: nj("a", "")}, {Name: "b", Job: nj("b", ""), After: []string{"a"}}}}
	}
	cb := nj("cb", "k-cb")
	cases := []struct {
		name   string
		bad    store.NewWorkflow
		target error
		says   string
	}{
		{"cycle", store.NewWorkflow{Name: "bad", Jobs: []store.WorkflowNode{{Name: "a", Job: nj("a", ""), After: []string{"b"}}, {Name: "b", Job: nj("b", ""), After: []string{"a"}}}},
			store.ErrInvalid, "cycle"},
		{"bad payload", store.NewWorkflow{Name: "bad", Jobs: []store.WorkflowNode{{Name: "a", Job: store.NewJob{Queue: q, Kind: "a", Payload: raw(`{`)}}}},
			store.ErrInvalid, `"a"`},
		{"callback key", store.NewWorkflow{Name: "bad", Jobs: []store.WorkflowNode{{Name: "a", Job: nj("a", "")}}, OnSuccess: &cb},
			store.ErrInvalid, "on_success"},
		{"key held", store.NewWorkflow{Name: "bad", Jobs: []store.WorkflowNode{{Name: "a", Job: nj("a", "k-new")}, {Name: "b", Job: nj("b", "k-plain")}}},
			store.ErrConflict, fmt.Sprint("job ", plain.ID)},
		{"key twice in the call", store.NewWorkflow{Name: "bad", Jobs: []store.WorkflowNode{{Name: "c", Job: nj("c", "k-first")}}},
			store.ErrInvalid, `"k-first"`},
	}
	for _, c := range cases {
		first := good("first")
		first.Jobs[0].Job.IdempotencyKey = "k-first"
		ws := []store.NewWorkflow{first, good("second"), c.bad, good("last")}
		_, err := x.s.EnqueueWorkflows(x.ctx, ws, at(time.Second))
		x.checkErr(c.name, err, c.target)
		be, ok := errors.AsType[*store.WorkflowBatchError](err)
		if !ok || be.Index != 2 || be.Name != "bad" {
			x.t.Errorf("%s: %v (%#v), want a *WorkflowBatchError naming workflow 2", c.name, err, be)
		}
		if err != nil && !strings.Contains(err.Error(), c.says) {
			x.t.Errorf("%s: error %q does not say %q", c.name, err, c.says)
		}
		if c.name == "key held" {
			ce, ok := errors.AsType[*store.WorkflowConflictError](err)
			if !ok || ce.Job != "b" || ce.Holder != plain.ID {
				x.t.Errorf("key held: %v, want job b's key held by job %d", err, plain.ID)
			}
		}
		if n := count(); n != start {
			x.t.Errorf("%s: the refused call stored %d jobs", c.name, n-start)
		}
		if ws, _, err := x.s.ListWorkflows(x.ctx, 0, 10); err != nil || len(ws) != 0 {
			x.t.Errorf("%s: the refused call stored %d workflows (%v)", c.name, len(ws), err)
		}
	}
	_, err := x.s.EnqueueWorkflows(x.ctx, nil, at(time.Second))
	x.checkErr("no workflows", err, store.ErrInvalid)
	x.checkAllCounts("end")
}

// testWorkflowsEnqueueConcurrent: callers enqueue batches of workflows
// at once, keys drawn from a small pool (so that batches race for
// them, in different orders) and some workflows without a key: each key
// ends up held by one workflow, which answers every workflow of that
// key, created or not, and the store holds exactly the jobs of the
// workflows created, each blocked or pending as enqueued.
func testWorkflowsEnqueueConcurrent(x *h) {
	const q, callers, calls, perCall, keys = "wf-many-conc", 4, 4, 8, 12
	seed := uint64(time.Now().UnixNano())
	x.t.Logf("seed %d", seed)
	type answer struct {
		key string
		w   *store.Workflow
	}
	var mu sync.Mutex
	var answers []answer
	errs := make(chan error, callers)
	for c := range callers {
		rng := rand.New(rand.NewPCG(seed, uint64(c)))
		go func() {
			for range calls {
				ws := make([]store.NewWorkflow, perCall)
				for i := range ws {
					w := store.NewWorkflow{Jobs: []store.WorkflowNode{
						{Name: "a", Job: store.NewJob{Queue: q, Kind: "a", MaxRetries: -1}},
						{Name: "b", Job: store.NewJob{Queue: q, Kind: "b", MaxRetries: -1}, After: []string{"a"}},
					}}
					if rng.IntN(4) > 0 {
						w.IdempotencyKey = fmt.Sprint("key-", rng.IntN(keys))
					}
					ws[i] = w
				}
				got, err := x.s.EnqueueWorkflows(x.ctx, ws, at(0))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, w := range got {
					answers = append(answers, answer{ws[i].IdempotencyKey, w})
				}
				mu.Unlock()
			}
			errs <- nil
		}()
	}
	for range callers {
		if err := <-errs; err != nil {
			x.t.Fatalf("EnqueueWorkflows: %v", err)
		}
	}
	holder := map[string]int64{}
	created := map[int64]bool{}
	for _, a := range answers {
		if !a.w.Existing {
			if created[a.w.ID] {
				x.t.Errorf("workflow %d created twice", a.w.ID)
			}
			created[a.w.ID] = true
		}
		if a.key == "" {
			if a.w.Existing {
				x.t.Errorf("workflow %d without a key answered as existing", a.w.ID)
			}
			continue
		}
		if h, ok := holder[a.key]; ok && h != a.w.ID {
			x.t.Errorf("key %s answered by workflows %d and %d", a.key, h, a.w.ID)
		}
		holder[a.key] = a.w.ID
		if a.w.IdempotencyKey != a.key {
			x.t.Errorf("key %s answered by workflow %d of key %q", a.key, a.w.ID, a.w.IdempotencyKey)
		}
	}
	for key, id := range holder {
		if !created[id] {
			x.t.Errorf("key %s: its workflow %d was never answered as created", key, id)
		}
	}
	ws, _, err := x.s.ListWorkflows(x.ctx, 0, store.MaxPageSize)
	if err != nil {
		x.t.Fatal(err)
	}
	if len(ws) != len(created) {
		x.t.Errorf("%d workflows stored, %d answered as created", len(ws), len(created))
	}
	for _, st := range []store.State{store.Pending, store.Blocked} {
		if n, err := x.s.Count(x.ctx, store.Filter{Queue: q, States: []store.State{st}}); err != nil || n != int64(len(created)) {
			x.t.Errorf("%d %s jobs (%v), want one a workflow: %d", n, st, err, len(created))
		}
	}
	x.checkAllCounts("end")
}

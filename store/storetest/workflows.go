package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// flow is a workflow under test: the workflow as enqueued and its job
// ids by name.
type flow struct {
	w   *store.Workflow
	ids map[string]int64
}

// enqueueFlow enqueues w at now and fails on an error.
func (x *h) enqueueFlow(w store.NewWorkflow, now time.Time) flow {
	x.t.Helper()
	got, err := x.s.EnqueueWorkflow(x.ctx, w, now)
	if err != nil {
		x.t.Fatalf("EnqueueWorkflow: %v", err)
	}
	f := flow{w: got, ids: map[string]int64{}}
	for _, j := range got.Jobs {
		f.ids[j.Name] = j.JobID
	}
	if len(f.ids) != len(w.Jobs) {
		x.t.Fatalf("EnqueueWorkflow: %d jobs back, want %d", len(f.ids), len(w.Jobs))
	}
	return f
}

// diamond is A -> B, C -> D in queue, each job of kind its name, with
// the three callbacks (kinds on_success, on_complete, on_death).
func diamond(queue string, policy store.OnDead) store.NewWorkflow {
	nj := func(kind string) store.NewJob {
		return store.NewJob{Queue: queue, Kind: kind, Payload: raw(`{}`), MaxRetries: -1}
	}
	cb := func(kind string) *store.NewJob { j := nj(kind); return &j }
	return store.NewWorkflow{
		Name: "diamond", OnDead: policy,
		Jobs: []store.WorkflowNode{
			{Name: "D", Job: nj("D"), After: []string{"B", "C"}},
			{Name: "B", Job: nj("B"), After: []string{"A"}},
			{Name: "A", Job: nj("A")},
			{Name: "C", Job: nj("C"), After: []string{"A"}},
		},
		OnSuccess: cb("on_success"), OnComplete: cb("on_complete"), OnDeath: cb("on_death"),
	}
}

// leaseKinds leases every due job of queue at now and returns them by
// kind; it fails unless the kinds leased are exactly want.
func (x *h) leaseKinds(queue string, now time.Time, want ...string) map[string]*store.Job {
	x.t.Helper()
	got := x.fetch(store.FetchParams{Queue: queue, Limit: 1000, Now: now, LeaseUntil: now.Add(time.Minute), Worker: "w"})
	out := map[string]*store.Job{}
	var kinds []string
	for _, j := range got {
		out[j.Kind] = j
		kinds = append(kinds, j.Kind)
	}
	slices.Sort(kinds)
	slices.Sort(want)
	if !slices.Equal(kinds, want) {
		x.t.Fatalf("at %s: leased kinds %v, want %v", now.Sub(base), kinds, want)
	}
	return out
}

// flowStates fails unless the jobs of f (by name) are in the states want.
func (x *h) flowStates(what string, f flow, want map[string]store.State) {
	x.t.Helper()
	for name, st := range want {
		id, ok := f.ids[name]
		if !ok {
			id = map[string]int64{"on_success": f.w.OnSuccess, "on_complete": f.w.OnComplete, "on_death": f.w.OnDeath}[name]
		}
		if got := x.get(id).State; got != st {
			x.t.Errorf("%s: job %s is %s, want %s", what, name, got, st)
		}
	}
}

// checkAllCounts is checkCounts over every state, Blocked included.
func (x *h) checkAllCounts(what string) {
	x.t.Helper()
	st := x.stats()
	for q, states := range st.Jobs {
		for _, state := range append(slices.Clone(store.States), store.Blocked) {
			got, err := x.s.Count(x.ctx, store.Filter{Queue: q, States: []store.State{state}})
			if err != nil {
				x.t.Fatalf("Count: %v", err)
			}
			if got != states[state] {
				x.t.Errorf("%s: Stats counts %d %s jobs in queue %s, Count %d", what, states[state], state, q, got)
			}
		}
	}
}

func (x *h) getFlow(id int64) *store.Workflow {
	x.t.Helper()
	w, err := x.s.GetWorkflow(x.ctx, id)
	if err != nil {
		x.t.Fatalf("GetWorkflow(%d): %v", id, err)
	}
	return w
}

func buryNow(j *store.Job, now time.Time) store.Outcome {
	return buryOf(j, now, failure.Permanent, "permanent", "fp", "boom")
}

// testWorkflowWait: the diamond with C dead under the wait policy: D
// stays blocked (never fetched, no attempt used), the death callback
// fires once, the complete and success callbacks wait; a redrive of C
// with a new payload and its completion release D, whose completion
// fires the success and complete callbacks, once each. Results recorded
// by B are read by D.
func testWorkflowWait(x *h) {
	const q = "wf-wait"
	f := x.enqueueFlow(diamond(q, ""), at(0))
	if f.w.OnDead != store.WaitOnDead || f.w.State != store.WorkflowActive || f.w.Total != 4 {
		x.t.Fatalf("enqueued workflow: policy %q, state %q, total %d; want wait, active, 4", f.w.OnDead, f.w.State, f.w.Total)
	}
	x.flowStates("enqueued", f, map[string]store.State{"A": store.Pending, "B": store.Blocked, "C": store.Blocked, "D": store.Blocked,
		"on_success": store.Blocked, "on_complete": store.Blocked, "on_death": store.Blocked})
	x.checkAllCounts("enqueued")
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.leaseKinds(q, at(time.Second)) // nothing else is due
	x.finish(completeOf(a, at(2*time.Second)))
	bc := x.leaseKinds(q, at(3*time.Second), "B", "C")
	done := completeOf(bc["B"], at(4*time.Second))
	done.Result = raw(`{"rows":42}`)
	x.finish(done, buryNow(bc["C"], at(4*time.Second)))
	x.flowStates("C dead", f, map[string]store.State{"B": store.Completed, "C": store.Dead, "D": store.Blocked,
		"on_success": store.Blocked, "on_complete": store.Blocked, "on_death": store.Pending})
	x.checkAllCounts("C dead")
	if w := x.getFlow(f.w.ID); w.State != store.WorkflowActive || w.Counts[store.Dead] != 1 || w.Counts[store.Blocked] != 1 {
		x.t.Errorf("C dead: workflow %s with counts %v; want active, 1 dead, 1 blocked", w.State, w.Counts)
	}
	if d := x.get(f.ids["D"]); d.Attempt != 0 {
		x.t.Errorf("blocked D used %d attempts", d.Attempt)
	}
	x.leaseKinds(q, at(5*time.Second), "on_death")
	res := x.redrive(store.RedriveParams{IDs: []int64{f.ids["C"]}, Now: at(6 * time.Second), Payload: raw(`{"fixed":true}`)})
	if len(res.Redriven) != 1 {
		x.t.Fatalf("redrive C: %+v", res)
	}
	x.flowStates("C redriven", f, map[string]store.State{"C": store.Pending, "D": store.Blocked})
	c := x.leaseKinds(q, at(7*time.Second), "C")["C"]
	x.finish(completeOf(c, at(8*time.Second)))
	d := x.leaseKinds(q, at(9*time.Second), "D")["D"]
	deps, err := x.s.DependencyResults(x.ctx, d.ID)
	if err != nil {
		x.t.Fatalf("DependencyResults: %v", err)
	}
	if len(deps) != 2 || deps[0].Name != "B" || string(deps[0].Result) != `{"rows":42}` || deps[1].Name != "C" ||
		deps[1].State != store.Completed || deps[1].Result != nil {
		x.t.Errorf("D's dependency results: %+v; want B with its result, C completed without one", deps)
	}
	x.finish(completeOf(d, at(10*time.Second)))
	x.flowStates("D completed", f, map[string]store.State{"D": store.Completed, "on_success": store.Pending, "on_complete": store.Pending})
	x.leaseKinds(q, at(11*time.Second), "on_success", "on_complete")
	x.leaseKinds(q, at(12*time.Second)) // each callback once
	if w := x.getFlow(f.w.ID); w.State != store.WorkflowSucceeded || w.Counts[store.Completed] != 4 {
		x.t.Errorf("workflow %s with counts %v; want succeeded, 4 completed", w.State, w.Counts)
	}
	x.checkAllCounts("end")
	// Retention deletes the completed jobs: the workflow stays succeeded.
	if _, err := x.s.DeleteFinished(x.ctx, store.Completed, at(time.Hour), 1000); err != nil {
		x.t.Fatalf("DeleteFinished: %v", err)
	}
	if w := x.getFlow(f.w.ID); w.State != store.WorkflowSucceeded || w.Completed != 4 || len(w.Jobs) != 0 {
		x.t.Errorf("after retention: workflow %s, %d completed, %d jobs; want succeeded, 4, 0", w.State, w.Completed, len(w.Jobs))
	}
}

// testWorkflowCancelPolicy: under the cancel policy, C's death cancels D
// at once, which finishes the workflow: the complete and death callbacks
// fire, the success callback is canceled.
func testWorkflowCancelPolicy(x *h) {
	const q = "wf-cancel"
	f := x.enqueueFlow(diamond(q, store.CancelOnDead), at(0))
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.finish(completeOf(a, at(2*time.Second)))
	bc := x.leaseKinds(q, at(3*time.Second), "B", "C")
	x.finish(buryNow(bc["C"], at(4*time.Second)))
	// D canceled makes success impossible: its callback is canceled.
	x.flowStates("C dead", f, map[string]store.State{"C": store.Dead, "D": store.Canceled,
		"on_success": store.Canceled, "on_complete": store.Blocked, "on_death": store.Pending})
	x.finish(completeOf(bc["B"], at(5*time.Second)))
	x.flowStates("B completed", f, map[string]store.State{"on_complete": store.Pending})
	if d := x.get(f.ids["D"]); len(d.History) == 0 || d.History[len(d.History)-1].Reason != "dependency_canceled" && d.History[len(d.History)-1].Reason != "dependency_dead" {
		x.t.Errorf("canceled D's history %+v: want a canceled event naming its dependency", d.History)
	}
	x.leaseKinds(q, at(6*time.Second), "on_complete", "on_death")
	if w := x.getFlow(f.w.ID); w.State != store.WorkflowFinished {
		x.t.Errorf("workflow %s, want finished", w.State)
	}
	x.checkAllCounts("end")
}

// testWorkflowRunAnyway: under the run policy, C's death releases D,
// which reads C's state.
func testWorkflowRunAnyway(x *h) {
	const q = "wf-run"
	f := x.enqueueFlow(diamond(q, store.RunOnDead), at(0))
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.finish(completeOf(a, at(2*time.Second)))
	bc := x.leaseKinds(q, at(3*time.Second), "B", "C")
	x.finish(completeOf(bc["B"], at(4*time.Second)), buryNow(bc["C"], at(4*time.Second)))
	got := x.leaseKinds(q, at(5*time.Second), "D", "on_death")
	deps, err := x.s.DependencyResults(x.ctx, got["D"].ID)
	if err != nil {
		x.t.Fatalf("DependencyResults: %v", err)
	}
	if len(deps) != 2 || deps[1].State != store.Dead {
		x.t.Errorf("D's dependencies %+v: want C dead", deps)
	}
	x.finish(completeOf(got["D"], at(6*time.Second)))
	x.flowStates("D completed", f, map[string]store.State{"on_complete": store.Pending, "on_success": store.Blocked})
	// C redriven and completed: the success callback fires then, D does
	// not run again.
	x.leaseKinds(q, at(7*time.Second), "on_complete")
	x.redrive(store.RedriveParams{IDs: []int64{f.ids["C"]}, Now: at(8 * time.Second)})
	c := x.leaseKinds(q, at(9*time.Second), "C")["C"]
	x.finish(completeOf(c, at(10*time.Second)))
	x.leaseKinds(q, at(11*time.Second), "on_success")
	x.flowStates("end", f, map[string]store.State{"D": store.Completed})
	x.checkAllCounts("end")
}

// testWorkflowCancel: CancelWorkflow cancels the waiting jobs and the
// callbacks, asks the running ones to stop, keeps the dead ones, and
// fires no callback.
func testWorkflowCancel(x *h) {
	const q = "wf-cancelwf"
	w := diamond(q, "")
	w.Jobs = append(w.Jobs, store.WorkflowNode{Name: "E", Job: store.NewJob{Queue: q, Kind: "E", MaxRetries: -1}, After: []string{"D"}})
	f := x.enqueueFlow(w, at(0))
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.finish(completeOf(a, at(2*time.Second)))
	bc := x.leaseKinds(q, at(3*time.Second), "B", "C")
	x.finish(buryNow(bc["C"], at(4*time.Second)))
	x.leaseKinds(q, at(5*time.Second), "on_death")
	got, err := x.s.CancelWorkflow(x.ctx, f.w.ID, at(6*time.Second))
	if err != nil {
		x.t.Fatalf("CancelWorkflow: %v", err)
	}
	if got.State != store.WorkflowCanceled || got.CanceledAt == nil {
		x.t.Errorf("canceled workflow: state %s", got.State)
	}
	x.flowStates("canceled", f, map[string]store.State{"B": store.Running, "C": store.Dead, "D": store.Canceled, "E": store.Canceled,
		"on_success": store.Canceled, "on_complete": store.Canceled, "on_death": store.Running})
	if !x.get(f.ids["B"]).CancelRequested {
		x.t.Errorf("running B: cancellation not requested")
	}
	x.checkAllCounts("canceled")
	// The dead C redriven and running again: a second cancel of the
	// workflow asks it to stop too (the first found it dead).
	if res := x.redrive(store.RedriveParams{IDs: []int64{f.ids["C"]}, Now: at(6500 * time.Millisecond)}); len(res.Redriven) != 1 {
		x.t.Fatalf("redrive C: %+v", res)
	}
	x.leaseKinds(q, at(6600*time.Millisecond), "C")
	if _, err := x.s.CancelWorkflow(x.ctx, f.w.ID, at(7*time.Second)); err != nil {
		x.t.Errorf("CancelWorkflow again: %v", err)
	}
	if !x.get(f.ids["C"]).CancelRequested {
		x.t.Errorf("C redriven and running: a second cancel of the workflow did not request its cancellation")
	}
	_, err = x.s.CancelWorkflow(x.ctx, missingID, at(7*time.Second))
	x.checkErr("CancelWorkflow(missing)", err, store.ErrNotFound)
	x.checkAllCounts("end")
}

// testWorkflowInvalid: cycles, unknown names and duplicates are refused
// with an ErrInvalid error naming them, and nothing is inserted.
func testWorkflowInvalid(x *h) {
	nj := store.NewJob{Queue: "wf-bad", Kind: "k", MaxRetries: -1}
	cases := []struct {
		name string
		jobs []store.WorkflowNode
		want string
	}{
		{"cycle", []store.WorkflowNode{{Name: "a", Job: nj, After: []string{"c"}}, {Name: "b", Job: nj, After: []string{"a"}},
			{Name: "c", Job: nj, After: []string{"b"}}, {Name: "d", Job: nj}}, "cycle: "},
		{"self", []store.WorkflowNode{{Name: "a", Job: nj, After: []string{"a"}}}, "a -> a"},
		{"unknown", []store.WorkflowNode{{Name: "a", Job: nj, After: []string{"zz"}}}, "a -> zz"},
		{"duplicate", []store.WorkflowNode{{Name: "a", Job: nj}, {Name: "a", Job: nj}}, `"a" used twice`},
		{"empty", nil, "no jobs"},
		// As the API refuses them: a job name with a control character
		// (a terminal escape for whoever lists the workflow) or white
		// space at either end, a dependency naming one.
		{"control", []store.WorkflowNode{{Name: "a\x1b]0;owned\x07", Job: nj}}, `a\x1b]0;owned\a`},
		{"newline", []store.WorkflowNode{{Name: "a\nb", Job: nj}}, `a\nb`},
		{"space", []store.WorkflowNode{{Name: " a", Job: nj}}, `" a"`},
	}
	for _, c := range cases {
		_, err := x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Jobs: c.jobs}, at(0))
		x.checkErr(c.name, err, store.ErrInvalid)
		if err != nil && !strings.Contains(err.Error(), c.want) {
			x.t.Errorf("%s: error %q does not name %q", c.name, err, c.want)
		}
	}
	var we *store.WorkflowError
	_, err := x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Jobs: cases[0].jobs}, at(0))
	if !errors.As(err, &we) || len(we.Cycle) != 4 {
		x.t.Errorf("cycle error %v: want a *WorkflowError with the cycle a, b, c, a", err)
	}
	_, err = x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Name: "order\x1b[2J", Jobs: []store.WorkflowNode{{Name: "a", Job: nj}}}, at(0))
	x.checkErr("workflow name with a control character", err, store.ErrInvalid)
	_, err = x.s.EnqueueWorkflow(x.ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{{Name: "a", Job: store.NewJob{Queue: "wf-bad", Kind: "k", Payload: raw(`{`)}}}}, at(0))
	x.checkErr("bad payload", err, store.ErrInvalid)
	if n, err := x.s.Count(x.ctx, store.Filter{Queue: "wf-bad"}); err != nil || n != 0 {
		x.t.Errorf("refused workflows left %d jobs (%v)", n, err)
	}
	if ws, _, err := x.s.ListWorkflows(x.ctx, 0, 10); err != nil || len(ws) != 0 {
		x.t.Errorf("refused workflows left %d workflows (%v)", len(ws), err)
	}
}

// testWorkflowIdempotent: a second enqueue with the workflow's key
// returns it (Existing) and creates nothing; ListWorkflows pages newest
// first.
func testWorkflowIdempotent(x *h) {
	const q = "wf-idem"
	w := diamond(q, "")
	w.IdempotencyKey = "order-1"
	f := x.enqueueFlow(w, at(0))
	again := x.enqueueFlow(w, at(time.Second))
	if !again.w.Existing || again.w.ID != f.w.ID {
		x.t.Errorf("second enqueue: workflow %d existing %v; want %d existing", again.w.ID, again.w.Existing, f.w.ID)
	}
	if n, _ := x.s.Count(x.ctx, store.Filter{Queue: q}); n != 7 {
		x.t.Errorf("%d jobs after two enqueues of one key, want 7", n)
	}
	other := x.enqueueFlow(diamond(q, ""), at(2*time.Second))
	page, next, err := x.s.ListWorkflows(x.ctx, 0, 1)
	if err != nil || len(page) != 1 || page[0].ID != other.w.ID || next == 0 {
		x.t.Fatalf("ListWorkflows page 1: %v, next %d, %v", page, next, err)
	}
	page, next, err = x.s.ListWorkflows(x.ctx, next, 1)
	if err != nil || len(page) != 1 || page[0].ID != f.w.ID || page[0].Counts[store.Pending] != 1 {
		x.t.Fatalf("ListWorkflows page 2: %+v, next %d, %v", page, next, err)
	}
	if _, err := x.s.GetWorkflow(x.ctx, missingID); !errors.Is(err, store.ErrNotFound) {
		x.t.Errorf("GetWorkflow(missing): %v, want ErrNotFound", err)
	}
}

// testWorkflowResultCap: a result over MaxResult or not JSON is refused
// (the whole Finish call) and the job stays running.
func testWorkflowResultCap(x *h) {
	j := x.leaseNew(at(0), "w", store.NewJob{Queue: "wf-res", Kind: "k", MaxRetries: -1})[0]
	for _, r := range []json.RawMessage{raw(`"` + strings.Repeat("x", store.MaxResult) + `"`), raw(`{`)} {
		o := completeOf(j, at(time.Second))
		o.Result = r
		_, err := x.s.Finish(x.ctx, []store.Outcome{o})
		x.checkErr("Finish with a bad result", err, store.ErrInvalid)
	}
	if got := x.get(j.ID); got.State != store.Running {
		x.t.Errorf("job %s after refused results, want running", got.State)
	}
	deps, err := x.s.DependencyResults(x.ctx, j.ID)
	if err != nil || len(deps) != 0 {
		x.t.Errorf("DependencyResults of a plain job: %v, %v; want none", deps, err)
	}
	_, err = x.s.DependencyResults(x.ctx, missingID)
	x.checkErr("DependencyResults(missing)", err, store.ErrNotFound)
}

// testWorkflowCountStates: CountWorkflows counts the workflows by state,
// every state present: none at first, then an active one (a job
// pending), an active one whose dead job's dependent waits for its
// redrive (wait), a succeeded, a finished (its only job dead) and a
// canceled one.
func testWorkflowCountStates(x *h) {
	want := map[store.WorkflowState]int64{store.WorkflowActive: 0, store.WorkflowSucceeded: 0, store.WorkflowFinished: 0, store.WorkflowCanceled: 0}
	check := func(what string) {
		x.t.Helper()
		got, err := x.s.CountWorkflows(x.ctx)
		if err != nil {
			x.t.Fatalf("CountWorkflows: %v", err)
		}
		if len(got) != len(want) {
			x.t.Errorf("%s: CountWorkflows = %v, want every state: %v", what, got, want)
		}
		for st, n := range want {
			if got[st] != n {
				x.t.Errorf("%s: CountWorkflows = %v, want %v", what, got, want)
				break
			}
		}
	}
	check("no workflow")
	one := func(queue string, policy store.OnDead, after bool) flow {
		w := store.NewWorkflow{OnDead: policy, Jobs: []store.WorkflowNode{{Name: "a", Job: store.NewJob{Queue: queue, Kind: "a", MaxRetries: -1}}}}
		if after {
			w.Jobs = append(w.Jobs, store.WorkflowNode{Name: "b", After: []string{"a"}, Job: store.NewJob{Queue: queue, Kind: "b", MaxRetries: -1}})
		}
		return x.enqueueFlow(w, at(0))
	}
	one("wfc-active", store.WaitOnDead, false)
	waiting := one("wfc-waiting", store.WaitOnDead, true)
	succeeded := one("wfc-succeeded", store.WaitOnDead, false)
	finished := one("wfc-finished", store.WaitOnDead, false)
	canceled := one("wfc-canceled", store.WaitOnDead, true)
	want[store.WorkflowActive] = 5
	check("five enqueued")
	x.finish(completeOf(x.leaseKinds("wfc-succeeded", at(time.Second), "a")["a"], at(2*time.Second)))
	x.finish(buryNow(x.leaseKinds("wfc-finished", at(time.Second), "a")["a"], at(2*time.Second)))
	x.finish(buryNow(x.leaseKinds("wfc-waiting", at(time.Second), "a")["a"], at(2*time.Second)))
	if _, err := x.s.CancelWorkflow(x.ctx, canceled.w.ID, at(3*time.Second)); err != nil {
		x.t.Fatalf("CancelWorkflow: %v", err)
	}
	want = map[store.WorkflowState]int64{store.WorkflowActive: 2, store.WorkflowSucceeded: 1, store.WorkflowFinished: 1, store.WorkflowCanceled: 1}
	check("each state")
	for _, f := range []flow{waiting, succeeded, finished, canceled} {
		if w := x.getFlow(f.w.ID); (w.ID == succeeded.w.ID) != (w.State == store.WorkflowSucceeded) {
			x.t.Errorf("workflow %d is %s", w.ID, w.State)
		}
	}
}

// testWorkflowCancelFired: canceling a workflow cancels its callbacks
// not fired (docs/workflows.md); one that fired and waits to run (the
// death callback, due) is a job of its own by then, and runs.
func testWorkflowCancelFired(x *h) {
	const q = "wf-cancelfired"
	f := x.enqueueFlow(diamond(q, ""), at(0))
	a := x.leaseKinds(q, at(time.Second), "A")["A"]
	x.finish(buryNow(a, at(2*time.Second)))
	x.flowStates("A dead", f, map[string]store.State{"on_death": store.Pending})
	if _, err := x.s.CancelWorkflow(x.ctx, f.w.ID, at(3*time.Second)); err != nil {
		x.t.Fatalf("CancelWorkflow: %v", err)
	}
	x.flowStates("canceled", f, map[string]store.State{"A": store.Dead, "B": store.Canceled, "D": store.Canceled,
		"on_success": store.Canceled, "on_complete": store.Canceled, "on_death": store.Pending})
	x.leaseKinds(q, at(4*time.Second), "on_death")
	x.checkAllCounts("canceled")
}

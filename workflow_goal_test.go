package redrive_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
)

// The goal of issue 32, through the engine: a diamond workflow (A -> B,
// C -> D) whose C fails permanently, run by a worker's handlers, under
// each failure policy. The store's conformance suite (store/storetest,
// testWorkflowWait and its neighbours) checks the same moves one store
// call at a time; here real handlers run them, on the store the engine's
// tests use (SQLite, or PostgreSQL with REDRIVE_ENGINE_STORE=postgres).

// diamondStep is the payload of every job of the diamond: C fails
// permanently until it is redriven with Fixed set.
type diamondStep struct {
	Fixed bool `json:"fixed,omitempty"`
}

// diamondRun is one execution of a handler of the diamond, in the order
// they started.
type diamondRun struct {
	name  string
	fixed bool
	// deps is what DependencyResults said when D started: each
	// dependency's name and state.
	deps map[string]redrive.State
	// ended is set when the handler returned.
	ended bool
}

// diamondLog keeps the executions of one test's handlers.
type diamondLog struct {
	mu   sync.Mutex
	runs []*diamondRun
}

func (l *diamondLog) start(r *diamondRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, r)
}

func (l *diamondLog) end(r *diamondRun) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.ended = true
}

// of returns copies of the executions of the job named name, in order.
func (l *diamondLog) of(name string) []diamondRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []diamondRun
	for _, r := range l.runs {
		if r.name == name {
			out = append(out, *r)
		}
	}
	return out
}

// names returns the names of the executions, in the order they started.
func (l *diamondLog) names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.runs {
		out = append(out, r.name)
	}
	return out
}

// diamondEnv is a worker whose handlers run the diamond's kinds and log
// each execution, and the ids of the diamond's jobs once enqueued.
type diamondEnv struct {
	*env
	log *diamondLog
	wf  *redrive.WorkflowInfo
	ids map[string]int64
}

func newDiamondEnv(t *testing.T, policy redrive.OnDead) *diamondEnv {
	e := &diamondEnv{env: newEnv(t, redrive.WorkerOptions{PollInterval: 20 * time.Millisecond}), log: &diamondLog{}}
	for _, kind := range []string{"A", "B", "C", "D", "on_success", "on_complete", "on_death"} {
		redrive.Handle(e.worker, kind, func(ctx context.Context, j *redrive.Job, s diamondStep) error {
			r := &diamondRun{name: kind, fixed: s.Fixed}
			if kind == "D" {
				deps, err := e.client.DependencyResults(ctx, j.ID)
				if err != nil {
					return err
				}
				r.deps = map[string]redrive.State{}
				for _, d := range deps {
					r.deps[d.Name] = d.State
				}
			}
			e.log.start(r)
			defer e.log.end(r)
			if kind == "C" && !s.Fixed {
				return &failure.Error{Class: failure.Permanent, Err: fmt.Errorf("C needs a fixed payload")}
			}
			return redrive.SetResult(ctx, map[string]string{"by": kind})
		})
	}
	req := func(kind string) redrive.Request { return redrive.Request{Kind: kind, Payload: diamondStep{}} }
	w := redrive.NewWorkflow("diamond").OnDead(policy).
		Add("A", req("A")).
		Add("B", req("B"), "A").
		Add("C", req("C"), "A").
		Add("D", req("D"), "B", "C").
		OnSuccess(req("on_success")).OnComplete(req("on_complete")).OnDeath(req("on_death"))
	var err error
	if e.wf, err = e.client.EnqueueWorkflow(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	e.ids = map[string]int64{"on_success": e.wf.OnSuccess, "on_complete": e.wf.OnComplete, "on_death": e.wf.OnDeath}
	for _, j := range e.wf.Jobs {
		e.ids[j.Name] = j.JobID
	}
	e.start()
	return e
}

// state returns the state of the diamond's job named name.
func (e *diamondEnv) state(name string) redrive.State {
	e.t.Helper()
	j, err := e.client.Get(e.t.Context(), e.ids[name])
	if err != nil {
		e.t.Fatal(err)
	}
	return j.State
}

// waitStates waits until the named jobs are in the states want.
func (e *diamondEnv) waitStates(what string, want map[string]redrive.State) {
	e.t.Helper()
	testwait.Watch(e.t, what, 30*time.Second, func() (bool, string) {
		var got []string
		ok := true
		for _, name := range slices.Sorted(mapKeys(want)) {
			st := e.state(name)
			got = append(got, fmt.Sprintf("%s %s", name, st))
			ok = ok && st == want[name]
		}
		return ok, fmt.Sprint(got)
	})
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// runsOf fails unless the job named name ran n times (to the end).
func (e *diamondEnv) runsOf(name string, n int) []diamondRun {
	e.t.Helper()
	runs := e.log.of(name)
	ended := 0
	for _, r := range runs {
		if r.ended {
			ended++
		}
	}
	if len(runs) != n || ended != n {
		e.t.Errorf("%s ran %d times (%d ended), want %d; executions in order: %v", name, len(runs), ended, n, e.log.names())
	}
	return runs
}

// workflowState waits until the workflow is in state want.
func (e *diamondEnv) workflowState(want store.WorkflowState) *redrive.WorkflowInfo {
	e.t.Helper()
	var w *redrive.WorkflowInfo
	testwait.Watch(e.t, "workflow "+string(want), 30*time.Second, func() (bool, string) {
		var err error
		if w, err = e.client.GetWorkflow(e.t.Context(), e.wf.ID); err != nil {
			e.t.Fatal(err)
		}
		return w.State == want, fmt.Sprintf("%s, counts %v", w.State, w.Counts)
	})
	return w
}

// TestWorkflowDiamondWait: under the wait policy, C's death leaves D
// blocked (no attempt used, its handler never runs) and fires the death
// callback; redriving C with an edited payload completes C, then D runs,
// seeing both dependencies completed, and the success and complete
// callbacks fire, each once.
func TestWorkflowDiamondWait(t *testing.T) {
	e := newDiamondEnv(t, redrive.WaitOnDead)
	e.waitStates("C dead, B and the death callback completed", map[string]redrive.State{
		"A": redrive.Completed, "B": redrive.Completed, "C": redrive.Dead, "on_death": redrive.Completed})
	// D would have been released in the transaction that buried C: it is
	// blocked now or never.
	d, err := e.client.Get(t.Context(), e.ids["D"])
	if err != nil {
		t.Fatal(err)
	}
	if d.State != store.Blocked || d.Attempt != 0 {
		t.Errorf("D with C dead: %s after %d attempts, want blocked after none", d.State, d.Attempt)
	}
	for _, cb := range []string{"on_success", "on_complete"} {
		if st := e.state(cb); st != store.Blocked {
			t.Errorf("%s with C dead: %s, want blocked", cb, st)
		}
	}
	w, err := e.client.GetWorkflow(t.Context(), e.wf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if w.State != store.WorkflowActive || w.Counts[redrive.Dead] != 1 || w.Counts[store.Blocked] != 1 {
		t.Errorf("workflow with C dead: %s, counts %v; want active, 1 dead, 1 blocked", w.State, w.Counts)
	}

	fixed, _ := json.Marshal(diamondStep{Fixed: true})
	prog, err := e.client.Redrive(t.Context(), redrive.RedriveRequest{IDs: []int64{e.ids["C"]}, Payload: json.RawMessage(fixed), Note: "fixed"})
	if err != nil || prog.Redriven != 1 {
		t.Fatalf("redrive C: %+v, %v", prog, err)
	}
	e.workflowState(store.WorkflowSucceeded)
	e.waitStates("every job and the success and complete callbacks completed", map[string]redrive.State{
		"C": redrive.Completed, "D": redrive.Completed, "on_success": redrive.Completed, "on_complete": redrive.Completed})
	e.stop() // nothing runs any more: the counts below are final
	if c := e.runsOf("C", 2); len(c) == 2 && (c[0].fixed || !c[1].fixed) {
		t.Errorf("C's payloads: first fixed %v, then %v; want the edited payload on the redrive only", c[0].fixed, c[1].fixed)
	}
	if d := e.runsOf("D", 1); len(d) == 1 && (d[0].deps["B"] != redrive.Completed || d[0].deps["C"] != redrive.Completed) {
		t.Errorf("D started with its dependencies %v, want both completed", d[0].deps)
	}
	order := e.log.names()
	c1 := slices.Index(order, "C")
	if c2, d := slices.Index(order[c1+1:], "C"), slices.Index(order, "D"); c1 < 0 || c2 < 0 || d < c1+1+c2 {
		t.Errorf("executions %v: want D after C's second run", order)
	}
	for _, cb := range []string{"on_success", "on_complete", "on_death"} {
		e.runsOf(cb, 1)
	}
}

// TestWorkflowDiamondCancel: under the cancel policy, C's death cancels
// D, whose handler never runs; the workflow finishes: the complete and
// death callbacks fire once, the success callback is canceled.
func TestWorkflowDiamondCancel(t *testing.T) {
	e := newDiamondEnv(t, redrive.CancelOnDead)
	w := e.workflowState(store.WorkflowFinished)
	if w.Counts[redrive.Completed] != 2 || w.Counts[redrive.Dead] != 1 || w.Counts[redrive.Canceled] != 1 {
		t.Errorf("finished workflow's counts %v, want 2 completed, 1 dead, 1 canceled", w.Counts)
	}
	e.waitStates("the callbacks", map[string]redrive.State{
		"C": redrive.Dead, "D": redrive.Canceled, "on_success": redrive.Canceled, "on_complete": redrive.Completed, "on_death": redrive.Completed})
	e.stop()
	e.runsOf("D", 0)
	e.runsOf("on_success", 0)
	e.runsOf("on_complete", 1)
	e.runsOf("on_death", 1)
}

// TestWorkflowDiamondRunAnyway: under the run policy, C's death releases
// D, which runs and reads C dead among its dependencies; the complete
// and death callbacks fire once, the success callback waits.
func TestWorkflowDiamondRunAnyway(t *testing.T) {
	e := newDiamondEnv(t, redrive.RunOnDead)
	w := e.workflowState(store.WorkflowFinished)
	if w.Counts[redrive.Completed] != 3 || w.Counts[redrive.Dead] != 1 {
		t.Errorf("finished workflow's counts %v, want 3 completed, 1 dead", w.Counts)
	}
	e.waitStates("the callbacks", map[string]redrive.State{
		"C": redrive.Dead, "D": redrive.Completed, "on_success": store.Blocked, "on_complete": redrive.Completed, "on_death": redrive.Completed})
	e.stop()
	if d := e.runsOf("D", 1); len(d) == 1 && (d[0].deps["B"] != redrive.Completed || d[0].deps["C"] != redrive.Dead) {
		t.Errorf("D started with its dependencies %v, want B completed and C dead", d[0].deps)
	}
	e.runsOf("on_success", 0)
	e.runsOf("on_complete", 1)
	e.runsOf("on_death", 1)
}

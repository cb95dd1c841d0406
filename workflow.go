package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redrivehq/redrive/store"
)

// OnDead is a workflow's failure policy: what becomes of the dependents
// of a job that died (see docs/design.md, "Workflows").
type OnDead = store.OnDead

// The failure policies.
const (
	// WaitOnDead (the default): the dependents of a dead job stay
	// blocked until it is redriven and completes.
	WaitOnDead = store.WaitOnDead
	// CancelOnDead: the dependents of a dead job are canceled.
	CancelOnDead = store.CancelOnDead
	// RunOnDead: the dependents of a dead job run anyway.
	RunOnDead = store.RunOnDead
)

// WorkflowInfo is a workflow as stored: its state, counts, jobs and
// callbacks.
type WorkflowInfo = store.Workflow

// WorkflowJob is one job of a stored workflow.
type WorkflowJob = store.WorkflowJob

// WorkflowState is where a workflow stands: active, succeeded, finished
// or canceled (store.WorkflowStates).
type WorkflowState = store.WorkflowState

// DependencyResult is what a workflow's job reads of one of its
// dependencies (Client.DependencyResults).
type DependencyResult = store.DependencyResult

// WorkflowError is the error (wrapping ErrInvalid) of a workflow whose
// dependencies name no job or form a cycle; it names them.
type WorkflowError = store.WorkflowError

// Workflow builds a workflow: jobs, the jobs each waits for, callbacks
// and a failure policy, enqueued as a whole by Client.EnqueueWorkflow. A
// workflow whose jobs wait for none is a batch. Its methods return it,
// so that calls chain; the first mistake is kept and reported by the
// enqueue.
type Workflow struct {
	w    store.NewWorkflow
	reqs []Request
	cbs  [3]*Request // success, complete, death
}

// NewWorkflow starts a workflow named name (a label for people; "" is
// allowed).
func NewWorkflow(name string) *Workflow {
	return &Workflow{w: store.NewWorkflow{Name: name}}
}

// Add adds a job named name (unique in the workflow) that runs once
// every job named in after completed.
func (w *Workflow) Add(name string, r Request, after ...string) *Workflow {
	w.w.Jobs = append(w.w.Jobs, store.WorkflowNode{Name: name, After: after})
	w.reqs = append(w.reqs, r)
	return w
}

// OnDead sets the failure policy (WaitOnDead by default).
func (w *Workflow) OnDead(p OnDead) *Workflow {
	w.w.OnDead = p
	return w
}

// Key makes the enqueue idempotent: a second enqueue of a workflow with
// the key returns the first (Existing set) and creates nothing.
func (w *Workflow) Key(key string) *Workflow {
	w.w.IdempotencyKey = key
	return w
}

// OnSuccess adds a job enqueued when every job of the workflow
// completed (after a redrive of a dead one, if need be), once.
func (w *Workflow) OnSuccess(r Request) *Workflow { w.cbs[0] = &r; return w }

// OnComplete adds a job enqueued when every job of the workflow
// finished (completed, dead or canceled), once.
func (w *Workflow) OnComplete(r Request) *Workflow { w.cbs[1] = &r; return w }

// OnDeath adds a job enqueued when a job of the workflow died for the
// first time, once.
func (w *Workflow) OnDeath(r Request) *Workflow { w.cbs[2] = &r; return w }

// EnqueueWorkflow enqueues w atomically: its jobs without dependencies
// are due at once (or at their RunAt), the others wait, blocked, until
// their dependencies completed. Each request is checked as Enqueue
// checks it. A job may carry an idempotency key of its own (callbacks
// may not; ReturnExisting does not apply): a key a job holds, or held
// (deleted, its key kept), refuses the whole workflow with a
// *WorkflowConflictError naming the job and the holder, after the
// workflow's own key (Workflow.Key) is looked up. A dependency naming
// no job, or a cycle, is a *WorkflowError naming them.
func (c *Client) EnqueueWorkflow(ctx context.Context, w *Workflow) (*WorkflowInfo, error) {
	now := c.now()
	var valid validNames
	nw, err := c.newWorkflow(w, now, &valid)
	if err != nil {
		return nil, fmt.Errorf("redrive: enqueue workflow: %w", err)
	}
	got, err := c.store.EnqueueWorkflow(ctx, nw, now)
	if err != nil {
		return nil, fmt.Errorf("redrive: enqueue workflow: %w", err)
	}
	if !got.Existing {
		c.wakeFor(dueJobs(&nw, nil))
	}
	return got, nil
}

// WorkflowBatchError is the error of an EnqueueWorkflows refused
// because of one of its workflows: Index is its index, Name its name,
// Err why (a *WorkflowError, a *WorkflowConflictError, an error
// wrapping ErrInvalid). It matches what Err matches.
type WorkflowBatchError = store.WorkflowBatchError

// MaxWorkflowBatch bounds the workflows of one EnqueueWorkflows (their
// jobs together are bounded as one workflow's).
const MaxWorkflowBatch = store.MaxWorkflowBatch

// EnqueueWorkflows enqueues ws as EnqueueWorkflow enqueues each, in one
// transaction of the store: all of them or none, for a fraction of the
// round trips of as many EnqueueWorkflow calls. It returns them in ws'
// order. A workflow whose key is held is answered by the workflow
// holding it (Existing set), as EnqueueWorkflow answers it, and so is a
// workflow whose key an earlier workflow of ws takes: by that one. A
// workflow refused (its check, a request of it, a key one of its jobs
// finds held, a job's key taken by a job of another workflow of ws)
// refuses them all with a *WorkflowBatchError naming it.
func (c *Client) EnqueueWorkflows(ctx context.Context, ws []*Workflow) ([]*WorkflowInfo, error) {
	now := c.now()
	var valid validNames
	nws := make([]store.NewWorkflow, len(ws))
	for i, w := range ws {
		if w == nil {
			return nil, fmt.Errorf("redrive: enqueue workflows: %w", &WorkflowBatchError{Index: i, Err: fmt.Errorf("%w: nil workflow", ErrInvalid)})
		}
		nw, err := c.newWorkflow(w, now, &valid)
		if err != nil {
			return nil, fmt.Errorf("redrive: enqueue workflows: %w", &WorkflowBatchError{Index: i, Name: w.w.Name, Err: err})
		}
		nws[i] = nw
	}
	got, err := c.store.EnqueueWorkflows(ctx, nws, now)
	if err != nil {
		return nil, fmt.Errorf("redrive: enqueue workflows: %w", err)
	}
	var jobs []*Job
	for i := range nws {
		if !got[i].Existing {
			jobs = dueJobs(&nws[i], jobs)
		}
	}
	// Wake this process's workers for the jobs due without waiting.
	c.wakeFor(jobs)
	return got, nil
}

// newWorkflow checks w's requests as Enqueue checks one and returns the
// workflow to store.
func (c *Client) newWorkflow(w *Workflow, now time.Time, valid *validNames) (store.NewWorkflow, error) {
	if err := noReturnExisting(w); err != nil {
		return store.NewWorkflow{}, err
	}
	nw := w.w
	nw.Jobs = make([]store.WorkflowNode, len(w.w.Jobs))
	for i := range w.reqs {
		nj, err := c.newJob(&w.reqs[i], now, valid)
		if err != nil {
			return store.NewWorkflow{}, fmt.Errorf("job %q: %w", w.w.Jobs[i].Name, err)
		}
		nw.Jobs[i] = store.WorkflowNode{Name: w.w.Jobs[i].Name, Job: nj, After: w.w.Jobs[i].After}
	}
	for i, dst := range []**store.NewJob{&nw.OnSuccess, &nw.OnComplete, &nw.OnDeath} {
		if w.cbs[i] == nil {
			continue
		}
		nj, err := c.newJob(w.cbs[i], now, valid)
		if err != nil {
			return store.NewWorkflow{}, fmt.Errorf("callback: %w", err)
		}
		*dst = &nj
	}
	return nw, nil
}

// dueJobs appends to jobs the jobs of nw due without waiting (those
// without dependencies), for wakeFor.
func dueJobs(nw *store.NewWorkflow, jobs []*Job) []*Job {
	for i := range nw.Jobs {
		if nj := &nw.Jobs[i].Job; len(nw.Jobs[i].After) == 0 {
			jobs = append(jobs, &Job{Queue: nj.Queue, RunAt: nj.RunAt})
		}
	}
	return jobs
}

// WorkflowConflictError is the error (wrapping ErrConflict) of an
// AddToWorkflow that the workflow's state refuses: closed or canceled
// (Closed says which), or a job depending on a member whose state would
// cancel it at once (Job, Field, Member, MemberState).
type WorkflowConflictError = store.WorkflowConflictError

// AddToWorkflow adds the jobs of w (its Add calls: w's name, key,
// policy and callbacks must be unset) to the workflow id while it is
// open, atomically: all of them or none. A job added may depend on jobs
// of w and on members of the workflow by their names: a member that
// completed holds it back no longer, one that has not finished does as
// any dependency does. The workflow's callbacks then wait for the jobs
// added too. A workflow is open until it is canceled or every job of it
// finished once (WorkflowInfo.ClosedAt, when its complete callback
// fires): then, and for a dependency on a member canceled (or dead,
// under CancelOnDead), the error is a *WorkflowConflictError; a name
// taken, a dependency naming no job or a cycle is a *WorkflowError; an
// unknown workflow ErrNotFound. It returns the workflow with its jobs.
func (c *Client) AddToWorkflow(ctx context.Context, id int64, w *Workflow) (*WorkflowInfo, error) {
	switch {
	case w.w.Name != "" || w.w.IdempotencyKey != "" || w.w.OnDead != "":
		return nil, fmt.Errorf("redrive: add to workflow %d: %w: the jobs added take the workflow's name, key and policy (set none)", id, ErrInvalid)
	case w.cbs[0] != nil || w.cbs[1] != nil || w.cbs[2] != nil:
		return nil, fmt.Errorf("redrive: add to workflow %d: %w: callbacks are set when the workflow is enqueued", id, ErrInvalid)
	}
	if err := noReturnExisting(w); err != nil {
		return nil, fmt.Errorf("redrive: add to workflow %d: %w", id, err)
	}
	now := c.now()
	nodes := make([]store.WorkflowNode, len(w.w.Jobs))
	var valid validNames
	for i := range w.reqs {
		nj, err := c.newJob(&w.reqs[i], now, &valid)
		if err != nil {
			return nil, fmt.Errorf("redrive: add to workflow %d: job %q: %w", id, w.w.Jobs[i].Name, err)
		}
		nodes[i] = store.WorkflowNode{Name: w.w.Jobs[i].Name, Job: nj, After: w.w.Jobs[i].After}
	}
	got, err := c.store.AddToWorkflow(ctx, id, nodes, now)
	if err != nil {
		return nil, fmt.Errorf("redrive: add to workflow %d: %w", id, err)
	}
	// Wake this process's workers for the jobs added due at once.
	added := make(map[string]*store.NewJob, len(nodes))
	for i := range nodes {
		added[nodes[i].Name] = &nodes[i].Job
	}
	var jobs []*Job
	for i := range got.Jobs {
		j := &got.Jobs[i]
		if nj := added[j.Name]; nj != nil && (j.State == store.Pending || j.State == store.Scheduled) {
			jobs = append(jobs, &Job{Queue: nj.Queue, RunAt: nj.RunAt})
		}
	}
	c.wakeFor(jobs)
	return got, nil
}

// noReturnExisting refuses a request of w asking ReturnExisting: a job
// of a workflow whose key is held is refused, never adopted.
func noReturnExisting(w *Workflow) error {
	for i := range w.reqs {
		if w.reqs[i].ReturnExisting {
			return fmt.Errorf("%w: job %q: ReturnExisting does not apply to a workflow's jobs (a key held refuses the workflow)", ErrInvalid, w.w.Jobs[i].Name)
		}
	}
	return nil
}

// GetWorkflow returns a workflow with its jobs' states.
func (c *Client) GetWorkflow(ctx context.Context, id int64) (*WorkflowInfo, error) {
	w, err := c.store.GetWorkflow(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("redrive: workflow %d: %w", id, err)
	}
	return w, nil
}

// ListWorkflows returns up to limit workflows with ids below before (0:
// from the newest), newest first, and the cursor of the next page (0:
// none).
func (c *Client) ListWorkflows(ctx context.Context, before int64, limit int) ([]*WorkflowInfo, int64, error) {
	ws, next, err := c.store.ListWorkflows(ctx, before, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("redrive: workflows: %w", err)
	}
	return ws, next, nil
}

// CountWorkflows returns the number of workflows in each state (every
// state present, 0 when none), as the metrics export them.
func (c *Client) CountWorkflows(ctx context.Context) (map[WorkflowState]int64, error) {
	n, err := c.store.CountWorkflows(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive: count workflows: %w", err)
	}
	return n, nil
}

// CancelWorkflow cancels a workflow: its waiting jobs and callbacks not
// fired are canceled, its running jobs asked to stop; its dead jobs
// stay in the DLQ.
func (c *Client) CancelWorkflow(ctx context.Context, id int64) (*WorkflowInfo, error) {
	w, err := c.store.CancelWorkflow(ctx, id, c.now())
	if err != nil {
		return nil, fmt.Errorf("redrive: cancel workflow %d: %w", id, err)
	}
	return w, nil
}

// DependencyResults returns the dependencies of a workflow's job with
// their states and the results their handlers recorded (SetResult), by
// id; none for a job outside a workflow. A handler reads its own with
// job.ID.
func (c *Client) DependencyResults(ctx context.Context, jobID int64) ([]DependencyResult, error) {
	r, err := c.store.DependencyResults(ctx, jobID)
	if err != nil {
		return nil, fmt.Errorf("redrive: dependency results of job %d: %w", jobID, err)
	}
	return r, nil
}

// ErrResultTooLarge is returned by SetResult for a result longer than
// MaxResult bytes once encoded.
var ErrResultTooLarge = errors.New("redrive: result too large")

// MaxResult bounds, in bytes, the JSON of a job's result (SetResult).
const MaxResult = store.MaxResult

// SetResult records v, encoded as JSON, as the result of the job whose
// handler runs under ctx: kept with the job if the attempt completes
// it, for its dependents to read (Client.DependencyResults). A later
// call replaces an earlier one; outside a handler's context it does
// nothing. A result longer than MaxResult bytes is refused
// (ErrResultTooLarge) and the earlier one, if any, kept.
func SetResult(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("redrive: result: %w", err)
	}
	if len(b) > MaxResult {
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrResultTooLarge, len(b), MaxResult)
	}
	if r, ok := ctx.Value(attemptKey{}).(*runningJob); ok {
		raw := json.RawMessage(b)
		r.output.Store(&raw)
	}
	return nil
}

package apiclient

import (
	"context"
	"fmt"
	"net/url"
	"strconv"

	"github.com/redrivehq/redrive"
)

// WorkflowRequest is the body of POST /v1/workflows: a workflow declared
// as a whole (see docs/workflows.md).
type WorkflowRequest struct {
	// Name describes the workflow to people ("" is allowed).
	Name string `json:"name"`
	// IdempotencyKey makes the enqueue happen once: a second request
	// with the key answers the workflow holding it (200) and creates
	// nothing.
	IdempotencyKey string `json:"idempotency_key"`
	// OnDead is the failure policy: wait (the default when ""), cancel
	// or run.
	OnDead redrive.OnDead `json:"on_dead"`
	// Jobs are the workflow's jobs, each named, with the jobs it waits
	// for.
	Jobs []WorkflowJobRequest `json:"jobs"`
	// OnSuccess, OnComplete and OnDeath are the callback jobs, each
	// enqueued once: when every job completed, when every job finished,
	// when a job died for the first time.
	OnSuccess  *EnqueueRequest `json:"on_success"`
	OnComplete *EnqueueRequest `json:"on_complete"`
	OnDeath    *EnqueueRequest `json:"on_death"`
}

// WorkflowJobRequest is one job of a WorkflowRequest (or of a
// WorkflowAddRequest): the fields of POST /v1/jobs but return_existing,
// its name, unique in the workflow, and After, the names of the jobs
// that must complete before it runs. Its idempotency key, if any, is
// its own: a key another job holds refuses the whole request (409).
type WorkflowJobRequest struct {
	Name  string   `json:"name"`
	After []string `json:"after"`
	EnqueueRequest
}

// WorkflowAddRequest is the body of POST /v1/workflows/{id}/jobs: jobs
// added to an open workflow, named as a workflow's jobs are (each name
// unused in the workflow), each with After naming jobs of the request
// or members of the workflow.
type WorkflowAddRequest struct {
	Jobs []WorkflowJobRequest `json:"jobs"`
}

// WorkflowBatchRequest is the body of POST /v1/workflows/batch: many
// workflows enqueued atomically, each as POST /v1/workflows takes one.
type WorkflowBatchRequest struct {
	Workflows []WorkflowRequest `json:"workflows"`
}

// WorkflowBatch is the answer to POST /v1/workflows/batch: the
// workflows in the request's order, each with its jobs, or, for one
// whose idempotency key was held (or taken by an earlier workflow of the
// request), the workflow holding it, existing true.
type WorkflowBatch struct {
	Workflows []*redrive.WorkflowInfo `json:"workflows"`
}

// WorkflowList is the answer to GET /v1/workflows.
type WorkflowList struct {
	// Workflows are the page's workflows, newest first, without their
	// jobs.
	Workflows []*redrive.WorkflowInfo `json:"workflows"`
	// Next is the before of the next page; "" on the last.
	Next string `json:"next,omitempty"`
}

// workflowPath is the path of workflow id, and of its action when not
// "".
func workflowPath(id int64, action string) string {
	p := "/v1/workflows/" + strconv.FormatInt(id, 10)
	if action != "" {
		p += "/" + action
	}
	return p
}

// EnqueueWorkflow enqueues a workflow as a whole, atomically (POST
// /v1/workflows), and returns it with its jobs. A cycle, a dependency
// naming no job, a duplicate name or an empty workflow is an *Error 400
// naming them; a key already held answers the workflow holding it,
// with Existing set.
func (c *Client) EnqueueWorkflow(ctx context.Context, in WorkflowRequest) (*redrive.WorkflowInfo, error) {
	var w redrive.WorkflowInfo
	if err := c.post(ctx, "/v1/workflows", in, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// EnqueueWorkflows enqueues many workflows atomically, all or none
// (POST /v1/workflows/batch), and returns them in in's order, each as
// EnqueueWorkflow returns one. A workflow refused refuses the request:
// an *Error 400 or 409 whose field names it (workflows[i]. and its own
// field).
func (c *Client) EnqueueWorkflows(ctx context.Context, in WorkflowBatchRequest) ([]*redrive.WorkflowInfo, error) {
	var out WorkflowBatch
	if err := c.post(ctx, "/v1/workflows/batch", in, &out); err != nil {
		return nil, err
	}
	if len(out.Workflows) != len(in.Workflows) {
		return nil, fmt.Errorf("server: POST /v1/workflows/batch answered %d workflows for %d", len(out.Workflows), len(in.Workflows))
	}
	return out.Workflows, nil
}

// Workflow returns workflow id with its jobs' states and its counts
// (GET /v1/workflows/{id}); one that does not exist is an *Error 404.
func (c *Client) Workflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error) {
	var w redrive.WorkflowInfo
	if err := c.get(ctx, workflowPath(id, ""), nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Workflows returns a page of the workflows with ids below before (0:
// from the newest), newest first, at most limit (0: the server's
// default), without their jobs (GET /v1/workflows); next is the before
// of the following page, 0 on the last.
func (c *Client) Workflows(ctx context.Context, before int64, limit int) (ws []*redrive.WorkflowInfo, next int64, err error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(before, 10))
	}
	var l WorkflowList
	if err := c.get(ctx, "/v1/workflows", v, &l); err != nil {
		return nil, 0, err
	}
	if l.Next != "" {
		if next, err = strconv.ParseInt(l.Next, 10, 64); err != nil || next <= 0 {
			return nil, 0, fmt.Errorf("server: GET /v1/workflows answered a next that is not a workflow id: %q", l.Next)
		}
		if before > 0 && next >= before {
			return nil, 0, fmt.Errorf("server: GET /v1/workflows answered a next (%d) that does not move past before (%d)", next, before)
		}
	}
	if l.Workflows == nil {
		l.Workflows = []*redrive.WorkflowInfo{}
	}
	return l.Workflows, next, nil
}

// AddToWorkflow adds jobs to workflow id while it is open (POST
// /v1/workflows/{id}/jobs), atomically, and returns the workflow with
// its jobs. A name taken, a dependency naming no job or a cycle is an
// *Error 400 naming the field; a workflow closed (every job finished
// once) or canceled, or a dependency on a member whose state would
// cancel the job at once, an *Error 409; an unknown id an *Error 404.
func (c *Client) AddToWorkflow(ctx context.Context, id int64, in WorkflowAddRequest) (*redrive.WorkflowInfo, error) {
	var w redrive.WorkflowInfo
	if err := c.post(ctx, workflowPath(id, "jobs"), in, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// CancelWorkflow cancels workflow id (POST /v1/workflows/{id}/cancel):
// its waiting jobs and callbacks not fired are canceled, its running
// jobs asked to stop, its dead jobs stay in the DLQ. Canceling it again
// changes nothing but the jobs redriven since; an unknown id is an
// *Error 404.
func (c *Client) CancelWorkflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error) {
	var w redrive.WorkflowInfo
	if err := c.post(ctx, workflowPath(id, "cancel"), nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

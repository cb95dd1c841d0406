package apiclient_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/store"
)

// TestWorkflows: a workflow enqueued, read, listed by pages and canceled
// through the client; a cycle and an unknown id are *Errors naming the
// field.
func TestWorkflows(t *testing.T) {
	e := newEnv(t, "tok")
	ctx := t.Context()
	job := func(name, kind string, after ...string) apiclient.WorkflowJobRequest {
		return apiclient.WorkflowJobRequest{Name: name, After: after, EnqueueRequest: apiclient.EnqueueRequest{Kind: kind, Payload: json.RawMessage(`{"n":1}`)}}
	}
	in := apiclient.WorkflowRequest{Name: "pipeline", IdempotencyKey: "p-1", OnDead: redrive.RunOnDead,
		Jobs:    []apiclient.WorkflowJobRequest{job("fetch", "fetch"), job("parse", "parse", "fetch")},
		OnDeath: &apiclient.EnqueueRequest{Kind: "page", Queue: "alerts"}}
	w, err := e.c.EnqueueWorkflow(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if w.Existing || w.Total != 2 || len(w.Jobs) != 2 || w.OnDead != redrive.RunOnDead || w.OnDeath == 0 || w.Counts[store.Blocked] != 1 {
		t.Fatalf("enqueued: %+v", w)
	}
	if cb, err := e.rc.Get(ctx, w.OnDeath); err != nil || cb.Queue != "alerts" || cb.State != store.Blocked {
		t.Errorf("the death callback: %+v, %v", cb, err)
	}
	again, err := e.c.EnqueueWorkflow(ctx, in)
	if err != nil || again.ID != w.ID || !again.Existing {
		t.Errorf("again with the key: %+v, %v", again, err)
	}
	got, err := e.c.Workflow(ctx, w.ID)
	if err != nil || got.Name != "pipeline" || len(got.Jobs) != 2 || got.Jobs[1].After[0] != got.Jobs[0].JobID {
		t.Errorf("workflow: %+v, %v", got, err)
	}

	second, err := e.c.EnqueueWorkflow(ctx, apiclient.WorkflowRequest{Jobs: []apiclient.WorkflowJobRequest{job("a", "a")}})
	if err != nil {
		t.Fatal(err)
	}
	ws, next, err := e.c.Workflows(ctx, 0, 1)
	if err != nil || len(ws) != 1 || ws[0].ID != second.ID || next != second.ID {
		t.Fatalf("first page: %v, next %d, %v", ws, next, err)
	}
	ws, next, err = e.c.Workflows(ctx, next, 1)
	if err != nil || len(ws) != 1 || ws[0].ID != w.ID || next != 0 || ws[0].Jobs != nil {
		t.Fatalf("second page: %v, next %d, %v", ws, next, err)
	}

	c, err := e.c.CancelWorkflow(ctx, w.ID)
	if err != nil || c.State != store.WorkflowCanceled || c.Canceled != 2 {
		t.Errorf("cancel: %+v, %v", c, err)
	}

	_, err = e.c.EnqueueWorkflow(ctx, apiclient.WorkflowRequest{Jobs: []apiclient.WorkflowJobRequest{job("a", "a", "b"), job("b", "b", "a")}})
	wantAPIError(t, err, http.StatusBadRequest, "invalid", "jobs")
	_, err = e.c.Workflow(ctx, 99)
	wantAPIError(t, err, http.StatusNotFound, "not_found", "id")
	_, err = e.c.CancelWorkflow(ctx, 99)
	wantAPIError(t, err, http.StatusNotFound, "not_found", "id")
}

// TestEnqueueWorkflows: workflows enqueued by one request through the
// client, in order, a key taken earlier in the request answered by its
// holder; a refused workflow is an *Error naming it, nothing stored.
func TestEnqueueWorkflows(t *testing.T) {
	e := newEnv(t, "tok")
	ctx := t.Context()
	job := func(name string, after ...string) apiclient.WorkflowJobRequest {
		return apiclient.WorkflowJobRequest{Name: name, After: after, EnqueueRequest: apiclient.EnqueueRequest{Kind: "k"}}
	}
	pair := apiclient.WorkflowRequest{Name: "pair", IdempotencyKey: "p", Jobs: []apiclient.WorkflowJobRequest{job("a"), job("b", "a")}}
	solo := apiclient.WorkflowRequest{Name: "solo", Jobs: []apiclient.WorkflowJobRequest{job("a")}}
	ws, err := e.c.EnqueueWorkflows(ctx, apiclient.WorkflowBatchRequest{Workflows: []apiclient.WorkflowRequest{pair, solo, pair}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 || ws[0].Name != "pair" || ws[0].Existing || ws[0].Counts[store.Blocked] != 1 || ws[1].Name != "solo" ||
		ws[2].ID != ws[0].ID || !ws[2].Existing {
		t.Fatalf("enqueued: %+v", ws)
	}
	loop := apiclient.WorkflowRequest{Jobs: []apiclient.WorkflowJobRequest{job("a", "b"), job("b", "a")}}
	_, err = e.c.EnqueueWorkflows(ctx, apiclient.WorkflowBatchRequest{Workflows: []apiclient.WorkflowRequest{solo, loop}})
	wantAPIError(t, err, http.StatusBadRequest, "invalid", "workflows[1].jobs")
	if n, err := e.rc.Count(ctx, redrive.Filter{}); err != nil || n != 3 {
		t.Errorf("%d jobs stored (%v), want 3", n, err)
	}
}

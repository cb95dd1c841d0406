package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/store"
)

// WorkflowRequest is the body of POST /v1/workflows.
// It is the type of package apiclient, the API's Go client.
type WorkflowRequest = apiclient.WorkflowRequest

// WorkflowJobRequest is one job of a WorkflowRequest.
// It is the type of package apiclient, the API's Go client.
type WorkflowJobRequest = apiclient.WorkflowJobRequest

// WorkflowAddRequest is the body of POST /v1/workflows/{id}/jobs.
// It is the type of package apiclient, the API's Go client.
type WorkflowAddRequest = apiclient.WorkflowAddRequest

// WorkflowBatchRequest is the body of POST /v1/workflows/batch.
// It is the type of package apiclient, the API's Go client.
type WorkflowBatchRequest = apiclient.WorkflowBatchRequest

// WorkflowBatch is the answer to POST /v1/workflows/batch.
// It is the type of package apiclient, the API's Go client.
type WorkflowBatch = apiclient.WorkflowBatch

// MaxWorkflowBatch bounds the workflows of one POST
// /v1/workflows/batch; their jobs together are bounded by
// MaxWorkflowJobs, as one workflow's, and the body by Options.MaxBody.
const MaxWorkflowBatch = 1000

// WorkflowList is the body of GET /v1/workflows.
// It is the type of package apiclient, the API's Go client.
type WorkflowList = apiclient.WorkflowList

// MaxWorkflowJobs bounds the jobs of one POST /v1/workflows (callbacks
// aside), well below store.MaxWorkflowJobs so that one request stays
// small; the body bound (Options.MaxBody, 1 MiB by default) applies
// too. A larger workflow is enqueued from Go (Client.EnqueueWorkflow).
const MaxWorkflowJobs = 10_000

// DecodeWorkflow reads raw, a workflow as POST /v1/workflows takes it, as
// strictly as the API does (strict JSON: no unknown or duplicate key),
// and checks it as the API does (WorkflowOf) at now. The CLI reads its
// workflow files with it, so that a file means the same directly on the
// store and through a server. An error says the field at fault, as the
// API's 400 does: "MESSAGE (field FIELD)".
func DecodeWorkflow(raw []byte, now time.Time) (WorkflowRequest, error) {
	var in WorkflowRequest
	err := (&api{}).decodeStrict(raw, &in)
	if err == nil {
		_, _, err = WorkflowOf(&in, now)
	}
	if ae, ok := err.(*apiError); ok && ae.field != "" {
		return in, fmt.Errorf("%w (field %s)", err, ae.field)
	}
	return in, err
}

// DecodeWorkflows reads raw, workflows as POST /v1/workflows/batch
// takes them ({"workflows": [...]}), as strictly as the API does, and
// checks them as the API does (WorkflowsOf) at now; an error says the
// field at fault, as DecodeWorkflow's. The CLI reads its files with it.
func DecodeWorkflows(raw []byte, now time.Time) (WorkflowBatchRequest, error) {
	var in WorkflowBatchRequest
	err := (&api{}).decodeStrict(raw, &in)
	if err == nil {
		_, _, err = WorkflowsOf(&in, now)
	}
	if ae, ok := err.(*apiError); ok && ae.field != "" {
		return in, fmt.Errorf("%w (field %s)", err, ae.field)
	}
	return in, err
}

// DecodeWorkflowAdd reads raw, the jobs POST /v1/workflows/{id}/jobs
// takes, as strictly as the API does, and checks them as the API does
// (WorkflowAddOf) at now; an error says the field at fault, as
// DecodeWorkflow's. The CLI reads its files with it.
func DecodeWorkflowAdd(raw []byte, now time.Time) (WorkflowAddRequest, error) {
	var in WorkflowAddRequest
	err := (&api{}).decodeStrict(raw, &in)
	if err == nil {
		_, _, err = WorkflowAddOf(&in, now)
	}
	if ae, ok := err.(*apiError); ok && ae.field != "" {
		return in, fmt.Errorf("%w (field %s)", err, ae.field)
	}
	return in, err
}

// WorkflowOf checks a workflow request as POST /v1/workflows does and
// returns the engine's workflow and its requests (the jobs', then the
// callbacks' present, in the order on_success, on_complete, on_death),
// run_at and delay read at now. A duplicate, empty or bad job name, a
// dependency naming no job, a cycle, a job with an idempotency key, an
// empty workflow or one of more than MaxWorkflowJobs jobs is an error
// naming them and the field at fault.
func WorkflowOf(in *WorkflowRequest, now time.Time) (*redrive.Workflow, []redrive.Request, error) {
	if err := checkName("name", in.Name, store.MaxNodeName); err != nil {
		return nil, nil, err
	}
	if err := checkName("idempotency_key", in.IdempotencyKey, maxKey); err != nil {
		return nil, nil, err
	}
	onDead := in.OnDead
	if onDead == "" {
		onDead = redrive.WaitOnDead
	}
	if !onDead.Valid() {
		return nil, nil, badRequest("on_dead", "on_dead must be wait, cancel or run, got %q", clip(string(in.OnDead)))
	}
	idx, err := checkJobNames(in.Jobs)
	if err != nil {
		return nil, nil, err
	}
	// Every reference that names no job, named at once.
	var unknown []string
	field := ""
	for i := range in.Jobs {
		for _, d := range in.Jobs[i].After {
			if _, ok := idx[d]; !ok {
				unknown = append(unknown, store.QuoteNode(clip(in.Jobs[i].Name))+" -> "+store.QuoteNode(clip(d)))
				if field == "" {
					field = fmt.Sprintf("jobs[%d].after", i)
				}
			}
		}
	}
	if len(unknown) > 0 {
		return nil, nil, badRequest(field, "after names no job of the workflow: %s", strings.Join(unknown, ", "))
	}
	// Cycles: the store's own check, which names one.
	nw := store.NewWorkflow{Name: in.Name, OnDead: onDead, Jobs: make([]store.WorkflowNode, len(in.Jobs))}
	for i := range in.Jobs {
		nw.Jobs[i] = store.WorkflowNode{Name: in.Jobs[i].Name, After: in.Jobs[i].After}
	}
	if _, err := store.CheckWorkflow(&nw); err != nil {
		return nil, nil, cycleError(err)
	}

	w := redrive.NewWorkflow(in.Name).OnDead(onDead).Key(in.IdempotencyKey)
	reqs, err := addRequests(w, in.Jobs, now)
	if err != nil {
		return nil, nil, err
	}
	for _, cb := range []struct {
		name string
		in   *EnqueueRequest
		set  func(redrive.Request) *redrive.Workflow
	}{{"on_success", in.OnSuccess, w.OnSuccess}, {"on_complete", in.OnComplete, w.OnComplete}, {"on_death", in.OnDeath, w.OnDeath}} {
		if cb.in == nil {
			continue
		}
		r, err := memberRequest(cb.in, cb.name+".", now)
		if err != nil {
			return nil, nil, err
		}
		cb.set(r)
		reqs = append(reqs, r)
	}
	return w, reqs, nil
}

// cycleError words CheckWorkflow's or CheckWorkflowAdd's error.
func cycleError(err error) error {
	if we, ok := store.IsWorkflowError(err); ok && len(we.Cycle) > 0 {
		return badRequest("jobs", "the jobs' dependencies form a cycle: %s", clip(strings.Join(we.Cycle, " -> ")))
	}
	return badRequest("jobs", "%s", strings.TrimPrefix(err.Error(), store.ErrInvalid.Error()+": "))
}

// addRequests checks jobs as POST /v1/jobs checks a job and adds them
// to w, returning their requests.
func addRequests(w *redrive.Workflow, jobs []WorkflowJobRequest, now time.Time) ([]redrive.Request, error) {
	reqs := make([]redrive.Request, 0, len(jobs)+3)
	for i := range jobs {
		prefix := fmt.Sprintf("jobs[%d].", i)
		r, err := memberRequest(&jobs[i].EnqueueRequest, prefix, now)
		if err != nil {
			return nil, err
		}
		w.Add(jobs[i].Name, r, jobs[i].After...)
		reqs = append(reqs, r)
	}
	return reqs, nil
}

// checkJobNames checks the count of jobs, their names (each once, well
// formed) and that none names a dependency twice, and returns their
// indexes by name.
func checkJobNames(jobs []WorkflowJobRequest) (map[string]int, error) {
	if len(jobs) == 0 {
		return nil, badRequest("jobs", "jobs must hold at least one job")
	}
	if len(jobs) > MaxWorkflowJobs {
		return nil, badRequest("jobs", "jobs holds %d jobs, the limit of one request is %d", len(jobs), MaxWorkflowJobs)
	}
	idx := make(map[string]int, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		field := fmt.Sprintf("jobs[%d].name", i)
		switch {
		case j.Name == "":
			return nil, badRequest(field, "job %d has no name: each job of a workflow is named", i)
		case j.Name != strings.TrimSpace(j.Name):
			return nil, badRequest(field, "job name %q starts or ends with white space", clip(j.Name))
		}
		if err := checkName(field, j.Name, store.MaxNodeName); err != nil {
			return nil, err
		}
		if k, dup := idx[j.Name]; dup {
			return nil, badRequest(field, "job name %q is used twice: by jobs[%d] and jobs[%d]", clip(j.Name), k, i)
		}
		idx[j.Name] = i
	}
	keys := map[string]int{}
	for i := range jobs {
		if k := jobs[i].IdempotencyKey; k != "" {
			if j, dup := keys[k]; dup {
				return nil, badRequest(fmt.Sprintf("jobs[%d].idempotency_key", i), "jobs[%d] and jobs[%d] have the same idempotency key %q", j, i, clip(k))
			}
			keys[k] = i
		}
	}
	for i := range jobs {
		seen := make(map[string]bool, len(jobs[i].After))
		for _, d := range jobs[i].After {
			if seen[d] {
				return nil, badRequest(fmt.Sprintf("jobs[%d].after", i), "job %q names %q twice in after", clip(jobs[i].Name), clip(d))
			}
			seen[d] = true
		}
	}
	return idx, nil
}

// WorkflowAddOf checks the jobs of POST /v1/workflows/{id}/jobs as
// WorkflowOf checks a workflow's, but for their dependencies on members
// of the workflow, which only the store knows: a duplicate, empty or
// bad name, a name given twice in after, a cycle among the jobs, or
// more than MaxWorkflowJobs jobs is an error naming the field at fault.
// It returns the jobs as a workflow to add (Client.AddToWorkflow) and
// their requests.
func WorkflowAddOf(in *WorkflowAddRequest, now time.Time) (*redrive.Workflow, []redrive.Request, error) {
	if _, err := checkJobNames(in.Jobs); err != nil {
		return nil, nil, err
	}
	nodes := make([]store.WorkflowNode, len(in.Jobs))
	for i := range in.Jobs {
		nodes[i] = store.WorkflowNode{Name: in.Jobs[i].Name, After: in.Jobs[i].After}
	}
	if _, err := store.CheckWorkflowAdd(nodes, nil); err != nil {
		return nil, nil, cycleError(err)
	}
	w := redrive.NewWorkflow("")
	reqs, err := addRequests(w, in.Jobs, now)
	if err != nil {
		return nil, nil, err
	}
	return w, reqs, nil
}

// memberRequest checks a workflow's job or callback as POST /v1/jobs
// checks a job, refusing the fields that make no sense in a workflow.
func memberRequest(in *EnqueueRequest, prefix string, now time.Time) (redrive.Request, error) {
	if in.IdempotencyKey != "" && !strings.HasPrefix(prefix, "jobs[") {
		return redrive.Request{}, badRequest(prefix+"idempotency_key", "a callback takes no idempotency key: give the workflow one (its idempotency_key)")
	}
	if in.ReturnExisting {
		return redrive.Request{}, badRequest(prefix+"return_existing", "a job of a workflow whose idempotency key is held is refused, never answered by the job holding it: return_existing does not apply")
	}
	return toRequest(in, prefix, now)
}

// memberField is the field of request i of WorkflowOf's requests: a
// job's (jobs[i].) or a callback's (on_success. and the others).
func memberField(in *WorkflowRequest, i int) string {
	if i < len(in.Jobs) {
		return fmt.Sprintf("jobs[%d].", i)
	}
	i -= len(in.Jobs)
	for _, cb := range []struct {
		name string
		in   *EnqueueRequest
	}{{"on_success", in.OnSuccess}, {"on_complete", in.OnComplete}, {"on_death", in.OnDeath}} {
		if cb.in == nil {
			continue
		}
		if i == 0 {
			return cb.name + "."
		}
		i--
	}
	return ""
}

// enqueueWorkflow answers POST /v1/workflows: 201 with the workflow and
// its Location, or 200 with the one holding its idempotency key.
func (a *api) enqueueWorkflow(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	var in WorkflowRequest
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := headerKey(r, &in.IdempotencyKey); err != nil {
		return err
	}
	wf, reqs, err := WorkflowOf(&in, time.Now())
	if err != nil {
		return err
	}
	// As POST /v1/jobs: a kind the live workers of its queue do not run
	// is refused, before anything is stored.
	if err := a.checkMemberKinds(r, reqs, func(i int) string { return memberField(&in, i) + "kind" }); err != nil {
		return err
	}
	got, err := a.client.EnqueueWorkflow(r.Context(), wf)
	if err != nil {
		if ke := keyConflict(err, in.Jobs); ke != nil {
			return ke
		}
		if errors.Is(err, redrive.ErrInvalid) {
			// A payload a kind's validator refused, or too large: the
			// message names the job.
			return &apiError{status: http.StatusBadRequest, code: "invalid", field: "jobs", msg: strings.TrimPrefix(err.Error(), "redrive: ")}
		}
		return err
	}
	status := http.StatusCreated
	if got.Existing {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", "/v1/workflows/"+strconv.FormatInt(got.ID, 10))
	}
	writeJSON(w, status, got)
	return nil
}

// WorkflowsOf checks a POST /v1/workflows/batch as the API does: each
// workflow as WorkflowOf checks one (its error's field prefixed with
// workflows[i].), at least one workflow, at most MaxWorkflowBatch, and
// at most MaxWorkflowJobs jobs together. It returns the workflows and,
// for each, its requests.
func WorkflowsOf(in *WorkflowBatchRequest, now time.Time) ([]*redrive.Workflow, [][]redrive.Request, error) {
	switch n := len(in.Workflows); {
	case n == 0:
		return nil, nil, badRequest("workflows", "workflows must hold at least one workflow")
	case n > MaxWorkflowBatch:
		return nil, nil, badRequest("workflows", "workflows holds %d workflows, the limit of one request is %d", n, MaxWorkflowBatch)
	}
	jobs := 0
	for i := range in.Workflows {
		if jobs += len(in.Workflows[i].Jobs); jobs > MaxWorkflowJobs {
			return nil, nil, badRequest(fmt.Sprintf("workflows[%d].jobs", i), "the workflows hold more than %d jobs together, the limit of one request", MaxWorkflowJobs)
		}
	}
	ws := make([]*redrive.Workflow, len(in.Workflows))
	reqs := make([][]redrive.Request, len(in.Workflows))
	for i := range in.Workflows {
		w, r, err := WorkflowOf(&in.Workflows[i], now)
		if err != nil {
			return nil, nil, inWorkflow(err, i)
		}
		ws[i], reqs[i] = w, r
	}
	return ws, reqs, nil
}

// inWorkflow qualifies err, an *apiError about workflow i of a batch,
// with the workflow: its field under workflows[i]., its message
// prefixed. Another error is returned as it is.
func inWorkflow(err error, i int) error {
	ae, ok := err.(*apiError)
	if !ok {
		return err
	}
	e := *ae
	e.field = fmt.Sprintf("workflows[%d]", i)
	if ae.field != "" {
		e.field += "." + ae.field
	}
	e.msg = fmt.Sprintf("workflow %d: %s", i, ae.msg)
	return &e
}

// enqueueWorkflows answers POST /v1/workflows/batch: 201 with the
// workflows, in the request's order, each created or, its key held, the
// one holding it (existing true).
func (a *api) enqueueWorkflows(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	if r.Header.Get("Idempotency-Key") != "" {
		return badRequest("Idempotency-Key", "a batch takes no Idempotency-Key header: give each workflow its idempotency_key")
	}
	var in WorkflowBatchRequest
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	ws, reqs, err := WorkflowsOf(&in, time.Now())
	if err != nil {
		return err
	}
	// As POST /v1/workflows: a kind the live workers of its queue do not
	// run is refused, before anything is stored.
	var all []redrive.Request
	var fields []string
	for i := range reqs {
		all = append(all, reqs[i]...)
		for k := range reqs[i] {
			fields = append(fields, fmt.Sprintf("workflows[%d].%skind", i, memberField(&in.Workflows[i], k)))
		}
	}
	if err := a.checkMemberKinds(r, all, func(i int) string { return fields[i] }); err != nil {
		return err
	}
	got, err := a.client.EnqueueWorkflows(r.Context(), ws)
	if err != nil {
		be, ok := errors.AsType[*redrive.WorkflowBatchError](err)
		if !ok {
			return err
		}
		if ke := keyConflict(err, in.Workflows[be.Index].Jobs); ke != nil {
			return inWorkflow(ke, be.Index)
		}
		if errors.Is(err, redrive.ErrInvalid) {
			// A payload a kind's validator refused, too large, or a job's
			// key another workflow of the request takes: the message
			// names the job.
			return &apiError{status: http.StatusBadRequest, code: "invalid", field: fmt.Sprintf("workflows[%d].jobs", be.Index),
				msg: strings.TrimPrefix(err.Error(), "redrive: ")}
		}
		return err
	}
	writeJSON(w, http.StatusCreated, WorkflowBatch{Workflows: got})
	return nil
}

// checkMemberKinds refuses, as POST /v1/jobs does, a workflow's job of a
// kind the live workers of its queue do not run, before anything is
// stored: 400 unknown_kind naming field(i) of the i-th request.
func (a *api) checkMemberKinds(r *http.Request, reqs []redrive.Request, field func(i int) string) error {
	_, err := a.client.CheckKinds(r.Context(), reqs)
	var ke *redrive.KindError
	if err == nil || !errors.As(err, &ke) {
		return err
	}
	i := 0
	var re *redrive.RequestError
	if errors.As(err, &re) {
		i = re.Index
	}
	return &apiError{status: http.StatusBadRequest, code: "unknown_kind", field: field(i), msg: ke.Error()}
}

// addToWorkflow answers POST /v1/workflows/{id}/jobs: 201 with the
// workflow and its jobs once the jobs are added.
func (a *api) addToWorkflow(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	id, err := workflowID(r)
	if err != nil {
		return err
	}
	var in WorkflowAddRequest
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	wf, reqs, err := WorkflowAddOf(&in, time.Now())
	if err != nil {
		return err
	}
	if err := a.checkMemberKinds(r, reqs, func(i int) string { return fmt.Sprintf("jobs[%d].kind", i) }); err != nil {
		return err
	}
	got, err := a.client.AddToWorkflow(r.Context(), id, wf)
	if err != nil {
		return addError(err, id, &in)
	}
	writeJSON(w, http.StatusCreated, got)
	return nil
}

// addError words an error of Client.AddToWorkflow, naming the field at
// fault of in.
func addError(err error, id int64, in *WorkflowAddRequest) error {
	at := func(name, field string) string {
		for i := range in.Jobs {
			if in.Jobs[i].Name == name {
				return fmt.Sprintf("jobs[%d].%s", i, field)
			}
		}
		return "jobs"
	}
	if ke := keyConflict(err, in.Jobs); ke != nil {
		return ke
	}
	if ce, ok := errors.AsType[*redrive.WorkflowConflictError](err); ok {
		field := "id"
		if ce.Closed == "" {
			field = at(ce.Job, ce.Field)
		}
		return &apiError{status: http.StatusConflict, code: "conflict", field: field, msg: ce.Error()}
	}
	if we, ok := store.IsWorkflowError(err); ok {
		switch {
		case we.Taken != "":
			return badRequest(at(we.Taken, "name"), "%s", we.Problem)
		case len(we.Unknown) > 0:
			return badRequest(at(we.UnknownJobs[0], "after"), "after names no job of the request nor member of the workflow: %s", clip(strings.Join(we.Unknown, ", ")))
		}
		return cycleError(err)
	}
	if errors.Is(err, redrive.ErrInvalid) {
		return &apiError{status: http.StatusBadRequest, code: "invalid", field: "jobs", msg: strings.TrimPrefix(err.Error(), "redrive: ")}
	}
	return workflowNotFound(err, id)
}

// keyConflict is the 409 of a job of jobs whose idempotency key
// another job holds (a *WorkflowConflictError on its key), or nil.
func keyConflict(err error, jobs []WorkflowJobRequest) error {
	ce, ok := errors.AsType[*redrive.WorkflowConflictError](err)
	if !ok || ce.Field != "idempotency_key" {
		return nil
	}
	field := "jobs"
	for i := range jobs {
		if jobs[i].Name == ce.Job {
			field = fmt.Sprintf("jobs[%d].idempotency_key", i)
		}
	}
	return &apiError{status: http.StatusConflict, code: "idempotency_conflict", field: field, msg: ce.Error()}
}

// workflowID parses the {id} path value.
func workflowID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("id", "workflow id must be a positive integer, got %q", clip(s))
	}
	return id, nil
}

// workflowNotFound words ErrNotFound for a workflow id.
func workflowNotFound(err error, id int64) error {
	if errors.Is(err, redrive.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found", field: "id", msg: fmt.Sprintf("workflow %d not found", id)}
	}
	return err
}

// getWorkflow answers GET /v1/workflows/{id}: the workflow with its
// jobs' states and its counts.
func (a *api) getWorkflow(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	id, err := workflowID(r)
	if err != nil {
		return err
	}
	wf, err := a.client.GetWorkflow(r.Context(), id)
	if err != nil {
		return workflowNotFound(err, id)
	}
	writeJSON(w, http.StatusOK, wf)
	return nil
}

// listWorkflows answers GET /v1/workflows?limit=&before=: the
// workflows, newest first, without their jobs.
func (a *api) listWorkflows(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "limit", "before")
	if err != nil {
		return err
	}
	n, err := q.limit()
	if err != nil {
		return err
	}
	var before int64
	if s := q.get("before"); s != "" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
			return badRequest("before", "before must be a workflow id (a positive integer, the next of a page), got %q", clip(s))
		}
	}
	ws, next, err := a.client.ListWorkflows(r.Context(), before, n)
	if err != nil {
		return err
	}
	if ws == nil {
		ws = []*redrive.WorkflowInfo{}
	}
	out := WorkflowList{Workflows: ws}
	if next != 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// cancelWorkflow answers POST /v1/workflows/{id}/cancel: the workflow,
// canceled.
func (a *api) cancelWorkflow(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	id, err := workflowID(r)
	if err != nil {
		return err
	}
	if err := a.noBody(w, r); err != nil {
		return err
	}
	wf, err := a.client.CancelWorkflow(r.Context(), id)
	if err != nil {
		return workflowNotFound(err, id)
	}
	a.log.Info("workflow canceled", "workflow", id)
	writeJSON(w, http.StatusOK, wf)
	return nil
}

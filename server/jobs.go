package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/internal/summary"
	"github.com/redrivehq/redrive/internal/tracectx"
)

// EnqueueRequest is the body of POST /v1/jobs and one element of a batch.
// It is the type of package apiclient, the API's Go client.
type EnqueueRequest = apiclient.EnqueueRequest

// BatchRequest is the body of POST /v1/jobs/batch.
// It is the type of package apiclient, the API's Go client.
type BatchRequest = apiclient.BatchRequest

// maxDelay bounds a delay or how far in the future run_at may be.
const maxDelay = 10 * 365 * 24 * time.Hour

// RequestOf validates an enqueue request as POST /v1/jobs does and returns
// the engine's request, every field kept, run_at and delay read at now.
// The CLI working directly on a store enqueues with it, so that both paths
// mean the same by one request. An error names the field, as the API's 400
// does.
func RequestOf(in *EnqueueRequest, now time.Time) (redrive.Request, error) {
	return toRequest(in, "", now)
}

// toRequest validates an enqueue request; prefix qualifies field names.
func toRequest(in *EnqueueRequest, prefix string, now time.Time) (redrive.Request, error) {
	var r redrive.Request
	if in.Kind == "" {
		return r, badRequest(prefix+"kind", "kind is required")
	}
	for _, c := range []struct{ name, v string }{{"kind", in.Kind}, {"queue", in.Queue}, {"dependency", in.Dependency}} {
		if c.v == "" && c.name != "kind" {
			continue
		}
		if err := redrive.CheckName(c.name, c.v); err != nil {
			return r, &apiError{status: http.StatusBadRequest, code: "invalid", field: prefix + c.name,
				msg: strings.TrimPrefix(err.Error(), redrive.ErrInvalid.Error()+": ")}
		}
	}
	if err := checkName(prefix+"idempotency_key", in.IdempotencyKey, maxKey); err != nil {
		return r, err
	}
	r.Kind, r.Queue, r.IdempotencyKey, r.Dependency, r.NotReprocessable, r.ReturnExisting =
		in.Kind, in.Queue, in.IdempotencyKey, in.Dependency, in.NotReprocessable, in.ReturnExisting
	if len(in.Payload) > 0 {
		r.Payload = in.Payload
	}
	if in.RunAt != "" && in.Delay != "" {
		return r, badRequest(prefix+"delay", "set run_at or delay, not both")
	}
	if in.RunAt != "" {
		t, err := parseTime(prefix+"run_at", in.RunAt)
		if err != nil {
			return r, err
		}
		if t.Sub(now) > maxDelay {
			return r, badRequest(prefix+"run_at", "run_at is more than %d years ahead", int(maxDelay/(365*24*time.Hour)))
		}
		r.RunAt = t
	}
	if in.Delay != "" {
		d, err := time.ParseDuration(in.Delay)
		if err != nil || d < 0 || d > maxDelay {
			return r, badRequest(prefix+"delay", "delay must be a non-negative duration such as \"10s\" or \"1h30m\", at most %s, got %q", maxDelay, clip(in.Delay))
		}
		r.Delay = d
	}
	if in.MaxRetries != nil {
		if *in.MaxRetries < 0 || *in.MaxRetries > 1000 {
			return r, badRequest(prefix+"max_retries", "max_retries must be from 0 to 1000, got %d", *in.MaxRetries)
		}
		n := *in.MaxRetries
		r.MaxRetries = &n
	}
	if err := checkPriority(prefix, in.Priority); err != nil {
		return r, err
	}
	r.Priority = in.Priority
	return r, nil
}

// checkPriority refuses a priority out of range with 400 on the field
// priority (prefix qualifies it).
func checkPriority(prefix string, p int) error {
	if p < redrive.MinPriority || p > redrive.MaxPriority {
		return badRequest(prefix+"priority", "priority must be an integer from %d to %d, got %d", redrive.MinPriority, redrive.MaxPriority, p)
	}
	return nil
}

// setPriority changes a waiting job's priority: 409 for a job that
// no longer waits (running or finished), 404 for an unknown one.
func (a *api) setPriority(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var in apiclient.PriorityRequest
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Priority == nil {
		return badRequest("priority", "priority is required: an integer from %d to %d", redrive.MinPriority, redrive.MaxPriority)
	}
	if err := checkPriority("", *in.Priority); err != nil {
		return err
	}
	j, err := a.client.SetPriority(r.Context(), id, *in.Priority)
	if err != nil {
		if errors.Is(err, redrive.ErrConflict) {
			state := ""
			if cur, gerr := a.client.Get(r.Context(), id); gerr == nil {
				state = " (it is " + string(cur.State) + ")"
			}
			return &apiError{status: http.StatusConflict, code: "conflict",
				msg: fmt.Sprintf("job %d is not waiting%s: only a pending or scheduled job's priority can change", id, state)}
		}
		return notFound(err, id)
	}
	a.redactJob(j)
	writeJSON(w, http.StatusOK, j)
	return nil
}

// payloadError names the field of an invalid payload the client refused:
// too large for its MaxPayload (field), or refused by its kind's
// validator (the field the validator names, such as payload.url). In a
// batch the field is prefixed with the request's jobs[i].
func payloadError(err error, field string) error {
	if !errors.Is(err, redrive.ErrInvalid) || !strings.Contains(err.Error(), "payload") {
		return err
	}
	prefix := ""
	var re *redrive.RequestError
	if errors.As(err, &re) {
		prefix, field = fmt.Sprintf("jobs[%d].", re.Index), "payload"
	}
	var fe *redrive.FieldError
	if errors.As(err, &fe) {
		field = fe.Field
	}
	return &apiError{status: http.StatusBadRequest, code: "invalid", field: prefix + field, msg: err.Error()}
}

// headerKey takes the Idempotency-Key header, when sent, as the
// body's idempotency key *key: the two must agree when both are given.
func headerKey(r *http.Request, key *string) error {
	hk := r.Header.Get("Idempotency-Key")
	if hk == "" {
		return nil
	}
	if *key != "" && *key != hk {
		return badRequest("idempotency_key", "the Idempotency-Key header and the idempotency_key field differ")
	}
	*key = hk
	return nil
}

func (a *api) enqueue(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	var in EnqueueRequest
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := headerKey(r, &in.IdempotencyKey); err != nil {
		return err
	}
	req, err := toRequest(&in, "", time.Now())
	if err != nil {
		return err
	}
	jobs, err := a.client.EnqueueChecked(requestTrace(r), []redrive.Request{req})
	if err != nil {
		return enqueueError(err, "", "payload")
	}
	status := http.StatusCreated
	if jobs[0].Existing {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", "/v1/jobs/"+strconv.FormatInt(jobs[0].ID, 10))
	}
	a.redactJob(jobs[0])
	writeJSON(w, status, jobs[0])
	return nil
}

func (a *api) enqueueBatch(w http.ResponseWriter, r *http.Request) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	var in BatchRequest
	if err := a.decodeBody(w, r, &in); err != nil {
		return err
	}
	if len(in.Jobs) == 0 {
		return badRequest("jobs", "jobs must hold at least one job")
	}
	if len(in.Jobs) > MaxBatch {
		return badRequest("jobs", "jobs holds %d jobs, the limit of one batch is %d", len(in.Jobs), MaxBatch)
	}
	now := time.Now()
	reqs := make([]redrive.Request, len(in.Jobs))
	for i := range in.Jobs {
		req, err := toRequest(&in.Jobs[i], fmt.Sprintf("jobs[%d].", i), now)
		if err != nil {
			return err
		}
		reqs[i] = req
	}
	jobs, err := a.client.EnqueueChecked(requestTrace(r), reqs)
	if err != nil {
		var kc *redrive.KeyConflictError
		if errors.As(err, &kc) {
			// The other jobs were enqueued: say so with the error.
			e := enqueueError(err, fmt.Sprintf("jobs[%d].", kc.Conflicts[0].Index), "jobs").(*apiError)
			for _, j := range jobs {
				a.redactJob(j)
			}
			writeJSON(w, e.status, map[string]any{"error": errorDetail{Code: e.code, Message: e.msg, Field: e.field}, "jobs": jobs})
			return nil
		}
		return enqueueError(err, "jobs[0].", "jobs")
	}
	for _, j := range jobs {
		a.redactJob(j)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"jobs": jobs})
	return nil
}

// requestTrace returns the context of an enqueue, redrive or replay
// request r: r's, with the remote span context of its W3C traceparent and
// tracestate headers (read with OpenTelemetry's propagator), so that the
// enqueue's (or the operation's) span is their child and its jobs join
// the caller's trace. A traceparent that
// does not parse is ignored (the enqueue starts a new trace) and counted
// (redrive.MalformedTraceContexts, exported as
// redrive_trace_contexts_malformed_total), never refused.
func requestTrace(r *http.Request) context.Context {
	ctx := r.Context()
	parent := r.Header.Values(tracectx.Parent)
	if len(parent) == 0 {
		return ctx
	}
	if len(parent) > 1 || parent[0] == "" {
		// Two traceparent headers: the W3C rule is to ignore both. One
		// that is empty is malformed too, as on a broker message
		// (tracectx.FromHeaders).
		tracectx.Malformed.Add(1)
		return ctx
	}
	sc, _ := tracectx.Extract(parent[0], strings.Join(r.Header.Values(tracectx.State), ","))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// enqueueError answers an enqueue's error: a key held by a different job
// is 409 idempotency_conflict on the key (prefix qualifies it), a kind no
// live worker of the job's queue runs 400 unknown_kind on the kind (the
// refused request's in a batch: prefix is jobs[0]. for a batch of one),
// a payload too large 400 on field.
func enqueueError(err error, prefix, field string) error {
	var ke *redrive.KindError
	if errors.As(err, &ke) {
		var re *redrive.RequestError
		if errors.As(err, &re) {
			prefix = fmt.Sprintf("jobs[%d].", re.Index)
		}
		return &apiError{status: http.StatusBadRequest, code: "unknown_kind", field: prefix + "kind", msg: ke.Error()}
	}
	var kc *redrive.KeyConflictError
	if errors.As(err, &kc) {
		c := kc.Conflicts[0]
		return &apiError{status: http.StatusConflict, code: "idempotency_conflict", field: prefix + "idempotency_key",
			msg: fmt.Sprintf("idempotency key %q is held by job %d, whose %s differs from this request's; use another key, "+
				"or set return_existing to get that job", c.Key, c.Job.ID, c.Field)}
	}
	return payloadError(err, field)
}

// pathID parses the {id} path value.
func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("id", "job id must be a positive integer, got %q", clip(s))
	}
	return id, nil
}

func (a *api) getJob(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, revealParam)
	if err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	reveal, err := a.reveal(r, q, "GET /v1/jobs/{id}")
	if err != nil {
		return err
	}
	j, err := a.client.Get(r.Context(), id)
	if err != nil {
		return notFound(err, id)
	}
	j.Summary = summary.Of(j.Kind, j.Payload)
	if !reveal {
		a.redactJob(j)
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// notFound words ErrNotFound for a job id.
func notFound(err error, id int64) error {
	if errors.Is(err, redrive.ErrNotFound) {
		return &apiError{status: http.StatusNotFound, code: "not_found", field: "id", msg: fmt.Sprintf("job %d not found", id)}
	}
	return err
}

// cancelJob cancels the job of the path (jobAction). A dead job is
// canceled by an admin only: canceled, it leaves the DLQ without running
// again, as a purge (admin) takes it out, and what operate may do to a
// dead job is redrive it (the bulk cancels take no dead job either). An
// operate token gets 403 naming the admin role.
func (a *api) cancelJob(w http.ResponseWriter, r *http.Request) error {
	cancel := a.client.Cancel
	if p := principalOf(r.Context()); p.role < RoleAdmin {
		cancel = func(ctx context.Context, id int64) (*redrive.Job, error) {
			j, err := a.client.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			if j.State == redrive.Dead {
				return nil, forbidden(p, RoleAdmin, fmt.Sprintf("canceling job %d, a dead job (it would leave the DLQ without running, as a purge takes it out; operate redrives dead jobs)", id))
			}
			return a.client.Cancel(ctx, id)
		}
	}
	return a.jobAction(w, r, cancel, func(id int64, state string) string {
		return fmt.Sprintf("job %d cannot be canceled%s", id, state)
	})
}

// runNow makes a scheduled job (delayed, or waiting for a retry) due at
// once: 200 with the job (a pending job as it is), 409 for a job that
// does not wait, 404 for an unknown one.
func (a *api) runNow(w http.ResponseWriter, r *http.Request) error {
	return a.jobAction(w, r, a.client.RunNow, func(id int64, state string) string {
		return fmt.Sprintf("job %d is not waiting%s: only a scheduled job (delayed, or waiting for a retry) can run now", id, state)
	})
}

// jobAction answers a POST that acts on the job of the path and takes no
// body: 200 with the job act returns (with its summary), 409 with the
// message conflict words (given the job's state as " (it is S)", or ""),
// 404 for an unknown job. A body is refused rather than ignored.
func (a *api) jobAction(w http.ResponseWriter, r *http.Request, act func(context.Context, int64) (*redrive.Job, error),
	conflict func(id int64, state string) string) error {
	if _, err := newQuery(r); err != nil {
		return err
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if r.ContentLength > 0 {
		var empty struct{}
		if err := a.decodeBody(w, r, &empty); err != nil {
			return err
		}
	}
	j, err := act(r.Context(), id)
	if err != nil {
		if errors.Is(err, redrive.ErrConflict) {
			state := ""
			if cur, gerr := a.client.Get(r.Context(), id); gerr == nil {
				state = " (it is " + string(cur.State) + ")"
			}
			return &apiError{status: http.StatusConflict, code: "conflict", msg: conflict(id, state)}
		}
		return notFound(err, id)
	}
	j.Summary = summary.Of(j.Kind, j.Payload)
	a.redactJob(j)
	writeJSON(w, http.StatusOK, j)
	return nil
}

// listResponse is a page of jobs; Next is "" on the last page.
type listResponse struct {
	Jobs []listedJob `json:"jobs"`
	Next string      `json:"next"`
}

// listedJob is a job as a listing shows it: with its summary and, unless
// the client asked for it (history=true), without its history.
type listedJob struct {
	*redrive.Job
	// History hides the job's: nil leaves it out (a pointer, as
	// omitempty would drop an empty slice too).
	History *[]redrive.Event `json:"history,omitempty"`
}

// listParams are the query parameters of a listing besides its filter.
var listParams = []string{"cursor", "limit", "match", "history", revealParam}

func (a *api) listJobs(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, append([]string{"state"}, append(listParams, readParams...)...)...)
	if err != nil {
		return err
	}
	return a.list(w, r, q, "GET /v1/jobs")
}

// list answers a listing of the route pattern; GET /v1/dlq restricts it
// to the DLQ.
func (a *api) list(w http.ResponseWriter, r *http.Request, q *query, pattern string) error {
	f, err := q.filter()
	if err != nil {
		return err
	}
	if pattern == "GET /v1/dlq" {
		f.States = []redrive.State{redrive.Dead}
	}
	if err := q.match(&f); err != nil {
		return err
	}
	history, err := q.parseBool("history")
	if err != nil {
		return err
	}
	p, err := q.page(f)
	if err != nil {
		return err
	}
	reveal, err := a.reveal(r, q, pattern)
	if err != nil {
		return err
	}
	res, err := a.client.List(r.Context(), f, p)
	if err != nil {
		return err
	}
	out := listResponse{Jobs: make([]listedJob, len(res.Jobs)), Next: res.Next}
	for i, j := range res.Jobs {
		j.Summary = summary.Of(j.Kind, j.Payload)
		if !reveal {
			a.redactJob(j)
		}
		out.Jobs[i] = listedJob{Job: j}
		if history {
			h := j.History
			if h == nil {
				h = []redrive.Event{}
			}
			out.Jobs[i].History = &h
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// isNull reports whether raw JSON is absent or the literal null.
func isNull(b json.RawMessage) bool {
	return len(b) == 0 || bytes.Equal(bytes.TrimSpace(b), []byte("null"))
}

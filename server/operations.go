package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/store"
)

// OperationKind says what an operation does.
type OperationKind = redrive.OperationKind

// The kinds of operations.
const (
	// OperationRedrive is a bulk redrive (POST /v1/dlq/redrive).
	OperationRedrive OperationKind = redrive.OperationRedrive
	// OperationPurge is a purge (DELETE /v1/dlq).
	OperationPurge OperationKind = redrive.OperationPurge
	// OperationReplay is a replay (POST /v1/replay).
	OperationReplay OperationKind = redrive.OperationReplay
	// OperationExport is a folder export (POST /v1/dlq/export).
	OperationExport OperationKind = redrive.OperationExport
	// OperationCancel is a bulk cancel of pending and scheduled jobs
	// (POST /v1/jobs/cancel).
	OperationCancel OperationKind = redrive.OperationCancel
)

// OperationState is where an operation stands.
type OperationState = redrive.OperationState

// The states of an operation. Pending, running and paused change; the
// others are final.
const (
	// OperationPending: waiting for a worker to run it. The API runs
	// none itself: the worker that leads the fleet (serve runs one)
	// claims it within its poll interval; without any worker on the
	// store it stays pending.
	OperationPending  OperationState = redrive.OperationPending
	OperationRunning  OperationState = redrive.OperationRunning
	OperationPaused   OperationState = redrive.OperationPaused
	OperationDone     OperationState = redrive.OperationDone
	OperationFailed   OperationState = redrive.OperationFailed
	OperationCanceled OperationState = redrive.OperationCanceled
)

// Operation is a durable bulk operation, as GET /v1/operations/{id}
// answers it.
// It is the type of package apiclient, the API's Go client.
type Operation = apiclient.Operation

// operationBody is the body of every answer about one operation.
type operationBody = apiclient.OperationBody

// Limits of the operations.
const (
	// DefaultMaxOperations is the default bound on the unfinished
	// operations (pending, running or paused) at once
	// (Options.MaxOperations).
	DefaultMaxOperations = 8
	// defaultOperationList is how many operations GET /v1/operations
	// lists without a limit.
	defaultOperationList = 100
)

// errServerClosed is why a closed server starts no operation.
var errServerClosed = errors.New("the server is shutting down")

// operations starts the API's operations in the store, bounds them, and
// reads them back.
type operations struct {
	client    *redrive.Client
	base      context.Context
	stop      context.CancelCauseFunc
	log       *slog.Logger
	maxActive int
	exportDir string
	mu        sync.Mutex // serializes the bound's check and the start
}

func newOperations(parent context.Context, maxActive int, log *slog.Logger) *operations {
	if parent == nil {
		parent = context.Background()
	}
	base, stop := context.WithCancelCause(parent)
	return &operations{base: base, stop: stop, log: log, maxActive: maxActive}
}

// OperationOf renders a stored operation as the API answers it (the CLI
// shows operations read from the store directly in this form too).
func OperationOf(op *redrive.Operation) Operation { return toOperation(op) }

// toOperation renders a stored operation for the API.
func toOperation(op *redrive.Operation) Operation {
	p := op.Progress
	filter := json.RawMessage(`{}`)
	if b, err := json.Marshal(op.Params); err == nil {
		var v struct {
			Filter json.RawMessage `json:"filter"`
		}
		if json.Unmarshal(b, &v) == nil && len(v.Filter) > 0 {
			filter = v.Filter
		}
	}
	out := Operation{ID: op.ID, Kind: op.Kind, State: op.State, Matched: max(p.Matched, 0), Processed: p.Processed,
		Replayed: p.Replayed, Redriven: p.Redriven, Refused: p.Refused, Skipped: p.Skipped, Purged: p.Purged,
		Unblocks: p.Unblocks, Exported: p.Exported, Canceled: p.Canceled, Rekeyed: p.Rekeyed, Failed: p.Failed, RefusedIDs: slices.Clone(p.RefusedIDs), Error: op.Error,
		Rate: op.Params.Rate, Batch: op.Params.Batch, Note: op.Params.Note, Filter: filter, Dir: op.Params.Dir,
		Cursor: op.Cursor, Worker: op.Worker, StartedAt: op.CreatedAt, RunAt: op.StartedAt, UpdatedAt: op.UpdatedAt,
		FinishedAt: op.FinishedAt}
	if out.RefusedIDs == nil {
		out.RefusedIDs = []int64{}
	}
	return out
}

// start stores a new operation, unless the server is closing or too many
// are unfinished.
func (o *operations) start(ctx context.Context, r redrive.OperationRequest) (*redrive.Operation, error) {
	if o.client == nil {
		return nil, errors.New("server: no client")
	}
	if o.base.Err() != nil {
		return nil, &apiError{status: http.StatusServiceUnavailable, code: "shutting_down",
			msg: "the server is shutting down and starts no more operations"}
	}
	if err := o.client.ValidateOperation(r); err != nil {
		return nil, payloadError(err, "payload")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	active, err := o.active(ctx)
	if err != nil {
		return nil, err
	}
	if active >= o.maxActive {
		return nil, &apiError{status: http.StatusTooManyRequests, code: "too_many_operations",
			msg: fmt.Sprintf("%d operations are unfinished (pending, running or paused), the limit is %d: wait for one to end (GET /v1/operations) or cancel one", active, o.maxActive)}
	}
	// A redrive or a replay of jobs no live worker of their queue runs is
	// refused, as an enqueue of them is.
	r.CheckKinds = true
	op, err := o.client.StartOperation(ctx, r)
	if ke, ok := errors.AsType[*redrive.OperationKindError](err); ok {
		field := "filter.kind"
		if len(r.IDs) > 0 {
			field = "ids"
		}
		return nil, &apiError{status: http.StatusBadRequest, code: "unknown_kind", field: field, msg: ke.Error()}
	}
	if err != nil {
		return nil, payloadError(err, "payload")
	}
	return op, nil
}

// active counts the unfinished operations among the newest thousand.
func (o *operations) active(ctx context.Context) (int, error) {
	ops, _, err := o.client.Operations(ctx, "", store.MaxPageSize)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, op := range ops {
		if !op.State.Final() {
			n++
		}
	}
	return n, nil
}

// close refuses new operations. The operations themselves live in the
// store and run in workers: they go on.
func (o *operations) close() { o.stop(errServerClosed) }

// wait polls the operation until it ends, ctx does or the server
// closes, and returns its last reading.
func (o *operations) wait(reqCtx context.Context, id string) (*redrive.Operation, error) {
	ctx, cancel := context.WithCancel(reqCtx)
	defer cancel()
	stop := context.AfterFunc(o.base, cancel)
	defer stop()
	op, err := o.client.WaitOperation(ctx, id, 50*time.Millisecond, nil)
	if err != nil && o.base.Err() != nil {
		// The server closes: answer with the operation as it stands.
		return o.client.Operation(reqCtx, id)
	}
	return op, err
}

// startBody reads the request of a handler that starts an operation from a
// JSON body: the body into in, and the wait query parameter (answer once
// the operation ends), the only one it takes.
func (a *api) startBody(w http.ResponseWriter, r *http.Request, in any) (waitEnd bool, err error) {
	q, err := newQuery(r, "wait")
	if err != nil {
		return false, err
	}
	if waitEnd, err = q.parseBool("wait"); err != nil {
		return false, err
	}
	return waitEnd, a.decodeBody(w, r, in)
}

// answerStarted answers a started operation: 202 with Location, or with
// wait, 200 with its final state once it ends (or its state when the
// server closes first).
func (a *api) answerStarted(w http.ResponseWriter, r *http.Request, op *redrive.Operation, waitEnd bool) error {
	if waitEnd {
		a.auditStarted(r, op)
		final, err := a.ops.wait(r.Context(), op.ID)
		// The wait may have outlasted the deadline set when the request
		// came: the answer gets one of its own.
		a.extendWrite(w)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, operationBody{Operation: toOperation(final)})
		return nil
	}
	w.Header().Set("Location", "/v1/operations/"+op.ID)
	writeJSON(w, http.StatusAccepted, operationBody{Operation: toOperation(op)})
	return nil
}

// parseBool parses an optional true/false query parameter.
func (q *query) parseBool(k string) (bool, error) {
	switch v := q.get(k); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, badRequest(k, "%s must be true or false, got %q", k, clip(v))
	}
}

// parseBatch checks an operation's batch size (0: the default).
func parseBatch(n int) error {
	if n < 0 || n > store.MaxPageSize {
		return badRequest("batch", "batch must be from 1 to %d jobs (0 or absent: %d)", store.MaxPageSize, redrive.DefaultOperationBatch)
	}
	return nil
}

// operationNotFound is the answer for an unknown operation id.
func operationNotFound(id string) error {
	return &apiError{status: http.StatusNotFound, code: "not_found", field: "id",
		msg: fmt.Sprintf("operation %q not found", clip(id))}
}

func (a *api) listOperations(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "limit", "before")
	if err != nil {
		return err
	}
	n, err := q.limit()
	if err != nil {
		return err
	}
	if n == 0 {
		n = defaultOperationList
	}
	before := q.get("before")
	if before != "" && !store.ValidOperationID(before) {
		return badRequest("before", "before must be an operation id (op_ and 24 hexadecimal digits), got %q", clip(before))
	}
	ops, next, err := a.client.Operations(r.Context(), before, n)
	if err != nil {
		if errors.Is(err, redrive.ErrInvalid) {
			return badRequest("before", "%s", err.Error())
		}
		return err
	}
	out := make([]Operation, len(ops))
	for i, op := range ops {
		out[i] = toOperation(op)
	}
	body := map[string]any{"operations": out}
	if next != "" {
		body["next"] = next
	}
	writeJSON(w, http.StatusOK, body)
	return nil
}

// pathOperationID returns the {id} of a request that takes no query
// parameters.
func pathOperationID(r *http.Request) (string, error) {
	if _, err := newQuery(r); err != nil {
		return "", err
	}
	id := r.PathValue("id")
	if !store.ValidOperationID(id) {
		return "", operationNotFound(id)
	}
	return id, nil
}

// operationResult answers one operation, or the error of reading or
// changing it.
func (a *api) operationResult(w http.ResponseWriter, r *http.Request, id string, op *redrive.Operation, err error) error {
	switch {
	case errors.Is(err, redrive.ErrNotFound):
		return operationNotFound(id)
	case errors.Is(err, redrive.ErrConflict):
		msg := fmt.Sprintf("operation %s is no longer in a state that allows this", id)
		if cur, gerr := a.client.Operation(r.Context(), id); gerr == nil {
			msg = fmt.Sprintf("operation %s is %s: this does not apply to it", id, cur.State)
		}
		return &apiError{status: http.StatusConflict, code: "conflict", msg: msg}
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, operationBody{Operation: toOperation(op)})
	return nil
}

// onOperation serves a request about the operation of the path's id with
// act (the Client's Operation, or one of its actions), answering the
// operation as act leaves it.
func (a *api) onOperation(act func(context.Context, string) (*redrive.Operation, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		id, err := pathOperationID(r)
		if err != nil {
			return err
		}
		op, err := act(r.Context(), id)
		return a.operationResult(w, r, id, op, err)
	}
}

// ReplayFilterBody selects the jobs of a replay.
// It is the type of package apiclient, the API's Go client.
type ReplayFilterBody = apiclient.ReplayFilterBody

// ReplayBody is the body of POST /v1/replay.
// It is the type of package apiclient, the API's Go client.
type ReplayBody = apiclient.ReplayBody

// toStateFilter validates the filter of a replay or a cancel body: the
// DLQ filter's fields, states and a payload match.
func toStateFilter(in *ReplayFilterBody) (redrive.Filter, error) {
	f, err := toFilter(in.FilterBody, "filter.")
	if err != nil {
		return f, err
	}
	for _, s := range in.States {
		st, err := parseState("filter.states", s)
		if err != nil {
			return f, err
		}
		f.States = append(f.States, st)
	}
	if err := checkName("filter.payload_field", in.PayloadField, maxName); err != nil {
		return f, err
	}
	f.PayloadField = in.PayloadField
	if !isNull(in.PayloadValue) || in.PayloadField != "" {
		f.PayloadValue = in.PayloadValue
		if len(f.PayloadValue) == 0 {
			return f, badRequest("filter.payload_value", "payload_field needs a payload_value (a JSON string, number, boolean or null)")
		}
	}
	if err := store.CheckPayloadMatch(f); err != nil {
		field := "filter.payload_value"
		if _, perr := store.PayloadPath(f.PayloadField); f.PayloadField == "" || perr != nil {
			field = "filter.payload_field"
		}
		return f, badRequest(field, "%s", trimInvalid(err))
	}
	return f, nil
}

// toReplayRequest validates a replay body.
func toReplayRequest(in ReplayBody) (redrive.OperationRequest, error) {
	req := redrive.OperationRequest{Kind: OperationReplay, Batch: in.Batch, Rate: in.Rate, Note: in.Note}
	if in.Filter != nil {
		f, err := toStateFilter(in.Filter)
		if err != nil {
			return req, err
		}
		req.Filter = f
	}
	if emptyFilter(req.Filter) && req.Filter.PayloadField == "" && !in.All {
		return req, &apiError{status: http.StatusBadRequest, code: "filter_required", field: "filter",
			msg: "the filter is empty and would replay every job; narrow it or set \"all\": true"}
	}
	if err := parseBatch(in.Batch); err != nil {
		return req, err
	}
	if err := parseRate(in.Rate); err != nil {
		return req, err
	}
	if err := checkName("note", in.Note, MaxNote); err != nil {
		return req, err
	}
	return req, nil
}

// trimInvalid is an ErrInvalid message without its "invalid request: "
// prefix.
func trimInvalid(err error) string {
	s := err.Error()
	p := redrive.ErrInvalid.Error() + ": "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// replay starts a replay (POST /v1/replay[?wait=true]).
func (a *api) replay(w http.ResponseWriter, r *http.Request) error {
	return startWith(a, w, r, toReplayRequest)
}

// startWith starts the operation of a route whose body B request turns
// into an operation request, and answers as answerStarted does.
func startWith[B any](a *api, w http.ResponseWriter, r *http.Request, request func(B) (redrive.OperationRequest, error)) error {
	var in B
	waitEnd, err := a.startBody(w, r, &in)
	if err != nil {
		return err
	}
	req, err := request(in)
	if err != nil {
		return err
	}
	// In the request's trace: a replay's span is a child of its
	// traceparent's.
	op, err := a.ops.start(requestTrace(r), req)
	if err != nil {
		return err
	}
	return a.answerStarted(w, r, op, waitEnd)
}

// CancelBody is the body of POST /v1/jobs/cancel.
// It is the type of package apiclient, the API's Go client.
type CancelBody = apiclient.CancelBody

// toCancelRequest validates a cancel body.
func toCancelRequest(in CancelBody) (redrive.OperationRequest, error) {
	req := redrive.OperationRequest{Kind: OperationCancel, Batch: in.Batch, Rate: in.Rate, Note: in.Note}
	switch {
	case len(in.IDs) > 0 && in.Filter != nil:
		return req, badRequest("filter", "give ids or filter, not both")
	case len(in.IDs) > 0:
		if in.All {
			return req, badRequest("all", "all applies to a filter, not to ids")
		}
		if len(in.IDs) > MaxRedriveIDs {
			return req, badRequest("ids", "ids holds %d ids, the limit is %d; cancel by filter instead", len(in.IDs), MaxRedriveIDs)
		}
		for _, id := range in.IDs {
			if id <= 0 {
				return req, badRequest("ids", "job ids must be positive, got %d", id)
			}
		}
		req.IDs = in.IDs
	case in.Filter != nil:
		f, err := toStateFilter(in.Filter)
		if err != nil {
			return req, err
		}
		for _, st := range f.States {
			if st != redrive.Pending && st != redrive.Scheduled {
				return req, badRequest("filter.states", "a bulk cancel selects pending and scheduled jobs only, not %s ones (cancel a running job by itself: POST /v1/jobs/{id}/cancel)", st)
			}
		}
		if emptyFilter(f) && f.PayloadField == "" && !in.All {
			return req, &apiError{status: http.StatusBadRequest, code: "filter_required", field: "filter",
				msg: "the filter is empty and would cancel every pending and scheduled job; narrow it or set \"all\": true"}
		}
		req.Filter = f
	case in.All:
		// Every pending and scheduled job.
	default:
		return req, &apiError{status: http.StatusBadRequest, code: "filter_required", field: "ids",
			msg: "say which jobs to cancel: ids, a filter, or \"all\": true"}
	}
	if err := parseBatch(in.Batch); err != nil {
		return req, err
	}
	if err := parseRate(in.Rate); err != nil {
		return req, err
	}
	if err := checkName("note", in.Note, MaxNote); err != nil {
		return req, err
	}
	return req, nil
}

// cancelJobs starts a bulk cancel (POST /v1/jobs/cancel[?wait=true]).
func (a *api) cancelJobs(w http.ResponseWriter, r *http.Request) error {
	return startWith(a, w, r, toCancelRequest)
}

// ExportBody is the body of POST /v1/dlq/export.
// It is the type of package apiclient, the API's Go client.
type ExportBody = apiclient.ExportBody

// exportDead starts a folder export (POST /v1/dlq/export[?wait=true]).
func (a *api) exportDead(w http.ResponseWriter, r *http.Request) error {
	var in ExportBody
	waitEnd, err := a.startBody(w, r, &in)
	if err != nil {
		return err
	}
	if a.ops.exportDir == "" {
		return &apiError{status: http.StatusForbidden, code: "export_disabled", field: "dir",
			msg: "this server writes no folders: start serve with --export-dir DIR to allow exports under DIR (or stream GET /v1/dlq/export)"}
	}
	if err := checkName("dir", in.Dir, maxQueryValue); err != nil {
		return err
	}
	if in.Dir == "" || !filepath.IsLocal(in.Dir) {
		return badRequest("dir", "dir must be a relative folder under the server's export folder, without \"..\", got %q", clip(in.Dir))
	}
	if p := principalOf(r.Context()); in.Decrypt && p.role < RoleAdmin {
		return forbidden(p, RoleAdmin, "exporting plaintext payloads (decrypt)")
	}
	// A decrypt is recorded with the request (the audit entry's target
	// holds the body, "decrypt": true).
	req := redrive.OperationRequest{Kind: OperationExport, Batch: in.Batch, Dir: filepath.Join(a.ops.exportDir, in.Dir),
		Root: a.ops.exportDir, Decrypt: in.Decrypt}
	if in.Filter != nil {
		f, err := toFilter(*in.Filter, "filter.")
		if err != nil {
			return err
		}
		req.Filter = f
	}
	if emptyFilter(req.Filter) && !in.All {
		return &apiError{status: http.StatusBadRequest, code: "filter_required", field: "filter",
			msg: "the filter is empty and would export every dead job; narrow it or set \"all\": true"}
	}
	if err := parseBatch(in.Batch); err != nil {
		return err
	}
	op, err := a.ops.start(r.Context(), req)
	if err != nil {
		return err
	}
	return a.answerStarted(w, r, op, waitEnd)
}

package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/store"
)

// OperationKind says what an operation does.
type OperationKind string

// The kinds of operations.
const (
	// OperationRedrive is a bulk redrive (POST /v1/dlq/redrive).
	OperationRedrive OperationKind = "redrive"
	// OperationPurge is a purge (DELETE /v1/dlq).
	OperationPurge OperationKind = "purge"
)

// OperationState is where an operation stands.
type OperationState string

// The states of an operation. Only running changes; the others are final.
const (
	OperationRunning  OperationState = "running"
	OperationDone     OperationState = "done"
	OperationFailed   OperationState = "failed"
	OperationCanceled OperationState = "canceled"
)

// Operation is a bulk redrive or a purge the API runs in the background,
// as GET /v1/operations/{id} answers it. Every field is always present,
// so a dashboard can poll it and draw a progress bar: Processed of
// Matched.
type Operation struct {
	// ID is "op_" and 24 hexadecimal digits.
	ID    string         `json:"id"`
	Kind  OperationKind  `json:"kind"`
	State OperationState `json:"state"`
	// Matched is how many dead jobs the selection held when the
	// operation counted it, at its start (0 until then). Jobs dying
	// meanwhile may make Processed end above it.
	Matched int64 `json:"matched"`
	// Processed is how many jobs the operation has handled so far:
	// Redriven + Refused + Skipped for a redrive, Purged for a purge.
	Processed int64 `json:"processed"`
	Redriven  int64 `json:"redriven"`
	// Refused counts jobs marked not reprocessable (a redrive).
	Refused int64 `json:"refused"`
	// Skipped counts jobs that were gone or no longer dead (a redrive).
	Skipped int64 `json:"skipped"`
	Purged  int64 `json:"purged"`
	// RefusedIDs are the ids of the refused jobs (the first 1000).
	RefusedIDs []int64 `json:"refused_ids"`
	// Error says why the operation failed or was canceled ("" otherwise).
	Error string `json:"error"`
	// Rate is the redrive's bound in jobs per second (0: none).
	Rate float64 `json:"rate"`
	// Note is the redrive's note.
	Note       string     `json:"note"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// operationBody is the body of every answer about one operation.
type operationBody struct {
	Operation Operation `json:"operation"`
}

// Limits of the operations registry.
const (
	// DefaultMaxOperations is the default bound on the operations running
	// at once (Options.MaxOperations).
	DefaultMaxOperations = 8
	// OperationRetention is how long a finished operation stays readable.
	OperationRetention = time.Hour
	// MaxKeptOperations bounds the operations kept: beyond it, the oldest
	// finished ones are forgotten before their hour is up.
	MaxKeptOperations = 1000
	// defaultOperationList is how many operations GET /v1/operations
	// lists without a limit.
	defaultOperationList = 100
)

// errCanceledByRequest is the cancel cause of DELETE /v1/operations/{id}.
var errCanceledByRequest = errors.New("canceled by DELETE /v1/operations/{id}")

// errServerClosed is the cancel cause of Server.Close.
var errServerClosed = errors.New("canceled: the server is shutting down")

// operation is one entry of the registry; op is guarded by the
// registry's mutex.
type operation struct {
	op     Operation
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// operations is the in-memory registry of the API's operations.
type operations struct {
	base       context.Context
	stop       context.CancelCauseFunc
	log        *slog.Logger
	maxRunning int
	keep       time.Duration
	maxKept    int
	now        func() time.Time

	mu      sync.Mutex
	byID    map[string]*operation
	order   []*operation // oldest first
	running int
	wg      sync.WaitGroup
}

func newOperations(parent context.Context, maxRunning int, log *slog.Logger) *operations {
	if parent == nil {
		parent = context.Background()
	}
	base, stop := context.WithCancelCause(parent)
	return &operations{base: base, stop: stop, log: log, maxRunning: maxRunning, keep: OperationRetention,
		maxKept: MaxKeptOperations, now: time.Now, byID: map[string]*operation{}}
}

// start registers an operation and runs it on its own goroutine, on a
// context detached from the request. run reports progress with update.
func (o *operations) start(init Operation, run func(ctx context.Context, update func(func(*Operation))) error) (*operation, error) {
	id, err := newOperationID()
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	if o.base.Err() != nil {
		o.mu.Unlock()
		return nil, &apiError{status: http.StatusServiceUnavailable, code: "shutting_down",
			msg: "the server is shutting down and starts no more operations"}
	}
	if running := o.running; running >= o.maxRunning {
		o.mu.Unlock()
		return nil, &apiError{status: http.StatusTooManyRequests, code: "too_many_operations",
			msg: fmt.Sprintf("%d operations are running, the limit is %d: wait for one to end (GET /v1/operations) or cancel one", running, o.maxRunning)}
	}
	o.pruneLocked()
	ctx, cancel := context.WithCancelCause(o.base)
	init.ID = id
	init.State = OperationRunning
	init.StartedAt = o.now().UTC()
	init.RefusedIDs = []int64{}
	op := &operation{op: init, cancel: cancel, done: make(chan struct{})}
	o.byID[id] = op
	o.order = append(o.order, op)
	o.running++
	o.wg.Add(1)
	o.mu.Unlock()
	o.log.Info("operation started", "operation", id, "kind", init.Kind, "rate", init.Rate, "note", init.Note)

	go func() {
		defer o.wg.Done()
		update := func(f func(*Operation)) {
			o.mu.Lock()
			f(&op.op)
			o.mu.Unlock()
		}
		err := runRecovered(ctx, update, run, o.log)
		o.finish(op, ctx, err)
		cancel(nil)
	}()
	return op, nil
}

// runRecovered runs run, turning a panic into an error (logged with its
// stack) so that one operation cannot bring the server down.
func runRecovered(ctx context.Context, update func(func(*Operation)), run func(context.Context, func(func(*Operation))) error, log *slog.Logger) (err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("operation panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("operation panicked: %v", v)
		}
	}()
	return run(ctx, update)
}

// finish records how run ended.
func (o *operations) finish(op *operation, ctx context.Context, err error) {
	o.mu.Lock()
	now := o.now().UTC()
	op.op.FinishedAt = &now
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		op.op.State = OperationDone
	case cause != nil && (errors.Is(err, context.Canceled) || errors.Is(err, cause)):
		op.op.State = OperationCanceled
		op.op.Error = errServerClosed.Error()
		if errors.Is(cause, errCanceledByRequest) {
			op.op.Error = "canceled by DELETE /v1/operations/" + op.op.ID
		}
	default:
		op.op.State = OperationFailed
		op.op.Error = publicError(err)
	}
	o.running--
	snap := op.snapshot()
	o.mu.Unlock()
	close(op.done)
	attrs := []any{"operation", snap.ID, "kind", snap.Kind, "state", snap.State, "matched", snap.Matched,
		"processed", snap.Processed, "duration", now.Sub(snap.StartedAt).String()}
	if snap.State == OperationFailed {
		o.log.Error("operation failed", append(attrs, "err", err)...)
	} else {
		o.log.Info("operation ended", attrs...)
	}
}

// publicError words an operation's failure for API clients, in the
// API's manner: input errors as they are, internal errors as a pointer
// to the server's log (which holds the detail).
func publicError(err error) string {
	switch {
	case errors.Is(err, redrive.ErrInvalid):
		return err.Error()
	case errors.Is(err, store.ErrClosed):
		return "the store is unavailable; see the server log"
	}
	return "internal error; see the server log"
}

// snapshot copies the operation for an answer; the caller holds the
// registry's mutex.
func (op *operation) snapshot() Operation {
	s := op.op
	s.RefusedIDs = slices.Clone(op.op.RefusedIDs)
	if s.RefusedIDs == nil {
		s.RefusedIDs = []int64{}
	}
	if op.op.FinishedAt != nil {
		t := *op.op.FinishedAt
		s.FinishedAt = &t
	}
	return s
}

// get returns the operation with this id, or nil.
func (o *operations) get(id string) (*operation, Operation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	op := o.byID[id]
	if op == nil {
		return nil, Operation{}
	}
	return op, op.snapshot()
}

// snapshotOf reads one operation.
func (o *operations) snapshotOf(op *operation) Operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return op.snapshot()
}

// list returns up to limit operations, newest first.
func (o *operations) list(limit int) []Operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pruneLocked()
	out := make([]Operation, 0, min(limit, len(o.order)))
	for i := len(o.order) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, o.order[i].snapshot())
	}
	return out
}

// pruneLocked forgets finished operations older than keep, and the
// oldest finished ones beyond maxKept.
func (o *operations) pruneLocked() {
	cutoff := o.now().Add(-o.keep)
	excess := len(o.order) - o.maxKept
	kept := o.order[:0]
	for _, op := range o.order {
		if f := op.op.FinishedAt; f != nil && (f.Before(cutoff) || excess > 0) {
			delete(o.byID, op.op.ID)
			excess--
			continue
		}
		kept = append(kept, op)
	}
	clear(o.order[len(kept):])
	o.order = kept
}

// cancel cancels a running operation. It reports false when the
// operation had already ended.
func (o *operations) cancel(op *operation) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if op.op.State != OperationRunning {
		return false
	}
	op.cancel(errCanceledByRequest)
	return true
}

// close cancels every running operation, refuses new ones and waits for
// the running ones to stop.
func (o *operations) close() {
	o.stop(errServerClosed)
	o.wg.Wait()
}

// wait blocks until op ends or ctx does.
func wait(ctx context.Context, op *operation) error {
	select {
	case <-op.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newOperationID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("operation id: %w", err)
	}
	return "op_" + hex.EncodeToString(b[:]), nil
}

// answerStarted answers a started operation: 202 with Location, or with
// wait, 200 with its final state once it ends.
func (a *api) answerStarted(w http.ResponseWriter, r *http.Request, op *operation, waitEnd bool) error {
	if waitEnd {
		if err := wait(r.Context(), op); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, operationBody{Operation: a.ops.snapshotOf(op)})
		return nil
	}
	snap := a.ops.snapshotOf(op)
	w.Header().Set("Location", "/v1/operations/"+snap.ID)
	writeJSON(w, http.StatusAccepted, operationBody{Operation: snap})
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

// operationNotFound is the answer for an unknown operation id.
func operationNotFound(id string) error {
	return &apiError{status: http.StatusNotFound, code: "not_found", field: "id",
		msg: fmt.Sprintf("operation %q not found (finished operations are kept %s)", clip(id), OperationRetention)}
}

func (a *api) listOperations(w http.ResponseWriter, r *http.Request) error {
	q, err := newQuery(r, "limit")
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
	writeJSON(w, http.StatusOK, map[string]any{"operations": a.ops.list(n)})
	return nil
}

// pathOperation returns the operation named by the {id} of a request that
// takes no query parameters, and a snapshot of it.
func (a *api) pathOperation(r *http.Request) (*operation, Operation, error) {
	if _, err := newQuery(r); err != nil {
		return nil, Operation{}, err
	}
	id := r.PathValue("id")
	op, snap := a.ops.get(id)
	if op == nil {
		return nil, Operation{}, operationNotFound(id)
	}
	return op, snap, nil
}

func (a *api) getOperation(w http.ResponseWriter, r *http.Request) error {
	_, snap, err := a.pathOperation(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, operationBody{Operation: snap})
	return nil
}

func (a *api) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	op, snap, err := a.pathOperation(r)
	if err != nil {
		return err
	}
	if !a.ops.cancel(op) {
		return &apiError{status: http.StatusConflict, code: "conflict",
			msg: fmt.Sprintf("operation %s has already ended (%s)", snap.ID, snap.State)}
	}
	// The operation stops at its next store call or pacing wait: wait for
	// it, so the answer holds what it did.
	if err := wait(r.Context(), op); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, operationBody{Operation: a.ops.snapshotOf(op)})
	return nil
}

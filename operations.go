package redrive

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"time"

	"github.com/redrivehq/redrive/store"
)

// Operation is a durable bulk operation: a replay, a bulk redrive, a
// purge, a folder export or a bulk cancel, kept in the store with its progress and a
// cursor. The worker that holds leadership runs it (Worker.Run), or the
// process that calls Client.RunOperation; whichever runs it holds a lease
// fenced by its worker id, and each batch commits with the advance of the
// cursor, so that a runner that dies leaves it exactly where its last
// batch ended: the next runner continues there and no job is handled
// twice. See docs/design.md.
type Operation = store.Operation

// OperationKind says what an operation does.
type OperationKind = store.OperationKind

// OperationState is where an operation stands.
type OperationState = store.OperationState

// OperationParams are an operation's parameters, as stored.
type OperationParams = store.OperationParams

// OperationProgress counts what an operation did.
type OperationProgress = store.OperationProgress

// The kinds of operations.
const (
	// OperationReplay enqueues, as new jobs, copies of the jobs matching
	// a filter, whatever their state (completed ones included); each copy
	// names its source in Job.ReplayOf and in a replayed event.
	OperationReplay = store.OpReplay
	// OperationRedrive moves the dead jobs matching a filter (or given by
	// id) back to pending.
	OperationRedrive = store.OpRedrive
	// OperationPurge deletes the dead jobs matching a filter.
	OperationPurge = store.OpPurge
	// OperationExport writes the dead jobs matching a filter to a folder
	// on the runner's machine, as Client.Export does.
	OperationExport = store.OpExport
	// OperationCancel cancels the pending and scheduled jobs matching a
	// filter (or given by id), as Client.Cancel does one job. Running
	// jobs are never touched: a filter selects pending and scheduled
	// jobs only (its States may narrow that to one of them), and the ids
	// given that are not pending or scheduled are counted as skipped.
	// Cancel a running job by itself (Client.Cancel) to ask its handler
	// to stop.
	OperationCancel = store.OpCancel
	// OperationRekey re-seals every payload sealed under a payload key
	// other than the store's current one (key rotation; it takes no
	// filter). See docs/security.md.
	OperationRekey = store.OpRekey
)

// The states of an operation.
const (
	OperationPending  = store.OpPending
	OperationRunning  = store.OpRunning
	OperationPaused   = store.OpPaused
	OperationDone     = store.OpDone
	OperationFailed   = store.OpFailed
	OperationCanceled = store.OpCanceled
)

// OperationRetention is how long a finished operation is kept: the
// worker's retention (Worker.Cleanup) deletes those that finished
// earlier.
const OperationRetention = 7 * 24 * time.Hour

// DefaultOperationBatch is how many jobs one batch of an operation
// handles when OperationRequest.Batch is 0.
const DefaultOperationBatch = 100

// OperationRequest says which operation to start.
type OperationRequest struct {
	Kind OperationKind
	// Filter selects the jobs. A replay honors every field, its States
	// included (completed jobs can be replayed; no States means every
	// state); a cancel selects pending and scheduled jobs (States may
	// name one of them); the other kinds select dead jobs only.
	Filter Filter
	// IDs, for a redrive or a cancel, selects these jobs instead of
	// Filter; the ids that are not dead (for a cancel: not pending or
	// scheduled) are counted as skipped.
	IDs []int64
	// Batch is how many jobs one batch handles, in one transaction with
	// the advance of the cursor (default DefaultOperationBatch, at most
	// 1000).
	Batch int
	// Rate bounds how many jobs per second the operation handles (0: no
	// bound), so that a replay or redrive of millions does not flood the
	// workers or a dependency that has just recovered. Under a rate, a
	// batch holds at most a second's worth of jobs (Rate, at least 1).
	Rate float64
	// Note is recorded in the history of each job touched (redriven,
	// replayed and canceled events): who, why.
	Note string
	// Payload, for a redrive, replaces the payload of every redriven job
	// (edit and redrive); nil keeps them.
	Payload any
	// Dir, for an export, is the folder written, on the machine of the
	// process that runs the operation.
	Dir string
	// Root, for an export, when set, is a folder Dir lies under (the
	// server's export folder): the export then writes through an os.Root
	// opened on it, so that no symbolic link under Root leads a write
	// outside it (such an export fails instead).
	Root string
	// Decrypt, for an export, writes the payloads in plaintext; without
	// it, on a store with payload keys, the payloads of sealed queues (or
	// stored sealed) are written sealed (Client.Exported). The API allows
	// it to the admin role only, and records who asked in the audit log.
	Decrypt bool
	// CheckKinds, for a redrive or a replay, refuses the operation with an
	// *OperationKindError when some selected jobs are in a queue whose
	// live workers run none of their kinds (CheckOperationKinds), as
	// EnqueueChecked refuses such a job. The API and the CLI set it.
	CheckKinds bool
}

// NewOperationID returns a new random operation id: "op_" and 24
// hexadecimal digits.
func NewOperationID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redrive: operation id: %w", err)
	}
	return "op_" + hex.EncodeToString(b[:]), nil
}

// ValidateOperation reports the error StartOperation would return for r
// before touching the store, wrapping ErrInvalid.
func (c *Client) ValidateOperation(r OperationRequest) error {
	_, err := c.newOperation(r)
	return err
}

// newOperation checks r and builds what the store keeps.
func (c *Client) newOperation(r OperationRequest) (store.NewOperation, error) {
	fail := func(format string, args ...any) (store.NewOperation, error) {
		return store.NewOperation{}, fmt.Errorf("redrive: operation: %w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if !r.Kind.Valid() {
		return fail("unknown kind %q (want replay, redrive, purge, export, cancel or rekey)", r.Kind)
	}
	if r.Batch == 0 {
		r.Batch = DefaultOperationBatch
	}
	if r.Batch < 1 || r.Batch > store.MaxPageSize {
		return fail("batch %d out of 1..%d", r.Batch, store.MaxPageSize)
	}
	if r.Rate < 0 {
		return fail("rate must not be negative")
	}
	if len(r.IDs) > 0 {
		if r.Kind != OperationRedrive && r.Kind != OperationCancel {
			return fail("ids select the jobs of a redrive or a cancel only; use a filter")
		}
		for _, id := range r.IDs {
			if id <= 0 {
				return fail("job ids must be positive, got %d", id)
			}
		}
		r.Filter = Filter{IDs: r.IDs}
	}
	p := store.OperationParams{Filter: r.Filter, Batch: r.Batch, Rate: r.Rate, Note: r.Note, Dir: r.Dir, Root: r.Root, Decrypt: r.Decrypt}
	if r.Payload != nil {
		if r.Kind != OperationRedrive {
			return fail("only a redrive replaces payloads")
		}
		payload, err := c.checkRedrive(RedriveRequest{Payload: r.Payload})
		if err != nil {
			return store.NewOperation{}, fmt.Errorf("redrive: operation: %w", err)
		}
		p.Payload = payload
	}
	if r.Kind == OperationExport && r.Dir == "" {
		return fail("an export needs a folder (Dir)")
	}
	if r.Kind != OperationExport && (r.Dir != "" || r.Root != "") {
		return fail("only an export writes to a folder")
	}
	if r.Kind != OperationExport && r.Decrypt {
		return fail("only an export decrypts payloads")
	}
	if r.Root != "" {
		if _, err := rootRelative(r.Root, r.Dir); err != nil {
			return fail("%v", err)
		}
	}
	if r.Kind == OperationCancel {
		for _, st := range p.Filter.States {
			if st != Pending && st != Scheduled {
				return fail("a cancel selects pending and scheduled jobs only, not %s ones (cancel a running job by itself)", st)
			}
		}
	} else if r.Kind != OperationReplay {
		p.Filter.States = nil
	}
	id, err := NewOperationID()
	if err != nil {
		return store.NewOperation{}, err
	}
	n := store.NewOperation{ID: id, Kind: r.Kind, Params: p}
	if err := store.CheckNewOperation(&n); err != nil {
		return store.NewOperation{}, fmt.Errorf("redrive: operation: %w", err)
	}
	return n, nil
}

// StartOperation stores a new pending operation and returns it. The
// worker holding leadership claims and runs it (Worker.Run looks for
// operations every PollInterval); RunOperation runs it in the calling
// process instead. Without any worker on the store it stays pending.
//
// A redrive or a replay is a span (a child of ctx's) linked to the traces
// of the first jobs it selects (up to 128); a replay's copies keep their
// sources' trace contexts, so their attempts join the sources' traces.
func (c *Client) StartOperation(ctx context.Context, r OperationRequest) (_ *Operation, err error) {
	if r.Filter.ErrorPrefix != "" {
		return nil, fmt.Errorf("redrive: operation: %w", store.ErrOperationErrorPrefix)
	}
	n, err := c.newOperation(r)
	if err != nil {
		return nil, err
	}
	if r.Kind == OperationRedrive {
		if err := c.validateRedrivePayload(ctx, r.IDs, r.Filter, n.Params.Payload); err != nil {
			return nil, fmt.Errorf("redrive: operation: %w", err)
		}
		if n.Params.Keys, err = c.redriveKeys(ctx, r.IDs, r.Filter, n.Params.Payload); err != nil {
			return nil, fmt.Errorf("redrive: operation: %w", err)
		}
	}
	if r.CheckKinds && (r.Kind == OperationRedrive || r.Kind == OperationReplay) {
		op := store.Operation{Kind: n.Kind, Params: n.Params}
		if err := c.CheckOperationKinds(ctx, store.OperationFilter(&op)); err != nil {
			return nil, fmt.Errorf("redrive: operation: %w", err)
		}
	}
	if c.tracer != nil && (r.Kind == OperationRedrive || r.Kind == OperationReplay) {
		var span trace.Span
		ctx, span = c.startRedrive(ctx, string(r.Kind))
		defer func() { c.endOperationSpan(ctx, span, n, err) }()
	}
	op, err := c.store.CreateOperation(ctx, n, c.now())
	if err != nil {
		return nil, fmt.Errorf("redrive: start operation: %w", err)
	}
	c.log.Info("operation started", "operation", op.ID, "kind", op.Kind, "batch", n.Params.Batch, "rate", n.Params.Rate, "note", n.Params.Note)
	c.wakeOperations()
	return op, nil
}

// wakeOperations tells this process's workers that an operation may be
// runnable (see Client.opsWake); a wake already pending is enough.
func (c *Client) wakeOperations() {
	select {
	case c.opsWake <- struct{}{}:
	default:
	}
}

// Operation returns one operation, or an error wrapping ErrNotFound.
func (c *Client) Operation(ctx context.Context, id string) (*Operation, error) {
	return c.store.GetOperation(ctx, id)
}

// Operations lists operations newest first: up to limit (0: 50, at most
// 1000), those created before the operation named by before when it is
// not "". next is the before of the following page, "" on the last.
func (c *Client) Operations(ctx context.Context, before string, limit int) (ops []*Operation, next string, err error) {
	return c.store.ListOperations(ctx, before, limit)
}

// PauseOperation pauses a pending or running operation: its runner
// stops after its current batch, and the operation keeps its cursor
// until ResumeOperation. Pausing a paused operation changes nothing; a
// finished one is ErrConflict.
func (c *Client) PauseOperation(ctx context.Context, id string) (*Operation, error) {
	return c.setOperationState(ctx, id, OperationPaused)
}

// ResumeOperation makes a paused operation pending again: a runner
// claims it and continues at its cursor. Resuming a pending or running
// operation changes nothing; a finished one is ErrConflict.
func (c *Client) ResumeOperation(ctx context.Context, id string) (*Operation, error) {
	return c.setOperationState(ctx, id, OperationPending)
}

// CancelOperation cancels a pending, running or paused operation for
// good: its runner stops after its current batch, and what it did stays
// done. Canceling a canceled operation changes nothing; a done or failed
// one is ErrConflict.
func (c *Client) CancelOperation(ctx context.Context, id string) (*Operation, error) {
	return c.setOperationState(ctx, id, OperationCanceled)
}

func (c *Client) setOperationState(ctx context.Context, id string, to OperationState) (*Operation, error) {
	op, err := c.store.SetOperationState(ctx, id, to, c.now())
	if err != nil {
		return nil, err
	}
	c.log.Info("operation state set", "operation", id, "state", op.State)
	if op.State == OperationPending {
		c.wakeOperations() // resumed
	}
	return op, nil
}

// WaitOperation polls the operation every poll (default 200ms) until it
// ends (done, failed or canceled) or ctx does, calling progress (when
// not nil) with each reading. It returns the last reading.
func (c *Client) WaitOperation(ctx context.Context, id string, poll time.Duration, progress func(*Operation)) (*Operation, error) {
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	for {
		op, err := c.store.GetOperation(ctx, id)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(op)
		}
		if op.State.Final() {
			return op, nil
		}
		if err := sleepCtx(ctx, poll); err != nil {
			return op, err
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// OperationLease is how long a runner started by RunOperation holds an
// operation between renewals (Worker.Run uses its LeaseDuration).
const OperationLease = 30 * time.Second

// RunOperation runs the operation id in this process, calling progress
// (when not nil) after each batch, until it ends, is paused, or ctx
// ends; it returns the operation as it last read it. When another
// runner holds the operation, it follows that runner's progress instead
// (as WaitOperation does, until the operation ends, or is paused) and
// takes the operation over if that runner's lease ends. When ctx ends
// midway, the operation's lease is released, so that any runner
// continues it at once.
func (c *Client) RunOperation(ctx context.Context, id string, progress func(*Operation)) (*Operation, error) {
	worker := fmt.Sprintf("run-%s-%d-%s", hostname(), os.Getpid(), randomSuffix())
	for {
		cur, err := c.store.GetOperation(ctx, id)
		if err != nil {
			return nil, err
		}
		if cur.State == OperationPending || (cur.State == OperationRunning && cur.LeaseUntil != nil && cur.LeaseUntil.Before(c.now())) {
			op, err := c.store.ClaimOperation(ctx, id, worker, c.now(), c.now().Add(OperationLease))
			if err != nil {
				return nil, err
			}
			if op != nil {
				return c.runClaimed(ctx, op, worker, OperationLease, progress)
			}
			continue
		}
		if progress != nil {
			progress(cur)
		}
		if cur.State.Final() || cur.State == OperationPaused {
			return cur, nil
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return cur, err
		}
	}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "host"
	}
	return h
}

func randomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errWrite marks a failure to write an export's files: the runner fails
// the operation rather than retry.
var errWrite = errors.New("writing the export failed")

// errOperationStopped means the runner lost the operation: it was paused
// or canceled, or another runner took it over.
var errOperationStopped = errors.New("operation stopped")

// opRunner runs one claimed operation.
type opRunner struct {
	c        *Client
	op       *Operation
	worker   string
	lease    time.Duration
	log      *slog.Logger
	progress func(*Operation)
}

// runClaimed runs an operation this process claimed, to its end or
// until it is paused, canceled or taken over, or ctx ends.
func (c *Client) runClaimed(ctx context.Context, op *Operation, worker string, lease time.Duration, progress func(*Operation)) (_ *Operation, err error) {
	r := &opRunner{c: c, op: op, worker: worker, lease: lease, progress: progress,
		log: c.log.With("operation", op.ID, "kind", op.Kind, "worker", worker)}
	r.log.Info("operation claimed", "cursor", op.Cursor, "processed", op.Progress.Processed)
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("operation panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("redrive: operation %s panicked: %v", op.ID, v)
			r.finish(context.WithoutCancel(ctx), OperationFailed, err.Error())
		}
	}()
	err = r.run(ctx)
	switch {
	case err == nil:
		return r.op, nil
	case errors.Is(err, errOperationStopped):
		cur, gerr := c.store.GetOperation(context.WithoutCancel(ctx), op.ID)
		if gerr == nil {
			r.op = cur
		}
		r.log.Info("operation stopped", "state", r.op.State, "holder", r.op.Worker)
		return r.op, nil
	case ctx.Err() != nil:
		// Release the lease: the next runner continues at once.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if cur, rerr := c.store.RenewOperation(rctx, store.OperationRenewal{ID: op.ID, Worker: worker, LeaseUntil: c.now(), Now: c.now(), Matched: -1}); rerr == nil {
			r.op = cur
		}
		r.log.Info("operation released", "cursor", r.op.Cursor, "processed", r.op.Progress.Processed)
		return r.op, ctx.Err()
	default:
		r.log.Error("operation failed", "error", err)
		r.finish(context.WithoutCancel(ctx), OperationFailed, publicOperationError(err))
		return r.op, err
	}
}

// publicOperationError words a failure for the operation's Error field,
// which the API shows: input and export errors as they are, store errors
// without their internals (the runner's log holds the detail).
func publicOperationError(err error) string {
	switch {
	case errors.Is(err, errWrite), errors.Is(err, ErrInvalid):
		return err.Error()
	case errors.Is(err, store.ErrClosed):
		return "the store was closed; see the worker's log"
	case errors.Is(err, store.ErrFull):
		return "the store is out of space; see the worker's log"
	case errors.Is(err, store.ErrUnavailable):
		return "the store was unavailable; see the worker's log"
	}
	return "internal error; see the worker's log"
}

func (r *opRunner) finish(ctx context.Context, state OperationState, msg string) {
	op, err := r.c.store.FinishOperation(ctx, r.op.ID, r.worker, state, msg, r.c.now())
	if err != nil {
		r.log.Error("operation: recording its end failed", "state", state, "error", err)
		return
	}
	r.op = op
	r.report()
	r.log.Info("operation ended", "state", op.State, "matched", op.Progress.Matched, "processed", op.Progress.Processed)
}

func (r *opRunner) report() {
	if r.progress != nil {
		r.progress(r.op)
	}
}

// renew extends the lease (recording matched when not negative).
func (r *opRunner) renew(ctx context.Context, matched int64) error {
	op, err := r.c.store.RenewOperation(ctx, store.OperationRenewal{ID: r.op.ID, Worker: r.worker,
		LeaseUntil: r.c.now().Add(r.lease), Now: r.c.now(), Matched: matched})
	if errors.Is(err, store.ErrConflict) {
		return errOperationStopped
	}
	if err != nil {
		return err
	}
	r.op = op
	return nil
}

// storeRetries bounds how long a runner retries a failing store call
// before it fails the operation: about 30 s of backoff.
const storeRetries = 40

// retrying runs f again after a store error other than a conflict, with
// backoff, while ctx lasts.
func (r *opRunner) retrying(ctx context.Context, what string, f func() error) error {
	for n := 1; ; n++ {
		err := f()
		if err == nil || errors.Is(err, errOperationStopped) || errors.Is(err, store.ErrConflict) || errors.Is(err, ErrInvalid) || errors.Is(err, errWrite) ||
			ctx.Err() != nil || n >= storeRetries {
			return err
		}
		r.log.Warn("operation: store call failed; retrying", "call", what, "attempt", n, "error", err)
		if err := sleepCtx(ctx, storeBackoff(n)); err != nil {
			return err
		}
	}
}

// count records how many jobs the selection holds, once.
func (r *opRunner) count(ctx context.Context) error {
	if r.op.Progress.Matched >= 0 {
		return nil
	}
	f := store.OperationFilter(r.op)
	var n int64
	if store.ByIDs(r.op) {
		n = int64(len(store.NextIDs(f.IDs, 0, math.MaxInt64, len(f.IDs)+1)))
	} else {
		var err error
		if n, err = r.c.store.Count(ctx, f); err != nil {
			return err
		}
	}
	if err := r.renew(ctx, n); err != nil {
		return err
	}
	r.report()
	return nil
}

func (r *opRunner) run(ctx context.Context) error {
	if err := r.retrying(ctx, "count", func() error { return r.count(ctx) }); err != nil {
		return err
	}
	batch := r.op.Params.Batch
	rate := r.op.Params.Rate
	if rate > 0 && float64(batch) > rate {
		// A batch of at most a second's worth of jobs, so that the pace
		// is smooth rather than a burst then a long wait.
		batch = max(1, int(rate))
	}
	start := time.Now()
	var done int64 // jobs handled by this runner, for the pace
	for {
		if rate > 0 {
			due := start.Add(time.Duration(float64(done) / rate * float64(time.Second)))
			if err := r.waitUntil(ctx, due); err != nil {
				return err
			}
		}
		var res store.StepResult
		err := r.retrying(ctx, "step", func() error {
			var err error
			res, err = r.step(ctx, batch)
			return err
		})
		if errors.Is(err, store.ErrConflict) {
			return errOperationStopped
		}
		if err != nil {
			return err
		}
		r.op = res.Operation
		done += res.Handled.Processed
		now := r.c.now()
		for _, q := range res.Queues {
			r.c.wake(q, now)
		}
		if res.Handled.Refused > 0 || res.Handled.Redriven > 0 || res.Handled.Replayed > 0 || res.Handled.Purged > 0 || res.Handled.Canceled > 0 {
			r.log.Debug("operation batch", "cursor", r.op.Cursor, "processed", r.op.Progress.Processed)
		}
		r.report()
		if res.End {
			var fin error
			err := r.retrying(ctx, "finish", func() error {
				op, err := r.c.store.FinishOperation(ctx, r.op.ID, r.worker, OperationDone, "", r.c.now())
				if errors.Is(err, store.ErrConflict) {
					fin = errOperationStopped
					return nil
				}
				if err == nil {
					r.op = op
				}
				return err
			})
			if err != nil {
				return err
			}
			if fin != nil {
				return fin
			}
			r.report()
			r.log.Info("operation ended", "state", r.op.State, "matched", r.op.Progress.Matched, "processed", r.op.Progress.Processed)
			return nil
		}
	}
}

// waitUntil waits until t, renewing the lease every third of it.
func (r *opRunner) waitUntil(ctx context.Context, t time.Time) error {
	for {
		wait := time.Until(t)
		if wait <= 0 {
			return nil
		}
		if err := sleepCtx(ctx, min(wait, r.lease/3)); err != nil {
			return err
		}
		if time.Until(t) > 0 {
			if err := r.retrying(ctx, "renew", func() error { return r.renew(ctx, -1) }); err != nil {
				return err
			}
		}
	}
}

// step handles one batch: the store does it for the kinds it can do in
// its transaction; an export writes the files first, then records them
// (writing a job's files again after a crash rewrites the same files).
func (r *opRunner) step(ctx context.Context, batch int) (store.StepResult, error) {
	s := store.OperationStep{ID: r.op.ID, Worker: r.worker, Cursor: r.op.Cursor, Limit: batch, Now: r.c.now(),
		LeaseUntil: r.c.now().Add(r.lease)}
	if r.op.Kind == OperationExport {
		jobs, err := r.c.store.OperationJobs(ctx, r.op.ID, r.op.Cursor, batch)
		if err != nil {
			return store.StepResult{}, err
		}
		e := &store.ExportedBatch{}
		if len(jobs) > 0 {
			fsys, dir, done, err := exportTarget(r.op.Params)
			if err != nil {
				return store.StepResult{}, fmt.Errorf("%w: %w", errWrite, err)
			}
			defer done()
			if err := fsys.MkdirAll(dir, 0o755); err != nil {
				return store.StepResult{}, fmt.Errorf("%w: %w", errWrite, err)
			}
			for _, j := range jobs {
				p, ee, m, err := r.c.Exported(j, r.op.Params.Decrypt)
				if err == nil {
					err = exportFiles(fsys, dir, p, ee, m)
				}
				if err != nil {
					return store.StepResult{}, fmt.Errorf("%w: job %d: %w", errWrite, j.ID, err)
				}
				e.Count++
				e.Last = j.ID
			}
		}
		s.Exported = e
	}
	return r.c.store.StepOperation(ctx, s)
}

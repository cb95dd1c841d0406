package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/httpjob"
	"github.com/redrivehq/redrive/server"
	"github.com/redrivehq/redrive/store"
)

// The direct backend: the operator commands on the store itself, with a
// redrive.Client (--db, --database-url).

var _ backend = (*directBackend)(nil)

// directClient is the client of the direct mode: it checks the payloads
// of http jobs as serve does (with the http kind's default guard).
func directClient(st store.Store, log *slog.Logger) *redrive.Client {
	c := redrive.NewClient(st, redrive.ClientOptions{Logger: log})
	c.SetValidator(httpjob.Kind, httpValidator)
	return c
}

// directBackend works on the store with a redrive.Client.
type directBackend struct {
	c     *redrive.Client
	close func() error
}

func (d *directBackend) Close() error { return d.close() }

// localActor is the audit log's actor of the CLI on the store.
const localActor = "local"

// record appends a change the CLI made on the store (when err is nil) to
// the audit log, as local, from this host. A failure to record is said on
// standard error: the change is made.
func (d *directBackend) record(ctx context.Context, err error, action string, target any, count int64, opID, note string) {
	if err != nil {
		return
	}
	t, _ := json.Marshal(target)
	host, _ := os.Hostname()
	e := store.AuditEntry{Actor: localActor, Action: action, Target: store.TruncateUTF8(string(t), store.MaxAuditTarget),
		Count: count, OperationID: opID, Note: store.TruncateUTF8(note, 1000), Remote: store.TruncateUTF8(host, 200)}
	if _, aerr := d.c.Store().AppendAudit(context.WithoutCancel(ctx), e); aerr != nil {
		fmt.Fprintf(os.Stderr, "redrive: the change was made but not recorded in the audit log: %v\n", aerr)
	}
}

// Enqueue enqueues one job; the request is read as POST /v1/jobs reads it
// (server.RequestOf), every field kept.
func (d *directBackend) Enqueue(ctx context.Context, in server.EnqueueRequest) (*redrive.Job, error) {
	r, err := server.RequestOf(&in, time.Now())
	if err != nil {
		return nil, err
	}
	// Checked as the API checks it: a kind the live workers of the
	// queue do not run is refused.
	jobs, err := d.c.EnqueueChecked(ctx, []redrive.Request{r})
	if len(jobs) == 1 {
		return jobs[0], err // with a *KeyConflictError, the job holding the key
	}
	return nil, err
}

func (d *directBackend) Get(ctx context.Context, id int64) (*redrive.Job, error) {
	j, err := d.c.Get(ctx, id)
	return j, jobError(id, err)
}

// jobError words a store's error about job id as the API does, without
// the store's name ("sqlite: job 7: job not found" is "job 7 not found");
// errors.Is still finds the store's error.
func jobError(id int64, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &jobErr{msg: fmt.Sprintf("job %d not found", id), err: err}
	case errors.Is(err, store.ErrConflict):
		return &jobErr{msg: fmt.Sprintf("job %d: its state does not allow this", id), err: err}
	}
	return err
}

// jobErr is an error about one job, worded for the operator.
type jobErr struct {
	msg string
	err error
}

func (e *jobErr) Error() string { return e.msg }
func (e *jobErr) Unwrap() error { return e.err }

// filter validates a listing's flags for direct mode.
func (q *listQuery) filter() (redrive.Filter, error) {
	f, err := q.toFilter()
	if err != nil {
		return f, err
	}
	if q.Match != "" {
		m, err := parsePayloadMatch(q.Match)
		if err != nil {
			return f, err
		}
		f.PayloadField, f.PayloadValue = m.Field, m.Value
	}
	if q.Dead {
		f.States = []redrive.State{redrive.Dead}
		return f, nil
	}
	for _, s := range q.States {
		st, err := store.ParseState(strings.TrimSpace(s))
		if err != nil {
			return f, fmt.Errorf("--state: unknown state %q (want pending, scheduled, running, completed, dead, canceled or blocked)", s)
		}
		f.States = append(f.States, st)
	}
	return f, nil
}

func (d *directBackend) List(ctx context.Context, q listQuery) (redrive.ListResult, error) {
	f, err := q.filter()
	if err != nil {
		return redrive.ListResult{}, err
	}
	return d.c.List(ctx, f, redrive.Page{Cursor: q.Cursor, Limit: q.Limit})
}

// Count counts what List selects, over all its pages.
func (d *directBackend) Count(ctx context.Context, q listQuery) (int64, error) {
	f, err := q.filter()
	if err != nil {
		return 0, err
	}
	return d.c.Count(ctx, f)
}

func (d *directBackend) SetPriority(ctx context.Context, id int64, priority int) (*redrive.Job, error) {
	j, err := d.c.SetPriority(ctx, id, priority)
	if errors.Is(err, store.ErrConflict) {
		if cur, gerr := d.c.Get(ctx, id); gerr == nil {
			return nil, &jobErr{msg: fmt.Sprintf("job %d is %s: only a pending or scheduled job's priority can change", id, cur.State), err: err}
		}
	}
	d.record(ctx, err, "jobs priority", map[string]any{"id": id, "priority": priority}, 1, "", "")
	return j, jobError(id, err)
}

func (d *directBackend) RunNow(ctx context.Context, id int64) (*redrive.Job, error) {
	j, err := d.c.RunNow(ctx, id)
	if errors.Is(err, store.ErrConflict) {
		if cur, gerr := d.c.Get(ctx, id); gerr == nil {
			return nil, &jobErr{msg: fmt.Sprintf("job %d is %s: only a scheduled job (delayed, or waiting for a retry) can run now", id, cur.State), err: err}
		}
	}
	d.record(ctx, err, "jobs run", map[string]any{"id": id}, 1, "", "")
	return j, jobError(id, err)
}

func (d *directBackend) Cancel(ctx context.Context, id int64) (*redrive.Job, error) {
	j, err := d.c.Cancel(ctx, id)
	if errors.Is(err, store.ErrConflict) {
		if cur, gerr := d.c.Get(ctx, id); gerr == nil {
			return nil, &jobErr{msg: fmt.Sprintf("job %d is %s: it cannot be canceled", id, cur.State), err: err}
		}
	}
	d.record(ctx, err, "jobs cancel", map[string]any{"id": id}, 1, "", "")
	return j, jobError(id, err)
}

func (d *directBackend) Stats(ctx context.Context) (redrive.Stats, error) { return d.c.Stats(ctx) }

func (d *directBackend) Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error) {
	f, err := fo.toFilter()
	if err != nil {
		return nil, err
	}
	return d.c.DeadGroups(ctx, f, limit)
}

// Redrive runs a redrive operation on the store (see runDirect).
func (d *directBackend) Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error) {
	req := redrive.OperationRequest{Kind: redrive.OperationRedrive, IDs: q.IDs, Rate: q.Rate, Note: q.Note}
	if len(q.Payload) > 0 {
		req.Payload = q.Payload
	}
	if len(q.IDs) == 0 {
		f, err := q.Filter.toFilter()
		if err != nil {
			return redrive.RedriveProgress{}, err
		}
		req.Filter = f
	}
	op, err := runDirect(ctx, d, req, func(op server.Operation) {
		if progress != nil {
			progress(redriveProgress(op))
		}
	})
	return redriveProgress(op), err
}

// Purge runs a purge operation on the store (see runDirect).
func (d *directBackend) Purge(ctx context.Context, fo filterOptions, _ bool, progress func(purgeProgress)) (int64, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	op, err := runDirect(ctx, d, redrive.OperationRequest{Kind: redrive.OperationPurge, Filter: f}, func(op server.Operation) {
		if progress != nil {
			progress(purgeProgress{Matched: op.Matched, Purged: op.Purged})
		}
	})
	return op.Purged, err
}

// PurgeIDs runs a purge operation of the dead jobs among ids on the
// store.
func (d *directBackend) PurgeIDs(ctx context.Context, ids []int64) (int64, error) {
	op, err := runDirect(ctx, d, redrive.OperationRequest{Kind: redrive.OperationPurge, Filter: redrive.Filter{IDs: ids}}, nil)
	return op.Purged, err
}

func (d *directBackend) Export(ctx context.Context, dir string, fo filterOptions, decrypt bool, progress func(int, int64)) (int, error) {
	f, err := fo.toFilter()
	if err != nil {
		return 0, err
	}
	target := map[string]any{"dir": dir, "filter": fo.FilterBody}
	export := d.c.Export
	if decrypt {
		// Who asked for plaintext is recorded before anything is
		// written, and the export refused when it cannot be.
		target["decrypt"] = true
		t, _ := json.Marshal(target)
		host, _ := os.Hostname()
		e := store.AuditEntry{Actor: localActor, Action: "dlq export", Target: store.TruncateUTF8(string(t), store.MaxAuditTarget),
			Note: "plaintext payloads (--decrypt)", Remote: store.TruncateUTF8(host, 200)}
		if _, err := d.c.Store().AppendAudit(context.WithoutCancel(ctx), e); err != nil {
			return 0, fmt.Errorf("an export with --decrypt is recorded in the audit log first, and the store refused the entry: %w", err)
		}
		export = d.c.ExportDecrypted
	}
	var report func(int)
	if progress != nil {
		total, err := d.Count(ctx, deadQuery(fo))
		if err != nil {
			return 0, err
		}
		progress(0, total)
		report = func(n int) { progress(n, total) }
	}
	n, err := export(ctx, dir, f, report)
	if !decrypt {
		// A plaintext export was recorded before it began: once.
		d.record(ctx, err, "dlq export", target, int64(n), "", "")
	}
	return n, err
}

// httpValidator is the http kind's payload check with its default guard.
var httpValidator = httpjob.New(httpjob.Options{AllowLinkLocalSetting: "serve --http-allow-link-local",
	AllowPrivateSetting: "serve --http-allow-private"}).Validate

// EnqueueBatch enqueues the batch with EnqueueChecked, each request read
// as the API reads it.
func (d *directBackend) EnqueueBatch(ctx context.Context, reqs []apiclient.EnqueueRequest) ([]*redrive.Job, error) {
	rs := make([]redrive.Request, len(reqs))
	now := time.Now()
	for i := range reqs {
		r, err := server.RequestOf(&reqs[i], now)
		if err != nil {
			return nil, fmt.Errorf("job %d of the batch: %w", i, err)
		}
		rs[i] = r
	}
	return d.c.EnqueueChecked(ctx, rs)
}

func (d *directBackend) Queues(ctx context.Context) ([]redrive.Queue, error) {
	return d.c.Queues(ctx)
}

func (d *directBackend) SetPaused(ctx context.Context, name string, paused bool) (redrive.Queue, error) {
	set, action := d.c.ResumeQueue, "queues resume"
	if paused {
		set, action = d.c.PauseQueue, "queues pause"
	}
	q, err := set(ctx, name)
	d.record(ctx, err, action, map[string]any{"name": name}, 1, "", "")
	return q, err
}

func (d *directBackend) Workers(ctx context.Context) ([]redrive.WorkerStatus, error) {
	return d.c.Workers(ctx)
}

func (d *directBackend) Breakers(ctx context.Context) ([]apiclient.BreakerView, error) {
	states, err := d.c.Store().ListBreakers(ctx)
	if err != nil {
		return nil, err
	}
	return server.FleetBreakers(states, time.Now()), nil
}

func (d *directBackend) ForceBreaker(ctx context.Context, name string, open bool, dur time.Duration) (apiclient.BreakerView, error) {
	now := time.Now()
	set := store.BreakerSet{Name: name, State: store.BreakerClosed, By: "operator (cli)", Now: now}
	if open {
		set.State = store.BreakerOpen
		if dur > 0 {
			set.Until = now.Add(dur)
		}
	}
	if !open {
		// Closing a breaker nobody has would create its record: refused,
		// as the API refuses it.
		if _, err := d.c.Store().Breaker(ctx, name); errors.Is(err, store.ErrNotFound) {
			return apiclient.BreakerView{}, errors.New(server.NoBreakerMessage(name))
		} else if err != nil {
			return apiclient.BreakerView{}, err
		}
	}
	st, err := d.c.Store().SetBreaker(ctx, set)
	action := "breakers close"
	if open {
		action = "breakers open"
	}
	d.record(ctx, err, action, map[string]any{"name": name, "duration": dur.String()}, 1, "", "")
	if err != nil {
		return apiclient.BreakerView{}, err
	}
	return server.FleetBreaker(st, time.Now()), nil
}

func (d *directBackend) Schedules(ctx context.Context) ([]redrive.ScheduleInfo, error) {
	return d.c.Schedules(ctx)
}

func (d *directBackend) SetSchedulePaused(ctx context.Context, name string, paused bool) (redrive.ScheduleInfo, error) {
	set, action := d.c.ResumeSchedule, "periodic resume"
	if paused {
		set, action = d.c.PauseSchedule, "periodic pause"
	}
	si, err := set(ctx, name)
	d.record(ctx, err, action, map[string]any{"name": name}, 1, "", "")
	return si, err
}

func (d *directBackend) TriggerSchedule(ctx context.Context, name string) (*redrive.Job, error) {
	j, err := d.c.TriggerSchedule(ctx, name)
	d.record(ctx, err, "periodic trigger", map[string]any{"name": name}, 1, "", "")
	return j, err
}

// DeleteBreaker refuses as the API does, in the same words.
func (d *directBackend) DeleteBreaker(ctx context.Context, name string, force bool) error {
	_, err := d.c.Store().DeleteBreaker(ctx, store.BreakerDelete{Name: name, Now: time.Now(), Force: force})
	d.record(ctx, err, "breakers delete", map[string]any{"name": name, "force": force}, 1, "", "")
	if errors.Is(err, store.ErrNotFound) {
		return errors.New(server.NoBreakerRecordMessage(name))
	}
	if ie, ok := errors.AsType[*store.BreakerInUseError](err); ok {
		return errors.New(ie.Error())
	}
	return err
}

func (d *directBackend) DeleteSchedule(ctx context.Context, name string) error {
	err := d.c.DeleteSchedule(ctx, name)
	d.record(ctx, err, "periodic delete", map[string]any{"name": name}, 1, "", "")
	return err
}

// operationError words a store error about operation id.
func operationError(id string, err error) error {
	if errors.Is(err, redrive.ErrNotFound) {
		return fmt.Errorf("operation %s not found", id)
	}
	return err
}

func (d *directBackend) Operations(ctx context.Context, before string, limit int) ([]apiclient.Operation, string, error) {
	ops, next, err := d.c.Operations(ctx, before, limit)
	if err != nil {
		return nil, "", err
	}
	out := make([]apiclient.Operation, len(ops))
	for i, op := range ops {
		out[i] = server.OperationOf(op)
	}
	return out, next, nil
}

func (d *directBackend) Operation(ctx context.Context, id string) (apiclient.Operation, error) {
	op, err := d.c.Operation(ctx, id)
	if err != nil {
		return apiclient.Operation{}, operationError(id, err)
	}
	return server.OperationOf(op), nil
}

func (d *directBackend) SetOperation(ctx context.Context, id, action string) (apiclient.Operation, error) {
	set := map[string]func(context.Context, string) (*redrive.Operation, error){
		"pause": d.c.PauseOperation, "resume": d.c.ResumeOperation, "cancel": d.c.CancelOperation}[action]
	if set == nil {
		return apiclient.Operation{}, fmt.Errorf("operations: unknown action %q", action)
	}
	op, err := set(ctx, id)
	if errors.Is(err, redrive.ErrConflict) {
		if cur, gerr := d.c.Operation(ctx, id); gerr == nil {
			return apiclient.Operation{}, fmt.Errorf("cannot %s operation %s: it is %s", action, id, cur.State)
		}
	}
	d.record(ctx, err, "operations "+action, map[string]any{"id": id}, 1, id, "")
	if err != nil {
		return apiclient.Operation{}, operationError(id, err)
	}
	return server.OperationOf(op), nil
}

// Follow runs the operation here (RunOperation), or follows the runner
// that holds it.
func (d *directBackend) Follow(ctx context.Context, op apiclient.Operation, cancelOnStop bool, report func(apiclient.Operation)) (apiclient.Operation, error) {
	last := op
	final, err := d.c.RunOperation(ctx, op.ID, func(o *redrive.Operation) {
		last = server.OperationOf(o)
		report(last)
	})
	if final != nil {
		last = server.OperationOf(final)
	}
	if err != nil && ctx.Err() != nil && cancelOnStop {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if c, cerr := d.c.CancelOperation(cctx, op.ID); cerr == nil {
			last = server.OperationOf(c)
			report(last)
		}
		return last, fmt.Errorf("%w: operation %s %s", ctx.Err(), op.ID, last.State)
	}
	return last, err
}

// CountReplay counts the jobs q selects.
func (d *directBackend) CountReplay(ctx context.Context, q replayQuery) (int64, error) {
	return d.c.Count(ctx, q.Filter)
}

// StartReplay starts a replay operation on the store.
func (d *directBackend) StartReplay(ctx context.Context, q replayQuery) (apiclient.Operation, error) {
	return startDirect(ctx, d, redrive.OperationRequest{Kind: redrive.OperationReplay, Filter: q.Filter, Batch: q.Batch, Rate: q.Rate, Note: q.Note})
}

// StartCancel starts a cancel operation on the store.
func (d *directBackend) StartCancel(ctx context.Context, q cancelQuery) (apiclient.Operation, error) {
	return startDirect(ctx, d, redrive.OperationRequest{Kind: redrive.OperationCancel, IDs: q.IDs, Filter: q.Filter, Batch: q.Batch, Rate: q.Rate, Note: q.Note})
}

// startDirect starts an operation on the store.
func startDirect(ctx context.Context, d *directBackend, req redrive.OperationRequest) (apiclient.Operation, error) {
	req.CheckKinds = true // as the API does
	op, err := d.c.StartOperation(ctx, req)
	if err != nil {
		return apiclient.Operation{}, err
	}
	action := map[store.OperationKind]string{redrive.OperationRedrive: "dlq redrive", redrive.OperationPurge: "dlq purge",
		redrive.OperationReplay: "replay", redrive.OperationCancel: "jobs cancel", redrive.OperationExport: "dlq export"}[op.Kind]
	if action == "" {
		action = "operation " + string(op.Kind)
	}
	target := map[string]any{"filter": server.OperationOf(op).Filter}
	if len(req.IDs) > 0 {
		target["ids"] = req.IDs
	}
	if req.Payload != nil {
		target["payload_edited"] = true
	}
	d.record(ctx, nil, action, target, 0, op.ID, req.Note)
	return server.OperationOf(op), nil
}

// runDirect starts an operation on the store and runs it here (or
// follows the worker that claims it first), calling report with each
// reading. Ctrl-C cancels it: what was done stays done.
func runDirect(ctx context.Context, d *directBackend, req redrive.OperationRequest, report func(apiclient.Operation)) (apiclient.Operation, error) {
	op, err := startDirect(ctx, d, req)
	if err != nil {
		return op, err
	}
	if report == nil {
		report = func(apiclient.Operation) {}
	}
	final, err := d.Follow(ctx, op, true, report)
	if err != nil {
		return final, err
	}
	switch final.State {
	case redrive.OperationDone:
		return final, nil
	case redrive.OperationFailed:
		return final, fmt.Errorf("operation %s failed: %s", final.ID, final.Error)
	}
	return final, fmt.Errorf("operation %s is %s", final.ID, final.State)
}

func (d *directBackend) Limits(ctx context.Context) ([]store.LimitState, error) {
	return d.c.LimitStates(ctx)
}

func (d *directBackend) ChangeLimit(ctx context.Context, name string, ch store.LimitChange) (store.LimitState, error) {
	l, err := d.c.ChangeLimit(ctx, name, ch)
	target := map[string]any{"name": name}
	if ch.Max != nil {
		target["max"] = *ch.Max
	}
	if ch.Rate != nil {
		target["rate"] = *ch.Rate
	}
	if ch.Hold != nil {
		target["hold"] = *ch.Hold
	}
	d.record(ctx, err, "limits set", target, 1, "", "")
	return l, err
}

func (d *directBackend) Workflows(ctx context.Context, before int64, limit int) ([]*redrive.WorkflowInfo, int64, error) {
	return d.c.ListWorkflows(ctx, before, limit)
}

func (d *directBackend) Workflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error) {
	w, err := d.c.GetWorkflow(ctx, id)
	return w, workflowError(id, err)
}

// CancelWorkflow cancels a workflow and records it in the audit log, its
// count the workflow's canceled jobs, as the API does.
func (d *directBackend) CancelWorkflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error) {
	w, err := d.c.CancelWorkflow(ctx, id)
	var n int64
	if w != nil {
		n = w.Canceled
	}
	d.record(ctx, err, "workflows cancel", map[string]any{"id": id}, n, "", "")
	return w, workflowError(id, err)
}

// EnqueueWorkflow enqueues a workflow checked as POST /v1/workflows
// checks it, a kind the live workers of its queue do not run refused.
func (d *directBackend) EnqueueWorkflow(ctx context.Context, in apiclient.WorkflowRequest) (*redrive.WorkflowInfo, error) {
	w, reqs, err := server.WorkflowOf(&in, time.Now())
	if err != nil {
		return nil, err
	}
	if _, err := d.c.CheckKinds(ctx, reqs); err != nil {
		return nil, err
	}
	return d.c.EnqueueWorkflow(ctx, w)
}

// EnqueueWorkflows enqueues workflows checked as POST
// /v1/workflows/batch checks them, a kind the live workers of its queue
// do not run refused.
func (d *directBackend) EnqueueWorkflows(ctx context.Context, in apiclient.WorkflowBatchRequest) ([]*redrive.WorkflowInfo, error) {
	ws, reqs, err := server.WorkflowsOf(&in, time.Now())
	if err != nil {
		return nil, err
	}
	var all []redrive.Request
	for _, r := range reqs {
		all = append(all, r...)
	}
	if _, err := d.c.CheckKinds(ctx, all); err != nil {
		return nil, err
	}
	return d.c.EnqueueWorkflows(ctx, ws)
}

// AddToWorkflow adds jobs checked as POST /v1/workflows/{id}/jobs checks
// them, a kind the live workers of its queue do not run refused.
func (d *directBackend) AddToWorkflow(ctx context.Context, id int64, in apiclient.WorkflowAddRequest) (*redrive.WorkflowInfo, error) {
	w, reqs, err := server.WorkflowAddOf(&in, time.Now())
	if err != nil {
		return nil, err
	}
	if _, err := d.c.CheckKinds(ctx, reqs); err != nil {
		return nil, err
	}
	return d.c.AddToWorkflow(ctx, id, w)
}

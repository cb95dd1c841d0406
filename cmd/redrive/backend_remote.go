package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/apiclient"
	"github.com/redrivehq/redrive/store"
)

// The remote backend: the operator commands on a server's REST API
// (--server), through package apiclient.

var _ backend = (*remoteBackend)(nil)

// remoteBackend works on a server's REST API.
type remoteBackend struct {
	api *apiclient.Client
}

func (r *remoteBackend) Close() error { return nil }

func (r *remoteBackend) Enqueue(ctx context.Context, in apiclient.EnqueueRequest) (*redrive.Job, error) {
	return r.api.Enqueue(ctx, in)
}

// EnqueueBatch enqueues the batch with one POST /v1/jobs/batch.
func (r *remoteBackend) EnqueueBatch(ctx context.Context, reqs []apiclient.EnqueueRequest) ([]*redrive.Job, error) {
	return r.api.EnqueueBatch(ctx, reqs)
}

func (r *remoteBackend) Get(ctx context.Context, id int64) (*redrive.Job, error) {
	return r.api.Job(ctx, id)
}

func (r *remoteBackend) SetPriority(ctx context.Context, id int64, priority int) (*redrive.Job, error) {
	return r.api.SetPriority(ctx, id, priority)
}

func (r *remoteBackend) RunNow(ctx context.Context, id int64) (*redrive.Job, error) {
	return r.api.RunJob(ctx, id)
}

func (r *remoteBackend) Cancel(ctx context.Context, id int64) (*redrive.Job, error) {
	return r.api.CancelJob(ctx, id)
}

// jobQuery is q as the API takes it.
func (q *listQuery) jobQuery() apiclient.JobQuery {
	jq := apiclient.JobQuery{FilterBody: q.wire(), Limit: q.Limit, Cursor: q.Cursor, Match: q.Match}
	if !q.Dead {
		jq.States = q.States
	}
	return jq
}

func (r *remoteBackend) List(ctx context.Context, q listQuery) (redrive.ListResult, error) {
	if q.Dead {
		return r.api.ListDead(ctx, q.jobQuery())
	}
	return r.api.ListJobs(ctx, q.jobQuery())
}

// Count asks GET /v1/jobs/count or GET /v1/dlq/count. A server older
// than the count routes answers GET /v1/dlq/count with 404 and GET
// /v1/jobs/count as the job "count" (400, field id): the count is then
// unknown (-1), not an error.
func (r *remoteBackend) Count(ctx context.Context, q listQuery) (int64, error) {
	var n int64
	var err error
	switch {
	case q.Dead && q.Match != "":
		// CountDead takes no payload match: count the dead jobs as
		// GET /v1/jobs/count does.
		jq := q.jobQuery()
		jq.States = []string{string(redrive.Dead)}
		n, err = r.api.CountJobs(ctx, jq)
	case q.Dead:
		n, err = r.api.CountDead(ctx, q.wire())
	default:
		n, err = r.api.CountJobs(ctx, q.jobQuery())
	}
	if ae, ok := errors.AsType[*apiclient.Error](err); ok &&
		(ae.StatusCode == http.StatusNotFound || (ae.StatusCode == http.StatusBadRequest && ae.Field == "id")) {
		return -1, nil
	}
	return n, err
}

func (r *remoteBackend) Stats(ctx context.Context) (redrive.Stats, error) { return r.api.Stats(ctx) }

func (r *remoteBackend) Groups(ctx context.Context, fo filterOptions, limit int) ([]redrive.Group, error) {
	return r.api.DeadGroups(ctx, fo.wire(), limit)
}

// startTimeout bounds a request that starts an operation on the server.
const startTimeout = 30 * time.Second

// started runs start, a request that starts an operation on the server,
// to its answer even when ctx ends meanwhile (Ctrl-C while the request
// is in flight): the server may have started the operation, and only its
// answer names it, so that follow can cancel it there rather than leave
// it running unseen.
func started(ctx context.Context, start func(context.Context) (apiclient.Operation, error)) (apiclient.Operation, error) {
	if err := ctx.Err(); err != nil {
		return apiclient.Operation{}, err // not sent: nothing started
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	defer cancel()
	return start(sctx)
}

// follow follows op on the server, canceling it there when ctx ends
// first; an operation that failed or was canceled by someone else is an
// error too.
func (r *remoteBackend) follow(ctx context.Context, op apiclient.Operation, report func(apiclient.Operation)) (apiclient.Operation, error) {
	op, err := r.api.Follow(ctx, op, apiclient.FollowOptions{Report: report, CancelOnStop: true})
	if err != nil {
		return op, err
	}
	switch op.State {
	case redrive.OperationDone:
		return op, nil
	case redrive.OperationFailed:
		return op, fmt.Errorf("server: operation %s failed: %s", op.ID, op.Error)
	default:
		return op, fmt.Errorf("server: operation %s %s: %s", op.ID, op.State, op.Error)
	}
}

// Redrive starts a redrive operation on the server and follows it.
func (r *remoteBackend) Redrive(ctx context.Context, q redriveQuery, progress func(redrive.RedriveProgress)) (redrive.RedriveProgress, error) {
	body := apiclient.RedriveBody{IDs: q.IDs, Rate: q.Rate, Payload: q.Payload, Note: q.Note}
	if len(q.IDs) == 0 {
		if q.Filter.empty() {
			body.All = true
		} else {
			fb := q.Filter.wire()
			body.Filter = &fb
		}
	}
	op, err := started(ctx, func(ctx context.Context) (apiclient.Operation, error) { return r.api.StartRedrive(ctx, body) })
	if err != nil {
		return redrive.RedriveProgress{}, err
	}
	op, err = r.follow(ctx, op, func(op apiclient.Operation) {
		if progress != nil {
			progress(redriveProgress(op))
		}
	})
	return redriveProgress(op), err
}

// Purge starts a purge operation on the server and follows it.
func (r *remoteBackend) Purge(ctx context.Context, fo filterOptions, all bool, progress func(purgeProgress)) (int64, error) {
	op, err := started(ctx, func(ctx context.Context) (apiclient.Operation, error) { return r.api.StartPurge(ctx, fo.wire(), all) })
	if err != nil {
		return 0, err
	}
	op, err = r.follow(ctx, op, func(op apiclient.Operation) {
		if progress != nil {
			progress(purgeProgress{Matched: op.Matched, Purged: op.Purged})
		}
	})
	return op.Purged, err
}

// purgeIDsPerRequest bounds the ids of one DELETE /v1/dlq, which go in
// its URL.
const purgeIDsPerRequest = 500

// PurgeIDs purges the dead jobs among ids on the server, in requests of
// at most purgeIDsPerRequest ids, following each operation.
func (r *remoteBackend) PurgeIDs(ctx context.Context, ids []int64) (int64, error) {
	var n int64
	for start := 0; start < len(ids); start += purgeIDsPerRequest {
		batch := ids[start:min(start+purgeIDsPerRequest, len(ids))]
		op, err := started(ctx, func(ctx context.Context) (apiclient.Operation, error) { return r.api.StartPurgeIDs(ctx, batch) })
		if err != nil {
			return n, err
		}
		op, err = r.follow(ctx, op, nil)
		n += op.Purged
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Export reads GET /v1/dlq/export (NDJSON, one job a line) and writes
// each job's folder as redrive.Client.Export does: with reveal=true, so
// that the payloads the server does not seal keep their real values (a
// redrive from the export needs them) as a folder export's do, and
// decrypt=true when asked.
func (r *remoteBackend) Export(ctx context.Context, dir string, fo filterOptions, decrypt bool, progress func(int, int64)) (int, error) {
	if dir == "" {
		return 0, errors.New("export: empty directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	s, err := r.api.ExportDeadWith(ctx, fo.wire(), apiclient.ExportOptions{Reveal: true, Decrypt: decrypt})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if progress != nil {
		progress(0, s.Total)
	}
	n := 0
	for {
		line, err := s.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if err := redrive.WriteExported(dir, line.Job.Payload, line.Error, line.Metadata); err != nil {
			return n, fmt.Errorf("export job %d: %w", line.Job.ID, err)
		}
		n++
		if progress != nil {
			progress(n, s.Total)
		}
	}
}

func (r *remoteBackend) Queues(ctx context.Context) ([]redrive.Queue, error) {
	return r.api.Queues(ctx)
}

func (r *remoteBackend) SetPaused(ctx context.Context, name string, paused bool) (redrive.Queue, error) {
	if paused {
		return r.api.PauseQueue(ctx, name)
	}
	return r.api.ResumeQueue(ctx, name)
}

func (r *remoteBackend) Workers(ctx context.Context) ([]redrive.WorkerStatus, error) {
	return r.api.Workers(ctx)
}

func (r *remoteBackend) Breakers(ctx context.Context) ([]apiclient.BreakerView, error) {
	return r.api.Breakers(ctx)
}

func (r *remoteBackend) ForceBreaker(ctx context.Context, name string, open bool, dur time.Duration) (apiclient.BreakerView, error) {
	if !open {
		return r.api.ResetBreaker(ctx, name)
	}
	return r.api.OpenBreaker(ctx, name, dur)
}

func (r *remoteBackend) DeleteBreaker(ctx context.Context, name string, force bool) error {
	return r.api.DeleteBreaker(ctx, name, force)
}

func (r *remoteBackend) Schedules(ctx context.Context) ([]redrive.ScheduleInfo, error) {
	return r.api.Schedules(ctx)
}

func (r *remoteBackend) SetSchedulePaused(ctx context.Context, name string, paused bool) (redrive.ScheduleInfo, error) {
	if paused {
		return r.api.PauseSchedule(ctx, name)
	}
	return r.api.ResumeSchedule(ctx, name)
}

func (r *remoteBackend) TriggerSchedule(ctx context.Context, name string) (*redrive.Job, error) {
	return r.api.TriggerSchedule(ctx, name)
}

func (r *remoteBackend) DeleteSchedule(ctx context.Context, name string) error {
	return r.api.DeleteSchedule(ctx, name)
}

func (r *remoteBackend) Operations(ctx context.Context, before string, limit int) ([]apiclient.Operation, string, error) {
	return r.api.Operations(ctx, before, limit)
}

func (r *remoteBackend) Operation(ctx context.Context, id string) (apiclient.Operation, error) {
	return r.api.Operation(ctx, id)
}

func (r *remoteBackend) SetOperation(ctx context.Context, id, action string) (apiclient.Operation, error) {
	switch action {
	case "pause":
		return r.api.PauseOperation(ctx, id)
	case "resume":
		return r.api.ResumeOperation(ctx, id)
	case "cancel":
		return r.api.CancelOperation(ctx, id)
	}
	return apiclient.Operation{}, fmt.Errorf("operations: unknown action %q", action)
}

// Follow polls the operation on the server until it ends; with
// cancelOnStop, it cancels it there when ctx ends first.
func (r *remoteBackend) Follow(ctx context.Context, op apiclient.Operation, cancelOnStop bool, report func(apiclient.Operation)) (apiclient.Operation, error) {
	if cancelOnStop {
		return r.follow(ctx, op, report)
	}
	return r.api.Follow(ctx, op, apiclient.FollowOptions{Report: report})
}

// CountReplay is -1: the server counts as it runs.
func (r *remoteBackend) CountReplay(context.Context, replayQuery) (int64, error) { return -1, nil }

// StartReplay starts a replay on the server (POST /v1/replay).
func (r *remoteBackend) StartReplay(ctx context.Context, q replayQuery) (apiclient.Operation, error) {
	body := apiclient.ReplayBody{All: q.All, Batch: q.Batch, Rate: q.Rate, Note: q.Note}
	if !q.Flags.empty() || len(q.States) > 0 || q.Match.Field != "" {
		rf := apiclient.ReplayFilterBody{FilterBody: q.Flags.wire(), States: q.States, PayloadField: q.Match.Field, PayloadValue: q.Match.Value}
		body.Filter = &rf
	} else {
		body.All = true
	}
	return started(ctx, func(ctx context.Context) (apiclient.Operation, error) { return r.api.StartReplay(ctx, body) })
}

// StartCancel starts a bulk cancel on the server (POST /v1/jobs/cancel).
func (r *remoteBackend) StartCancel(ctx context.Context, q cancelQuery) (apiclient.Operation, error) {
	body := apiclient.CancelBody{IDs: q.IDs, All: q.All, Batch: q.Batch, Rate: q.Rate, Note: q.Note}
	if len(q.IDs) == 0 {
		if !q.Flags.empty() || len(q.States) > 0 || q.Match.Field != "" {
			rf := apiclient.ReplayFilterBody{FilterBody: q.Flags.wire(), States: q.States, PayloadField: q.Match.Field, PayloadValue: q.Match.Value}
			body.Filter = &rf
		} else {
			body.All = true
		}
	}
	return started(ctx, func(ctx context.Context) (apiclient.Operation, error) { return r.api.StartCancel(ctx, body) })
}

func (r *remoteBackend) Limits(ctx context.Context) ([]store.LimitState, error) {
	return r.api.Limits(ctx)
}

func (r *remoteBackend) ChangeLimit(ctx context.Context, name string, ch store.LimitChange) (store.LimitState, error) {
	body := apiclient.LimitSet{Max: ch.Max, HoldOnRetryAfter: ch.Hold}
	if ch.Rate != nil {
		rate := "none"
		if ch.Rate.N != 0 {
			rate = redrive.FormatRate(*ch.Rate)
			if ch.Rate.Burst != 0 {
				burst := ch.Rate.Burst
				body.Burst = &burst
			}
		}
		body.Rate = &rate
	}
	return r.api.ChangeLimit(ctx, name, body)
}

func (r *remoteBackend) Audit(ctx context.Context, q apiclient.AuditQuery) (apiclient.AuditList, error) {
	return r.api.Audit(ctx, q)
}

func (r *remoteBackend) Workflows(ctx context.Context, before int64, limit int) ([]*redrive.WorkflowInfo, int64, error) {
	return r.api.Workflows(ctx, before, limit)
}

func (r *remoteBackend) Workflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error) {
	return r.api.Workflow(ctx, id)
}

func (r *remoteBackend) CancelWorkflow(ctx context.Context, id int64) (*redrive.WorkflowInfo, error) {
	return r.api.CancelWorkflow(ctx, id)
}

func (r *remoteBackend) EnqueueWorkflow(ctx context.Context, in apiclient.WorkflowRequest) (*redrive.WorkflowInfo, error) {
	return r.api.EnqueueWorkflow(ctx, in)
}

func (r *remoteBackend) EnqueueWorkflows(ctx context.Context, in apiclient.WorkflowBatchRequest) ([]*redrive.WorkflowInfo, error) {
	return r.api.EnqueueWorkflows(ctx, in)
}

func (r *remoteBackend) AddToWorkflow(ctx context.Context, id int64, in apiclient.WorkflowAddRequest) (*redrive.WorkflowInfo, error) {
	return r.api.AddToWorkflow(ctx, id, in)
}

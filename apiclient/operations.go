package apiclient

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// StartCancel starts a bulk cancel (POST /v1/jobs/cancel): the pending
// and scheduled jobs in.Filter (or in.IDs) selects are canceled.
func (c *Client) StartCancel(ctx context.Context, in CancelBody) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, "/v1/jobs/cancel", in, &ob)
}

// StartReplay starts a replay (POST /v1/replay): the jobs in.Filter
// selects, whatever their state, enqueued again as new jobs.
func (c *Client) StartReplay(ctx context.Context, in ReplayBody) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, "/v1/replay", in, &ob)
}

// Operations returns a page of the operations, the newest first, from
// before on ("": the newest), at most limit (0: the server's default)
// (GET /v1/operations). next is the before of the following page, ""
// on the last.
func (c *Client) Operations(ctx context.Context, before string, limit int) (ops []Operation, next string, err error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	if before != "" {
		v.Set("before", before)
	}
	var l OperationList
	if err := c.get(ctx, "/v1/operations", v, &l); err != nil {
		return nil, "", err
	}
	return l.Operations, l.Next, nil
}

// OperationPages iterates over the pages of the operations, the newest
// first, limit a page, until the last page or the first error.
func (c *Client) OperationPages(ctx context.Context, limit int) iter.Seq2[[]Operation, error] {
	return func(yield func([]Operation, error) bool) {
		before := ""
		seen := map[string]bool{}
		for {
			ops, next, err := c.Operations(ctx, before, limit)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(ops, nil) || next == "" {
				return
			}
			if seen[next] || next == before {
				yield(nil, fmt.Errorf("server: the operations listing answered a cursor it gave before (%q) as the next: stopped", next))
				return
			}
			seen[next] = true
			before = next
		}
	}
}

// operationPath is the path of operation id, and of its action when not
// "".
func operationPath(id, action string) string {
	p := "/v1/operations/" + segment(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// Operation returns operation id (GET /v1/operations/{id}).
func (c *Client) Operation(ctx context.Context, id string) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.get(ctx, operationPath(id, ""), nil, &ob)
}

// PauseOperation pauses a pending or running operation (POST
// /v1/operations/{id}/pause); one that has ended is an *Error 409.
func (c *Client) PauseOperation(ctx context.Context, id string) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, operationPath(id, "pause"), nil, &ob)
}

// ResumeOperation resumes a paused operation (POST
// /v1/operations/{id}/resume).
func (c *Client) ResumeOperation(ctx context.Context, id string) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, operationPath(id, "resume"), nil, &ob)
}

// CancelOperation cancels an operation that has not ended (POST
// /v1/operations/{id}/cancel, which DELETE /v1/operations/{id} does
// too): its runner stops after its current batch, and what it did stays
// done.
func (c *Client) CancelOperation(ctx context.Context, id string) (Operation, error) {
	var ob OperationBody
	return ob.Operation, c.post(ctx, operationPath(id, "cancel"), nil, &ob)
}

// FollowOptions say how Follow follows an operation.
type FollowOptions struct {
	// Report, when set, is called with the operation given, then with
	// each state read.
	Report func(Operation)
	// CancelOnStop cancels the operation on the server when ctx ends
	// before it does (Ctrl-C): Follow then returns its final state with
	// ctx's error. Otherwise the operation goes on.
	CancelOnStop bool
}

// Follow reads op's state every poll interval (WithPollInterval) until
// it is final (done, failed or canceled), and returns it; the operation's
// own failure is in its State and Error, not in the error returned.
func (c *Client) Follow(ctx context.Context, op Operation, o FollowOptions) (Operation, error) {
	report := o.Report
	if report == nil {
		report = func(Operation) {}
	}
	report(op)
	t := time.NewTicker(c.poll)
	defer t.Stop()
	for !op.State.Final() {
		select {
		case <-ctx.Done():
			if !o.CancelOnStop {
				return op, ctx.Err()
			}
			final, err := c.cancelStopped(ctx, op.ID)
			if err != nil {
				return op, fmt.Errorf("%w; canceling operation %s on the server failed: %w", ctx.Err(), op.ID, err)
			}
			report(final)
			return final, fmt.Errorf("%w: operation %s %s on the server", ctx.Err(), op.ID, final.State)
		case <-t.C:
		}
		cur, err := c.Operation(ctx, op.ID)
		if err != nil {
			if ctx.Err() != nil && o.CancelOnStop {
				continue // canceled meanwhile: the next turn cancels the operation
			}
			return op, fmt.Errorf("follow operation %s: %w", op.ID, err)
		}
		op = cur
		report(op)
	}
	return op, nil
}

// cancelStopped cancels operation id after ctx has ended, and returns its
// final state.
func (c *Client) cancelStopped(ctx context.Context, id string) (Operation, error) {
	// A context of its own: ctx is over, and the cancel must still go.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var ob OperationBody
	err := c.do(cctx, request{method: http.MethodDelete, path: operationPath(id, "")}, &ob)
	if statusOf(err) == http.StatusConflict {
		// It ended meanwhile.
		return c.Operation(cctx, id)
	}
	return ob.Operation, err
}

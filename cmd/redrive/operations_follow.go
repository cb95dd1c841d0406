package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redrivehq/redrive"
	"github.com/redrivehq/redrive/server"
	"github.com/spf13/cobra"
)

// followAndReport follows op with a progress bar, then prints its final
// state. cancelOnStop cancels it when ctx ends (Ctrl-C) first.
func followAndReport(ctx context.Context, cmd *cobra.Command, g *globalOptions, b backend, op server.Operation, cancelOnStop bool) error {
	bar := newProgressBar(cmd, g, string(op.Kind))
	final, err := followOperation(ctx, b, op, cancelOnStop, func(o server.Operation) {
		total := o.Matched
		if o.State == server.OperationPending && o.Matched == 0 {
			total = -1
		}
		detail := outcomeText(o)
		if o.State != server.OperationRunning {
			detail = strings.TrimPrefix(detail+", "+string(o.State), ", ")
		}
		bar.update(o.Processed, total, detail)
	})
	bar.finish()
	out := cmd.OutOrStdout()
	if g.JSON {
		if werr := writeJSON(out, final); werr != nil {
			return werr
		}
	} else if final.ID != "" {
		fmt.Fprintf(out, "operation %s %s: %s\n", final.ID, final.State, progressText(final))
	}
	if err != nil {
		return err
	}
	switch final.State {
	case server.OperationDone:
		return nil
	case server.OperationFailed:
		return fmt.Errorf("operation %s failed: %s", final.ID, final.Error)
	}
	return fmt.Errorf("operation %s is %s", final.ID, final.State)
}

// followOperation follows op until it ends (or, directly on the store,
// is paused), calling report with each reading. Directly on the store
// it runs the operation itself when no worker holds it.
func followOperation(ctx context.Context, b backend, op server.Operation, cancelOnStop bool, report func(server.Operation)) (server.Operation, error) {
	switch b := b.(type) {
	case *directBackend:
		last := op
		final, err := b.c.RunOperation(ctx, op.ID, func(o *redrive.Operation) {
			last = server.OperationOf(o)
			report(last)
		})
		if final != nil {
			last = server.OperationOf(final)
		}
		if err != nil && ctx.Err() != nil && cancelOnStop {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if c, cerr := b.c.CancelOperation(cctx, op.ID); cerr == nil {
				last = server.OperationOf(c)
				report(last)
			}
			return last, fmt.Errorf("%w: operation %s %s", ctx.Err(), op.ID, last.State)
		}
		return last, err
	case *httpBackend:
		if cancelOnStop {
			return b.follow(ctx, op, report)
		}
		return b.watch(ctx, op, report)
	}
	return op, fmt.Errorf("operations: unsupported backend %T", b)
}

// listOperations lists operations on either backend.
func listOperations(ctx context.Context, b backend, before string, limit int) ([]server.Operation, string, error) {
	switch b := b.(type) {
	case *directBackend:
		ops, next, err := b.c.Operations(ctx, before, limit)
		if err != nil {
			return nil, "", err
		}
		out := make([]server.Operation, len(ops))
		for i, op := range ops {
			out[i] = server.OperationOf(op)
		}
		return out, next, nil
	case *httpBackend:
		v := url.Values{}
		if limit > 0 {
			v.Set("limit", strconv.Itoa(limit))
		}
		if before != "" {
			v.Set("before", before)
		}
		var l struct {
			Operations []server.Operation `json:"operations"`
			Next       string             `json:"next"`
		}
		if err := b.do(ctx, http.MethodGet, "/v1/operations", v, nil, &l); err != nil {
			return nil, "", err
		}
		return l.Operations, l.Next, nil
	}
	return nil, "", fmt.Errorf("operations: unsupported backend %T", b)
}

// operationError words a store error about operation id.
func operationError(id string, err error) error {
	if errors.Is(err, redrive.ErrNotFound) {
		return fmt.Errorf("operation %s not found", id)
	}
	return err
}

func getOperation(ctx context.Context, b backend, id string) (server.Operation, error) {
	switch b := b.(type) {
	case *directBackend:
		op, err := b.c.Operation(ctx, id)
		if err != nil {
			return server.Operation{}, operationError(id, err)
		}
		return server.OperationOf(op), nil
	case *httpBackend:
		var ob operationBody
		err := b.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), nil, nil, &ob)
		return ob.Operation, err
	}
	return server.Operation{}, fmt.Errorf("operations: unsupported backend %T", b)
}

// setOperation pauses, resumes or cancels an operation.
func setOperation(ctx context.Context, b backend, id, action string) (server.Operation, error) {
	switch b := b.(type) {
	case *directBackend:
		set := map[string]func(context.Context, string) (*redrive.Operation, error){
			"pause": b.c.PauseOperation, "resume": b.c.ResumeOperation, "cancel": b.c.CancelOperation}[action]
		op, err := set(ctx, id)
		if errors.Is(err, redrive.ErrConflict) {
			if cur, gerr := b.c.Operation(ctx, id); gerr == nil {
				return server.Operation{}, fmt.Errorf("cannot %s operation %s: it is %s", action, id, cur.State)
			}
		}
		if err != nil {
			return server.Operation{}, operationError(id, err)
		}
		return server.OperationOf(op), nil
	case *httpBackend:
		var ob operationBody
		err := b.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/"+action, nil, nil, &ob)
		return ob.Operation, err
	}
	return server.Operation{}, fmt.Errorf("operations: unsupported backend %T", b)
}

// startDirect starts an operation on the store.
func startDirect(ctx context.Context, d *directBackend, req redrive.OperationRequest) (server.Operation, error) {
	op, err := d.c.StartOperation(ctx, req)
	if err != nil {
		return server.Operation{}, err
	}
	return server.OperationOf(op), nil
}

// runDirect starts an operation on the store and runs it here (or
// follows the worker that claims it first), calling report with each
// reading. Ctrl-C cancels it: what was done stays done.
func runDirect(ctx context.Context, d *directBackend, req redrive.OperationRequest, report func(server.Operation)) (server.Operation, error) {
	op, err := startDirect(ctx, d, req)
	if err != nil {
		return op, err
	}
	if report == nil {
		report = func(server.Operation) {}
	}
	final, err := followOperation(ctx, d, op, true, report)
	if err != nil {
		return final, err
	}
	switch final.State {
	case server.OperationDone:
		return final, nil
	case server.OperationFailed:
		return final, fmt.Errorf("operation %s failed: %s", final.ID, final.Error)
	}
	return final, fmt.Errorf("operation %s is %s", final.ID, final.State)
}

package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// TestWorkflowBatchCommit checks the completions done at the commit
// (migration 0038, docs/design.md "Workflows") in transactions of several
// statements, written by hand as any code may: completions of one
// workflow in two statements release their dependent once the
// transaction commits; a transaction that sets jobs_flow_batch IMMEDIATE
// sees a completion's consequences at the end of its statement; and a
// completion and a cancel of the same workflow in one transaction fire
// the complete callback once, though the cancel (done for its row, in its
// statement) meets counts without the completion (done at the commit).
func TestWorkflowBatchCommit(t *testing.T) {
	dbURL(t)
	t.Parallel()
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Microsecond)
	jobs := pgx.Identifier{schema, "jobs"}.Sanitize()
	job := func(kind string) store.NewJob { return store.NewJob{Queue: "q", Kind: kind, Payload: []byte(`{}`)} }
	enqueue := func(w store.NewWorkflow) (*store.Workflow, map[string]int64) {
		t.Helper()
		wf, err := s.EnqueueWorkflow(ctx, w, now)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int64{}
		for _, j := range wf.Jobs {
			ids[j.Name] = j.JobID
		}
		return wf, ids
	}
	state := func(id int64) store.State {
		t.Helper()
		j, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}
	inTx := func(f func(tx pgx.Tx)) {
		t.Helper()
		tx, err := s.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		f(tx)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(tx pgx.Tx, sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	finish := func(tx pgx.Tx, state string, id int64) {
		t.Helper()
		exec(tx, `UPDATE `+jobs+` SET state = $1, finished_at = $2 WHERE id = $3`, state, now, id)
	}

	// a and b complete in two statements of one transaction: c is
	// released at the commit, the callbacks wait for c.
	cb := job("cb")
	wf, ids := enqueue(store.NewWorkflow{
		Jobs: []store.WorkflowNode{
			{Name: "a", Job: job("a")}, {Name: "b", Job: job("b")},
			{Name: "c", Job: job("c"), After: []string{"a", "b"}},
		},
		OnSuccess: &cb, OnComplete: &cb,
	})
	inTx(func(tx pgx.Tx) {
		finish(tx, "completed", ids["a"])
		finish(tx, "completed", ids["b"])
	})
	if got := state(ids["c"]); got != store.Pending {
		t.Fatalf("c is %s after its dependencies' commit, want pending", got)
	}
	for _, id := range []int64{wf.OnSuccess, wf.OnComplete} {
		if got := state(id); got != store.Blocked {
			t.Fatalf("callback %d is %s with c pending, want blocked", id, got)
		}
	}
	// c completes in a transaction with the trigger IMMEDIATE: its
	// statement fires the callbacks, seen before the commit.
	inTx(func(tx pgx.Tx) {
		exec(tx, `SET CONSTRAINTS `+pgx.Identifier{schema, "jobs_flow_batch"}.Sanitize()+` IMMEDIATE`)
		finish(tx, "completed", ids["c"])
		for _, id := range []int64{wf.OnSuccess, wf.OnComplete} {
			var st string
			if err := tx.QueryRow(ctx, `SELECT state FROM `+jobs+` WHERE id = $1`, id).Scan(&st); err != nil {
				t.Fatal(err)
			}
			if st != "pending" {
				t.Fatalf("callback %d is %s after c's statement (IMMEDIATE), want pending", id, st)
			}
		}
	})
	got, err := s.GetWorkflow(ctx, wf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.WorkflowSucceeded || got.Completed != 3 {
		t.Fatalf("workflow %s with %d completed, want succeeded with 3", got.State, got.Completed)
	}

	// A completion then a cancel in one transaction: the cancel's
	// statement counts 1 canceled of 2, the commit's pass 1 completed:
	// the complete callback fires there, once.
	done := job("done")
	wf, ids = enqueue(store.NewWorkflow{
		Jobs:       []store.WorkflowNode{{Name: "x", Job: job("x")}, {Name: "y", Job: job("y")}},
		OnComplete: &done,
	})
	inTx(func(tx pgx.Tx) {
		finish(tx, "completed", ids["x"])
		finish(tx, "canceled", ids["y"])
	})
	if got := state(wf.OnComplete); got != store.Pending {
		t.Fatalf("complete callback is %s after every job finished, want pending", got)
	}
	got, err = s.GetWorkflow(ctx, wf.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Completed != 1 || got.Canceled != 1 || got.State != store.WorkflowFinished {
		t.Fatalf("workflow %s, %d completed and %d canceled, want finished, 1 and 1", got.State, got.Completed, got.Canceled)
	}

	// One statement completing 4,000 jobs fanning into one: the setting
	// takes the first 16,384 characters of ids (of 4 or 5 digits here:
	// about 3,000), the rest are done for their row; the final job is
	// released once, every completion counted.
	const wide = 4000
	fan := store.NewWorkflow{OnSuccess: &done}
	after := make([]string, wide)
	for i := range after {
		after[i] = fmt.Sprint("d", i)
		fan.Jobs = append(fan.Jobs, store.WorkflowNode{Name: after[i], Job: job("d")})
	}
	fan.Jobs = append(fan.Jobs, store.WorkflowNode{Name: "final", Job: job("final"), After: after})
	wf, ids = enqueue(fan)
	inTx(func(tx pgx.Tx) {
		exec(tx, `UPDATE `+jobs+` SET state = 'completed', finished_at = $1 WHERE flow = $2 AND state = 'pending'`, now, wf.ID)
		// Before the commit: those done for their row are counted.
		var counted int64
		if err := tx.QueryRow(ctx, `SELECT completed FROM `+pgx.Identifier{schema, "workflows"}.Sanitize()+` WHERE id = $1`, wf.ID).Scan(&counted); err != nil {
			t.Fatal(err)
		}
		if counted == 0 || counted == wide {
			t.Fatalf("%d of %d completions counted before the commit, want some (past the setting's bound) but not all", counted, wide)
		}
	})
	if got := state(ids["final"]); got != store.Pending {
		t.Fatalf("final job is %s after its %d dependencies completed in one statement, want pending", got, wide)
	}
	if got, err = s.GetWorkflow(ctx, wf.ID); err != nil {
		t.Fatal(err)
	}
	if got.Completed != wide {
		t.Fatalf("workflow counts %d completed, want %d", got.Completed, wide)
	}
}

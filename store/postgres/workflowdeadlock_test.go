package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestWorkflowPurgeCancelDeadlock tries to provoke the deadlock between
// the two orders in which a workflow's rows are locked: a purge of a
// dead job locks the job, then its blocked dependents (their cancel by
// jobs_flow_deleted), then the workflow (each cancel's jobs_flow); a
// cancel of the workflow locks the workflow, then its jobs. Each round
// runs, at once, for several workflows whose dead job X has many
// blocked dependents, the purge of X and the cancel of the workflow,
// and a Finish completing the workflow's running jobs (locked by the
// Finish, the workflow at its commit; the cancel asks them to stop).
// Every call must succeed (a deadlock PostgreSQL breaks is retried),
// and each workflow must end consistent: X gone, every other job
// completed or canceled, its counts those of its jobs (X's death kept),
// the success callback canceled and the complete callback fired once.
func TestWorkflowPurgeCancelDeadlock(t *testing.T) {
	dbURL(t)
	t.Parallel()
	schema := newSchema(t)
	s, err := postgres.Open(t.Context(), dbURL(t), postgres.Options{Schema: schema, MaxConns: 16, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	var before int64
	if err := s.Pool().QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	const rounds, flows, dependents, runners = 4, 4, 150, 20
	now := time.Now().UTC().Truncate(time.Second)
	for round := range rounds {
		q := fmt.Sprintf("dl%d", round)
		nj := func(kind string) store.NewJob { return store.NewJob{Queue: q, Kind: kind, MaxRetries: -1} }
		cb := func(kind string) *store.NewJob { j := nj(kind); j.Queue = q + "-cb"; return &j }
		type wf struct {
			w       *store.Workflow
			x       int64
			running []*store.Job
		}
		var ws []*wf
		for f := range flows {
			nw := store.NewWorkflow{Name: fmt.Sprint("dl-", round, "-", f), OnSuccess: cb("success"), OnComplete: cb("complete")}
			nw.Jobs = append(nw.Jobs, store.WorkflowNode{Name: "X", Job: nj("X")})
			for k := range dependents {
				nw.Jobs = append(nw.Jobs, store.WorkflowNode{Name: fmt.Sprint("d", k), Job: nj("d"), After: []string{"X"}})
			}
			for k := range runners {
				nw.Jobs = append(nw.Jobs, store.WorkflowNode{Name: fmt.Sprint("r", k), Job: nj("r")})
			}
			w, err := s.EnqueueWorkflow(ctx, nw, now)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, &wf{w: w, x: w.Jobs[0].JobID})
		}
		leased, err := s.Fetch(ctx, store.FetchParams{Queue: q, Limit: 1000, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
		if err != nil || len(leased) != flows*(1+runners) {
			t.Fatalf("round %d: fetch: %d jobs, %v", round, len(leased), err)
		}
		var bury []store.Outcome
		for _, j := range leased {
			o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, At: now}
			if j.Kind == "X" {
				o.Kind, o.Class, o.DeadReason, o.Error = store.Bury, failure.Permanent, "permanent", "boom"
				bury = append(bury, o)
				continue
			}
			for _, f := range ws {
				if j.ID > f.x && j.ID <= f.x+dependents+runners {
					f.running = append(f.running, j)
				}
			}
		}
		if _, err := s.Finish(ctx, bury); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 3*flows)
		for _, f := range ws {
			wg.Add(3)
			go func() {
				defer wg.Done()
				<-start
				if n, err := s.Purge(ctx, store.Filter{IDs: []int64{f.x}}, 10); err != nil || n != 1 {
					errs <- fmt.Errorf("purge of X (%d): %d, %v", f.x, n, err)
				}
			}()
			go func() {
				defer wg.Done()
				<-start
				if _, err := s.CancelWorkflow(ctx, f.w.ID, now.Add(time.Second)); err != nil {
					errs <- fmt.Errorf("cancel of workflow %d: %v", f.w.ID, err)
				}
			}()
			go func() {
				defer wg.Done()
				<-start
				var outs []store.Outcome
				for _, j := range f.running {
					outs = append(outs, store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker,
						Kind: store.Complete, At: now.Add(time.Second)})
				}
				if _, err := s.Finish(ctx, outs); err != nil {
					errs <- fmt.Errorf("finish of workflow %d's running jobs: %v", f.w.ID, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		for _, f := range ws {
			w, err := s.GetWorkflow(ctx, f.w.ID)
			if err != nil {
				t.Fatal(err)
			}
			if w.Counts[store.Completed] != runners || w.Counts[store.Canceled] != dependents || len(w.Jobs) != dependents+runners {
				t.Errorf("round %d: workflow %d: jobs by state %v, %d jobs; want %d completed, %d canceled", round, w.ID, w.Counts, len(w.Jobs), runners, dependents)
			}
			if w.Completed != runners || w.Canceled != dependents || w.Dead != 1 || w.State != store.WorkflowCanceled || w.ClosedAt == nil {
				t.Errorf("round %d: workflow %d: %s, completed %d, dead %d, canceled %d, closed %v", round, w.ID, w.State, w.Completed, w.Dead, w.Canceled, w.ClosedAt)
			}
			if j, err := s.Get(ctx, f.x); err == nil {
				t.Errorf("round %d: X (%d) is still there, %s", round, f.x, j.State)
			}
			succ, err := s.Get(ctx, w.OnSuccess)
			if err != nil || succ.State != store.Canceled {
				t.Errorf("round %d: workflow %d: success callback %+v, %v; want canceled", round, w.ID, succ, err)
			}
			comp, err := s.Get(ctx, w.OnComplete)
			if err != nil || (comp.State != store.Pending && comp.State != store.Canceled) {
				t.Errorf("round %d: workflow %d: complete callback %+v, %v; want pending or canceled", round, w.ID, comp, err)
			}
		}
	}
	checkJobCounts(t, schema)
	var after int64
	if err := s.Pool().QueryRow(context.Background(), `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	t.Logf("deadlocks PostgreSQL broke meanwhile (the whole database, other tests too): %d", after-before)
}

package sqlite_test

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestDepsGoneFollowDependent: the trace of a deleted dependency
// (job_deps_gone, migration 0045) lives as long as its dependent: D
// waits for A and B; A completes and is deleted by retention (a trace
// for D), B dies and is purged (D, blocked, is canceled: no trace for
// it, and its first stays), and D's own deletion takes its traces.
func TestDepsGoneFollowDependent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "redrive.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: "q", Kind: kind, MaxRetries: -1} }
	w, err := s.EnqueueWorkflow(ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{
		{Name: "A", Job: nj("A")}, {Name: "B", Job: nj("B")}, {Name: "D", Job: nj("D"), After: []string{"A", "B"}}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, j := range w.Jobs {
		ids[j.Name] = j.JobID
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != 2 {
		t.Fatalf("fetch: %d, %v", len(got), err)
	}
	var outs []store.Outcome
	for _, j := range got {
		o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: store.Complete, At: t0}
		if j.Kind == "B" {
			o.Kind, o.Class, o.DeadReason, o.Error = store.Bury, failure.Permanent, "permanent", "boom"
		}
		outs = append(outs, o)
	}
	if _, err := s.Finish(ctx, outs); err != nil {
		t.Fatal(err)
	}
	traces := func(what string, want int) {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM job_deps_gone`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d traces of deleted dependencies, want %d", what, n, want)
		}
	}
	if n, err := s.DeleteFinished(ctx, store.Completed, t0.Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("retention of A: %d, %v", n, err)
	}
	traces("A deleted", 1)
	if n, err := s.Purge(ctx, store.Filter{IDs: []int64{ids["B"]}}, 10); err != nil || n != 1 {
		t.Fatalf("purge of B: %d, %v", n, err)
	}
	traces("B purged", 1)
	deps, err := s.DependencyResults(ctx, ids["D"])
	if err != nil || len(deps) != 1 || !deps[0].Deleted || deps[0].Name != "A" || deps[0].State != store.Completed {
		t.Fatalf("DependencyResults(D) = %+v, %v; want A, deleted", deps, err)
	}
	if n, err := s.DeleteFinished(ctx, store.Canceled, time.Now().Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("retention of D: %d, %v", n, err)
	}
	traces("D deleted", 0)
}

// TestFlowBatchFailedFinish: a Finish that fails between its statements
// (here a trigger aborting its third outcome, a death, after its two
// completions were recorded in flow_batch, migration 0039) leaves
// nothing behind: not the marker nor a recorded completion, the jobs
// still running, the workflow's counts and dependents as before; the
// same Finish then applies whole, and its completions release their
// dependent.
func TestFlowBatchFailedFinish(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "redrive.db")
	open := func() *sqlite.Store {
		s, err := sqlite.Open(ctx, path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: "q", Kind: kind, MaxRetries: -1} }
	w, err := s.EnqueueWorkflow(ctx, store.NewWorkflow{OnDead: store.RunOnDead, Jobs: []store.WorkflowNode{
		{Name: "A", Job: nj("A")}, {Name: "B", Job: nj("B")}, {Name: "C", Job: nj("boom")},
		{Name: "D", Job: nj("D"), After: []string{"A", "B", "C"}}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != 3 {
		t.Fatalf("fetch: %d, %v", len(got), err)
	}
	var outs []store.Outcome
	for _, j := range got {
		o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: store.Complete, At: t0}
		if j.Kind == "boom" {
			o.Kind, o.Class, o.DeadReason, o.Error = store.Bury, failure.Permanent, "permanent", "boom"
		}
		outs = append(outs, o)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	exec(t, path, `CREATE TRIGGER test_boom AFTER UPDATE OF state ON jobs WHEN NEW.kind = 'boom' AND NEW.state = 'dead'
		BEGIN SELECT RAISE(ABORT, 'boom'); END`)
	s = open()
	if _, err := s.Finish(ctx, outs); err == nil {
		t.Fatal("Finish applied through the aborting trigger")
	}
	check := func(what string, wantState store.State, wantCompleted int64, wantD store.State) {
		t.Helper()
		g, err := s.GetWorkflow(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range g.Jobs {
			want := wantState
			if j.Name == "C" && wantState == store.Completed {
				want = store.Dead
			}
			if j.Name == "D" {
				want = wantD
			}
			if j.State != want {
				t.Errorf("%s: %s is %s, want %s", what, j.Name, j.State, want)
			}
		}
		if g.Completed != wantCompleted {
			t.Errorf("%s: workflow counts %d completed, want %d", what, g.Completed, wantCompleted)
		}
	}
	check("after the failed Finish", store.Running, 0, store.Blocked)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM flow_batch`).Scan(&n); err != nil || n != 0 {
		t.Errorf("flow_batch after the failed Finish: %d rows, %v; want none", n, err)
	}
	db.Close()
	exec(t, path, `DROP TRIGGER test_boom`)
	s = open()
	defer s.Close()
	applied, err := s.Finish(ctx, outs)
	if err != nil || len(applied) != 3 || !applied[0] || !applied[1] || !applied[2] {
		t.Fatalf("Finish again: %v, %v", applied, err)
	}
	check("after the Finish", store.Completed, 2, store.Pending)
}

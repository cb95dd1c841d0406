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

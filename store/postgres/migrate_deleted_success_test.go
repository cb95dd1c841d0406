package postgres_test

import (
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestMigrateDeletedSuccess: migration 0040 cancels the success callback
// of a workflow that lost a dead job before it (purged at version 38,
// when the deletion left the callback blocked), and leaves alone the
// callback of a workflow whose dead job is still there to be redriven.
func TestMigrateDeletedSuccess(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	t.Cleanup(func() { checkJobCounts(t, schema) })
	restore := postgres.MigrateThrough(38)
	defer restore()
	s := open(t, schema)
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: "q", Kind: kind, MaxRetries: -1} }
	cb := nj("cb")
	var flows []*store.Workflow
	for _, kind := range []string{"purged", "kept"} {
		w, err := s.EnqueueWorkflow(ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{{Name: kind, Job: nj(kind)}}, OnSuccess: &cb}, t0)
		if err != nil {
			t.Fatal(err)
		}
		flows = append(flows, w)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != 2 {
		t.Fatalf("fetch: %d, %v", len(got), err)
	}
	var outs []store.Outcome
	for _, j := range got {
		outs = append(outs, store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker,
			Kind: store.Bury, At: t0, Class: failure.Permanent, DeadReason: "permanent", Error: "boom"})
	}
	if _, err := s.Finish(ctx, outs); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, store.Filter{IDs: []int64{flows[0].Jobs[0].JobID}}, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	if j, err := s.Get(ctx, flows[0].OnSuccess); err != nil || j.State != store.Blocked {
		t.Fatalf("at version 38, the purged workflow's success callback: %v, %v; want it blocked", j, err)
	}
	s.Close()
	restore()
	s = open(t, schema)
	defer s.Close()
	for i, want := range []store.State{store.Canceled, store.Blocked} {
		j, err := s.Get(ctx, flows[i].OnSuccess)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != want {
			t.Errorf("workflow %d: success callback %s after the migration, want %s", flows[i].ID, j.State, want)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Counters["q"][store.StatCanceled]; n != 1 {
		t.Errorf("canceled counter of q: %d, want 1 (the callback)", n)
	}
}

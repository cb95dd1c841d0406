package postgres_test

import (
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestMigrateWorkflowClosed: migration 0036 closes the workflows of a
// schema at version 35 whose jobs all finished, and those whose complete
// callback fired though a redrive made them active again; it leaves the
// others open.
func TestMigrateWorkflowClosed(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	restore := postgres.MigrateThrough(35)
	defer restore()
	s := open(t, schema)
	nj := func(kind string) store.NewJob { return store.NewJob{Queue: "q", Kind: kind, MaxRetries: -1} }
	cb := nj("cb")
	var ids []int64
	for _, kind := range []string{"done", "redriven", "open"} {
		w, err := s.EnqueueWorkflow(ctx, store.NewWorkflow{Jobs: []store.WorkflowNode{{Name: kind, Job: nj(kind)}}, OnComplete: &cb}, t0)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != 3 {
		t.Fatalf("fetch: %d, %v", len(got), err)
	}
	byKind := map[string]*store.Job{}
	for _, j := range got {
		byKind[j.Kind] = j
	}
	outcome := func(j *store.Job, kind store.OutcomeKind) store.Outcome {
		o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: kind, At: t0}
		if kind == store.Bury {
			o.Class, o.DeadReason, o.Error = failure.Permanent, "permanent", "boom"
		}
		return o
	}
	if _, err := s.Finish(ctx, []store.Outcome{outcome(byKind["done"], store.Complete), outcome(byKind["redriven"], store.Bury)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redrive(ctx, store.RedriveParams{IDs: []int64{byKind["redriven"].ID}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	restore()
	s = open(t, schema)
	defer s.Close()
	for i, want := range []bool{true, true, false} {
		w, err := s.GetWorkflow(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if (w.ClosedAt != nil) != want {
			t.Errorf("workflow %d (%s): closed at %v, want closed %v", w.ID, w.State, w.ClosedAt, want)
		}
	}
}

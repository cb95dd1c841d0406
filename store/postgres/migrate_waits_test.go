package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// TestMigrateWorkflowWaits: migration 0034 counts, for the blocked jobs
// of a schema at version 33, the edges not done (job_waits), so that the
// completions after it release them exactly when the last dependency
// completes: a fan-in of six with three of them completed and one dead
// under wait, a job waiting for two completed ones (released before),
// and one waiting for the dead one.
func TestMigrateWorkflowWaits(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	restore := postgres.MigrateThrough(33)
	defer restore() // a failure below must not leave the package's other tests at version 33
	s := open(t, schema)
	defer func() { s.Close() }()
	now := t0
	nj := func(queue string) store.NewJob { return store.NewJob{Queue: queue, Kind: "k", MaxRetries: -1} }
	w := store.NewWorkflow{OnDead: store.WaitOnDead}
	var all []string
	for i := range 6 {
		name := fmt.Sprint("d", i)
		all = append(all, name)
		w.Jobs = append(w.Jobs, store.WorkflowNode{Name: name, Job: nj("deps")})
	}
	w.Jobs = append(w.Jobs,
		store.WorkflowNode{Name: "fanin", Job: nj("fanin"), After: all},
		store.WorkflowNode{Name: "two", Job: nj("two"), After: []string{"d0", "d1"}},
		store.WorkflowNode{Name: "dead", Job: nj("dead"), After: []string{"d3"}})
	wf, err := s.EnqueueWorkflow(ctx, w, now)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int64{}
	for _, j := range wf.Jobs {
		ids[j.Name] = j.JobID
	}
	leased := map[int64]*store.Job{}
	lease := func(queue string) {
		t.Helper()
		got, err := s.Fetch(ctx, store.FetchParams{Queue: queue, Limit: 100, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
		if err != nil {
			t.Fatalf("Fetch %s: %v", queue, err)
		}
		for _, j := range got {
			leased[j.ID] = j
		}
	}
	end := func(name string, kind store.OutcomeKind) {
		t.Helper()
		j := leased[ids[name]]
		if j == nil {
			t.Fatalf("%s is not leased", name)
		}
		o := store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: kind, At: now}
		if kind == store.Bury {
			o.Class, o.DeadReason, o.Fingerprint, o.Error = failure.Permanent, "permanent", "fp", "boom"
		}
		if applied, err := s.Finish(ctx, []store.Outcome{o}); err != nil || !applied[0] {
			t.Fatalf("Finish(%s): %v, %v", name, applied, err)
		}
		delete(leased, j.ID)
	}
	states := func(what string, want map[string]store.State) {
		t.Helper()
		for name, st := range want {
			j, err := s.Get(ctx, ids[name])
			if err != nil {
				t.Fatal(err)
			}
			if j.State != st {
				t.Errorf("%s: %s is %s, want %s", what, name, j.State, st)
			}
		}
	}
	lease("deps")
	for _, d := range []string{"d0", "d1", "d2"} {
		end(d, store.Complete)
	}
	end("d3", store.Bury)
	states("at version 33", map[string]store.State{"fanin": store.Blocked, "two": store.Pending, "dead": store.Blocked, "d3": store.Dead})

	s.Close()
	restore()
	s = open(t, schema)
	states("after 0034", map[string]store.State{"fanin": store.Blocked, "two": store.Pending, "dead": store.Blocked})
	end("d4", store.Complete)
	end("d5", store.Complete)
	states("d3 dead", map[string]store.State{"fanin": store.Blocked, "dead": store.Blocked})
	if _, err := s.Redrive(ctx, store.RedriveParams{IDs: []int64{ids["d3"]}, Now: now}); err != nil {
		t.Fatal(err)
	}
	lease("deps")
	end("d3", store.Complete)
	states("every dependency completed", map[string]store.State{"fanin": store.Pending, "two": store.Pending, "dead": store.Pending})
}

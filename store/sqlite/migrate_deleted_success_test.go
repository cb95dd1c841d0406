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

// TestMigrateDeletedSuccess: migration 0040 cancels the success callback
// of a workflow that lost a dead job before it (purged under the trigger
// of 0035, which left the callback blocked), and leaves alone the
// callback of a workflow whose dead job is still there to be redriven.
func TestMigrateDeletedSuccess(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "redrive.db")
	opts := sqlite.Options{Logger: slog.New(slog.DiscardHandler)}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The trigger of migration 0035 back, then a purge under it.
	exec(t, path,
		`DROP TRIGGER jobs_flow_deleted`,
		`CREATE TRIGGER jobs_flow_deleted AFTER DELETE ON jobs
		WHEN OLD.flow IS NOT NULL
		BEGIN
			UPDATE jobs SET state = 'canceled',
				finished_at = CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000,
				history = json_insert(coalesce(history, '[]'), '$[#]', json_object('kind', 'canceled', 'attempt', 0,
					'at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 'reason', 'dependency_deleted', 'note', 'job ' || OLD.id))
			WHERE id IN (SELECT job_id FROM job_deps WHERE dep_id = OLD.id AND done = 0) AND state = 'blocked';
			DELETE FROM job_deps WHERE dep_id = OLD.id;
			DELETE FROM job_deps WHERE job_id = OLD.id;
		END`)
	if s, err = sqlite.Open(ctx, path, opts); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, store.Filter{IDs: []int64{flows[0].Jobs[0].JobID}}, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	if j, err := s.Get(ctx, flows[0].OnSuccess); err != nil || j.State != store.Blocked {
		t.Fatalf("under the trigger of 0035, the purged workflow's success callback: %v, %v; want it blocked", j, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	exec(t, path, `DELETE FROM redrive_migrations WHERE version = 40`)
	if s, err = sqlite.Open(ctx, path, opts); err != nil {
		t.Fatalf("reopen (migration 0040): %v", err)
	}
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
	if st.Counters["q"][store.StatCanceled] != 1 || st.Jobs["q"][store.Canceled] != 1 || st.Jobs["q"][store.Blocked] != 1 {
		t.Errorf("queue q: canceled counter %d, canceled %d, blocked %d; want 1, 1, 1",
			st.Counters["q"][store.StatCanceled], st.Jobs["q"][store.Canceled], st.Jobs["q"][store.Blocked])
	}
	// The trigger of 0040 is in place: the other workflow's purge cancels its callback.
	if n, err := s.Purge(ctx, store.Filter{IDs: []int64{flows[1].Jobs[0].JobID}}, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	if j, err := s.Get(ctx, flows[1].OnSuccess); err != nil || j.State != store.Canceled {
		t.Errorf("after the migration, a purge: success callback %v, %v; want it canceled", j, err)
	}
}

// exec runs the statements qs on the database at path.
func exec(t *testing.T, path string, qs ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range qs {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

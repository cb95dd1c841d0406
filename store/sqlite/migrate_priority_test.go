package sqlite_test

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestMigratePriorityWithData: migration 0014 (priorities) applies to a
// database that already holds waiting and running jobs: a database is
// taken back to version 13 (the priority column and jobs_ready dropped,
// jobs_due restored, the version forgotten), and reopening it migrates
// it again: every job has priority 0, jobs_ready replaces jobs_due, the
// waiting jobs are fetched in due order, and a new job of a higher
// priority goes first.
func TestMigratePriorityWithData(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "redrive.db")
	opts := sqlite.Options{Logger: slog.New(slog.DiscardHandler)}
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var nj []store.NewJob
	for i := range 20 {
		nj = append(nj, store.NewJob{Queue: "q", Kind: "k", RunAt: t0.Add(time.Duration(i%7-3) * time.Second)})
	}
	old, err := s.Enqueue(ctx, nj, t0)
	if err != nil {
		t.Fatal(err)
	}
	running, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 2, Now: t0, LeaseUntil: t0.Add(time.Hour), Worker: "w"})
	if err != nil || len(running) != 2 {
		t.Fatalf("Fetch: %d jobs, %v", len(running), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		// Back to version 13: 0023 (the limit groups' waiting jobs),
		// 0020 (holds on Retry-After, whose columns go with their
		// tables), 0019 (fair shares), 0016 (rate limits) and 0015
		// (concurrency limits) first, then 0014.
		`DROP INDEX jobs_limit_group_due`,
		`DELETE FROM redrive_migrations WHERE version = 23`,
		`DELETE FROM redrive_migrations WHERE version = 20`,
		`DROP INDEX jobs_fair_first`,
		`DROP INDEX jobs_fair_due`,
		`DROP INDEX jobs_ready`,
		`CREATE INDEX jobs_ready ON jobs (queue, priority, run_at, id) WHERE state IN ('pending', 'scheduled') AND climit IS NULL`,
		`ALTER TABLE jobs DROP COLUMN fkey`,
		`DELETE FROM redrive_migrations WHERE version = 19`,
		`DROP TABLE limit_rates`,
		`DELETE FROM redrive_migrations WHERE version = 16`,
		`DROP TRIGGER conc_limits_gen_update`,
		`DROP TRIGGER conc_limits_gen_insert`,
		`DROP TRIGGER jobs_limit_gen`,
		`DROP TABLE limit_gen`,
		`DROP INDEX jobs_limit_running`,
		`DROP INDEX jobs_limit_due`,
		`DROP TABLE conc_limits`,
		`DROP INDEX jobs_ready`,
		`ALTER TABLE jobs DROP COLUMN ckey`,
		`ALTER TABLE jobs DROP COLUMN climit`,
		`DELETE FROM redrive_migrations WHERE version = 15`,
		`ALTER TABLE jobs DROP COLUMN priority`,
		`CREATE INDEX jobs_due ON jobs (queue, run_at, id) WHERE state IN ('pending', 'scheduled')`,
		`DELETE FROM redrive_migrations WHERE version = 14`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatalf("reopen (migration 0014 on data): %v", err)
	}
	defer s.Close()
	for _, j := range old {
		got, err := s.Get(ctx, j.ID)
		if err != nil || got.Priority != 0 {
			t.Fatalf("job %d after the migration: %v, %v; want priority 0", j.ID, got, err)
		}
	}
	high, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Priority: 5, RunAt: t0.Add(time.Second)}}, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 100, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 19 || got[0].ID != high[0].ID {
		t.Fatalf("fetch after the migration: %d jobs, first %d; want 19, the priority job %d first", len(got), got[0].ID, high[0].ID)
	}
	for k := 2; k < len(got); k++ {
		if a, b := got[k-1], got[k]; a.RunAt.After(b.RunAt) || a.RunAt.Equal(b.RunAt) && a.ID > b.ID {
			t.Fatalf("fetch after the migration: job %d before job %d", a.ID, b.ID)
		}
	}
	db, err = sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var idx []string
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'index' AND name IN ('jobs_ready', 'jobs_due')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		idx = append(idx, n)
	}
	if err := rows.Err(); err != nil || len(idx) != 1 || idx[0] != "jobs_ready" {
		t.Fatalf("indexes after the migration: %v, %v; want [jobs_ready]", idx, err)
	}
}

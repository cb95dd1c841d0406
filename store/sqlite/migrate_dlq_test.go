package sqlite_test

import (
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
)

// TestMigrateDLQWithData: migration 0013 (the DLQ's indexes and counted
// causes) applies to a database that already holds dead jobs, and counts
// them (and 0044, the bounds of the causes' errors, after it): a
// database is taken back to version 12 (its DLQ objects dropped,
// the old fingerprint index restored, the version forgotten), and
// reopening it migrates it again; counts and groups then agree with a
// count of the jobs, and keep agreeing after more deaths and a redrive.
func TestMigrateDLQWithData(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "redrive.db")
	opts := sqlite.Options{Logger: slog.New(slog.DiscardHandler)}
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	addDead := func(s store.Store, n int) []*store.Job {
		var ds []store.DeadJob
		for i := range n {
			ds = append(ds, store.DeadJob{Queue: fmt.Sprintf("q%d", i%2), Kind: "k", Payload: []byte(`{}`), MaxRetries: -1,
				DeadAt: t0.Add(time.Duration(i) * time.Second), DeadReason: fmt.Sprintf("r%d", i%3),
				LastError: fmt.Sprintf("%s %d", []string{"boom", "bang", "boom!"}[i%3], i), LastErrorClass: failure.Transient, Fingerprint: fmt.Sprintf("fp%d", i%5)})
		}
		jobs, err := s.AddDead(ctx, ds, t0)
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	addDead(s, 60)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP TRIGGER jobs_dead_inserted`, `DROP TRIGGER jobs_dead_deleted`, `DROP TRIGGER jobs_dead_updated`,
		`DROP TABLE dead_groups`,
		`DROP INDEX jobs_dead_queue`, `DROP INDEX jobs_dead_kind`, `DROP INDEX jobs_dead_class`, `DROP INDEX jobs_dead_reason`,
		`DROP INDEX jobs_dead_fingerprint`,
		`CREATE INDEX jobs_dead_fingerprint ON jobs (fingerprint, dead_at) WHERE state = 'dead'`,
		`DELETE FROM redrive_migrations WHERE version = 13`,
		// 0044 adds to what 0013 creates: it runs again after it.
		`DELETE FROM redrive_migrations WHERE version = 44`,
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
		t.Fatalf("reopen (migration 0013 on data): %v", err)
	}
	defer s.Close()
	check := func(when string) {
		t.Helper()
		dead := []store.State{store.Dead}
		for _, f := range []store.Filter{{States: dead}, {States: dead, Queue: "q1"}, {States: dead, Reason: "r2"}, {States: dead, Fingerprint: "fp3", Queue: "q0"},
			{States: dead, ErrorPrefix: "boom"}, {States: dead, ErrorPrefix: "b", Queue: "q1"}, {States: dead, ErrorPrefix: "boom!"}} {
			counted, err := s.Count(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			scan := f
			scan.Since = t0.Add(-time.Hour) // not a cause field: counts the jobs
			real, err := s.Count(ctx, scan)
			if err != nil {
				t.Fatal(err)
			}
			if counted != real || real == 0 {
				t.Errorf("%s: Count(%+v) = %d, %d jobs match", when, f, counted, real)
			}
			g, err := s.Groups(ctx, f, 10)
			if err != nil {
				t.Fatal(err)
			}
			rg, err := s.Groups(ctx, scan, 10)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(g) != fmt.Sprint(rg) {
				t.Errorf("%s: Groups(%+v) = %v, from the jobs %v", when, f, g, rg)
			}
		}
	}
	check("after the migration")
	jobs := addDead(s, 7)
	if _, err := s.Redrive(ctx, store.RedriveParams{IDs: []int64{1, 2, jobs[0].ID}, Now: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	check("after more deaths and a redrive")
	// A dead job's error changed by hand (migration 0044's trigger).
	db, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `UPDATE jobs SET last_error = 'bang' WHERE id IN (3, 4)`); err != nil {
		t.Fatal(err)
	}
	check("after errors changed")
}

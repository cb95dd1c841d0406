package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestErrorBounds: the counts and groups by error prefix, answered from
// the bounds of each cause's errors (migration 0044), agree with a count
// of the jobs after the migration runs on a schema holding dead jobs,
// after a dead job's error is changed by hand, and after the bounds of
// a cause are lost (its jobs are then counted).
func TestErrorBounds(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ds []store.DeadJob
	for i := range 30 {
		ds = append(ds, store.DeadJob{Queue: fmt.Sprintf("q%d", i%2), Kind: "k", Payload: []byte(`{}`), MaxRetries: -1,
			DeadAt: t0.Add(time.Duration(i) * time.Second), DeadReason: "r",
			LastError: fmt.Sprintf("%s %d", []string{"alpha", "alpha beta", "beta"}[i%3], i), LastErrorClass: failure.Transient,
			Fingerprint: fmt.Sprintf("fp%d", i%3)})
	}
	jobs, err := s.AddDead(ctx, ds, t0)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	sch := pgx.Identifier{schema}.Sanitize()
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Back to version 43: the migration runs again on the dead jobs.
	exec(`DROP TABLE ` + sch + `.dead_error_bounds`)
	exec(`DELETE FROM ` + sch + `.redrive_migrations WHERE version = 44`)
	s = open(t, schema)
	defer s.Close()
	dead := []store.State{store.Dead}
	check := func(when string) {
		t.Helper()
		for _, f := range []store.Filter{
			{States: dead, ErrorPrefix: "alpha"}, {States: dead, ErrorPrefix: "alpha "}, {States: dead, ErrorPrefix: "alpha b"},
			{States: dead, ErrorPrefix: "beta"}, {States: dead, ErrorPrefix: "gamma"}, {States: dead, ErrorPrefix: "a", Queue: "q1"},
		} {
			n, err := s.Count(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			scan := f
			scan.Since = t0.Add(-time.Hour) // not a cause field: counts the jobs
			real, err := s.Count(ctx, scan)
			if err != nil {
				t.Fatal(err)
			}
			if n != real {
				t.Errorf("%s: Count(%q, queue %q) = %d, %d jobs match", when, f.ErrorPrefix, f.Queue, n, real)
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
				t.Errorf("%s: Groups(%q) = %v, from the jobs %v", when, f.ErrorPrefix, g, rg)
			}
		}
	}
	check("after the migration")
	// A dead job's error changed by hand, to one its cause never had.
	exec(fmt.Sprintf(`UPDATE %s.jobs SET last_error = 'gamma' WHERE id = %d`, sch, jobs[0].ID))
	exec(fmt.Sprintf(`UPDATE %s.jobs SET last_error = 'beta 0' WHERE id = %d`, sch, jobs[3].ID))
	check("after errors changed")
	exec(`DELETE FROM ` + sch + `.dead_error_bounds`)
	check("without bounds")
	checkJobCounts(t, schema)
}

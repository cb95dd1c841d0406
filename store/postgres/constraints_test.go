package postgres_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/redrivehq/redrive/store"
)

// TestJobsConstraints: after every migration, the jobs table itself
// refuses a priority out of range and an unknown state (the store checks
// both before writing; the table is the last line, for any other writer),
// and takes every state, blocked included. Migration 0032 once rebuilt
// the state check without the priority range 0031 had folded into it.
func TestJobsConstraints(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	jobs, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k"}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	id := jobs[0].ID
	for _, c := range []struct {
		set  string
		args []any
		ok   bool
	}{
		{"priority = $2", []any{store.MaxPriority + 1}, false},
		{"priority = $2", []any{store.MinPriority - 1}, false},
		{"priority = $2", []any{store.MaxPriority}, true},
		{"state = $2", []any{"bogus"}, false},
		{"state = $2", []any{string(store.Blocked)}, true},
		{"state = $2", []any{string(store.Pending)}, true},
	} {
		_, err := s.Pool().Exec(ctx, `UPDATE `+schema+`.jobs SET `+c.set+` WHERE id = $1`, append([]any{id}, c.args...)...)
		var pe *pgconn.PgError
		switch {
		case c.ok && err != nil:
			t.Errorf("SET %s %v: %v, want it taken", c.set, c.args, err)
		case !c.ok && (!errors.As(err, &pe) || pe.Code != "23514"):
			t.Errorf("SET %s %v: %v, want a check violation", c.set, c.args, err)
		}
	}
}

package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// TestRenamedSchema checks that a store whose schema was renamed works
// under its new name once opened (Open migrates): the job-count triggers
// find their table in the renamed schema, and the counts are kept.
func TestRenamedSchema(t *testing.T) {
	ctx := context.Background()
	old := newSchema(t)
	s := open(t, old)
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}}, t0); err != nil {
		t.Fatal(err)
	}
	s.Close()
	renamed := newSchema(t) // dropped at the end; renamed into below
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+renamed+` CASCADE; ALTER SCHEMA `+old+` RENAME TO `+renamed); err != nil {
		t.Fatal(err)
	}
	r := open(t, renamed)
	defer r.Close()
	if _, err := r.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}}, t0); err != nil {
		t.Fatalf("enqueue after the rename: %v", err)
	}
	st, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Jobs["q"][store.Pending]; got != 2 {
		t.Fatalf("pending jobs after the rename: %d, want 2", got)
	}
}

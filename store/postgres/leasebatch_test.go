package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
)

// leaseBatches reads the lease batches of schema: each batch's ids.
func leaseBatches(t *testing.T, conn *pgx.Conn, schema string) [][]int64 {
	t.Helper()
	rows, err := conn.Query(t.Context(), `SELECT ids FROM `+pgx.Identifier{schema, "lease_batches"}.Sanitize()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[[]int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLeaseBatchesPruned: the rescue's read of the lease batches (migration
// 0025) deletes those whose leases all ended and keeps, of the others,
// only the leases still held, so that the table holds about one lease
// period of fetches.
func TestLeaseBatchesPruned(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var jobs []store.NewJob
	for range 9 {
		jobs = append(jobs, store.NewJob{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1})
	}
	if _, err := s.Enqueue(ctx, jobs, t0); err != nil {
		t.Fatal(err)
	}
	var leased []*store.Job
	for range 3 {
		got, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 3, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w"})
		if err != nil || len(got) != 3 {
			t.Fatalf("Fetch: %d jobs, %v; want 3", len(got), err)
		}
		leased = append(leased, got...)
	}
	if b := leaseBatches(t, conn, schema); len(b) != 3 {
		t.Fatalf("after 3 fetches: %d lease batches, want 3", len(b))
	}
	// All of batch 1 and two of batch 2 complete; the third of batch 2
	// is renewed, batch 3 is left to expire.
	var outs []store.Outcome
	for _, j := range leased[:5] {
		outs = append(outs, store.Outcome{JobID: j.ID, Lease: j.Lease, Attempt: j.Attempt, Worker: "w", Queue: "q", Kind: store.Complete, At: t0})
	}
	if applied, err := s.Finish(ctx, outs); err != nil || slices.Contains(applied, false) {
		t.Fatalf("Finish: %v, %v", applied, err)
	}
	if _, err := s.Heartbeat(ctx, "w", []store.Lease{store.LeaseOf(leased[5])}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	exp, err := s.Expired(ctx, t0.Add(2*time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(js []*store.Job) (out []int64) {
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	if got, want := ids(exp), ids(leased[6:]); !slices.Equal(got, want) {
		t.Errorf("Expired = %v, want %v", got, want)
	}
	b := leaseBatches(t, conn, schema)
	if want := [][]int64{{leased[5].ID}, ids(leased[6:])}; !slices.EqualFunc(b, want, slices.Equal) {
		t.Errorf("lease batches after the rescue's read: %v, want %v (batch 1 deleted, batch 2 holding its renewed lease)", b, want)
	}
}

// TestMigrateLeaseBatchesWithRunning: migration 0025 records the jobs
// running when it applies, so that the rescue still finds them: a schema
// is taken back to version 24 with jobs running, and migrated again.
func TestMigrateLeaseBatchesWithRunning(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	if _, err := s.Enqueue(ctx, []store.NewJob{{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1},
		{Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}, {Queue: "q", Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}}, t0); err != nil {
		t.Fatal(err)
	}
	a, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 2, Now: t0, LeaseUntil: t0.Add(time.Minute), Worker: "w1"})
	if err != nil || len(a) != 2 {
		t.Fatalf("Fetch: %d, %v", len(a), err)
	}
	b, err := s.Fetch(ctx, store.FetchParams{Queue: "q", Limit: 1, Now: t0, LeaseUntil: t0.Add(2 * time.Minute), Worker: "w2"})
	if err != nil || len(b) != 1 {
		t.Fatalf("Fetch: %d, %v", len(b), err)
	}
	s.Close()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{schema}.Sanitize()
	for _, q := range []string{
		`DROP TABLE ` + id + `.lease_batches`,
		`CREATE INDEX jobs_lease ON ` + id + `.jobs (lease_until, id) WHERE lease_until IS NOT NULL`,
		`DELETE FROM ` + id + `.redrive_migrations WHERE version = 25`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s = open(t, schema)
	defer s.Close()
	for _, c := range []struct {
		at   time.Time
		want []int64
	}{{t0.Add(time.Minute), nil}, {t0.Add(time.Minute + time.Second), []int64{a[0].ID, a[1].ID}}, {t0.Add(2*time.Minute + time.Second), []int64{a[0].ID, a[1].ID, b[0].ID}}} {
		exp, err := s.Expired(ctx, c.at, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, j := range exp {
			got = append(got, j.ID)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Expired(%s) after the migration = %v, want %v", c.at, got, c.want)
		}
	}
	if got, err := s.Leased(ctx, "w1", 10); err != nil || len(got) != 2 {
		t.Errorf("Leased(w1) after the migration = %d jobs, %v; want 2", len(got), err)
	}
}

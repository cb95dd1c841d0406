package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/failure"
	"github.com/redrivehq/redrive/store"
)

// TestJobCountsRandomUpdates: the counts the update trigger keeps (jobs
// per queue and state, dead jobs per cause, each cause's error bounds)
// agree with the jobs counted one by one after each of a few hundred
// UPDATE statements written by hand (any writer's statements are
// counted, not only the store's): random subsets of the jobs moved to a
// random state or queue, into and out of the DLQ, dead jobs' causes and
// errors changed, and updates that change neither. The model is the
// table itself, recounted after every statement.
func TestJobCountsRandomUpdates(t *testing.T) {
	ctx := t.Context()
	schema := newSchema(t)
	s := open(t, schema)
	jobs := make([]store.NewJob, 300)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: fmt.Sprintf("q%d", i%3), Kind: "k", Payload: []byte(`{}`), MaxRetries: -1}
	}
	if _, err := s.Enqueue(ctx, jobs, t0); err != nil {
		t.Fatal(err)
	}
	var ds []store.DeadJob
	for i := range 60 {
		ds = append(ds, store.DeadJob{Queue: fmt.Sprintf("q%d", i%2), Kind: "k", Payload: []byte(`{}`), MaxRetries: -1,
			DeadAt: t0, DeadReason: "r", LastError: fmt.Sprintf("boom %d", i%4), LastErrorClass: failure.Transient,
			Fingerprint: fmt.Sprintf("fp%d", i%3)})
	}
	if _, err := s.AddDead(ctx, ds, t0); err != nil {
		t.Fatal(err)
	}
	s.Close()

	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	sch := pgx.Identifier{schema}.Sanitize()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	states := []string{"pending", "scheduled", "running", "completed", "dead", "canceled", "blocked"}
	for step := range 300 {
		// A random subset: the jobs of an id range whose id falls on one
		// residue (one job to all of them).
		m, lo := 1+r.IntN(7), 1+r.IntN(360)
		subset := fmt.Sprintf("id %% %d = %d AND id BETWEEN %d AND %d", m, r.IntN(m), lo, lo+r.IntN(120))
		var q string
		switch r.IntN(6) {
		case 0, 1:
			q = fmt.Sprintf(`UPDATE %s.jobs SET state = '%s' WHERE %s`, sch, states[r.IntN(len(states))], subset)
		case 2:
			q = fmt.Sprintf(`UPDATE %s.jobs SET queue = 'q%d' WHERE %s`, sch, r.IntN(4), subset)
		case 3:
			q = fmt.Sprintf(`UPDATE %s.jobs SET fingerprint = 'fp%d', last_error = 'err %d' WHERE state = 'dead' AND %s`,
				sch, r.IntN(4), r.IntN(5), subset)
		case 4:
			// Into the DLQ with a cause, and out of it, in one statement.
			q = fmt.Sprintf(`UPDATE %s.jobs SET state = CASE WHEN state = 'dead' THEN 'pending' ELSE 'dead' END,
				dead_reason = 'r%d', last_error = 'e%d' WHERE %s`, sch, r.IntN(3), r.IntN(6), subset)
		default:
			// Neither state nor queue nor cause: counts nothing.
			q = fmt.Sprintf(`UPDATE %s.jobs SET lease_until = now() WHERE %s`, sch, subset)
		}
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("step %d: %s: %v", step, q, err)
		}
		checkJobCounts(t, schema)
		checkErrorBoundsCover(t, conn, sch)
		if t.Failed() {
			t.Fatalf("step %d (seed %d): counts differ after %s", step, seed, q)
		}
	}
}

// checkErrorBoundsCover fails t when a dead job's error key lies outside
// the bounds of its cause (dead_error_bounds, migration 0044) in schema
// s (sanitized): bounds may be loose, never narrow.
func checkErrorBoundsCover(t *testing.T, conn *pgx.Conn, s string) {
	t.Helper()
	var n int
	err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+s+`.jobs j
	LEFT JOIN `+s+`.dead_error_bounds b ON b.k = `+s+`.dead_group_key(j.fingerprint, j.queue, j.kind, j.last_error_class, j.dead_reason)
	WHERE j.state = 'dead' AND (b.k IS NULL
		OR left(coalesce(j.last_error, ''), 200) COLLATE "C" < b.error_lo OR left(coalesce(j.last_error, ''), 200) COLLATE "C" > b.error_hi)`).Scan(&n)
	if err != nil {
		t.Fatalf("error bounds: %v", err)
	}
	if n > 0 {
		t.Errorf("%d dead jobs outside their cause's error bounds", n)
	}
}

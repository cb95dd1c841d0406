package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/storetest"
)

// TestWorkflowEdges runs the conformance test of the deletion of a
// workflow job's edges and wait count on PostgreSQL, reading job_deps
// and job_waits with a connection of its own.
func TestWorkflowEdges(t *testing.T) {
	dbURL(t)
	t.Parallel()
	schema := newSchema(t)
	query := func(t *testing.T, q string, scan func(rows pgx.Rows) error) {
		conn, err := pgx.Connect(t.Context(), dbURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		rows, err := conn.Query(t.Context(), q)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	storetest.RunWorkflowEdges(t, storetest.EdgesDB{
		Open: func(t *testing.T) store.Store { return open(t, schema) },
		Edges: func(t *testing.T) [][2]int64 {
			var out [][2]int64
			query(t, `SELECT dep_id, job_id FROM `+pgx.Identifier{schema, "job_deps"}.Sanitize()+` ORDER BY dep_id, job_id`, func(rows pgx.Rows) error {
				var e [2]int64
				err := rows.Scan(&e[0], &e[1])
				out = append(out, e)
				return err
			})
			return out
		},
		Waits: func(t *testing.T) []int64 {
			var out []int64
			query(t, `SELECT job_id FROM `+pgx.Identifier{schema, "job_waits"}.Sanitize()+` ORDER BY job_id`, func(rows pgx.Rows) error {
				var id int64
				err := rows.Scan(&id)
				out = append(out, id)
				return err
			})
			return out
		},
	})
}

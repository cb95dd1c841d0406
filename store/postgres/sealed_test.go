package postgres_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
	"github.com/redrivehq/redrive/store/storetest"
)

// TestSealed runs the payload encryption conformance test on PostgreSQL,
// reading the schema's tables with a connection of its own.
func TestSealed(t *testing.T) {
	dbURL(t)
	t.Parallel()
	schema := newSchema(t)
	query := func(t *testing.T, q string, each func(rows pgx.Rows) error) {
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
			if err := each(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	db := storetest.SealedDB{
		Open: func(t *testing.T, c store.PayloadCodec) store.Store {
			s, err := postgres.Open(t.Context(), dbURL(t), postgres.Options{Schema: schema, MaxConns: 4, Logger: quiet(), Payloads: c})
			if err != nil {
				t.Fatalf("postgres.Open: %v", err)
			}
			return s
		},
		Raw: func(t *testing.T) map[int64][]byte {
			out := map[int64][]byte{}
			query(t, `SELECT id, payload FROM `+pgx.Identifier{schema, "jobs"}.Sanitize(), func(rows pgx.Rows) error {
				var id int64
				var p []byte
				err := rows.Scan(&id, &p)
				out[id] = p
				return err
			})
			return out
		},
		All: func(t *testing.T) []byte {
			var tables []string
			query(t, `SELECT tablename FROM pg_tables WHERE schemaname = '`+schema+`'`, func(rows pgx.Rows) error {
				var name string
				err := rows.Scan(&name)
				tables = append(tables, name)
				return err
			})
			var all []byte
			for _, tbl := range tables {
				query(t, `SELECT t::text FROM `+pgx.Identifier{schema, tbl}.Sanitize()+` t`, func(rows pgx.Rows) error {
					var s string
					err := rows.Scan(&s)
					all = append(all, s...)
					return err
				})
			}
			return all
		},
	}
	storetest.RunSealed(t, db)
	t.Run("Export", func(t *testing.T) { storetest.RunSealedExport(t, db) })
}

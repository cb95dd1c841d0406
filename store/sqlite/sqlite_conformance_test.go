package sqlite_test

import (
	"database/sql"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/redrivehq/redrive/internal/sqlitetest"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/sqlite"
	"github.com/redrivehq/redrive/store/storetest"
)

// open opens a new, empty SQLite store in a fresh temporary directory.
func open(tb testing.TB) store.Store {
	tb.Helper()
	s, err := sqlite.Open(tb.Context(), sqlitetest.Path(tb), sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatalf("sqlite.Open: %v", err)
	}
	return s
}

// TestErrorPrefixWalk runs the error prefix subtest with every prefix
// "many": its listings walk the newest dead jobs instead of sorting the
// prefix's range of jobs_dead_error.
func TestErrorPrefixWalk(t *testing.T) {
	storetest.RunNamed(t, func(t *testing.T) store.Store {
		s := open(t).(*sqlite.Store)
		sqlite.SetErrorPrefixFew(s, 1)
		return s
	}, "ListErrorPrefix")
}

// TestConformance runs the store conformance suite on SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// BenchmarkStore runs the store-level benchmarks on SQLite.
func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

// TestSealed runs the payload encryption conformance test on SQLite,
// reading the jobs table's payloads with a connection of its own.
func TestSealed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "redrive.db")
	db := storetest.SealedDB{
		Open: func(t *testing.T, c store.PayloadCodec) store.Store {
			s, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: slog.New(slog.DiscardHandler), Payloads: c})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			return s
		},
		Raw: func(t *testing.T) map[int64][]byte {
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rows, err := db.QueryContext(t.Context(), `SELECT id, payload FROM jobs`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			out := map[int64][]byte{}
			for rows.Next() {
				var id int64
				var p []byte
				if err := rows.Scan(&id, &p); err != nil {
					t.Fatal(err)
				}
				out[id] = p
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
		All: func(t *testing.T) []byte {
			var all []byte
			for _, suffix := range []string{"", "-wal"} {
				b, err := os.ReadFile(path + suffix)
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				all = append(all, b...)
			}
			return all
		},
	}
	storetest.RunSealed(t, db)
	t.Run("Export", func(t *testing.T) { storetest.RunSealedExport(t, db) })
}

// TestWorkflowEdges runs the conformance test of the deletion of a
// workflow job's edges on SQLite, reading job_deps with a connection of
// its own.
func TestWorkflowEdges(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "redrive.db")
	storetest.RunWorkflowEdges(t, storetest.EdgesDB{
		Open: func(t *testing.T) store.Store {
			s, err := sqlite.Open(t.Context(), path, sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("sqlite.Open: %v", err)
			}
			return s
		},
		Edges: func(t *testing.T) [][2]int64 {
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rows, err := db.QueryContext(t.Context(), `SELECT dep_id, job_id FROM job_deps ORDER BY dep_id, job_id`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out [][2]int64
			for rows.Next() {
				var e [2]int64
				if err := rows.Scan(&e[0], &e[1]); err != nil {
					t.Fatal(err)
				}
				out = append(out, e)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			return out
		},
	})
}

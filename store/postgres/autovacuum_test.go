package postgres_test

import (
	"slices"
	"testing"
)

// TestJobsAutovacuumSettings: the jobs table carries its own autovacuum
// storage parameters (migration 0047), beside its fillfactor, and no
// other table of the schema has any: the server's settings are left as
// they are.
func TestJobsAutovacuumSettings(t *testing.T) {
	s := openFresh(t)
	rows, err := s.Pool().Query(t.Context(), `SELECT c.relname::text, coalesce(c.reloptions, '{}') FROM pg_class c
		WHERE c.relnamespace = $1::regnamespace AND c.relkind = 'r' AND c.reloptions IS NOT NULL`, s.Schema())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for rows.Next() {
		var name string
		var opts []string
		if err := rows.Scan(&name, &opts); err != nil {
			t.Fatal(err)
		}
		slices.Sort(opts)
		got[name] = opts
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{"autovacuum_vacuum_cost_delay=0", "autovacuum_vacuum_scale_factor=0.02", "autovacuum_vacuum_threshold=1000", "fillfactor=90"}
	if len(got) != 1 || !slices.Equal(got["jobs"], want) {
		t.Errorf("tables with storage parameters: %v, want only jobs with %v", got, want)
	}
}

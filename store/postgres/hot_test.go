package postgres_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redrivehq/redrive/internal/testwait"
	"github.com/redrivehq/redrive/store"
	"github.com/redrivehq/redrive/store/postgres"
)

// hotCounts reads the jobs table's updates and HOT updates from the
// cumulative statistics (pg_stat_user_tables), once they count at least
// want updates: a backend reports its counts when its transaction ends,
// at most once a second, so the test waits for them.
func hotCounts(t *testing.T, url, schema string, want int64) (upd, hot int64) {
	t.Helper()
	testwait.Until(t, "the statistics to count the updates", 30*time.Second, func() bool {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(t.Context())
		err = conn.QueryRow(t.Context(), `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
			schema).Scan(&upd, &hot)
		if err != nil {
			t.Fatal(err)
		}
		return upd >= want
	})
	return upd, hot
}

// TestCompletionHOT counts the HOT updates (no index entry) of a lease
// and of the plain completion of the jobs leased (migration 0042, the
// prototype of the HOT completion): the lease moves the job out of the
// waiting indexes, so it is never HOT; the completion changes no
// indexed column, so it is HOT wherever the page has room for the new
// version, which the fillfactor leaves.
func TestCompletionHOT(t *testing.T) {
	const n = 200
	schema := newSchema(t)
	s := open(t, schema)
	defer s.Close()
	ctx := t.Context()
	jobs := make([]store.NewJob, n)
	for i := range jobs {
		jobs[i] = store.NewJob{Queue: "hot", Kind: "noop", Payload: json.RawMessage(`{"n":1}`), MaxRetries: -1}
	}
	now := time.Now().UTC()
	if _, err := s.Enqueue(ctx, jobs, now); err != nil {
		t.Fatal(err)
	}
	got, err := s.Fetch(ctx, store.FetchParams{Queue: "hot", Limit: n, Now: now, LeaseUntil: now.Add(time.Hour), Worker: "w"})
	if err != nil || len(got) != n {
		t.Fatalf("Fetch = %d jobs, %v; want %d", len(got), err, n)
	}
	url := dbURL(t)
	upd0, hot0 := hotCounts(t, url, schema, n)
	if hot0 != 0 {
		t.Errorf("lease: %d of %d updates HOT; want 0 (the lease leaves the waiting indexes)", hot0, upd0)
	}
	outs := make([]store.Outcome, 0, n)
	for _, j := range got {
		outs = append(outs, store.Outcome{JobID: j.ID, Queue: j.Queue, Attempt: j.Attempt, Lease: j.Lease, Worker: j.Worker, Kind: store.Complete,
			At: time.Now().UTC(), Duration: store.Duration(time.Millisecond)})
	}
	applied, err := s.Finish(ctx, outs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range applied {
		if !ok {
			t.Fatalf("completion of job %d not applied", outs[i].JobID)
		}
	}
	upd, hot := hotCounts(t, url, schema, upd0+n)
	t.Logf("completions: %d updates, %d HOT", upd-upd0, hot-hot0)
	if upd-upd0 != n {
		t.Fatalf("completions: %d updates; want %d", upd-upd0, n)
	}
	// Each completion is HOT unless its page had no room; with the
	// fillfactor's room and the lease's dead versions pruned, most are.
	if hot-hot0 < n/2 {
		t.Errorf("completions: %d of %d HOT; want at least half", hot-hot0, n)
	}
	// A completed job reads no lease, though the completion left
	// lease_until as the lease set it.
	j, err := s.Get(ctx, got[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.Completed || j.LeaseUntil != nil {
		t.Errorf("after its completion: state %s, lease until %v; want completed, no lease", j.State, j.LeaseUntil)
	}
}

// TestPhaseStatementsUseIndexes: every statement that reads a partial
// index of jobs over phase (migration 0042) still proves its predicate:
// the generic plan, on an empty table, reads the index.
func TestPhaseStatementsUseIndexes(t *testing.T) {
	s := openFresh(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, dbURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"fetch":          {"jobs_ready"},
		"unlimitedAbove": {"jobs_ready"},
		"nextDue":        {"jobs_ready", "jobs_limit_due", "jobs_fair_first"},
		"limitedDue":     {"jobs_limit_due"},
		"limitedSelect":  {"jobs_limit_running", "jobs_limit_due", "jobs_limit_group_due"},
		"fairProbe":      {"jobs_fair_first"},
		"deleteFinished": {"jobs_done"},
		"deleteCanceled": {"jobs_canceled"},
		"deleteDead":     {"jobs_dead"},
	}
	statements := postgres.PhaseStatements(s)
	for name, indexes := range want {
		sql := statements[name]
		if _, err := conn.Exec(ctx, `PREPARE p_`+name+` AS `+sql); err != nil {
			t.Fatalf("%s: prepare: %v", name, err)
		}
		params := strings.TrimSuffix(strings.Repeat("NULL, ", maxParam(sql)), ", ")
		rows, err := conn.Query(ctx, `EXPLAIN EXECUTE p_`+name+`(`+params+`)`)
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: explain: %v", name, err)
		}
		text := strings.Join(plan, "\n")
		for _, ix := range indexes {
			if !strings.Contains(text, " using "+ix+" on jobs") {
				t.Errorf("%s: the plan does not read %s:\n%s", name, ix, text)
			}
		}
	}
}
